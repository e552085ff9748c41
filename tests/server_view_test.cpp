// The display view of thin tensors (engine::display_view) and the routes that use it: /api/tensor,
// /api/tile, /api/value(s), /api/cell in view coordinates; /api/locate; /api/tensors on 10,000
// tensors. Against a real server on an ephemeral loopback port serving, without an index:
//   0 view.safetensors: thin [2304, 8], its values as a plain [128, 144] matrix, a vector [384],
//     a conv [64, 32, 3, 3], a prime-length vector [383]
//   1 quant.gguf: Q8_0 [288], Q4_0 [3072] and an F32 [288]
//   2 many.safetensors: 10,000 tensors of 2 elements in 1,000 blocks
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>

#include <nlohmann/json.hpp>

#include "core/quantize/quantize.h"
#include "engine/matrix_shape.h"
#include "formats/gguf/gguf.h"
#include "formats/safetensors/safetensors.h"
#include "served_for_test.h"
#include "tensormorph/open.h"
#include "test_util.h"

namespace tensormorph {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr size_t kManyTensors = 10000;

std::vector<float> wavy(uint64_t n, double phase) {
  std::vector<float> v(n);
  for (uint64_t i = 0; i < n; ++i) {
    v[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i) + phase) * (1.0 + static_cast<double>(i % 7)));
  }
  return v;
}

TensorInfo info(std::vector<uint64_t> shape, DType dtype = DType::kF32) {
  TensorInfo t;
  t.name = "t";
  t.dtype = dtype;
  t.shape = std::move(shape);
  return t;
}

void expect_view(const TensorInfo& t, uint64_t rows, uint64_t cols, bool folded, const std::string& rule) {
  const engine::DisplayView v = engine::display_view(t);
  EXPECT_EQ(v.rows, rows) << t.shape_string();
  EXPECT_EQ(v.cols, cols) << t.shape_string();
  EXPECT_EQ(v.folded, folded) << t.shape_string();
  EXPECT_EQ(v.rule, rule) << t.shape_string();
}

TEST(DisplayView, FoldsThinTensorsPerTheRule) {
  expect_view(info({2304, 8}), 128, 144, true, "18 consecutive rows side by side");
  expect_view(info({8, 2304}), 128, 144, true, "each row wrapped into rows of 144");
  expect_view(info({384}), 16, 24, true, "each row wrapped into rows of 24");
  expect_view(info({64, 32, 3, 3}), 64, 288, true, "96 consecutive rows side by side");  // the trailing dims
  expect_view(info({383}), 1, 383, false, "as stored");                                   // prime: nothing less thin
  expect_view(info({766}), 2, 383, true, "each row wrapped into rows of 383");           // less thin, if still thin
  expect_view(info({64, 64}), 64, 64, false, "as stored");
  expect_view(info({64, 512}), 64, 512, false, "as stored");  // 8 times wider is not thin
  expect_view(info({}), 1, 1, false, "as stored");
  expect_view(info({0, 8}), 0, 8, false, "as stored");
  // Quantized: widths in whole blocks (F32 would take [16, 18]).
  expect_view(info({288}), 16, 18, true, "each row wrapped into rows of 18");
  expect_view(info({288}, DType::kQ8_0), 9, 32, true, "each row wrapped into rows of 32");
  expect_view(info({3072}, DType::kQ4_0), 48, 64, true, "each row wrapped into rows of 64");
  expect_view(info({4096}, DType::kQ4_K), 16, 256, true, "each row wrapped into rows of 256");
  // Past 2^22 elements, or strided: as stored.
  expect_view(info({uint64_t{1} << 23}), 1, uint64_t{1} << 23, false, "as stored");
  TensorInfo strided = info({2304, 8});
  strided.strides = {1, 2304};
  expect_view(strided, 2304, 8, false, "as stored");
  // A PyTorch tensor whose strides are row-major is contiguous: folded, shown without them.
  TensorInfo row_major = info({2304, 8});
  row_major.strides = {8, 1};
  const TensorInfo shown = engine::as_displayed(row_major, engine::display_view(row_major));
  EXPECT_EQ(shown.shape, (std::vector<uint64_t>{128, 144}));
  EXPECT_TRUE(shown.strides.empty());
}

