// The Compare mode's HTTP routes (/api/diff, /api/diff/tensor, /api/diff/tile, /api/quant-error,
// /api/block) against a real server on an ephemeral loopback port serving five checkpoints:
//   0 stories260K.gguf (F32)            1 its Q4_K_M quantization (Q5_0, Q8_0, F16, F32)
//   2 gguf-ref/quantized.gguf            3 gguf-ref/dequantized.safetensors (ggml's decoding, and "source")
//   4 big.safetensors, 5 big-changed.safetensors: one 2048 x 2560 F16 matrix, and a copy with a planted change
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/quantize/quantize.h"
#include "engine/matrix_shape.h"
#include "formats/safetensors/safetensors.h"
#include "served_for_test.h"
#include "tensormorph/decode.h"
#include "tensormorph/open.h"
#include "test_util.h"

namespace tensormorph {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr uint64_t kBigRows = 2048, kBigCols = 2560;

class ServerCompare : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    setenv("TENSORMORPH_CONFIG", (dir_->path() / "settings.json").c_str(), 1);
    const fs::path data = testing::testdata_dir();
    std::vector<std::string> paths;
    for (const fs::path& p : {data / "real/stories260K.gguf", data / "gguf-ref/stories260K-Q4_K_M.gguf",
                              data / "gguf-ref/quantized.gguf", data / "gguf-ref/dequantized.safetensors"}) {
      fs::copy_file(p, dir_->path() / p.filename());
      paths.push_back((dir_->path() / p.filename()).string());
    }
    // A matrix past the values-only size, so that coarse difference tiles come from the pyramid.
    std::vector<uint16_t> a(kBigRows * kBigCols), b;
    for (uint64_t i = 0; i < a.size(); ++i) a[i] = f32_to_f16(static_cast<float>(std::sin(0.001 * static_cast<double>(i))));
    b = a;
    b[kChangedRow * kBigCols + kChangedCol] = f32_to_f16(5.0f);  // the planted change
    for (auto [name, v] : {std::pair{"big.safetensors", &a}, {"big-changed.safetensors", &b}}) {
      safetensors::TensorToWrite t{"w", DType::kF16, {kBigRows, kBigCols}, std::as_bytes(std::span(*v)), nullptr};
      ASSERT_TRUE(safetensors::write_file(dir_->path() / name, std::span(&t, 1), {}).ok());
      paths.push_back((dir_->path() / name).string());
    }
    auto served = testing::ServedForTest::start(paths, {});
    ASSERT_TRUE(served.ok()) << served.status().to_string();
    served_ = std::move(served).value();
    served_->wait_for_index();
  }
  static void TearDownTestSuite() {
    served_.reset();
    delete dir_;
  }
  static std::vector<float> decoded(const std::string& file, const std::string& tensor) {
    auto c = open_checkpoint(dir_->path() / file);
    EXPECT_TRUE(c.ok());
    const TensorInfo* t = (*c)->find(tensor);
    EXPECT_NE(t, nullptr) << tensor;
    auto v = (*c)->decode_f32(*t);
    EXPECT_TRUE(v.ok());
    return *v;
  }

  static constexpr uint64_t kChangedRow = 1000, kChangedCol = 1234;
  static inline testing::TempDir* dir_ = nullptr;
  static inline std::unique_ptr<testing::ServedForTest> served_;
};

