// End-to-end tests of the `tensormorph` binary: demo, info, stats, export, exit codes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <string>
#include <vector>

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

// The lines of `text` that begin with `prefix`.
std::vector<std::string> lines_starting(const std::string& text, const std::string& prefix) {
  std::vector<std::string> lines;
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = std::min(text.find('\n', at), text.size());
    const std::string line = text.substr(at, end - at);
    if (line.rfind(prefix, 0) == 0) lines.push_back(line);
    at = end + 1;
  }
  return lines;
}

TEST_F(DemoCheckpoint, StatsTableListsNonFiniteTensorsFirstWhateverTheSort) {
  const std::string planted = "model.layers.2.mlp.down_proj.weight";  // the demo's NaN and +Inf
  for (const char* sort : {"absmax", "name", "file", "zeros"}) {
    SCOPED_TRACE(sort);
    auto r = run_cli({"stats", demo(), "--sort", sort});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const auto header = r.out.find("name ");
    ASSERT_NE(header, std::string::npos) << r.out;
    const auto first_row = r.out.find('\n', header) + 1;
    EXPECT_EQ(r.out.compare(first_row, planted.size(), planted), 0) << r.out;
    EXPECT_NE(r.out.find("1 of 38 tensors holds NaN/Inf (listed first): " + planted + " (1 NaN, 1 +Inf)"),
              std::string::npos)
        << r.out;
  }
  // Counts are exact: 384 x 1024 elements, not "393.22K"; zeros as a count, not a percentage.
  auto r = run_cli({"stats", demo(), "--tensor", planted});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("393,216"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find('%'), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("K "), std::string::npos) << r.out;
  // JSON keeps the order asked for and names the tensors holding NaN/Inf.
  auto j = run_cli({"stats", demo(), "--json"});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const auto parsed = nlohmann::json::parse(j.out);
  EXPECT_EQ(parsed["tensors"][0]["name"], "model.embed_tokens.weight");
  EXPECT_EQ(parsed["nonfinite_tensors"], nlohmann::json::array({planted}));
}

