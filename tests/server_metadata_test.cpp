// The viewer's metadata routes (/api/metadata, /api/metadata/array) against a real server on an
// ephemeral loopback port serving real checkpoints nobody on this team wrote:
//   0 ollama_llama-2-tiny-random.gguf (a 32,000-token vocabulary; data starts at byte 724416)
//   1 peft-gpt2_adapter_model.safetensors (__metadata__ = {"format": "pt"})
//   2 taef2_decoder.pth (a torch.save zip)
//   3 gguf-ref/stories260K-Q4_K_M.gguf (written by llama-quantize)
#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "served_for_test.h"
#include "tensormorph/open.h"
#include "test_util.h"

namespace tensormorph {
namespace {

using json = nlohmann::json;

std::string lowered(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

class ServerMetadata : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    setenv("TENSORMORPH_CONFIG", (dir_->path() / "settings.json").c_str(), 1);
    server::ServerOptions options;
    options.build_index = false;  // the metadata routes read headers only; the test data is read-only
    const auto data = testing::testdata_dir();
    auto served = testing::ServedForTest::start(
        {(data / "real/ollama_llama-2-tiny-random.gguf").string(),
         (data / "real/peft-gpt2_adapter_model.safetensors").string(), (data / "real/taef2_decoder.pth").string(),
         (data / "gguf-ref/stories260K-Q4_K_M.gguf").string()},
        options);
    ASSERT_TRUE(served.ok()) << served.status().to_string();
    served_ = std::move(served).value();
  }
  static void TearDownTestSuite() {
    served_.reset();
    delete dir_;
  }
  // The value of fact `key` in a /api/metadata answer (null when absent).
  static json fact(const json& answer, const std::string& key) {
    for (const auto& f : answer["facts"]) {
      if (f["key"] == key) return f["value"];
    }
    return nullptr;
  }
  static const json* entry(const json& answer, const std::string& key) {
    for (const auto& e : answer["entries"]) {
      if (e["key"] == key) return &e;
    }
    return nullptr;
  }

