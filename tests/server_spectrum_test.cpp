// The spectrum routes against a real server on an ephemeral loopback port, serving the demo
// checkpoint: one tensor's spectrum, metrics and ESD (/api/spectrum), the consent ladder over a
// time budget, the engine's errors as 4xx, results kept for a second call, and the overview's
// walk over every matrix (/api/spectra).
#include <gtest/gtest.h>

#include <httplib.h>

#include <cstdlib>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/demo/demo_checkpoint.h"
#include "served_for_test.h"
#include "test_util.h"

namespace tensormorph {
namespace {

using json = nlohmann::json;

class ServerSpectrum : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    setenv("TENSORMORPH_CONFIG", (dir_->path() / "settings.json").c_str(), 1);
    ASSERT_TRUE(demo::write_demo_checkpoint(dir_->path() / "demo").ok());
    auto served = testing::ServedForTest::start({(dir_->path() / "demo").string()}, {});
    ASSERT_TRUE(served.ok()) << served.status().to_string();
    served_ = std::move(served).value();
    served_->wait_for_index();
  }
  static void TearDownTestSuite() {
    served_.reset();
    delete dir_;
  }
  /// Sets the running server's compute.time_budget ("off": unlimited).
  static void set_time_budget(const std::string& value) {
    served_->post_ok("/api/settings", json{{"key", "compute.time_budget"}, {"value", value}}.dump());
  }

  static inline testing::TempDir* dir_ = nullptr;
  static inline std::unique_ptr<testing::ServedForTest> served_;
};

TEST_F(ServerSpectrum, AnswersValuesMetricsAndTheEsdThenKeepsThem) {
  // The demo plants four spikes in this q_proj (two in the others).
  const std::string url = "/api/spectrum?ckpt=0&tensor=model.layers.1.self_attn.q_proj.weight";
  const json s = served_->get_json(url);
  EXPECT_EQ(s["source"], "computed");
  EXPECT_EQ(s["rung"], "exact");
  EXPECT_EQ(s["exactness"], "exact");
  EXPECT_EQ(s["rows"], 384);
  EXPECT_EQ(s["cols"], 384);
  ASSERT_EQ(s["values"].size(), 384u);
  for (size_t i = 1; i < s["values"].size(); ++i) EXPECT_GE(s["values"][i - 1].get<double>(), s["values"][i].get<double>());
  ASSERT_FALSE(s["records"].empty());
  EXPECT_EQ(s["metrics"]["mp_spikes"], 4);
  EXPECT_DOUBLE_EQ(s["metrics"]["spectral_norm"].get<double>(), s["values"][0].get<double>());
  // The histogram holds every positive eigenvalue; the fit line is drawn from xmin on.
  const json& esd = s["esd"];
  uint64_t total = 0;
  for (const auto& c : esd["counts"]) total += c.get<uint64_t>();
  EXPECT_EQ(total + esd["zeros"].get<uint64_t>(), 384u);
  EXPECT_EQ(esd["edges"].size(), esd["counts"].size() + 1);
  ASSERT_TRUE(esd["power_law"]["fitted"].get<bool>()) << esd.dump();
  ASSERT_EQ(esd["fit"].size(), esd["counts"].size());
  const double xmin = esd["power_law"]["xmin"];
  for (size_t i = 0; i < esd["fit"].size(); ++i) {
    EXPECT_EQ(esd["fit"][i].is_null(), esd["edges"][i + 1].get<double>() <= xmin) << i;
  }
  EXPECT_GT(esd["mp_bulk_edge"].get<double>(), esd["edges"][0].get<double>());
  // Asked again: kept beside the index, nothing read.
  const json again = served_->get_json(url + "&top=10");
  EXPECT_EQ(again["source"], "stored");
  EXPECT_TRUE(again["records"].empty());
  ASSERT_EQ(again["values"].size(), 10u);
  EXPECT_EQ(again["metrics"], s["metrics"]) << "metrics come from every value, not the ones listed";
  EXPECT_EQ(again["values"][9], s["values"][9]);
}

TEST_F(ServerSpectrum, RefusesWhatHasNoSpectrumWithTheEnginesReason) {
  const json nan = served_->get_json("/api/spectrum?ckpt=0&tensor=model.layers.2.mlp.down_proj.weight", 400);
  const std::string why = nan["error"];
  EXPECT_NE(why.find("model.layers.2.mlp.down_proj.weight"), std::string::npos) << why;
  EXPECT_NE(why.find("row 7, column 11 is NaN"), std::string::npos) << why;
  const json vector = served_->get_json("/api/spectrum?ckpt=0&tensor=model.norm.weight", 422);
  EXPECT_NE(vector["error"].get<std::string>().find("matrix"), std::string::npos) << vector.dump();
  EXPECT_TRUE(served_->get_json("/api/spectrum?ckpt=0&tensor=model.nope", 404).contains("hint"));
  EXPECT_TRUE(served_->get_json("/api/spectrum?ckpt=0&tensor=model.layers.0.mlp.up_proj.weight&bins=1", 400).contains("error"));
}

