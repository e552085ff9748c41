// End-to-end tests of the `tensormorph` binary: demo, info, stats, export, exit codes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include <nlohmann/json.hpp>

#include "test_util.h"

namespace tensormorph {
namespace {

using testing::run_cli;
using testing::TempDir;

class DemoCheckpoint : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    auto r = run_cli({"demo", (dir_->path() / "demo").string()});
    ASSERT_EQ(r.exit_code, 0) << r.err;
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }
  static std::string demo() { return (dir_->path() / "demo").string(); }
  static TempDir* dir_;
};
TempDir* DemoCheckpoint::dir_ = nullptr;

TEST_F(DemoCheckpoint, InfoJsonDescribesShardedSet) {
  auto r = run_cli({"info", demo(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["schema"], "tensormorph.info/1");
  EXPECT_EQ(j["format"], "safetensors");
  EXPECT_EQ(j["files"].size(), 2u);
  // 1 embedding + 4 layers x 9 tensors + final norm.
  EXPECT_EQ(j["tensors"].size(), 38u);
  EXPECT_EQ(j["totals"]["by_dtype"]["BF16"]["tensors"], 29);
  EXPECT_EQ(j["totals"]["by_dtype"]["F32"]["tensors"], 9);
  bool found = false;
  for (const auto& t : j["tensors"]) {
    if (t["name"] == "model.layers.2.mlp.down_proj.weight") {
      found = true;
      EXPECT_EQ(t["shape"], nlohmann::json::array({384, 1024}));
      EXPECT_EQ(t["bytes"], 384 * 1024 * 2);
    }
  }
  EXPECT_TRUE(found);
}

TEST_F(DemoCheckpoint, GgufTwinHasQuantizedTypes) {
  auto r = run_cli({"info", demo() + "/demo-mixed-quant.gguf", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["format"], "gguf");
  EXPECT_EQ(j["tensors"].size(), 38u);
  EXPECT_TRUE(j["totals"]["by_dtype"].contains("Q4_0"));
  EXPECT_TRUE(j["totals"]["by_dtype"].contains("Q8_0"));
}

TEST_F(DemoCheckpoint, StatsCountPlantedNanAndInfWithoutPropagating) {
  auto r = run_cli({"stats", demo(), "--tensor", "*layers.2.mlp.down*", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["tensors"].size(), 1u);
  const auto& s = j["tensors"][0];
  EXPECT_EQ(s["nan"], 1);
  EXPECT_EQ(s["pos_inf"], 1);
  EXPECT_EQ(s["finite"], 384 * 1024 - 2);
  EXPECT_TRUE(std::isfinite(s["mean"].get<double>()));
  EXPECT_LT(s["absmax"].get<double>(), 1.0);
  EXPECT_NEAR(s["std"].get<double>(), 0.02, 0.002);
}

TEST_F(DemoCheckpoint, StatsMatchIndependentComputationFromExportedValues) {
  TempDir out;
  const std::string npy = (out / "w.npy").string();
  const std::string name = "model.layers.0.self_attn.q_proj.weight";
  auto e = run_cli({"export", demo(), "--tensor", name, "-o", npy});
  ASSERT_EQ(e.exit_code, 0) << e.err;
  std::string bytes = testing::read_bytes(npy);
  ASSERT_EQ(bytes.substr(1, 5), "NUMPY");
  uint16_t header_len = static_cast<uint16_t>(static_cast<unsigned char>(bytes[8]) |
                                              (static_cast<unsigned char>(bytes[9]) << 8));
  std::string header = bytes.substr(10, header_len);
  EXPECT_NE(header.find("'shape': (384, 384)"), std::string::npos) << header;
  EXPECT_EQ((10 + header_len) % 64, 0);
  const size_t n = 384 * 384;
  ASSERT_EQ(bytes.size(), 10 + header_len + n * 4);
  double sum = 0, lo = 1e9, hi = -1e9;
  for (size_t i = 0; i < n; ++i) {
    float f;
    std::memcpy(&f, bytes.data() + 10 + header_len + 4 * i, 4);
    sum += f;
    lo = std::min<double>(lo, f);
    hi = std::max<double>(hi, f);
  }
  auto r = run_cli({"stats", demo(), "--tensor", name, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto s = nlohmann::json::parse(r.out)["tensors"][0];
  EXPECT_EQ(s["min"].get<double>(), lo);
  EXPECT_EQ(s["max"].get<double>(), hi);
  EXPECT_NEAR(s["mean"].get<double>(), sum / n, 1e-12);
}

// The twin is what llama.cpp's converter would make of the set (q/k rows regrouped per head), so a
// comparison that undoes the regrouping sees only the quantization error.
TEST_F(DemoCheckpoint, GgufTwinComparesAsAFaithfulConversion) {
  auto r = run_cli({"diff", demo(), demo() + "/demo-mixed-quant.gguf", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto doc = nlohmann::json::parse(r.out);
  ASSERT_EQ(doc["tensors"].size(), 38u);
  for (const auto& t : doc["tensors"]) {
    if (!t["cosine"].is_number()) continue;  // the planted NaN/Inf tensor: no finite-pair cosine to speak of
    EXPECT_GT(t["cosine"].get<double>(), 0.99) << t["a"];
    EXPECT_LT(t["rel_fro"].get<double>(), 0.15) << t["a"];
  }
}

TEST_F(DemoCheckpoint, DemoIsDeterministic) {
  TempDir again;
  auto r = run_cli({"demo", (again / "d").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* f : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                        "model.safetensors.index.json", "demo-mixed-quant.gguf"}) {
    EXPECT_EQ(testing::read_bytes(again / "d" / f), testing::read_bytes(std::filesystem::path(demo()) / f)) << f;
  }
}

TEST(Cli, ExitCodes) {
  EXPECT_EQ(run_cli({}).exit_code, 2);
  EXPECT_EQ(run_cli({"info"}).exit_code, 2);
  EXPECT_EQ(run_cli({"frobnicate"}).exit_code, 2);
  auto missing = run_cli({"info", "/nonexistent/model.safetensors"});
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.err.find("/nonexistent/model.safetensors"), std::string::npos);
}

TEST(Cli, RefusesOtherFilesNamingTheDetectedFormat) {
  TempDir dir;
  testing::write_bytes(dir / "notes.txt", "hello, this is text\n");
  auto text = run_cli({"info", (dir / "notes.txt").string()});
  EXPECT_EQ(text.exit_code, 1);
  EXPECT_NE(text.err.find("text file"), std::string::npos) << text.err;

  testing::write_bytes(dir / "old.bin", std::string("lmgg\x01\x00\x00\x00", 8) + std::string(64, '\0'));
  auto ggml = run_cli({"info", (dir / "old.bin").string()});
  EXPECT_EQ(ggml.exit_code, 1);
  EXPECT_NE(ggml.err.find("pre-GGUF"), std::string::npos) << ggml.err;

  testing::write_bytes(dir / "empty.safetensors", "");
  auto empty = run_cli({"info", (dir / "empty.safetensors").string()});
  EXPECT_EQ(empty.exit_code, 1);
  EXPECT_NE(empty.err.find("empty file"), std::string::npos) << empty.err;
}

TEST(Cli, ExportUnknownTensorIsUserError) {
  auto r = run_cli({"export", (testing::testdata_dir() / "real/dfdx_mnist.safetensors").string(), "--tensor", "nope"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("'nope'"), std::string::npos);
}

TEST(Cli, InfoOpensEveryRealCheckpoint) {
  for (const char* f : {"dfdx_mnist.safetensors", "peft-gpt2_adapter_model.safetensors",
                        "hqqsvd_test_bf16.safetensors", "stories260K.gguf", "ollama_llama-2-tiny-random.gguf",
                        "taef2_decoder.pth"}) {
    auto r = run_cli({"info", (testing::testdata_dir() / "real" / f).string(), "--json"});
    EXPECT_EQ(r.exit_code, 0) << f << ": " << r.err;
    const auto parsed = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(parsed.is_discarded()) << f << ": info --json printed invalid JSON";
  }
}

// A GGUF file with one F32 tensor of 8 elements named `name` (any bytes).
std::string gguf_with_tensor_name(std::string_view name) {
  std::string bytes;
  const auto le = [&](uint64_t value, unsigned width) {
    for (unsigned i = 0; i < width; ++i) bytes += static_cast<char>((value >> (8 * i)) & 0xFF);
  };
  bytes += "GGUF";
  le(3, 4);
  le(1, 8);  // tensors
  le(0, 8);  // key/values
  le(name.size(), 8);
  bytes += name;
  le(1, 4);  // n_dims
  le(8, 8);
  le(0, 4);  // F32
  le(0, 8);  // data offset
  while (bytes.size() % 32 != 0) bytes += '\0';
  bytes.append(32, '\0');
  return bytes;
}

TEST(Cli, InfoEscapesTerminalSequencesInTensorNames) {
  testing::TempDir dir;
  const auto path = dir / "escape.gguf";
  testing::write_bytes(path, gguf_with_tensor_name("evil\x1b[31mred\nline"));
  auto r = run_cli({"info", path.string()});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("evil\\x1B[31mred\\nline"), std::string::npos) << r.out;
}

TEST(Cli, InfoJsonAcceptsTensorNamesThatAreNotUtf8) {
  testing::TempDir dir;
  const auto path = dir / "latin1.gguf";
  testing::write_bytes(path, gguf_with_tensor_name("caf\xE9"));
  auto r = run_cli({"info", path.string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto parsed = nlohmann::json::parse(r.out, nullptr, /*allow_exceptions=*/false);
  ASSERT_FALSE(parsed.is_discarded()) << r.out;
  EXPECT_EQ(parsed["tensors"][0]["name"], "caf\\xE9");
  auto text = run_cli({"info", path.string()});
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("caf\\xE9"), std::string::npos) << text.out;
}

}  // namespace
}  // namespace tensormorph