TEST_F(ServerCompare, DiffListsEveryTensorMostChangedFirst) {
  const json d = served_->get_json("/api/diff?a=0&b=1");
  EXPECT_EQ(d["schema"], "tensormorph.diff/1");
  EXPECT_EQ(d["sort"], "rel_fro");
  EXPECT_EQ(d["matching"]["matched"], 48);
  EXPECT_TRUE(d["matching"]["only_a"].empty());
  ASSERT_EQ(d["tensors"].size(), 48u);
  double last = INFINITY;
  int identical = 0;
  for (const auto& t : d["tensors"]) {
    const double v = t["rel_fro"].is_null() ? -INFINITY : t["rel_fro"].get<double>();
    EXPECT_LE(v, last) << t["a"];
    last = v;
    identical += t["identical"].get<bool>();
    EXPECT_EQ(t["a"], t["b"]);
    EXPECT_TRUE(t.contains("a_index") && t.contains("b_index"));
  }
  EXPECT_EQ(identical, 11);  // the F32 norms, left unquantized
  // max |a - b| of one tensor equals the one computed from both decodings.
  const std::string name = "blk.0.attn_q.weight";
  const auto a = decoded("stories260K.gguf", name), b = decoded("stories260K-Q4_K_M.gguf", name);
  double max_abs = 0;
  for (size_t i = 0; i < a.size(); ++i) max_abs = std::max(max_abs, std::fabs(static_cast<double>(a[i] - b[i])));
  for (const auto& t : d["tensors"]) {
    if (t["a"] == name) {
      EXPECT_DOUBLE_EQ(t["max_abs"].get<double>(), max_abs);
    }
  }
  // Sorted by cosine, least similar first.
  const json c = served_->get_json("/api/diff?a=0&b=1&sort=cosine");
  EXPECT_EQ(c["sort"], "cosine");
  EXPECT_LE(c["tensors"][0]["cosine"].get<double>(), c["tensors"][30]["cosine"].get<double>());
}