TEST_F(ServerSpectrum, OverTheTimeBudgetAnswersWithTheLadderAndHonoursConsent) {
  const std::string url = "/api/spectrum?ckpt=0&tensor=model.layers.3.mlp.gate_proj.weight";
  set_time_budget("1e-9");
  const json refused = served_->get_json(url, 409);
  EXPECT_EQ(refused["needs_consent"], true);
  EXPECT_EQ(refused["op"], "spectrum");
  EXPECT_NE(refused["reason"].get<std::string>().find("time budget"), std::string::npos) << refused.dump();
  std::vector<std::string> rungs;
  for (const auto& r : refused["ladder"]) {
    rungs.push_back(r["id"]);
    EXPECT_TRUE(r.contains("error_bound") && r.contains("estimated_ms") && r.contains("backend")) << r.dump();
  }
  ASSERT_GE(rungs.size(), 3u);
  EXPECT_EQ(rungs[0], "exact");
  EXPECT_EQ(rungs[1], "gram");
  EXPECT_EQ(rungs[2], "randomized");
  bool listed = false;
  const json compute = served_->get_json("/api/compute");
  for (const auto& c : compute["consent_requests"]) listed = listed || c["op"] == "spectrum";
  EXPECT_TRUE(listed) << "the Compute panel lists it among the operations waiting for consent";
  // An approximate rung answers, marked so, and is never kept.
  const json gram = served_->get_json(url + "&consent=gram");
  EXPECT_EQ(gram["rung"], "gram");
  EXPECT_EQ(gram["exactness"], "bounded");
  EXPECT_TRUE(gram.contains("metrics"));
  const json top = served_->get_json(url + "&consent=randomized&top=8");
  EXPECT_EQ(top["complete"], false);
  EXPECT_EQ(top["values"].size(), 8u);
  EXPECT_FALSE(top.contains("metrics")) << "metrics need every value";
  served_->get_json(url, 409);
  // The exact rung consented to is kept: asked again without a budget, nothing is computed.
  const json exact = served_->get_json(url + "&consent=exact");
  EXPECT_EQ(exact["exactness"], "exact");
  set_time_budget("off");
  const json kept = served_->get_json(url);
  EXPECT_EQ(kept["source"], "stored");
  EXPECT_EQ(kept["values"], exact["values"]);
}

TEST_F(ServerSpectrum, SpectraListsWhatIsKnownAndComputesTheRestInSteps) {
  const json before = served_->get_json("/api/spectra?ckpt=0");
  const uint64_t total = before["total"];
  EXPECT_EQ(total, 29u) << "the embedding and 7 matrices in each of 4 blocks";
  for (const auto& t : before["tensors"]) EXPECT_EQ(t["state"], "stored") << t.dump();
  // Under a time budget nothing new runs: those tensors say they need consent.
  set_time_budget("1e-9");
  const json waiting = served_->get_json("/api/spectra?ckpt=0&compute=1&from=0&limit=2");
  EXPECT_EQ(waiting["next"], 2);
  ASSERT_EQ(waiting["tensors"].size(), 2u);
  for (const auto& t : waiting["tensors"]) {
    if (t["state"] == "stored") continue;
    EXPECT_EQ(t["state"], "needs_consent") << t.dump();
    EXPECT_NE(t["reason"].get<std::string>().find("time budget"), std::string::npos) << t.dump();
  }
  set_time_budget("off");
  // The viewer's walk: one tensor per request until `next` reaches the total.
  uint64_t from = 0, with_metrics = 0, errors = 0;
  while (from < total) {
    const json step = served_->get_json("/api/spectra?ckpt=0&compute=1&limit=1&from=" + std::to_string(from));
    ASSERT_EQ(step["from"], from);
    ASSERT_EQ(step["next"], from + 1);
    ASSERT_EQ(step["tensors"].size(), 1u);
    const json& t = step["tensors"][0];
    if (t["state"] == "error") {
      ++errors;
      EXPECT_EQ(t["name"], "model.layers.2.mlp.down_proj.weight");
      EXPECT_NE(t["error"].get<std::string>().find("NaN"), std::string::npos) << t.dump();
    } else {
      EXPECT_TRUE(t["state"] == "computed" || t["state"] == "stored") << t.dump();
      with_metrics += t.contains("metrics");
    }
    from = step["next"];
  }
  EXPECT_EQ(errors, 1u);
  EXPECT_EQ(with_metrics, total - 1);
  const json after = served_->get_json("/api/spectra?ckpt=0");
  EXPECT_EQ(after["tensors"].size(), total - 1) << "every computed spectrum was kept";
  for (const auto& t : after["tensors"]) {
    if (t["name"] == "model.layers.1.self_attn.q_proj.weight") {
      EXPECT_EQ(t["metrics"]["mp_spikes"], 4);
    }
    if (t["name"] == "model.layers.0.self_attn.q_proj.weight") {
      EXPECT_EQ(t["metrics"]["mp_spikes"], 2);
    }
  }
  EXPECT_EQ(served_->get_json("/api/spectra?ckpt=0&compute=1&from=" + std::to_string(total))["tensors"].size(), 0u);
  served_->get_json("/api/spectra?ckpt=0&limit=0", 400);
  served_->get_json("/api/spectra?ckpt=9", 404);
}

}  // namespace
}  // namespace tensormorph