class ServerView : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    setenv("TENSORMORPH_CONFIG", (dir_->path() / "settings.json").c_str(), 1);
    thin_ = new std::vector<float>(wavy(2304 * 8, 0.0));
    const auto vector = wavy(384, 1.0), conv = wavy(64 * 32 * 9, 2.0), prime = wavy(383, 3.0);
    auto bytes = [](const std::vector<float>& v) { return std::as_bytes(std::span(v)); };
    const std::vector<safetensors::TensorToWrite> view = {
        {"thin", DType::kF32, {2304, 8}, bytes(*thin_), nullptr},
        {"twin", DType::kF32, {128, 144}, bytes(*thin_), nullptr},
        {"vector", DType::kF32, {384}, bytes(vector), nullptr},
        {"conv", DType::kF32, {64, 32, 3, 3}, bytes(conv), nullptr},
        {"prime", DType::kF32, {383}, bytes(prime), nullptr},
    };
    ASSERT_TRUE(safetensors::write_file(dir_->path() / "view.safetensors", view, {}).ok());
    const auto q8_values = wavy(288, 4.0), q4_values = wavy(3072, 5.0);
    auto q8 = encode_from_f32(DType::kQ8_0, q8_values);
    auto q4 = encode_from_f32(DType::kQ4_0, q4_values);
    ASSERT_TRUE(q8.ok() && q4.ok());
    const std::vector<gguf::TensorToWrite> quant = {{"q8", DType::kQ8_0, {288}, *q8},
                                                    {"q4", DType::kQ4_0, {3072}, *q4},
                                                    {"f32", DType::kF32, {288}, bytes(q8_values)}};
    ASSERT_TRUE(gguf::write_file(dir_->path() / "quant.gguf", {}, quant).ok());
    std::vector<std::string> names;
    std::vector<float> pair = {1.0f, -2.0f};
    std::vector<safetensors::TensorToWrite> many;
    for (size_t i = 0; i < kManyTensors; ++i) names.push_back("model.layers." + std::to_string(i / 10) + ".p" + std::to_string(i % 10) + ".weight");
    for (const auto& n : names) many.push_back({n, DType::kF32, {2}, bytes(pair), nullptr});
    ASSERT_TRUE(safetensors::write_file(dir_->path() / "many.safetensors", many, {}).ok());
    server::ServerOptions options;
    options.build_index = false;
    auto served = testing::ServedForTest::start({(dir_->path() / "view.safetensors").string(),
                                                  (dir_->path() / "quant.gguf").string(),
                                                  (dir_->path() / "many.safetensors").string()},
                                                 options);
    ASSERT_TRUE(served.ok()) << served.status().to_string();
    served_ = std::move(served).value();
  }
  static void TearDownTestSuite() {
    served_.reset();
    delete thin_;
    delete dir_;
  }
  static std::vector<float> decoded(const std::string& file, const std::string& tensor) {
    auto ckpt = open_checkpoint(dir_->path() / file);
    EXPECT_TRUE(ckpt.ok());
    auto values = (*ckpt)->decode_f32(*(*ckpt)->find(tensor));
    EXPECT_TRUE(values.ok());
    return *values;
  }

  static inline testing::TempDir* dir_ = nullptr;
  static inline std::vector<float>* thin_ = nullptr;
  static inline std::unique_ptr<testing::ServedForTest> served_;
};

TEST_F(ServerView, TensorAnswersTheMatrixTheViewAndAZoomOverTheView) {
  const json thin = served_->get_json("/api/tensor?ckpt=0&tensor=thin");
  EXPECT_EQ(thin["matrix"], json({{"rows", 2304}, {"cols", 8}}));
  EXPECT_EQ(thin["view"], json({{"rows", 128}, {"cols", 144}, {"folded", true}, {"rule", "18 consecutive rows side by side"}}));
  EXPECT_EQ(thin["zoom"], served_->get_json("/api/tensor?ckpt=0&tensor=twin")["zoom"]);
  EXPECT_EQ(thin["zoom"]["width"], 144 * 32);
  EXPECT_EQ(thin["elements"], 2304 * 8);
  EXPECT_EQ(thin["bytes"], 2304 * 8 * 4);
  EXPECT_EQ(thin["file_name"], "view.safetensors");
  EXPECT_EQ(thin["stats"], nullptr) << "no index";
  EXPECT_EQ(served_->get_json("/api/tensor?ckpt=0&tensor=conv")["view"]["cols"], 288);
  EXPECT_EQ(served_->get_json("/api/tensor?ckpt=0&tensor=vector")["view"]["rows"], 16);
  const json prime = served_->get_json("/api/tensor?ckpt=0&tensor=prime");
  EXPECT_EQ(prime["view"], json({{"rows", 1}, {"cols", 383}, {"folded", false}, {"rule", "as stored"}}));
  EXPECT_EQ(served_->get_json("/api/tensor?ckpt=1&tensor=q8")["view"]["cols"], 32);
  EXPECT_EQ(served_->get_json("/api/tensor?ckpt=1&tensor=q4")["view"]["cols"], 64);
}