TEST_F(DemoCheckpoint, StatsExplainOnACurrentIndexSaysNoOperationRan) {
  ASSERT_EQ(run_cli({"index", demo()}).exit_code, 0);
  auto r = run_cli({"stats", demo(), "--explain"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("all 38 tensors from the index (no operation ran)"), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("model.safetensors.index.tmindex: read (up to date)"), std::string::npos) << r.err;
}

TEST_F(DemoCheckpoint, InfoOnAnIndexSaysWhatItIs) {
  ASSERT_EQ(run_cli({"index", demo()}).exit_code, 0);
  const std::string sidecar = demo() + "/model.safetensors.index.tmindex";
  auto r = run_cli({"info", sidecar});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("a Tensormorph index"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("checkpoint  " + demo() + "/model.safetensors.index.json"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tile        256"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("tensors     38"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("state       current"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("/L0"), std::string::npos) << "not listed as a checkpoint of pyramid tensors:\n" << r.out;
  auto j = run_cli({"info", sidecar, "--json"});
  ASSERT_EQ(j.exit_code, 0) << j.err;
  const auto parsed = nlohmann::json::parse(j.out);
  EXPECT_EQ(parsed["schema"], "tensormorph.index_info/1");
  EXPECT_EQ(parsed["tensors"], 38);
  EXPECT_EQ(parsed["files"].size(), 2u);
  EXPECT_TRUE(parsed["current"]);
}

TEST_F(DemoCheckpoint, ExportSuggestsCloseNamesForAMisspeltTensor) {
  auto r = run_cli({"export", demo(), "--tensor", "model.layers.0.self_attn.q_prj.weight"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("close names: 'model.layers.0.self_attn.q_proj.weight'"), std::string::npos) << r.err;
  auto far = run_cli({"export", demo(), "--tensor", "zzzzzzzz"});
  EXPECT_EQ(far.exit_code, 1);
  EXPECT_NE(far.err.find("none of its 38 tensor names is close"), std::string::npos) << far.err;
}

TEST_F(DemoCheckpoint, ExportIntoAMissingDirectoryNamesIt) {
  TempDir out;
  const auto missing = out / "no" / "such";
  auto r = run_cli({"export", demo(), "--tensor", "model.norm.weight", "-o", (missing / "w.npy").string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("the directory " + missing.string() + " does not exist"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find(".tmp."), std::string::npos) << "no temporary file's name:\n" << r.err;
}

TEST_F(DemoCheckpoint, StatsGlobMatchingNothingFailsAtOnceWithCloseNames) {
  auto r = run_cli({"stats", demo(), "--tensor", "*layers.2.mlp.dwn_proj*"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no tensor matches the given --tensor patterns ('*layers.2.mlp.dwn_proj*')"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("'model.layers.2.mlp.down_proj.weight'"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("indexing"), std::string::npos) << r.err;
}

TEST(Cli, GgufInfoShowsFormatFactsWithTheFileTypeDecoded) {
  const auto q4 = testing::testdata_dir() / "gguf-ref/stories260K-Q4_K_M.gguf";
  auto r = run_cli({"info", q4.string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  std::map<std::string, nlohmann::json> facts;
  for (const auto& f : j["facts"]) facts[f["key"]] = f["value"];
  EXPECT_EQ(facts["gguf.version"], 3);
  EXPECT_EQ(facts["gguf.alignment"], 32);
  EXPECT_EQ(facts["gguf.file_type"], "MOSTLY_Q4_K_M (15)");
  // Bits per weight: the stored bytes of every tensor, times 8, over their elements.
  uint64_t bytes = 0, elements = 0;
  for (const auto& t : j["tensors"]) {
    bytes += t["bytes"].get<uint64_t>();
    elements += t["parameters"].get<uint64_t>();
  }
  EXPECT_NEAR(facts["bits_per_weight"].get<double>(), 8.0 * static_cast<double>(bytes) / static_cast<double>(elements),
              0.0005);
  EXPECT_EQ(facts["bits_per_weight.F32"], 32.0);
  auto text = run_cli({"info", q4.string()});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("gguf.file_type"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("MOSTLY_Q4_K_M (15)"), std::string::npos) << text.out;

  // Where the tensor data starts, as MANIFEST.md's independent parser read it.
  const auto ollama_file = testing::testdata_dir() / "real/ollama_llama-2-tiny-random.gguf";
  auto ollama = run_cli({"info", ollama_file.string(), "--json"});
  ASSERT_EQ(ollama.exit_code, 0) << ollama.err;
  bool found = false;
  const auto ollama_info = nlohmann::json::parse(ollama.out);
  for (const auto& f : ollama_info["facts"]) {
    if (f["key"] == "gguf.data_offset") found = f["value"] == 724416;
  }
  EXPECT_TRUE(found) << ollama.out;
}

TEST(Cli, BackendsNamesEachDtypeSetOnceInAnAlignedTable) {
  auto r = run_cli({"backends"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto headers = lines_starting(r.out, "  operation ");
  ASSERT_FALSE(headers.empty()) << r.out;
  const size_t bitwise_column = headers[0].find("bitwise");
  const size_t partial_column = headers[0].find("partial");
  for (const std::string& row : lines_starting(r.out, "  tm.")) {
    // Each cell starts under its heading: the cell before ends in two spaces.
    EXPECT_EQ(row.substr(bitwise_column - 2, 2), "  ") << row;
    EXPECT_NE(row[bitwise_column], ' ') << row;
    EXPECT_NE(row[partial_column], ' ') << row;
    EXPECT_LT(row.size(), 80u) << "a dtype list inside the table:\n" << row;
  }
  EXPECT_EQ(r.out.find("dtype sets"), r.out.rfind("dtype sets")) << r.out;
  EXPECT_NE(r.out.find("dtype sets"), std::string::npos) << r.out;
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
