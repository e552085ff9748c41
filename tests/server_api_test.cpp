// The viewer's HTTP API against a real server on an ephemeral loopback port, serving the demo checkpoint.
#include <gtest/gtest.h>

#include <httplib.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "formats/demo/demo_checkpoint.h"
#include "engine/matrix_shape.h"
#include "served_for_test.h"
#include "server/server.h"
#include "tensormorph/open.h"
#include "test_util.h"

namespace tensormorph {
namespace {

using json = nlohmann::json;

class ServerApi : public ::testing::Test {
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

  static inline testing::TempDir* dir_ = nullptr;
  static inline std::unique_ptr<testing::ServedForTest> served_;
};

TEST_F(ServerApi, ListsCheckpointsAndSearchesTensors) {
  const json c = served_->get_json("/api/checkpoints");
  ASSERT_EQ(c["checkpoints"].size(), 1u);
  const json& demo = c["checkpoints"][0];
  EXPECT_EQ(demo["index"], "ready");
  auto ckpt = open_checkpoint(dir_->path() / "demo");
  ASSERT_TRUE(ckpt.ok());
  uint64_t bytes = 0, parameters = 0;
  for (const auto& f : (*ckpt)->files()) bytes += std::filesystem::file_size(f.path);
  for (const auto& t : (*ckpt)->tensors()) parameters += t.elements();
  EXPECT_EQ(demo["name"], (dir_->path() / "demo").string());
  EXPECT_TRUE(std::filesystem::path(demo["path"].get<std::string>()).is_absolute());
  EXPECT_EQ(demo["files"], (*ckpt)->files().size());
  EXPECT_EQ(demo["bytes"], bytes);
  EXPECT_EQ(demo["tensors"], (*ckpt)->tensors().size());
  EXPECT_EQ(demo["parameters"], parameters);
  // The fresh index read every tensor, and said so as it went.
  const json& progress = demo["index_progress"];
  EXPECT_EQ(progress["tensors_total"], (*ckpt)->tensors().size());
  EXPECT_EQ(progress["tensors_done"], progress["tensors_total"]);
  EXPECT_GT(progress["bytes_total"].get<uint64_t>(), 0u);
  EXPECT_EQ(progress["bytes_done"], progress["bytes_total"]);

  const json all = served_->get_json("/api/tensors?ckpt=0");
  EXPECT_EQ(all["index_state"], "ready");
  ASSERT_EQ(all["stacks"].size(), 1u);
  EXPECT_EQ(all["stacks"][0]["stack"], "model.layers");
  EXPECT_EQ(all["stacks"][0]["blocks"], 4);
  EXPECT_EQ(all["stacks"][0]["roles"], json({"input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                             "self_attn.v_proj.weight", "self_attn.o_proj.weight",
                                             "post_attention_layernorm.weight", "mlp.gate_proj.weight",
                                             "mlp.up_proj.weight", "mlp.down_proj.weight"}));
  for (const auto& t : all["tensors"]) {
    const TensorInfo* info = (*ckpt)->find(t["name"].get<std::string>());
    ASSERT_NE(info, nullptr);
    EXPECT_EQ(t["offset"], info->offset);
    EXPECT_EQ(t["bytes"], info->nbytes);
    EXPECT_EQ(t["file"], info->file);
    EXPECT_EQ(t["file_name"], (*ckpt)->files()[info->file].path.filename().string());
    ASSERT_TRUE(t["stats"].is_object()) << "from the index: " << t.dump();
    const json& s = t["stats"];
    const double mean = s["mean"], std = s["std"], min = s["min"], max = s["max"];
    EXPECT_NEAR(s["outlier_score"].get<double>(), std > 0 ? std::max(max - mean, mean - min) / std : 0.0, 1e-9);
  }
  const json embed = all["tensors"][0];
  EXPECT_EQ(embed["section"], "embedding");
  EXPECT_EQ(embed["block"], nullptr);
  const json some = served_->get_json("/api/tensors?ckpt=0&q=down_proj");
  EXPECT_EQ(some["total"], 4);
  EXPECT_GT(all["total"].get<int>(), some["total"].get<int>());
  for (const auto& t : some["tensors"]) {
    EXPECT_NE(t["name"].get<std::string>().find("down_proj"), std::string::npos);
    EXPECT_EQ(t["role_label"], "down");
    // The planted NaN and Inf of layer 2's down_proj are counted.
    const json& s = t["stats"];
    EXPECT_EQ(s["nan"].get<int>() + s["pos_inf"].get<int>() + s["neg_inf"].get<int>() > 0, t["block"] == 2) << t["name"];
  }
}

// The columns form is the entries form transposed: rebuilt tensor by tensor it is equal to it,
// string fields of few values come as a dictionary, and an unknown form is refused with a hint.
TEST_F(ServerApi, TensorsAsColumnsAreTheEntriesTransposed) {
  const json entries = served_->get_json("/api/tensors?ckpt=0");
  const json columns = served_->get_json("/api/tensors?ckpt=0&form=columns");
  ASSERT_FALSE(columns.contains("tensors"));
  EXPECT_EQ(columns["total"], entries["total"]);
  EXPECT_EQ(columns["stacks"], entries["stacks"]);
  const json& c = columns["columns"];
  ASSERT_TRUE(c["dtype"].contains("codes")) << "two storage types over 38 tensors: a dictionary";
  ASSERT_TRUE(c["name"].is_array());
  auto field = [&](const std::string& key, size_t i) -> json {
    const json& column = c[key];
    return column.is_object() ? column["values"][column["codes"][i].get<size_t>()] : column[i];
  };
  const size_t n = entries["tensors"].size();
  for (size_t i = 0; i < n; ++i) {
    const json& e = entries["tensors"][i];
    json rebuilt = json::object();
    for (const auto& f : e.items()) {
      if (f.key() == "stats") continue;
      rebuilt[f.key()] = field(f.key(), i);
    }
    json stats = json::object();
    for (const auto& s : c["stats"].items()) stats[s.key()] = s.value()[i];
    rebuilt["stats"] = stats;
    EXPECT_EQ(rebuilt, e) << i;
  }
  // Asked again, each form comes from the kept answer, unchanged.
  EXPECT_EQ(served_->get_json("/api/tensors?ckpt=0&form=columns"), columns);
  EXPECT_EQ(served_->get_json("/api/tensors?ckpt=0"), entries);
  const json refused = served_->get_json("/api/tensors?ckpt=0&form=rows", 400);
  EXPECT_EQ(refused["code"], "INVALID_ARGUMENT");
  EXPECT_NE(refused["hint"].get<std::string>().find("form=columns"), std::string::npos);
}

// Large answers go out gzip-compressed at a fast level to clients that take gzip (a browser asks
// for Brotli too, which the library would produce at its slowest quality), and plain to others.
TEST_F(ServerApi, LargeAnswersAreGzippedForClientsThatAcceptIt) {
  httplib::Client client("127.0.0.1", served_->port());
  client.set_decompress(false);
  auto packed = client.Get("/api/tensors?ckpt=0", {{"Accept-Encoding", "gzip, deflate, br"}});
  ASSERT_TRUE(packed);
  EXPECT_EQ(packed->get_header_value("Content-Encoding"), "gzip");
  EXPECT_EQ(packed->get_header_value("Content-Length"), std::to_string(packed->body.size()));
  auto plain = client.Get("/api/tensors?ckpt=0", {{"Accept-Encoding", "identity"}});
  ASSERT_TRUE(plain);
  EXPECT_FALSE(plain->has_header("Content-Encoding"));
  EXPECT_LT(packed->body.size() * 3, plain->body.size());
  // What the library's own client makes of the compressed answer is the plain one.
  httplib::Client unpacking("127.0.0.1", served_->port());
  auto unpacked = unpacking.Get("/api/tensors?ckpt=0", {{"Accept-Encoding", "gzip"}});
  ASSERT_TRUE(unpacked);
  EXPECT_EQ(unpacked->body, plain->body);
}

TEST_F(ServerApi, LocateFindsThePlantedNaNThroughTheIndexAndTheLargestMagnitude) {
  const std::string t = "model.layers.2.mlp.down_proj.weight";  // NaN at [7, 11], +Inf at [100, 200]
  const json nan = served_->get_json("/api/locate?ckpt=0&tensor=" + t + "&what=nonfinite");
  EXPECT_EQ(nan["found"], true);
  EXPECT_EQ(nan["index"], 7 * 1024 + 11);
  EXPECT_EQ(nan["coords"], json({7, 11}));
  EXPECT_EQ(nan["matrix_row"], 7);
  EXPECT_EQ(nan["matrix_col"], 11);
  EXPECT_EQ(nan["view_row"], 7);
  EXPECT_EQ(nan["view_col"], 11);
  EXPECT_EQ(nan["value"], nullptr);
  EXPECT_EQ(nan["kind"], "NaN");
  // The index proves every tile row but the first clean: one band of rows decoded.
  ASSERT_EQ(nan["records"].size(), 1u) << nan["records"].dump();
  EXPECT_EQ(nan["records"][0]["op"], "tm.decode@1");
  const json clean = served_->get_json("/api/locate?ckpt=0&tensor=model.layers.1.mlp.down_proj.weight&what=nonfinite");
  EXPECT_EQ(clean["found"], false);
  EXPECT_EQ(clean["kind"], nullptr);
  EXPECT_TRUE(clean["records"].empty()) << "the index proves it finite";

  auto ckpt = open_checkpoint(dir_->path() / "demo");
  ASSERT_TRUE(ckpt.ok());
  auto values = (*ckpt)->decode_f32(*(*ckpt)->find(t));
  ASSERT_TRUE(values.ok());
  uint64_t best = 0;
  for (uint64_t i = 0; i < values->size(); ++i) {
    if (std::isfinite((*values)[i]) && !(std::fabs((*values)[i]) <= std::fabs((*values)[best]))) best = i;
  }
  const json top = served_->get_json("/api/locate?ckpt=0&tensor=" + t + "&what=absmax");
  EXPECT_EQ(top["found"], true);
  EXPECT_EQ(top["index"], best);
  EXPECT_EQ(top["matrix_row"], best / 1024);
  EXPECT_EQ(top["matrix_col"], best % 1024);
  EXPECT_EQ(top["value"].get<double>(), static_cast<double>((*values)[best]));
  EXPECT_EQ(top["kind"], "value");
}

TEST_F(ServerApi, ValuesEqualTheDecodedTensor) {
  auto ckpt = open_checkpoint(dir_->path() / "demo");
  ASSERT_TRUE(ckpt.ok());
  const TensorInfo* t = (*ckpt)->find("model.layers.2.mlp.down_proj.weight");
  auto values = (*ckpt)->decode_f32(*t);
  ASSERT_TRUE(values.ok());
  const uint64_t cols = engine::as_matrix(*t).cols;
  for (auto [r, c] : {std::pair<uint64_t, uint64_t>{0, 0}, {7, 11}, {100, 200}, {383, 1023}, {50, 600}}) {
    const json v = served_->get_json("/api/value?ckpt=0&tensor=" + t->name + "&row=" + std::to_string(r) + "&col=" + std::to_string(c));
    const float want = (*values)[r * cols + c];
    char text[48];
    std::snprintf(text, sizeof text, "%.9g", static_cast<double>(want));
    EXPECT_EQ(v["text"], text) << r << "," << c;
    if (std::isfinite(want)) {
      EXPECT_EQ(v["value"].get<double>(), static_cast<double>(want));
    }
    ASSERT_FALSE(v["records"].empty());
    EXPECT_EQ(v["records"][0]["op"], "tm.tile_stats@1");
  }
}

TEST_F(ServerApi, AnalysesAnswerCountThePlantedNonFiniteValuesAndKeepQuantiles) {
  const std::string t = "model.layers.2.mlp.down_proj.weight";  // the demo's planted NaN and Inf
  const json q = served_->get_json("/api/quantiles?ckpt=0&tensor=" + t + "&p=0,0.5,1");
  EXPECT_EQ(q["source"], "computed");
  EXPECT_GT(q["nan"].get<int>() + q["pos_inf"].get<int>() + q["neg_inf"].get<int>(), 0);
  ASSERT_EQ(q["quantiles"].size(), 3u);
  EXPECT_LE(q["quantiles"][0]["linear"].get<double>(), q["median"].get<double>());
  EXPECT_FALSE(q["records"].empty());
  const json again = served_->get_json("/api/quantiles?ckpt=0&tensor=" + t + "&p=0,0.5,1");
  EXPECT_EQ(again["source"], "stored");
  EXPECT_EQ(again["quantiles"], q["quantiles"]);
  const json o = served_->get_json("/api/outliers?ckpt=0&tensor=" + t + "&k=5");
  ASSERT_EQ(o["top_k"].size(), 5u);
  EXPECT_GE(std::fabs(o["top_k"][0]["value"].get<double>()), std::fabs(o["top_k"][4]["value"].get<double>()));
  EXPECT_EQ(o["source"], "computed");
  const json o2 = served_->get_json("/api/outliers?ckpt=0&tensor=" + t + "&k=5");
  EXPECT_EQ(o2["source"], "stored");
  EXPECT_TRUE(o2["records"].empty());
  EXPECT_EQ(o2["top_k"], o["top_k"]);
  EXPECT_EQ(o2["outlier_channels"], o["outlier_channels"]);
  const json c = served_->get_json("/api/channels?ckpt=0&tensor=" + t + "&stat=l2");
  EXPECT_EQ(c["source"], "stored");  // the outliers' question counted them
  auto ckpt = open_checkpoint(dir_->path() / "demo");
  ASSERT_TRUE(ckpt.ok());
  const engine::MatrixShape m = engine::as_matrix(*(*ckpt)->find(t));
  EXPECT_EQ(c["rows"].size(), m.rows);
  EXPECT_EQ(c["cols"].size(), m.cols);
  for (const char* bad : {"/api/quantiles?ckpt=0&tensor=model.layers.2.mlp.down_proj.weight&p=1.5",
                          "/api/outliers?ckpt=0&tensor=model.layers.2.mlp.down_proj.weight&k=0",
                          "/api/channels?ckpt=0&tensor=model.layers.2.mlp.down_proj.weight&stat=median"}) {
    const json e = served_->get_json(bad, 400);
    EXPECT_TRUE(e.contains("error")) << bad;
  }
}

TEST_F(ServerApi, ValueWindowsEqualTheDecodedTensorAndStopAtTheEdges) {
  auto ckpt = open_checkpoint(dir_->path() / "demo");
  ASSERT_TRUE(ckpt.ok());
  const TensorInfo* t = (*ckpt)->find("model.layers.2.mlp.down_proj.weight");
  auto values = (*ckpt)->decode_f32(*t);
  ASSERT_TRUE(values.ok());
  const engine::MatrixShape m = engine::as_matrix(*t);
  // An interior window, and one hanging over the bottom-right corner (clipped to the matrix).
  for (auto [r, c] : {std::pair<uint64_t, uint64_t>{5, 9}, {m.rows - 3, m.cols - 2}}) {
    const json w = served_->get_json("/api/values?ckpt=0&tensor=" + t->name + "&row=" + std::to_string(r) +
                            "&col=" + std::to_string(c) + "&rows=16&cols=12");
    const uint64_t rows = std::min<uint64_t>(16, m.rows - r), cols = std::min<uint64_t>(12, m.cols - c);
    ASSERT_EQ(w["rows"], rows);
    ASSERT_EQ(w["cols"], cols);
    ASSERT_EQ(w["text"].size(), rows * cols);
    for (uint64_t i = 0; i < rows; ++i) {
      for (uint64_t j = 0; j < cols; ++j) {
        char text[48];
        std::snprintf(text, sizeof text, "%.9g", static_cast<double>((*values)[(r + i) * m.cols + c + j]));
        ASSERT_EQ(w["text"][i * cols + j], text) << "(" << r + i << ", " << c + j << ")";
      }
    }
    ASSERT_FALSE(w["records"].empty());
    EXPECT_EQ(w["records"][0]["op"], "tm.decode@1");
  }
  EXPECT_EQ(served_->get_json("/api/values?ckpt=0&tensor=" + t->name + "&row=0&col=0&rows=65", 400)["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(served_->get_json("/api/values?ckpt=0&tensor=" + t->name + "&row=" + std::to_string(m.rows) + "&col=0", 400)["code"],
            "INVALID_ARGUMENT");
}

TEST_F(ServerApi, TilesArePngsWithCachingHeaders) {
  const json info = served_->get_json("/api/tensor?ckpt=0&tensor=model.embed_tokens.weight");
  const int max_level = info["zoom"]["max_level"], min_level = info["zoom"]["min_level"];
  for (int level : {min_level, max_level - 5, max_level}) {
    const std::string path = "/api/tile/0/0/" + std::to_string(level) + "/0/0.png?lo=-0.05&hi=0.05";
    auto first = served_->get(path);
    ASSERT_TRUE(first);
    ASSERT_EQ(first->status, 200) << first->body;
    EXPECT_EQ(first->get_header_value("Content-Type"), "image/png");
    EXPECT_EQ(first->body.substr(1, 3), "PNG");
    const std::string etag = first->get_header_value("ETag");
    EXPECT_FALSE(etag.empty());
    auto again = served_->get(path);
    EXPECT_EQ(again->body, first->body);
    EXPECT_EQ(again->get_header_value("X-Tensormorph-Source"), "cache");
    httplib::Client client("127.0.0.1", served_->port());
    auto conditional = client.Get(path.c_str(), {{"If-None-Match", etag}});
    EXPECT_EQ(conditional->status, 304);
  }
  // The [4096, 384] embedding is long but wide enough to keep its rows (tokens): shown as stored.
  EXPECT_EQ(info["view"]["folded"], false);
  EXPECT_EQ(info["view"]["cols"], 384);
  // The deepest level's tile count: 384 columns / 8 elements per tile.
  EXPECT_EQ(served_->get("/api/tile/0/0/" + std::to_string(max_level) + "/47/0.png")->status, 200);
  EXPECT_EQ(served_->get("/api/tile/0/0/" + std::to_string(max_level) + "/48/0.png")->status, 404);
}

TEST_F(ServerApi, BadRequestsGetCleanJsonErrors) {
  EXPECT_EQ(served_->get_json("/api/tensor?ckpt=0&tensor=no.such.tensor", 404)["code"], "NOT_FOUND");
  const json typo = served_->get_json("/api/tensor?ckpt=0&tensor=model.layers.2.mlp.down_prj.weight", 404);
  EXPECT_EQ(typo["hint"].get<std::string>().rfind("did you mean 'model.layers.2.mlp.down_proj.weight'", 0), 0u) << typo.dump();
  EXPECT_NE(served_->get_json("/api/tensor?ckpt=7&tensor=x", 404)["hint"].get<std::string>().find("checkpoints 0 to 0"),
            std::string::npos);
  EXPECT_EQ(served_->get_json("/api/tensor?ckpt=7&tensor=x", 404)["code"], "NOT_FOUND");
  EXPECT_EQ(served_->get_json("/api/tensor?ckpt=-1&tensor=x", 400)["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(served_->get_json("/api/value?ckpt=0&tensor=model.norm.weight&row=0&col=99999999999999999999", 400)["code"], "INVALID_ARGUMENT");
  // model.norm.weight [384] is shown as [16, 24].
  EXPECT_EQ(served_->get_json("/api/value?ckpt=0&tensor=model.norm.weight&row=16&col=0", 400)["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(served_->get_json("/api/tile/0/0/999/0/0.png", 400)["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(served_->get_json("/api/tile/0/0/3/0/0.png", 400)["code"], "INVALID_ARGUMENT");  // above the overview
  // The embedding's levels: 8 to 17.
  const json far = served_->get_json("/api/tile/0/0/17/18446744073709551615/0.png", 404);
  EXPECT_EQ(far["code"], "NOT_FOUND");
  EXPECT_EQ(far["hint"], "level 17 has x in [0, 48) and y in [0, 512)");
  EXPECT_EQ(served_->get_json("/api/tile/0/0/18/0/0.png", 400)["hint"],
            "levels run from 8 (the whole tensor in one tile) to 17 (32 pixels per element)");
  EXPECT_EQ(served_->get_json("/api/tile/0/9999/17/0/0.png", 404)["code"], "NOT_FOUND");
  EXPECT_EQ(served_->get_json("/api/tile/0/0/17/0/0.png?stat=bogus", 400)["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(served_->get_json("/api/tile/0/0/17/0/0.png?lo=1&hi=1", 400)["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(served_->get_json("/api/histogram?ckpt=0&tensor=model.norm.weight&bins=0", 400)["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(served_->get_json("/api/../../etc/passwd", 404)["code"], "NOT_FOUND");
  EXPECT_EQ(served_->get_json("/api/nothing", 404)["code"], "NOT_FOUND");
  httplib::Client client("127.0.0.1", served_->port());
  auto bad = client.Post("/api/compute", "{not json", "application/json");
  EXPECT_EQ(bad->status, 400);
  auto wrong = client.Post("/api/compute", R"({"never": "cpu"})", "application/json");
  EXPECT_EQ(wrong->status, 400);
}

TEST_F(ServerApi, ConstraintsApplyToTheNextOperationAndPersistWhenAsked) {
  httplib::Client client("127.0.0.1", served_->port());
  // Never every backend the session has (the CPU, and the WebGPU backend where it is available).
  json never = json::array();
  const json before = served_->get_json("/api/compute");
  for (const auto& b : before["backends"]) never.push_back(b["name"]);
  auto set = client.Post("/api/compute", json{{"never", never}, {"persist", true}}.dump(), "application/json");
  ASSERT_EQ(set->status, 200) << set->body;
  // With every exact backend excluded, tile statistics cannot run: an error, never a crash.
  const json refused = served_->get_json("/api/stats?ckpt=0&tensor=model.norm.weight&recompute=1", 422);
  EXPECT_NE(refused["error"].get<std::string>().find("never (constraint)"), std::string::npos) << refused.dump();
  EXPECT_NE(testing::read_bytes(dir_->path() / "settings.json").find("cpu"), std::string::npos);
  ASSERT_EQ(client.Post("/api/compute", R"({"mode": "auto", "persist": true})", "application/json")->status, 200);
  EXPECT_EQ(testing::read_bytes(dir_->path() / "settings.json").find("cpu"), std::string::npos);
  const json stats = served_->get_json("/api/stats?ckpt=0&tensor=model.norm.weight&recompute=1");
  EXPECT_EQ(stats["source"], "computed");
  ASSERT_FALSE(stats["records"].empty());
  const uint64_t seq = stats["records"].back()["sequence"];
  const json compute = served_->get_json("/api/compute?since=" + std::to_string(seq - 1));
  EXPECT_EQ(compute["constraints"]["mode"], "auto");
  ASSERT_FALSE(compute["records"].empty());
  EXPECT_EQ(compute["records"][0]["sequence"], seq);
}

TEST_F(ServerApi, QuantilesOverTheTimeBudgetAnswerWithTheLadderAndHonourConsent) {
  httplib::Client client("127.0.0.1", served_->port());
  auto set = client.Post("/api/settings", R"({"key": "compute.time_budget", "value": "1e-9"})", "application/json");
  ASSERT_EQ(set->status, 200) << set->body;
  const std::string url = "/api/quantiles?ckpt=0&tensor=model.layers.1.self_attn.q_proj.weight&p=0.01,0.5,0.99";
  const json refused = served_->get_json(url, 409);
  EXPECT_EQ(refused["needs_consent"], true) << refused.dump();
  EXPECT_NE(refused["reason"].get<std::string>().find("time budget"), std::string::npos) << refused.dump();
  std::vector<std::string> rungs;
  for (const auto& r : refused["ladder"]) rungs.push_back(r["id"]);
  EXPECT_EQ(rungs, (std::vector<std::string>{"exact", "histogram", "sample"})) << "the index is ready: its histogram is a rung";
  // The Compute panel lists it among the operations waiting for consent.
  bool listed = false;
  const json compute = served_->get_json("/api/compute");
  for (const auto& c : compute["consent_requests"]) listed = listed || c["op"] == "quantiles";
  EXPECT_TRUE(listed) << compute["consent_requests"].dump();
  const json histogram = served_->get_json(url + "&consent=histogram");
  EXPECT_EQ(histogram["rung"], "histogram");
  EXPECT_EQ(histogram["exactness"], "approximate");
  EXPECT_TRUE(histogram["records"].empty()) << "read off the index";
  const json exact = served_->get_json(url + "&consent=exact");
  EXPECT_EQ(exact["exactness"], "exact");
  for (size_t i = 0; i < 3; ++i) {
    const double v = exact["quantiles"][i]["linear"];
    EXPECT_LE(histogram["quantiles"][i]["interval"][0].get<double>(), v);
    EXPECT_GE(histogram["quantiles"][i]["interval"][1].get<double>(), v);
  }
  ASSERT_EQ(client.Post("/api/settings", R"({"key": "compute.time_budget", "value": "off"})", "application/json")->status, 200);
  EXPECT_EQ(served_->get_json(url)["source"], "stored") << "the exact result consented to was kept";
}

TEST_F(ServerApi, MemoryBudgetAppliesToTheNextOperation) {
  httplib::Client client("127.0.0.1", served_->port());
  auto set = client.Post("/api/settings", R"({"key": "compute.memory_budget", "value": "285000"})", "application/json");
  ASSERT_EQ(set->status, 200) << set->body;
  EXPECT_EQ(json::parse(set->body)["applies"], "now");
  // The exact overview render of the embedding needs more working memory than that, its sampled
  // rung (one row per block) does not: without a restart, it now asks for consent.
  const json info = served_->get_json("/api/tensor?ckpt=0&tensor=model.embed_tokens.weight");
  const std::string tile = "/api/tile/0/0/" + std::to_string(info["zoom"]["min_level"].get<int>()) + "/0/0.png?lo=-0.0123&hi=0.0123";
  const json refused = served_->get_json(tile, 409);
  EXPECT_EQ(refused["needs_consent"], true) << refused.dump();
  EXPECT_FALSE(refused["ladder"].empty());
  ASSERT_EQ(client.Post("/api/settings", R"({"key": "compute.memory_budget", "value": "0"})", "application/json")->status, 200);
  auto rendered = served_->get(tile);
  ASSERT_TRUE(rendered);
  EXPECT_EQ(rendered->status, 200);
  // plugins.path loads code: never settable over HTTP.
  auto plugins = client.Post("/api/settings", R"({"key": "plugins.path", "value": "/nonexistent"})", "application/json");
  ASSERT_EQ(plugins->status, 403) << plugins->body;
  EXPECT_EQ(json::parse(plugins->body)["code"], "FORBIDDEN");
}

TEST(ServerBind, RefusesNonLoopbackWithoutTheFlag) {
  EXPECT_TRUE(server::is_loopback_host("127.0.0.1"));
  EXPECT_TRUE(server::is_loopback_host("::1"));
  EXPECT_FALSE(server::is_loopback_host("0.0.0.0"));
  testing::TempDir dir;
  ASSERT_TRUE(demo::write_demo_checkpoint(dir.path()).ok());
  auto session = engine::open_default_session("auto");
  ASSERT_TRUE(session.ok());
  server::ServerOptions options;
  options.host = "0.0.0.0";
  options.port = 0;
  options.build_index = false;
  auto created = server::ViewerServer::create({dir.path().string()}, options, std::move(session).value());
  ASSERT_TRUE(created.ok());
  auto bound = (*created)->bind();
  EXPECT_EQ(bound.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tensormorph
