// The viewer's Compute drawer and colour routes against a real server on an ephemeral loopback
// port, serving the demo checkpoint: running totals, the tensor each record served, refusals that
// say what to change, and the palettes tiles take.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "formats/demo/demo_checkpoint.h"
#include "served_for_test.h"
#include "test_util.h"

namespace tensormorph {
namespace {

using json = nlohmann::json;

class ServerCompute : public ::testing::Test {
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
  static std::string overview_tile() {
    const json info = served_->get_json("/api/tensor?ckpt=0&tensor=model.embed_tokens.weight");
    return "/api/tile/0/0/" + std::to_string(info["zoom"]["min_level"].get<int>()) + "/0/0.png?lo=-0.0123&hi=0.0123";
  }

  static inline testing::TempDir* dir_ = nullptr;
  static inline std::unique_ptr<testing::ServedForTest> served_;
};

TEST_F(ServerCompute, RecordsNameTheirTensorAndTheSummaryCountsSinceStart) {
  const json before = served_->get_json("/api/compute");
  ASSERT_TRUE(before.contains("summary")) << before.dump();
  ASSERT_TRUE(before.contains("consent_sequence")) << before.dump();
  const uint64_t operations = before["summary"]["operations"];
  const std::string t = "model.layers.0.self_attn.q_proj.weight";
  const json stats = served_->get_json("/api/stats?ckpt=0&tensor=" + t + "&recompute=1");
  ASSERT_FALSE(stats["records"].empty());
  for (const auto& r : stats["records"]) EXPECT_EQ(r["tensor"], t);
  const json after = served_->get_json("/api/compute");
  const json& summary = after["summary"];
  EXPECT_EQ(summary["operations"].get<uint64_t>(), operations + stats["records"].size());
  uint64_t by_backend = 0;
  for (const auto& [name, counts] : summary["by_backend"].items()) {
    by_backend += counts["operations"].get<uint64_t>();
    for (const char* key : {"fallbacks", "consented", "approximate"}) EXPECT_TRUE(counts.contains(key)) << name;
  }
  EXPECT_EQ(by_backend, summary["operations"].get<uint64_t>());
  for (const char* key : {"fallbacks", "consented", "approximate", "consents"}) EXPECT_TRUE(summary.contains(key)) << key;
  EXPECT_EQ(after["records"].back()["tensor"], t);
}

TEST_F(ServerCompute, SplittingAcrossBackendsIsASettingOfTheRunningServer) {
  EXPECT_EQ(served_->get_json("/api/settings")["running"]["compute.split"], "auto");
  served_->post_ok("/api/settings", R"({"key": "compute.split", "value": "off"})");
  EXPECT_EQ(served_->get_json("/api/settings")["running"]["compute.split"], "off");
  const json listed = served_->get_json("/api/settings");
  EXPECT_TRUE(listed["values"].contains("compute.split")) << listed.dump();
  served_->post_ok("/api/settings", R"({"key": "compute.split", "value": "auto"})");
  EXPECT_EQ(served_->get_json("/api/settings")["running"]["compute.split"], "auto");
}

TEST_F(ServerCompute, ConsentedOperationsAreCountedAndTheRequestsNumbered) {
  const std::string tile = overview_tile() + "&palette=coolwarm";
  const uint64_t sequence_before = served_->get_json("/api/compute")["consent_sequence"];
  served_->post_ok("/api/settings", R"({"key": "compute.memory_budget", "value": "285000"})");
  const json refused = served_->get_json(tile, 409);
  ASSERT_FALSE(refused["ladder"].empty()) << refused.dump();
  const json waiting = served_->get_json("/api/compute");
  EXPECT_EQ(waiting["consent_sequence"].get<uint64_t>(), sequence_before + 1);
  EXPECT_EQ(waiting["consent_requests"].back()["sequence"], waiting["consent_sequence"]);
  const std::string rung = refused["ladder"][0]["id"];
  auto consented = served_->get(tile + "&consent=" + rung);
  ASSERT_TRUE(consented);
  EXPECT_EQ(consented->status, 200) << consented->body;
  served_->post_ok("/api/settings", R"({"key": "compute.memory_budget", "value": "0"})");
  const json summary = served_->get_json("/api/compute")["summary"];
  EXPECT_GE(summary["consented"].get<uint64_t>(), 1u);
  EXPECT_GE(summary["approximate"].get<uint64_t>(), 1u);
  ASSERT_FALSE(summary["consents"].empty());
  const json& last = summary["consents"].back();
  EXPECT_EQ(last["tensor"], "model.embed_tokens.weight");
  EXPECT_EQ(last["op"], "tm.render_tile_sampled@1");
  EXPECT_EQ(last["exactness"], "approximate");
  EXPECT_FALSE(last["backend"].get<std::string>().empty());
  EXPECT_NE(last["detail"].get<std::string>().find("consented"), std::string::npos) << last.dump();
}

TEST_F(ServerCompute, RefusalsSayWhatToChange) {
  const std::string stats = "/api/stats?ckpt=0&tensor=model.norm.weight&recompute=1";
  // Never every backend the session has (the CPU, and the WebGPU backend where it is available).
  json never = json::array();
  const json compute = served_->get_json("/api/compute");
  for (const auto& b : compute["backends"]) never.push_back(b["name"]);
  served_->post_ok("/api/compute", json{{"never", never}}.dump());
  const json excluded = served_->get_json(stats, 422);
  EXPECT_EQ(excluded["code"], "FAILED_PRECONDITION") << excluded.dump();
  EXPECT_NE(excluded["hint"].get<std::string>().find("allow a backend"), std::string::npos) << excluded.dump();
  EXPECT_NE(excluded["error"].get<std::string>().find("never (constraint)"), std::string::npos) << excluded.dump();
  served_->post_ok("/api/compute", R"({"mode": "auto"})");

  served_->post_ok("/api/settings", R"({"key": "compute.memory_budget", "value": "16"})");
  const json over = served_->get_json(stats, 422);
  EXPECT_EQ(over["code"], "RESOURCE_EXHAUSTED") << over.dump();
  EXPECT_NE(over["hint"].get<std::string>().find("raise the memory budget (now 16 bytes) to at least"), std::string::npos)
      << over.dump();
  served_->post_ok("/api/settings", R"({"key": "compute.memory_budget", "value": "0"})");
  EXPECT_EQ(served_->get_json(stats)["source"], "computed");
  // Other errors carry their own hints, never a refusal's.
  const json unknown = served_->get_json("/api/tensor?ckpt=0&tensor=no.such.tensor", 404);
  EXPECT_EQ(unknown["hint"].get<std::string>().find("budget"), std::string::npos) << unknown.dump();
}

TEST_F(ServerCompute, ColormapsListTheScalesAndPalettes) {
  const json c = served_->get_json("/api/colormaps");
  EXPECT_EQ(c["scales"], json::array({"diverging", "sequential", "log"}));
  std::map<std::string, json> palettes;
  for (const auto& p : c["palettes"]) palettes[p["name"]] = p;
  ASSERT_EQ(palettes.size(), 7u) << c.dump();
  EXPECT_EQ(palettes["cividis"]["kind"], "sequential");
  EXPECT_EQ(palettes["cividis"]["colorblind_safe"], true);
  EXPECT_EQ(palettes["cividis"]["perceptually_uniform"], true);
  EXPECT_EQ(palettes["rdbu"]["kind"], "diverging");
  EXPECT_EQ(palettes["greys"]["perceptually_uniform"], false);
  EXPECT_EQ(palettes["viridis"]["default_for"], json::array({"sequential"}));
  EXPECT_EQ(palettes["magma"]["default_for"], json::array({"log"}));
  EXPECT_EQ(palettes["coolwarm"]["default_for"], json::array({"diverging"}));
  EXPECT_EQ(palettes["inferno"]["default_for"], json::array());
}

TEST_F(ServerCompute, AColourBarTakesAPaletteOfTheScalesKind) {
  const json own = served_->get_json("/api/colormap/sequential");
  EXPECT_EQ(own["palette"], "default");
  ASSERT_EQ(own["colors"].size(), 256u);
  const json cividis = served_->get_json("/api/colormap/sequential?palette=cividis");
  ASSERT_EQ(cividis["colors"].size(), 256u);
  EXPECT_EQ(cividis["colors"][0], json::array({0, 34, 78}));       // the published table's first entry
  EXPECT_EQ(cividis["colors"][255], json::array({254, 232, 56}));  // and its last
  EXPECT_EQ(served_->get_json("/api/colormap/log?palette=cividis")["colors"], cividis["colors"]);
  EXPECT_EQ(served_->get_json("/api/colormap/diverging?palette=RdBu")["palette"], "rdbu");
  EXPECT_EQ(served_->get_json("/api/colormap/diverging?palette=viridis", 400)["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(served_->get_json("/api/colormap/sequential?palette=jet", 400)["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(served_->get_json("/api/colormap/nothing", 404)["code"], "NOT_FOUND");
}

TEST_F(ServerCompute, TilesTakeAPalette) {
  const json info = served_->get_json("/api/tensor?ckpt=0&tensor=model.norm.weight");
  const std::string base = "/api/tile/0/" + std::to_string(info["index"].get<int>()) + "/" +
                           std::to_string(info["zoom"]["max_level"].get<int>()) + "/0/0.png?cmap=sequential&lo=0.5&hi=1.5";
  auto own = served_->get(base);
  auto cividis = served_->get(base + "&palette=cividis");
  auto greys = served_->get(base + "&palette=greys");
  for (const auto* r : {&own, &cividis, &greys}) {
    ASSERT_TRUE(*r);
    ASSERT_EQ((*r)->status, 200) << (*r)->body;
  }
  EXPECT_NE(own->body, cividis->body);
  EXPECT_NE(cividis->body, greys->body);
  EXPECT_EQ(served_->get(base + "&palette=cividis")->get_header_value("X-Tensormorph-Source"), "cache");
  EXPECT_EQ(served_->get_json(base + "&palette=coolwarm", 400)["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(served_->get_json(base + "&palette=bogus", 400)["code"], "INVALID_ARGUMENT");
}

}  // namespace
}  // namespace tensormorph