// The folded tensor's tiles are the plain [128, 144] matrix's, pixel for pixel, at every kind of level.
TEST_F(ServerView, FoldedTilesEqualThoseOfThePlainMatrix) {
  const json zoom = served_->get_json("/api/tensor?ckpt=0&tensor=thin")["zoom"];
  const int max_level = zoom["max_level"], min_level = zoom["min_level"];
  ASSERT_EQ(max_level - min_level, 5) << "levels from one pixel per element to 32";
  for (int level = min_level; level <= max_level; ++level) {
    for (const std::string stat : {"mean", "absmax"}) {
      const std::string tail = "/" + std::to_string(level) + "/0/0.png?lo=-4&hi=4&stat=" + stat;
      auto folded = served_->get("/api/tile/0/0" + tail);
      auto plain = served_->get("/api/tile/0/1" + tail);
      ASSERT_TRUE(folded && plain);
      ASSERT_EQ(folded->status, 200) << folded->body;
      ASSERT_EQ(plain->status, 200) << plain->body;
      EXPECT_EQ(folded->body, plain->body) << "level " << level << " " << stat;
    }
  }
  // The last tile of the deepest level: 144 columns / 8 elements per tile, 128 rows / 8.
  EXPECT_EQ(served_->get("/api/tile/0/0/" + std::to_string(max_level) + "/17/15.png")->status, 200);
  const json outside = served_->get_json("/api/tile/0/0/" + std::to_string(max_level) + "/18/0.png", 404);
  EXPECT_EQ(outside["hint"], "level " + std::to_string(max_level) + " has x in [0, 18) and y in [0, 16)");
  const json above = served_->get_json("/api/tile/0/0/" + std::to_string(max_level + 1) + "/0/0.png", 400);
  EXPECT_NE(above["hint"].get<std::string>().find("levels run from " + std::to_string(min_level)), std::string::npos);
  // The quantized folds render (rows of whole blocks), at the deepest and the whole-tensor level.
  for (const std::string t : {"q8", "q4"}) {
    const json z = served_->get_json("/api/tensor?ckpt=1&tensor=" + t)["zoom"];
    const std::string index = t == "q8" ? "0" : "1";
    for (int level : {z["min_level"].get<int>(), z["max_level"].get<int>()}) {
      auto tile = served_->get("/api/tile/1/" + index + "/" + std::to_string(level) + "/0/0.png");
      ASSERT_TRUE(tile);
      EXPECT_EQ(tile->status, 200) << t << " level " << level << ": " << tile->body;
    }
  }
}

TEST_F(ServerView, ValuesValueAndCellMapViewCoordinatesBackToElements) {
  const std::vector<float>& v = *thin_;
  // A window of the view: display row r holds elements [r * 144, (r + 1) * 144).
  const json w = served_->get_json("/api/values?ckpt=0&tensor=thin&row=5&col=130&rows=3&cols=20");
  ASSERT_EQ(w["rows"], 3);
  ASSERT_EQ(w["cols"], 14);  // clipped at the view's 144 columns
  for (uint64_t i = 0; i < 3; ++i) {
    for (uint64_t j = 0; j < 14; ++j) {
      char text[48];
      std::snprintf(text, sizeof text, "%.9g", static_cast<double>(v[(5 + i) * 144 + 130 + j]));
      ASSERT_EQ(w["text"][i * 14 + j], text) << i << "," << j;
    }
  }
  const json one = served_->get_json("/api/value?ckpt=0&tensor=thin&row=100&col=77");
  const uint64_t index = 100 * 144 + 77;
  EXPECT_EQ(one["index"], index);
  EXPECT_EQ(one["coords"], json({index / 8, index % 8}));
  EXPECT_EQ(one["matrix_row"], index / 8);
  EXPECT_EQ(one["matrix_col"], index % 8);
  EXPECT_EQ(one["value"].get<double>(), static_cast<double>(v[index]));
  const json conv = served_->get_json("/api/value?ckpt=0&tensor=conv&row=3&col=100");
  EXPECT_EQ(conv["coords"], json({3, 100 / 9, 100 % 9 / 3, 100 % 3}));
  EXPECT_EQ(conv["matrix_row"], (3 * 288 + 100) / 3);
  const json outside = served_->get_json("/api/value?ckpt=0&tensor=thin&row=128&col=0", 400);
  EXPECT_NE(outside["hint"].get<std::string>().find("128 x 144"), std::string::npos) << outside.dump();
  // A quantized fold: display row 8 of the Q8_0 vector is its last block.
  const std::vector<float> q8 = decoded("quant.gguf", "q8");
  const json last = served_->get_json("/api/values?ckpt=1&tensor=q8&row=8&col=0&rows=1&cols=32");
  ASSERT_EQ(last["cols"], 32);
  for (uint64_t j = 0; j < 32; ++j) EXPECT_EQ(last["values"][j].get<double>(), static_cast<double>(q8[256 + j])) << j;
  // A cell of the deepest level but 3 (8 x 8 elements) covers those elements of the view.
  const json zoom = served_->get_json("/api/tensor?ckpt=0&tensor=thin")["zoom"];
  const json cell = served_->get_json("/api/cell?ckpt=0&tensor=thin&level=" + std::to_string(zoom["max_level"].get<int>() - 8) +
                             "&row=20&col=140");
  EXPECT_EQ(cell["rows"], json({16, 24}));
  EXPECT_EQ(cell["cols"], json({136, 144}));
  double max = -INFINITY;
  for (uint64_t r = 16; r < 24; ++r) {
    for (uint64_t c = 136; c < 144; ++c) max = std::max(max, static_cast<double>(v[r * 144 + c]));
  }
  EXPECT_EQ(cell["count"], 64);
  EXPECT_EQ(cell["max"].get<double>(), max);
}