  static inline testing::TempDir* dir_ = nullptr;
  static inline std::unique_ptr<testing::ServedForTest> served_;
};

TEST_F(ServerMetadata, GgufFactsAndEntriesWithLongArraysAsPreviews) {
  const json m = served_->get_json("/api/metadata?ckpt=0");
  EXPECT_EQ(m["format"], "gguf");
  EXPECT_EQ(fact(m, "gguf.version"), 3);
  EXPECT_EQ(fact(m, "gguf.alignment"), 32);
  EXPECT_EQ(fact(m, "gguf.data_offset"), 724416);  // MANIFEST.md, read by an independent parser
  EXPECT_EQ(fact(m, "file.bytes"), 1750560);
  // F16 x 9 and F32 x 3: between 16 and 32 bits per weight overall, exactly 16 for the F16 ones.
  EXPECT_EQ(fact(m, "bits_per_weight.F16"), 16.0);
  EXPECT_EQ(fact(m, "bits_per_weight.F32"), 32.0);
  EXPECT_GE(fact(m, "bits_per_weight").get<double>(), 16.0);
  EXPECT_LE(fact(m, "bits_per_weight").get<double>(), 32.0);

  const json* tokens = entry(m, "tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ((*tokens)["type"], "array<string>");
  EXPECT_EQ((*tokens)["length"], 32000);
  EXPECT_FALSE(tokens->contains("value"));
  ASSERT_EQ((*tokens)["preview"].size(), 16u);
  const json* arch = entry(m, "general.architecture");
  ASSERT_NE(arch, nullptr);
  EXPECT_EQ((*arch)["value"], "llama");
  EXPECT_FALSE(arch->contains("length"));
}

TEST_F(ServerMetadata, FileTypeIsDecodedAsLlamaCppNamesIt) {
  const json m = served_->get_json("/api/metadata?ckpt=3");
  EXPECT_EQ(fact(m, "gguf.file_type"), "MOSTLY_Q4_K_M (15)");
  const json* stored = entry(m, "general.file_type");
  ASSERT_NE(stored, nullptr);
  EXPECT_EQ((*stored)["value"], 15);
}

TEST_F(ServerMetadata, QueryFiltersKeysAndStringValuesIgnoringCase) {
  const json all = served_->get_json("/api/metadata?ckpt=0");
  const json some = served_->get_json("/api/metadata?ckpt=0&q=ARCHITECTURE");
  ASSERT_GE(some["entries"].size(), 1u);
  EXPECT_LT(some["entries"].size(), all["entries"].size());
  for (const auto& e : some["entries"]) {
    // Either the key holds the text, or (an array) some of its items do and are counted.
    if (e.contains("matches")) {
      EXPECT_GE(e["matches"].get<int>(), 1) << e.dump();
      continue;
    }
    EXPECT_NE(lowered(e["key"]).find("architecture"), std::string::npos) << e.dump();
  }
  EXPECT_NE(entry(some, "general.architecture"), nullptr);
  EXPECT_EQ(some["facts"], all["facts"]);  // facts are always complete
  // A string value matches ("llama" is general.architecture's value), and an array whose items
  // match is listed with how many do.
  const json by_value = served_->get_json("/api/metadata?ckpt=0&q=LLaMA");
  EXPECT_NE(entry(by_value, "general.architecture"), nullptr);
  const json in_vocabulary = served_->get_json("/api/metadata?ckpt=0&q=%3Cunk%3E");
  const json* tokens = entry(in_vocabulary, "tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_GE((*tokens)["matches"].get<int>(), 1);
  const json none = served_->get_json("/api/metadata?ckpt=0&q=no-such-text-anywhere");
  EXPECT_TRUE(none["entries"].empty());
}

TEST_F(ServerMetadata, ArrayPagesAndSearchesAVocabulary) {
  const json m = served_->get_json("/api/metadata?ckpt=0");
  const json* tokens = entry(m, "tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  const json page = served_->get_json("/api/metadata/array?ckpt=0&key=tokenizer.ggml.tokens&offset=0&limit=16");
  EXPECT_EQ(page["key"], "tokenizer.ggml.tokens");
  EXPECT_EQ(page["length"], 32000);
  EXPECT_EQ(page["offset"], 0);
  ASSERT_EQ(page["items"].size(), 16u);
  for (size_t i = 0; i < 16; ++i) {
    EXPECT_EQ(page["items"][i]["i"], i);
    EXPECT_EQ(page["items"][i]["value"], (*tokens)["preview"][i]);
  }
  const json last = served_->get_json("/api/metadata/array?ckpt=0&key=tokenizer.ggml.tokens&offset=31990&limit=1000");
  ASSERT_EQ(last["items"].size(), 10u);
  EXPECT_EQ(last["items"][9]["i"], 31999);
  const json beyond = served_->get_json("/api/metadata/array?ckpt=0&key=tokenizer.ggml.tokens&offset=40000&limit=5");
  EXPECT_TRUE(beyond["items"].empty());

  // Search within the array: every item returned holds the text, with its index in the array;
  // paging goes over the matches.
  const json found = served_->get_json("/api/metadata/array?ckpt=0&key=tokenizer.ggml.tokens&q=ing&limit=1000");
  ASSERT_GT(found["matches"].get<int>(), 1);
  ASSERT_EQ(found["items"].size(), std::min<size_t>(1000, found["matches"].get<size_t>()));
  bool other_case = false;
  for (const auto& item : found["items"]) {
    const std::string value = item["value"];
    EXPECT_NE(lowered(value).find("ing"), std::string::npos) << item.dump();
    other_case |= value.find("ing") == std::string::npos;
  }
  EXPECT_TRUE(other_case) << "the search ignores case: 'ING' and 'Ing' are found too";
  const json second = served_->get_json("/api/metadata/array?ckpt=0&key=tokenizer.ggml.tokens&q=ing&offset=1&limit=1");
  ASSERT_EQ(second["items"].size(), 1u);
  EXPECT_EQ(second["items"][0], found["items"][1]);
  const json whole = served_->get_json("/api/metadata/array?ckpt=0&key=tokenizer.ggml.tokens&offset=" +
                              found["items"][1]["i"].dump() + "&limit=1");
  EXPECT_EQ(whole["items"][0], found["items"][1]);
}

TEST_F(ServerMetadata, ArrayRefusesBadRequests) {
  EXPECT_EQ(served_->get_json("/api/metadata/array?ckpt=0&key=tokenizer.ggml.tokens&limit=1001", 400)["code"],
            "INVALID_ARGUMENT");
  EXPECT_EQ(served_->get_json("/api/metadata/array?ckpt=0&key=general.architecture", 400)["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(served_->get_json("/api/metadata/array?ckpt=0&key=no.such.key", 404)["code"], "NOT_FOUND");
  EXPECT_EQ(served_->get_json("/api/metadata/array?ckpt=0", 400)["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(served_->get_json("/api/metadata?ckpt=9", 404)["code"], "NOT_FOUND");
}

TEST_F(ServerMetadata, SafetensorsMetadataAndHeaderFacts) {
  const json m = served_->get_json("/api/metadata?ckpt=1");
  EXPECT_EQ(m["format"], "safetensors");
  const json* format = entry(m, "format");
  ASSERT_NE(format, nullptr);
  EXPECT_EQ((*format)["value"], "pt");
  // The header's size as the file's first 8 bytes (little-endian) say, and data right after it.
  const auto file = testing::testdata_dir() / "real/peft-gpt2_adapter_model.safetensors";
  const std::string head = testing::read_bytes(file).substr(0, 8);
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = header_bytes << 8 | static_cast<unsigned char>(head[i]);
  EXPECT_EQ(fact(m, "safetensors.header_bytes"), header_bytes);
  EXPECT_EQ(fact(m, "safetensors.data_offset"), header_bytes + 8);
  EXPECT_EQ(fact(m, "bits_per_weight"), 32.0);  // 25 F32 tensors
}

TEST_F(ServerMetadata, PyTorchArchiveFactsAndRecords) {
  const json m = served_->get_json("/api/metadata?ckpt=2");
  EXPECT_EQ(m["format"], "pytorch");
  EXPECT_EQ(fact(m, "bits_per_weight"), 16.0);  // 79 F16 tensors
  EXPECT_GE(fact(m, "pytorch.pickle_protocol").get<int>(), 2);
  EXPECT_EQ(fact(m, "pytorch.storages"), 79);
  EXPECT_TRUE(fact(m, "pytorch.pickle_entry").get<std::string>().ends_with("data.pkl"));
  EXPECT_NE(entry(m, "pytorch.format_version"), nullptr);  // the .format_version record
  EXPECT_NE(entry(m, "pytorch.storage_alignment"), nullptr);
}

}  // namespace
}  // namespace tensormorph