TEST_F(ServerCompare, DiffErrors) {
  EXPECT_EQ(served_->get_json("/api/diff?a=0", 400)["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(served_->get_json("/api/diff?a=0&b=9", 404)["code"], "NOT_FOUND");
  EXPECT_EQ(served_->get_json("/api/diff?a=x&b=1", 400)["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(served_->get_json("/api/diff?a=0&b=1&sort=bogus", 400)["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(served_->get_json("/api/diff/tensor?a=0&b=1&tensor=nope", 404)["code"], "NOT_FOUND");
  EXPECT_EQ(served_->get_json("/api/diff/tensor?a=0&b=1", 400)["code"], "INVALID_ARGUMENT");
  // One-sided tensors: the two gguf-ref files share no names with stories260K.
  const json d = served_->get_json("/api/diff?a=0&b=2");
  EXPECT_EQ(d["matching"]["matched"], 0);
  EXPECT_EQ(d["matching"]["only_a"].size(), 48u);
  EXPECT_EQ(d["matching"]["only_b"].size(), 23u);
  EXPECT_EQ(served_->get_json("/api/diff/tensor?a=0&b=2&tensor=blk.0.attn_q.weight", 404)["code"], "NOT_FOUND");
}

TEST_F(ServerCompare, DiffTensorHasGeometryAndAZeroCentredRange) {
  const json t = served_->get_json("/api/diff/tensor?a=4&b=5&tensor=w");
  EXPECT_EQ(t["max_abs"].get<double>(), 5.0 - static_cast<double>(f16_to_f32(f32_to_f16(static_cast<float>(std::sin(0.001 * (kChangedRow * kBigCols + kChangedCol)))))));
  EXPECT_EQ(t["counts"]["differing"], 1);
  EXPECT_EQ(t["max_abs_at"]["row"], kChangedRow);
  EXPECT_EQ(t["max_abs_at"]["col"], kChangedCol);
  EXPECT_EQ(t["rows"], kBigRows);
  EXPECT_EQ(t["zoom"]["width"], kBigCols * 32);
  EXPECT_EQ(t["range"]["symmetric"][0].get<double>(), -t["range"]["symmetric"][1].get<double>());
  EXPECT_EQ(t["range"]["symmetric"][1].get<double>(), t["max_abs"].get<double>());
}

TEST_F(ServerCompare, DifferenceTilesFromValuesAndFromThePyramid) {
  const json t = served_->get_json("/api/diff/tensor?a=4&b=5&tensor=w");
  const int max_level = t["zoom"]["max_level"], min_level = t["zoom"]["min_level"];
  // Deepest level over the planted change: values of a - b.
  const std::string deep = "/api/diff/tile/4/5/0/" + std::to_string(max_level) + "/" + std::to_string(kChangedCol * 32 / 256) +
                           "/" + std::to_string(kChangedRow * 32 / 256) + ".png?lo=-5&hi=5";
  auto res = served_->get(deep);
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("Content-Type"), "image/png");
  EXPECT_EQ(res->get_header_value("X-Tensormorph-Source"), "difference values");
  EXPECT_EQ(served_->get(deep)->get_header_value("X-Tensormorph-Source"), "cache");
  // The overview: one pixel per tile of the difference pyramid.
  res = served_->get("/api/diff/tile/4/5/0/" + std::to_string(min_level) + "/0/0.png?stat=absmax&lo=-5&hi=5");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("X-Tensormorph-Source"), "difference pyramid");
  // A small pair renders every level from values.
  res = served_->get("/api/diff/tile/0/1/1/" + std::to_string(served_->get_json("/api/diff/tensor?a=0&b=1&tensor=blk.0.attn_q.weight")["zoom"]["min_level"].get<int>()) + "/0/0.png");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  // Errors.
  EXPECT_EQ(served_->get_json("/api/diff/tile/4/5/0/" + std::to_string(max_level + 1) + "/0/0.png", 400)["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(served_->get_json("/api/diff/tile/4/5/0/" + std::to_string(min_level) + "/9/0.png", 404)["code"], "NOT_FOUND");
  EXPECT_EQ(served_->get_json("/api/diff/tile/4/9/0/" + std::to_string(min_level) + "/0/0.png", 404)["code"], "NOT_FOUND");
  EXPECT_EQ(served_->get_json("/api/diff/tile/4/5/7/" + std::to_string(min_level) + "/0/0.png", 404)["code"], "NOT_FOUND");
  EXPECT_EQ(served_->get_json("/api/diff/tile/4/5/0/" + std::to_string(min_level) + "/0/0.png?lo=1&hi=-1", 400)["code"], "INVALID_ARGUMENT");
}

TEST_F(ServerCompare, QuantizationErrorMeasuredAndWhatIf) {
  const json m = served_->get_json("/api/quant-error?ckpt=1&tensor=blk.0.attn_q.weight&reference=0");
  EXPECT_EQ(m["mode"], "measured");
  EXPECT_EQ(m["quantized"], "Q5_0");
  EXPECT_EQ(m["reference"], "F32");
  EXPECT_GT(m["rmse"].get<double>(), 0);
  EXPECT_LE(m["p95_abs"].get<double>(), m["p99_abs"].get<double>());
  EXPECT_LE(m["p99_abs"].get<double>(), m["max_abs"].get<double>());
  EXPECT_EQ(m["rows"].size(), 64u);
  EXPECT_EQ(m["blocks"].size(), 64u * 64 / 32);
  EXPECT_EQ(m["block_elements"], 32);
  EXPECT_EQ(m["histogram"]["counts"].size(), 64u + 3);
  // Against ggml's own decoding the measured error is zero.
  const json zero = served_->get_json("/api/quant-error?ckpt=2&tensor=ref.Q4_K&reference=3&blocks=0");
  EXPECT_EQ(zero["max_abs"].get<double>(), 0.0);
  EXPECT_FALSE(zero.contains("blocks"));
  const json w = served_->get_json("/api/quant-error?ckpt=3&tensor=source&type=Q4_K");
  EXPECT_EQ(w["mode"], "what-if");
  EXPECT_EQ(w["quantized"], "Q4_K");
  EXPECT_EQ(w["blocks"].size(), 64u * 512 / 256);
  EXPECT_GT(w["rmse"].get<double>(), 0);
  // Errors.
  EXPECT_EQ(served_->get_json("/api/quant-error?ckpt=3&tensor=source", 400)["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(served_->get_json("/api/quant-error?ckpt=3&tensor=source&type=Q4_K&reference=2", 400)["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(served_->get_json("/api/quant-error?ckpt=3&tensor=source&type=F32", 400)["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(served_->get_json("/api/quant-error?ckpt=0&tensor=blk.0.ffn_down.weight&type=Q4_K", 400)["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(served_->get_json("/api/quant-error?ckpt=3&tensor=nope&type=Q4_K", 404)["code"], "NOT_FOUND");
  EXPECT_EQ(served_->get_json("/api/quant-error?ckpt=0&tensor=output_norm.weight&reference=0", 400)["code"], "INVALID_ARGUMENT");
}

TEST_F(ServerCompare, BlockAnatomyOfStoredMeasuredAndWhatIfBlocks) {
  const auto want = decoded("dequantized.safetensors", "ref.Q4_K");
  const auto source = decoded("dequantized.safetensors", "source");
  const uint64_t row = 3, block = 1;
  const json s = served_->get_json("/api/block?ckpt=2&tensor=ref.Q4_K&row=3&block=1");
  EXPECT_EQ(s["dtype"], "Q4_K");
  EXPECT_EQ(s["mode"], "stored");
  EXPECT_TRUE(s["described"].get<bool>());
  EXPECT_TRUE(s["fields"].contains("d") && s["fields"].contains("dmin"));
  ASSERT_EQ(s["sub_blocks"].size(), 8u);
  EXPECT_TRUE(s["sub_blocks"][0].contains("min_q"));
  ASSERT_EQ(s["decoded"].size(), 256u);
  for (uint32_t i = 0; i < 256; ++i) {
    EXPECT_EQ(s["decoded"][i].get<float>(), want[row * 512 + block * 256 + i]) << i;
    // The value formed from the reported fields, as the decoder forms it.
    const auto& sub = s["sub_blocks"][i / 32];
    const float v = sub["scale"].get<float>() * static_cast<float>(s["quants"][i].get<int>()) - sub["min"].get<float>();
    EXPECT_EQ(v, s["decoded"][i].get<float>()) << i;
  }
  EXPECT_FALSE(s.contains("reference"));
  const json m = served_->get_json("/api/block?ckpt=2&tensor=ref.Q4_K&row=3&block=1&reference=3");
  ASSERT_EQ(m["error"].size(), 256u);
  for (const auto& e : m["error"]) EXPECT_EQ(e.get<double>(), 0.0);
  // What-if: ggml's reference quantizer gives the bytes ggml wrote.
  const json w = served_->get_json("/api/block?ckpt=3&tensor=source&row=3&block=1&type=Q4_K");
  EXPECT_EQ(w["mode"], "what-if");
  EXPECT_EQ(w["raw"], s["raw"]);
  for (uint32_t i = 0; i < 256; ++i) {
    EXPECT_EQ(w["reference"][i].get<float>(), source[row * 512 + block * 256 + i]);
    EXPECT_EQ(w["error"][i].get<float>(), w["decoded"][i].get<float>() - w["reference"][i].get<float>());
  }
  // A legacy block measured against the F32 original: d, decoded values, reference values.
  const json q = served_->get_json("/api/block?ckpt=1&tensor=blk.0.attn_q.weight&row=5&block=1&reference=0");
  EXPECT_EQ(q["dtype"], "Q5_0");
  EXPECT_TRUE(q["fields"].contains("d"));
  EXPECT_FALSE(q["fields"].contains("m"));
  const auto original = decoded("stories260K.gguf", "blk.0.attn_q.weight");
  for (uint32_t i = 0; i < 32; ++i) EXPECT_EQ(q["reference"][i].get<float>(), original[5 * 64 + 32 + i]);
  // Errors.
  EXPECT_EQ(served_->get_json("/api/block?ckpt=2&tensor=ref.Q4_K&row=3&block=2", 400)["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(served_->get_json("/api/block?ckpt=2&tensor=ref.Q4_K&row=64&block=0", 400)["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(served_->get_json("/api/block?ckpt=3&tensor=source&row=0&block=0", 400)["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(served_->get_json("/api/block?ckpt=3&tensor=nope&row=0&block=0", 404)["code"], "NOT_FOUND");
  EXPECT_EQ(served_->get_json("/api/block?ckpt=2&tensor=ref.Q4_K&row=0&block=0&reference=0", 404)["code"], "NOT_FOUND");
}

}  // namespace
}  // namespace tensormorph