TEST_F(ServerView, LocateFindsTheLargestMagnitudeInEveryCoordinateSystem) {
  const std::vector<float> values = decoded("view.safetensors", "vector");
  uint64_t best = 0;
  for (uint64_t i = 1; i < values.size(); ++i) {
    if (std::fabs(values[i]) > std::fabs(values[best])) best = i;
  }
  const json a = served_->get_json("/api/locate?ckpt=0&tensor=vector&what=absmax");
  EXPECT_EQ(a["found"], true);
  EXPECT_EQ(a["index"], best);
  EXPECT_EQ(a["coords"], json({best}));
  EXPECT_EQ(a["matrix_row"], 0);
  EXPECT_EQ(a["matrix_col"], best);
  EXPECT_EQ(a["view_row"], best / 24);
  EXPECT_EQ(a["view_col"], best % 24);
  EXPECT_EQ(a["value"].get<double>(), static_cast<double>(values[best]));
  EXPECT_EQ(a["kind"], "value");
  EXPECT_EQ(a["records"][0]["op"], "tm.top_k@1");
  // Nothing non-finite: without an index every band is decoded to say so.
  const json none = served_->get_json("/api/locate?ckpt=0&tensor=thin&what=nonfinite");
  EXPECT_EQ(none["found"], false);
  EXPECT_EQ(none["index"], nullptr);
  ASSERT_FALSE(none["records"].empty());
  EXPECT_EQ(none["records"][0]["op"], "tm.decode@1");
  EXPECT_EQ(served_->get_json("/api/locate?ckpt=0&tensor=thin&what=median", 400)["code"], "INVALID_ARGUMENT");
}

TEST_F(ServerView, TensorsListsTenThousandTensorsWithTheirPlaces) {
  const auto start = std::chrono::steady_clock::now();
  auto res = served_->get("/api/tensors?ckpt=2");
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  std::cout << "/api/tensors on " << kManyTensors << " tensors: " << ms << " ms, " << res->body.size() << " bytes\n";
  RecordProperty("api_tensors_10000_ms", std::to_string(ms));
  const json all = json::parse(res->body);
  ASSERT_EQ(all["total"], kManyTensors);
  ASSERT_EQ(all["tensors"].size(), kManyTensors);
  EXPECT_EQ(all["index_state"], "building") << "served without an index";
  for (size_t i = 0; i < kManyTensors; ++i) {
    const json& t = all["tensors"][i];
    ASSERT_EQ(t["index"], i);
    ASSERT_EQ(t["stack"], "model.layers");
    ASSERT_EQ(t["block"], i / 10);
    ASSERT_EQ(t["role"], "p" + std::to_string(i % 10) + ".weight");
    ASSERT_EQ(t["elements"], 2);
    ASSERT_EQ(t["stats"], nullptr);
  }
  ASSERT_EQ(all["stacks"].size(), 1u);
  EXPECT_EQ(all["stacks"][0]["blocks"], kManyTensors / 10);
  EXPECT_EQ(all["stacks"][0]["block_numbers"][999], 999);
  EXPECT_EQ(all["stacks"][0]["roles"].size(), 10u);
}

}  // namespace
}  // namespace tensormorph
