// GGUF reader and writer: real files from other projects, fuzz-corpus negatives, round trips and
// hand-built malformed headers.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "formats/gguf/gguf.h"
#include "test_util.h"
#include "tensormorph/dtype.h"

namespace tensormorph {
namespace {

using testing::TempDir;
using Json = nlohmann::ordered_json;

std::filesystem::path real_file(const std::string& name) { return testing::testdata_dir() / "real" / name; }
std::filesystem::path ref_file(const std::string& name) { return testing::testdata_dir() / "gguf-ref" / name; }
std::filesystem::path negative_file(const std::string& name) { return testing::testdata_dir() / "negative" / name; }

const MetadataEntry* find_key(const Checkpoint& checkpoint, std::string_view key) {
  for (const MetadataEntry& entry : checkpoint.metadata()) {
    if (entry.key == key) return &entry;
  }
  return nullptr;
}

std::map<std::string, int> count_dtypes(const Checkpoint& checkpoint) {
  std::map<std::string, int> counts;
  for (const TensorInfo& tensor : checkpoint.tensors()) ++counts[std::string(dtype_name(tensor.dtype))];
  return counts;
}

// Appends little-endian GGUF fields to build headers byte by byte, including malformed ones.
class Builder {
 public:
  Builder& raw(std::string_view bytes) { bytes_ += bytes; return *this; }
  Builder& le(uint64_t value, unsigned width) {
    for (unsigned i = 0; i < width; ++i) bytes_ += static_cast<char>((value >> (8 * i)) & 0xFF);
    return *this;
  }
  Builder& u8(uint8_t v) { return le(v, 1); }
  Builder& u32(uint32_t v) { return le(v, 4); }
  Builder& u64(uint64_t v) { return le(v, 8); }
  Builder& str(std::string_view s) { return u64(s.size()).raw(s); }
  Builder& header(uint64_t tensors, uint64_t kvs, uint32_t version = 3) {
    return raw("GGUF").u32(version).u64(tensors).u64(kvs);
  }
  Builder& kv_u32(std::string_view key, uint32_t value) { return str(key).u32(4).u32(value); }
  Builder& tensor(std::string_view name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) u64(d);
    return u32(type).u64(offset);
  }
  Builder& pad(size_t alignment) {
    while (bytes_.size() % alignment != 0) bytes_ += '\0';
    return *this;
  }
  Builder& zeros(size_t n) { bytes_.append(n, '\0'); return *this; }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

constexpr uint32_t kF32 = 0;
constexpr uint32_t kQ4_0 = 2;

class GgufBytesTest : public ::testing::Test {
 protected:
  Result<std::unique_ptr<Checkpoint>> open_bytes(const std::string& bytes) {
    testing::write_bytes(file_, bytes);
    return gguf::open_file(file_);
  }
  // Opens `bytes`, expects failure, and returns the message.
  std::string failure(const std::string& bytes, StatusCode code = StatusCode::kFormatError) {
    auto result = open_bytes(bytes);
    EXPECT_FALSE(result.ok());
    if (result.ok()) return "";
    EXPECT_EQ(result.status().code(), code) << result.status().to_string();
    EXPECT_NE(result.status().message().find(file_.string()), std::string::npos) << result.status().message();
    return result.status().message();
  }
  TempDir dir_;
  std::filesystem::path file_ = dir_ / "case.gguf";
};

// One F32 tensor of 8 elements (32 bytes, so there is no trailing padding).
std::string one_tensor_file() {
  return Builder().header(1, 1).kv_u32("general.alignment", 32).tensor("w", {8}, kF32, 0).pad(32).zeros(32).bytes();
}

// ---- real files -------------------------------------------------------------------------------

TEST(GgufRealTest, Stories260K) {
  auto result = gguf::open_file(real_file("stories260K.gguf"));
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  const Checkpoint& ckpt = **result;
  EXPECT_EQ(ckpt.format(), CheckpointFormat::kGguf);
  ASSERT_EQ(ckpt.tensors().size(), 48u);
  EXPECT_EQ(count_dtypes(ckpt), (std::map<std::string, int>{{"F32", 48}}));
  ASSERT_EQ(ckpt.metadata().size(), 19u);

  // File order, not sorted order.
  EXPECT_EQ(ckpt.tensors()[0].name, "token_embd.weight");
  EXPECT_EQ(ckpt.tensors()[1].name, "output_norm.weight");
  EXPECT_EQ(ckpt.tensors()[2].name, "output.weight");
  EXPECT_EQ(ckpt.tensors()[3].name, "blk.0.attn_q.weight");
  EXPECT_EQ(ckpt.tensors()[47].name, "blk.4.ffn_norm.weight");

  const TensorInfo* embd = ckpt.find("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->shape, (std::vector<uint64_t>{512, 64}));  // GGUF ne [64, 512] reversed
  EXPECT_EQ(embd->nbytes, 512u * 64 * 4);
  EXPECT_EQ(embd->offset, 14176u);  // header ends at 14152, rounded up to 32
  const TensorInfo* attn_k = ckpt.find("blk.0.attn_k.weight");
  ASSERT_NE(attn_k, nullptr);
  EXPECT_EQ(attn_k->shape, (std::vector<uint64_t>{32, 64}));
  const TensorInfo* norm = ckpt.find("output_norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(norm->shape, (std::vector<uint64_t>{64}));
  const TensorInfo* down = ckpt.find("blk.0.ffn_down.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(down->shape, (std::vector<uint64_t>{64, 172}));

  uint64_t parameters = 0;
  for (const TensorInfo& tensor : ckpt.tensors()) {
    parameters += tensor.elements();
    EXPECT_EQ(tensor.offset % 32, 0u) << tensor.name;
    EXPECT_EQ(tensor.nbytes, tensor.elements() * 4) << tensor.name;
  }
  EXPECT_EQ(parameters, 292800u);
  const TensorInfo& last = ckpt.tensors().back();
  EXPECT_EQ(last.offset + last.nbytes, ckpt.files()[0].size);
  EXPECT_EQ(ckpt.files()[0].size, 1185376u);

  const MetadataEntry* tokens = find_key(ckpt, "tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(tokens->type, "array<string>");
  ASSERT_EQ(tokens->value.size(), 512u);
  EXPECT_EQ(tokens->value[0], "<unk>");
  EXPECT_EQ(tokens->value[3], "<0x00>");
  const MetadataEntry* scores = find_key(ckpt, "tokenizer.ggml.scores");
  ASSERT_NE(scores, nullptr);
  EXPECT_EQ(scores->type, "array<f32>");
  EXPECT_EQ(scores->value.size(), 512u);
  const MetadataEntry* token_type = find_key(ckpt, "tokenizer.ggml.token_type");
  ASSERT_NE(token_type, nullptr);
  EXPECT_EQ(token_type->type, "array<i32>");
  EXPECT_EQ(token_type->value[0], 2);
  EXPECT_EQ(ckpt.metadata()[0].key, "tokenizer.ggml.tokens");
  const MetadataEntry* arch = find_key(ckpt, "general.architecture");
  ASSERT_NE(arch, nullptr);
  EXPECT_EQ(arch->type, "string");
  EXPECT_EQ(arch->value, "llama");
  const MetadataEntry* separator = find_key(ckpt, "tokenizer.ggml.seperator_token_id");
  ASSERT_NE(separator, nullptr);
  EXPECT_EQ(separator->type, "u32");
  EXPECT_EQ(separator->value.get<uint64_t>(), 4294967295u);
  const MetadataEntry* eps = find_key(ckpt, "llama.attention.layer_norm_rms_epsilon");
  ASSERT_NE(eps, nullptr);
  EXPECT_EQ(eps->type, "f32");
  EXPECT_EQ(eps->value.get<double>(), static_cast<double>(1e-5f));
  EXPECT_EQ(find_key(ckpt, "general.alignment"), nullptr);  // default alignment 32
}

TEST(GgufRealTest, Stories260KOutputNormValues) {
  auto result = gguf::open_file(real_file("stories260K.gguf"));
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  const TensorInfo* norm = (*result)->find("output_norm.weight");
  ASSERT_NE(norm, nullptr);
  auto values = (*result)->decode_f32(*norm);
  ASSERT_TRUE(values.ok()) << values.status().to_string();
  ASSERT_EQ(values->size(), 64u);
  for (float v : *values) {
    EXPECT_GT(v, 0.96f);
    EXPECT_LT(v, 4.44f);
  }
}

TEST(GgufRealTest, OllamaTinyRandomWithFullVocabulary) {
  auto result = gguf::open_file(real_file("ollama_llama-2-tiny-random.gguf"));
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  const Checkpoint& ckpt = **result;
  ASSERT_EQ(ckpt.tensors().size(), 12u);
  EXPECT_EQ(count_dtypes(ckpt), (std::map<std::string, int>{{"F16", 9}, {"F32", 3}}));
  EXPECT_EQ(ckpt.tensors()[0].name, "token_embd.weight");
  EXPECT_EQ(ckpt.tensors()[0].offset, 724416u);
  EXPECT_EQ(ckpt.tensors()[0].shape, (std::vector<uint64_t>{32000, 8}));
  EXPECT_EQ(ckpt.metadata().size(), 18u);
  const MetadataEntry* tokens = find_key(ckpt, "tokenizer.ggml.tokens");
  ASSERT_NE(tokens, nullptr);
  EXPECT_EQ(tokens->type, "array<string>");
  EXPECT_EQ(tokens->value.size(), 32000u);
  const MetadataEntry* scores = find_key(ckpt, "tokenizer.ggml.scores");
  ASSERT_NE(scores, nullptr);
  EXPECT_EQ(scores->value.size(), 32000u);
}

TEST(GgufRealTest, QuantizedReferenceTypesInOrder) {
  auto result = gguf::open_file(ref_file("quantized.gguf"));
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  const Checkpoint& ckpt = **result;
  const std::vector<std::string> types = {"Q4_0",   "Q4_1",  "Q5_0",  "Q5_1",   "Q8_0",    "Q2_K",
                                          "Q3_K",   "Q4_K",  "Q5_K",  "Q6_K",   "IQ4_NL",  "IQ4_XS",
                                          "TQ1_0",  "TQ2_0", "F16",   "BF16",   "IQ2_XXS", "IQ2_XS",
                                          "IQ2_S",  "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M"};
  ASSERT_EQ(ckpt.tensors().size(), types.size());
  uint64_t previous_end = 0;
  for (size_t i = 0; i < types.size(); ++i) {
    const TensorInfo& tensor = ckpt.tensors()[i];
    EXPECT_EQ(tensor.name, "ref." + types[i]);
    EXPECT_EQ(dtype_name(tensor.dtype), types[i]);
    EXPECT_EQ(tensor.shape, (std::vector<uint64_t>{64, 512}));
    auto expected_bytes = dtype_storage_bytes(tensor.dtype, 64 * 512);
    ASSERT_TRUE(expected_bytes.ok());
    EXPECT_EQ(tensor.nbytes, *expected_bytes) << tensor.name;
    EXPECT_GE(tensor.offset, previous_end) << tensor.name;
    previous_end = tensor.offset + tensor.nbytes;
  }
  EXPECT_EQ(ckpt.metadata().size(), 4u);
  const MetadataEntry* seed = find_key(ckpt, "tensormorph.ref.seed");
  ASSERT_NE(seed, nullptr);
  EXPECT_EQ(seed->type, "u64");
  EXPECT_EQ(seed->value.get<uint64_t>(), 20261129u);
}

TEST(GgufRealTest, StoriesQ4KMMixedTypes) {
  auto result = gguf::open_file(ref_file("stories260K-Q4_K_M.gguf"));
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  const Checkpoint& ckpt = **result;
  EXPECT_EQ(ckpt.tensors().size(), 48u);
  EXPECT_EQ(count_dtypes(ckpt), (std::map<std::string, int>{{"Q5_0", 29}, {"Q8_0", 3}, {"F16", 5}, {"F32", 11}}));
  EXPECT_EQ(ckpt.metadata().size(), 21u);
  const TensorInfo* down = ckpt.find("blk.0.ffn_down.weight");
  ASSERT_NE(down, nullptr);
  EXPECT_EQ(dtype_name(down->dtype), "F16");
  EXPECT_EQ(down->shape, (std::vector<uint64_t>{64, 172}));
  const TensorInfo* output = ckpt.find("output.weight");
  ASSERT_NE(output, nullptr);
  EXPECT_EQ(dtype_name(output->dtype), "Q8_0");
  EXPECT_EQ(output->nbytes, 512u * 2 * 34);
}

// ---- fuzz-corpus negatives -------------------------------------------------------------------

TEST(GgufNegativeTest, TruncatedMetadataIsRejected) {
  const auto path = negative_file("gridcore_hdr-suppress-eos.gguf");
  auto result = gguf::open_file(path);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kFormatError);
  const std::string message = result.status().message();
  EXPECT_NE(message.find(path.string()), std::string::npos) << message;
  EXPECT_NE(message.find("header byte"), std::string::npos) << message;
  EXPECT_NE(message.find("truncated"), std::string::npos) << message;
}

TEST(GgufNegativeTest, WrappingOffsetIsRejected) {
  auto result = gguf::open_file(negative_file("gridcore_hdr-wrap-first-offset.gguf"));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kFormatError);
  const std::string message = result.status().message();
  EXPECT_NE(message.find("token_embd.weight"), std::string::npos) << message;
  EXPECT_NE(message.find("wraps around"), std::string::npos) << message;
}

// The zero-dim tensor itself is accepted as empty; the file fails later because this fuzz sample is
// cut at 8 KiB while the next tensor's data lies far beyond that.
TEST(GgufNegativeTest, ZeroFirstDimIsAnEmptyTensorButTheFileIsCut) {
  auto result = gguf::open_file(negative_file("gridcore_hdr-zero-first-dim.gguf"));
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kFormatError);
  const std::string message = result.status().message();
  EXPECT_EQ(message.find("token_embd.weight"), std::string::npos) << message;
  EXPECT_NE(message.find("output_norm.weight"), std::string::npos) << message;
  EXPECT_NE(message.find("end of the file"), std::string::npos) << message;
}

TEST(GgufNegativeTest, ValidSmallVocabularyOnlyFileOpens) {
  auto result = gguf::open_file(negative_file("gridcore_valid-small.gguf"));
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  EXPECT_TRUE((*result)->tensors().empty());
  EXPECT_EQ((*result)->metadata().size(), 9u);
  const MetadataEntry* merges = find_key(**result, "tokenizer.ggml.merges");
  ASSERT_NE(merges, nullptr);
  EXPECT_EQ(merges->type, "array<string>");
  EXPECT_EQ(merges->value.size(), 31u);
  const MetadataEntry* add_bos = find_key(**result, "tokenizer.ggml.add_bos_token");
  ASSERT_NE(add_bos, nullptr);
  EXPECT_EQ(add_bos->type, "bool");
  EXPECT_EQ(add_bos->value, false);
}

// ---- round trips through write_file ------------------------------------------------------------

TEST(GgufRoundTripTest, EveryValueType) {
  TempDir dir;
  const std::vector<gguf::KeyValueToWrite> kvs = {
      {"t.u8", "u8", 255},
      {"t.i8", "i8", -128},
      {"t.u16", "u16", 65535},
      {"t.i16", "i16", -32768},
      {"t.u32", "u32", 4294967295u},
      {"t.i32", "i32", std::numeric_limits<int32_t>::min()},
      {"t.u64", "u64", std::numeric_limits<uint64_t>::max()},
      {"t.i64", "i64", std::numeric_limits<int64_t>::min()},
      {"t.f32", "f32", 1.5},
      {"t.f64", "f64", -2.25e300},
      {"t.bool_true", "bool", true},
      {"t.bool_false", "bool", false},
      {"t.string", "string", "h\xC3\xA9llo"},
      {"t.empty_string", "string", ""},
      {"t.array_u8", "array<u8>", Json::array({1, 2, 3})},
      {"t.array_i64", "array<i64>", Json::array({-1, 0, std::numeric_limits<int64_t>::max()})},
      {"t.array_f32", "array<f32>", Json::array({0.5, -0.25})},
      {"t.array_f64", "array<f64>", Json::array({1e-300})},
      {"t.array_bool", "array<bool>", Json::array({true, false})},
      {"t.array_string", "array<string>", Json::array({"a", "", "ccc"})},
      {"t.array_empty", "array<u64>", Json::array()},
      {"t.nested", "array<array<i32>>", Json::array({Json::array({1, 2}), Json::array({3})})},
      {"t.nested3", "array<array<array<string>>>",
       Json::array({Json::array({Json::array({"x"}), Json::array({"y", "z"})})})},
  };
  const auto path = dir / "values.gguf";
  ASSERT_TRUE(gguf::write_file(path, kvs, {}).ok());
  auto result = gguf::open_file(path);
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  const auto metadata = (*result)->metadata();
  ASSERT_EQ(metadata.size(), kvs.size());  // alignment 32 adds no key
  for (size_t i = 0; i < kvs.size(); ++i) {
    EXPECT_EQ(metadata[i].key, kvs[i].key);
    EXPECT_EQ(metadata[i].type, kvs[i].type) << kvs[i].key;
    EXPECT_EQ(metadata[i].value, kvs[i].value) << kvs[i].key << ": " << metadata[i].value.dump();
  }
}

TEST(GgufRoundTripTest, NonFiniteFloatsAreStored) {
  TempDir dir;
  const std::vector<gguf::KeyValueToWrite> kvs = {
      {"nan", "f32", std::numeric_limits<double>::quiet_NaN()},
      {"inf", "f64", -std::numeric_limits<double>::infinity()},
  };
  const auto path = dir / "nan.gguf";
  ASSERT_TRUE(gguf::write_file(path, kvs, {}).ok());
  auto result = gguf::open_file(path);
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  EXPECT_TRUE(std::isnan((*result)->metadata()[0].value.get<double>()));
  EXPECT_EQ((*result)->metadata()[1].value.get<double>(), -std::numeric_limits<double>::infinity());
}

std::vector<std::byte> pattern_bytes(uint64_t size, uint32_t seed) {
  std::vector<std::byte> bytes(size);
  for (uint64_t i = 0; i < size; ++i) bytes[i] = static_cast<std::byte>((i * 131 + seed * 7 + 1) & 0xFF);
  return bytes;
}

void round_trip_every_dtype(uint32_t alignment) {
  TempDir dir;
  std::vector<std::vector<std::byte>> storage;
  std::vector<gguf::TensorToWrite> tensors;
  for (size_t i = 0; i < static_cast<size_t>(DType::kCount); ++i) {
    const DTypeInfo& info = dtype_info(static_cast<DType>(i));
    if (info.ggml_type_id < 0) continue;
    const std::vector<uint64_t> shape = {3, uint64_t{info.block_elems} * 2};
    storage.push_back(pattern_bytes(uint64_t{info.block_bytes} * 6, static_cast<uint32_t>(i)));
    tensors.push_back({"t." + std::string(info.name), info.dtype, shape, storage.back()});
  }
  ASSERT_GE(tensors.size(), 30u);
  const auto path = dir / "dtypes.gguf";
  const Status written = gguf::write_file(path, {}, tensors, alignment);
  ASSERT_TRUE(written.ok()) << written.to_string();
  auto result = gguf::open_file(path);
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  const Checkpoint& ckpt = **result;
  const std::string file = testing::read_bytes(path);
  ASSERT_EQ(ckpt.tensors().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorInfo& tensor = ckpt.tensors()[i];
    EXPECT_EQ(tensor.name, tensors[i].name);
    EXPECT_EQ(tensor.dtype, tensors[i].dtype) << tensor.name;
    EXPECT_EQ(tensor.shape, tensors[i].shape) << tensor.name;
    EXPECT_EQ(tensor.offset % alignment, 0u) << tensor.name;
    ASSERT_EQ(tensor.nbytes, tensors[i].data.size()) << tensor.name;
    const std::string stored = file.substr(tensor.offset, tensor.nbytes);
    EXPECT_EQ(stored, std::string(reinterpret_cast<const char*>(tensors[i].data.data()), tensors[i].data.size()))
        << tensor.name;
  }
  if (alignment == 32) {
    EXPECT_EQ(find_key(ckpt, "general.alignment"), nullptr);
  } else {
    const MetadataEntry* entry = find_key(ckpt, "general.alignment");
    ASSERT_NE(entry, nullptr);
    EXPECT_EQ(entry->type, "u32");
    EXPECT_EQ(entry->value.get<uint64_t>(), alignment);
  }
  EXPECT_EQ(file.size() % alignment, 0u);
}

TEST(GgufRoundTripTest, EveryGgmlDtypeAlignment32) { round_trip_every_dtype(32); }
TEST(GgufRoundTripTest, EveryGgmlDtypeAlignment64) { round_trip_every_dtype(64); }

TEST(GgufRoundTripTest, ScalarVectorAndEmptyTensors) {
  TempDir dir;
  const auto scalar = pattern_bytes(4, 1);
  const auto vector = pattern_bytes(12, 2);
  const std::vector<gguf::TensorToWrite> tensors = {
      {"scalar", DType::kF32, {}, scalar},
      {"vector", DType::kF32, {3}, vector},
      {"empty", DType::kF32, {5, 0}, {}},
  };
  const auto path = dir / "shapes.gguf";
  ASSERT_TRUE(gguf::write_file(path, {}, tensors).ok());
  auto result = gguf::open_file(path);
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  const Checkpoint& ckpt = **result;
  ASSERT_EQ(ckpt.tensors().size(), 3u);
  EXPECT_TRUE(ckpt.tensors()[0].shape.empty());
  EXPECT_EQ(ckpt.tensors()[0].nbytes, 4u);
  EXPECT_EQ(ckpt.tensors()[1].shape, (std::vector<uint64_t>{3}));
  EXPECT_EQ(ckpt.tensors()[2].shape, (std::vector<uint64_t>{5, 0}));
  EXPECT_EQ(ckpt.tensors()[2].nbytes, 0u);
  EXPECT_EQ(ckpt.tensors()[2].elements(), 0u);
}

TEST(GgufWriterTest, RejectsBadInput) {
  TempDir dir;
  const auto path = dir / "bad.gguf";
  const auto data = pattern_bytes(16, 0);
  const std::vector<gguf::KeyValueToWrite> out_of_range = {{"k", "u8", 256}};
  EXPECT_EQ(gguf::write_file(path, out_of_range, {}).code(), StatusCode::kInvalidArgument);
  const std::vector<gguf::KeyValueToWrite> wrong_json = {{"k", "string", 3}};
  EXPECT_EQ(gguf::write_file(path, wrong_json, {}).code(), StatusCode::kInvalidArgument);
  const std::vector<gguf::KeyValueToWrite> bad_utf8_in_message = {{"k", "u8", "\xFF"}};
  EXPECT_EQ(gguf::write_file(path, bad_utf8_in_message, {}).code(), StatusCode::kInvalidArgument);
  const std::vector<gguf::KeyValueToWrite> unknown_type = {{"k", "u128", 3}};
  EXPECT_EQ(gguf::write_file(path, unknown_type, {}).code(), StatusCode::kInvalidArgument);
  const std::vector<gguf::KeyValueToWrite> duplicate = {{"k", "u8", 1}, {"k", "u8", 2}};
  EXPECT_EQ(gguf::write_file(path, duplicate, {}).code(), StatusCode::kInvalidArgument);
  const std::vector<gguf::KeyValueToWrite> wrong_alignment = {{"general.alignment", "u32", 32}};
  EXPECT_EQ(gguf::write_file(path, wrong_alignment, {}, 64).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(gguf::write_file(path, {}, {}, 48).code(), StatusCode::kInvalidArgument);
  const std::vector<gguf::TensorToWrite> no_ggml_id = {{"u", DType::kU8, {16}, data}};
  EXPECT_EQ(gguf::write_file(path, {}, no_ggml_id).code(), StatusCode::kInvalidArgument);
  const std::vector<gguf::TensorToWrite> short_data = {{"f", DType::kF32, {5}, data}};
  EXPECT_EQ(gguf::write_file(path, {}, short_data).code(), StatusCode::kInvalidArgument);
  const std::vector<gguf::TensorToWrite> split_block = {{"q", DType::kQ4_0, {2, 16}, data}};
  EXPECT_EQ(gguf::write_file(path, {}, split_block).code(), StatusCode::kInvalidArgument);
  const std::vector<gguf::TensorToWrite> twice = {{"f", DType::kF32, {4}, data}, {"f", DType::kF32, {4}, data}};
  EXPECT_EQ(gguf::write_file(path, {}, twice).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(GgufWriterTest, GivenAlignmentKeyIsKeptOnce) {
  TempDir dir;
  const auto path = dir / "aligned.gguf";
  const std::vector<gguf::KeyValueToWrite> kvs = {{"general.alignment", "u32", 128}};
  const auto data = pattern_bytes(8, 3);
  const std::vector<gguf::TensorToWrite> tensors = {{"a", DType::kF32, {2}, data}, {"b", DType::kF32, {2}, data}};
  ASSERT_TRUE(gguf::write_file(path, kvs, tensors, 128).ok());
  auto result = gguf::open_file(path);
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  EXPECT_EQ((*result)->metadata().size(), 1u);
  EXPECT_EQ((*result)->tensors()[1].offset - (*result)->tensors()[0].offset, 128u);
}

// ---- hand-built malformed headers --------------------------------------------------------------

TEST_F(GgufBytesTest, SmallValidFileOpens) {
  auto result = open_bytes(one_tensor_file());
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  ASSERT_EQ((*result)->tensors().size(), 1u);
  EXPECT_EQ((*result)->tensors()[0].offset, 96u);  // 90-byte header rounded up to 32
  EXPECT_EQ((*result)->tensors()[0].nbytes, 32u);
}

TEST_F(GgufBytesTest, EveryPrefixOfAValidFileFailsCleanly) {
  // Written by write_file so every kv type appears; the last tensor fills its padding exactly.
  const std::vector<gguf::KeyValueToWrite> kvs = {
      {"s", "string", "text"}, {"b", "bool", true}, {"f", "f64", 2.0},
      {"a", "array<array<u16>>", Json::array({Json::array({1, 2}), Json::array()})},
      {"t", "array<string>", Json::array({"x", "yz"})},
  };
  const auto q4 = pattern_bytes(18 * 2, 5);
  const auto f32 = pattern_bytes(32, 6);
  const std::vector<gguf::TensorToWrite> tensors = {{"q", DType::kQ4_0, {2, 32}, q4}, {"f", DType::kF32, {8}, f32}};
  const auto full_path = dir_ / "full.gguf";
  ASSERT_TRUE(gguf::write_file(full_path, kvs, tensors).ok());
  const std::string full = testing::read_bytes(full_path);
  ASSERT_TRUE(gguf::open_file(full_path).ok());
  for (size_t length = 0; length < full.size(); ++length) {
    auto result = open_bytes(full.substr(0, length));
    ASSERT_FALSE(result.ok()) << "prefix of " << length << " bytes opened";
    EXPECT_EQ(result.status().code(), StatusCode::kFormatError) << result.status().to_string();
  }
}

TEST_F(GgufBytesTest, UnknownTypeIdIsNamed) {
  const std::string message = failure(
      Builder().header(1, 0).tensor("weird", {32}, 200, 0).pad(32).zeros(128).bytes(), StatusCode::kUnsupported);
  EXPECT_NE(message.find("200"), std::string::npos) << message;
  EXPECT_NE(message.find("'weird'"), std::string::npos) << message;
  EXPECT_NE(message.find("header byte"), std::string::npos) << message;
}

TEST_F(GgufBytesTest, RemovedTypeIdsAreNamed) {
  std::string message = failure(Builder().header(1, 0).tensor("old", {32}, 4, 0).pad(32).zeros(64).bytes(),
                                StatusCode::kUnsupported);
  EXPECT_NE(message.find("Q4_2"), std::string::npos) << message;
  EXPECT_NE(message.find("removed"), std::string::npos) << message;
  message = failure(Builder().header(1, 0).tensor("old", {32}, 31, 0).pad(32).zeros(64).bytes(),
                    StatusCode::kUnsupported);
  EXPECT_NE(message.find("Q4_0_4_4"), std::string::npos) << message;
}

TEST_F(GgufBytesTest, MisalignedOffset) {
  const std::string message = failure(Builder().header(1, 0).tensor("w", {4}, kF32, 16).pad(32).zeros(64).bytes());
  EXPECT_NE(message.find("'w'"), std::string::npos) << message;
  EXPECT_NE(message.find("alignment 32"), std::string::npos) << message;
}

TEST_F(GgufBytesTest, OverlappingTensors) {
  const std::string message = failure(Builder()
                                          .header(2, 0)
                                          .tensor("first", {16}, kF32, 0)
                                          .tensor("second", {16}, kF32, 32)
                                          .pad(32)
                                          .zeros(128)
                                          .bytes());
  EXPECT_NE(message.find("overlaps"), std::string::npos) << message;
  EXPECT_NE(message.find("'first'"), std::string::npos) << message;
  EXPECT_NE(message.find("'second'"), std::string::npos) << message;
}

TEST_F(GgufBytesTest, SharedOffsetForEmptyTensorIsNotAnOverlap) {
  auto result = open_bytes(
      Builder().header(2, 0).tensor("empty", {0, 4}, kF32, 0).tensor("w", {8}, kF32, 0).pad(32).zeros(32).bytes());
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  EXPECT_EQ((*result)->tensors()[0].shape, (std::vector<uint64_t>{4, 0}));
  EXPECT_EQ((*result)->tensors()[0].nbytes, 0u);
}

TEST_F(GgufBytesTest, DimensionProductOverflow) {
  const std::string message = failure(
      Builder().header(1, 0).tensor("big", {1ull << 32, 1ull << 32, 4}, kF32, 0).pad(32).zeros(32).bytes());
  EXPECT_NE(message.find("'big'"), std::string::npos) << message;
}

TEST_F(GgufBytesTest, ByteSizeOverflow) {
  const std::string message =
      failure(Builder().header(1, 0).tensor("big", {1ull << 62}, kF32, 0).pad(32).zeros(32).bytes());
  EXPECT_NE(message.find("'big'"), std::string::npos) << message;
}

TEST_F(GgufBytesTest, DimensionAboveInt64) {
  const std::string message =
      failure(Builder().header(1, 0).tensor("neg", {1ull << 63}, 24, 0).pad(32).zeros(32).bytes());
  EXPECT_NE(message.find("int64"), std::string::npos) << message;
}

TEST_F(GgufBytesTest, HugeStringLength) {
  const std::string message = failure(Builder().header(0, 1).u64(1ull << 63).raw("key").zeros(16).bytes());
  EXPECT_NE(message.find("string length 9223372036854775808"), std::string::npos) << message;
  EXPECT_NE(message.find("header byte 24"), std::string::npos) << message;
}

TEST_F(GgufBytesTest, HugeArrayCount) {
  const std::string message =
      failure(Builder().header(0, 1).str("arr").u32(9).u32(4).u64(1ull << 61).zeros(64).bytes());
  EXPECT_NE(message.find("'arr'"), std::string::npos) << message;
  EXPECT_NE(message.find("array count 2305843009213693952"), std::string::npos) << message;
}

TEST_F(GgufBytesTest, HugeKeyValueAndTensorCounts) {
  std::string message = failure(Builder().header(0, 1ull << 60).zeros(64).bytes());
  EXPECT_NE(message.find("key/value count"), std::string::npos) << message;
  message = failure(Builder().header(1ull << 60, 0).zeros(64).bytes());
  EXPECT_NE(message.find("tensor count"), std::string::npos) << message;
}

TEST_F(GgufBytesTest, DeeplyNestedArraysStopCleanly) {
  Builder builder;
  builder.header(0, 1).str("deep").u32(9);
  for (int i = 0; i < 10000; ++i) builder.u32(9).u64(1);
  builder.u32(0).u64(0);
  const std::string message = failure(builder.bytes());
  EXPECT_NE(message.find("nested"), std::string::npos) << message;
}

TEST_F(GgufBytesTest, BadAlignmentValues) {
  for (uint32_t alignment : {0u, 3u, 48u}) {
    const std::string message =
        failure(Builder().header(0, 1).kv_u32("general.alignment", alignment).zeros(32).bytes());
    EXPECT_NE(message.find("power of two"), std::string::npos) << message;
  }
  const std::string message = failure(Builder().header(0, 1).str("general.alignment").u32(10).u64(32).bytes());
  EXPECT_NE(message.find("expected u32"), std::string::npos) << message;
}

TEST_F(GgufBytesTest, CustomAlignmentMovesDataStart) {
  auto result = open_bytes(
      Builder().header(1, 1).kv_u32("general.alignment", 256).tensor("w", {8}, kF32, 256).pad(256).zeros(512).bytes());
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  EXPECT_EQ((*result)->tensors()[0].offset, 512u);
}

TEST_F(GgufBytesTest, RowMustNotSplitABlock) {
  const std::string message = failure(
      Builder().header(1, 0).tensor("q", {48, 2}, kQ4_0, 0).pad(32).zeros(256).bytes());
  EXPECT_NE(message.find("block size 32"), std::string::npos) << message;
  EXPECT_NE(message.find("'q'"), std::string::npos) << message;
}

TEST_F(GgufBytesTest, VersionOneIsRefused) {
  const std::string message = failure(Builder().header(0, 0, 1).bytes(), StatusCode::kUnsupported);
  EXPECT_NE(message.find("version 1"), std::string::npos) << message;
}

TEST_F(GgufBytesTest, UnknownVersionIsRefused) {
  const std::string message = failure(Builder().header(0, 0, 7).bytes(), StatusCode::kUnsupported);
  EXPECT_NE(message.find("version 7"), std::string::npos) << message;
}

TEST_F(GgufBytesTest, VersionTwoIsRead) {
  auto result = open_bytes(Builder().header(1, 1, 2).kv_u32("k", 7).tensor("w", {8}, kF32, 0).pad(32).zeros(32).bytes());
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  EXPECT_EQ((*result)->tensors().size(), 1u);
}

TEST_F(GgufBytesTest, BigEndianIsRefused) {
  const std::string bytes = Builder().raw("GGUF").raw(std::string("\0\0\0\3", 4)).zeros(16).bytes();
  const std::string message = failure(bytes, StatusCode::kUnsupported);
  EXPECT_NE(message.find("big-endian"), std::string::npos) << message;
}

TEST_F(GgufBytesTest, TooManyDims) {
  const std::string message = failure(
      Builder().header(1, 0).tensor("w", {1, 1, 1, 1, 1, 1, 1, 1, 1}, kF32, 0).pad(32).zeros(32).bytes());
  EXPECT_NE(message.find("n_dims = 9"), std::string::npos) << message;
}

TEST_F(GgufBytesTest, BadMagic) {
  const std::string message = failure(Builder().raw("GGML").u32(3).u64(0).u64(0).bytes());
  EXPECT_NE(message.find("not a GGUF file"), std::string::npos) << message;
}

TEST_F(GgufBytesTest, BoolMustBeZeroOrOne) {
  const std::string message = failure(Builder().header(0, 1).str("flag").u32(7).u8(2).bytes());
  EXPECT_NE(message.find("'flag'"), std::string::npos) << message;
  EXPECT_NE(message.find("neither 0 nor 1"), std::string::npos) << message;
}

TEST_F(GgufBytesTest, UnknownValueType) {
  const std::string message = failure(Builder().header(0, 1).str("odd").u32(13).u32(0).bytes());
  EXPECT_NE(message.find("unknown value type 13"), std::string::npos) << message;
}

TEST_F(GgufBytesTest, DuplicateKeysAndTensorNames) {
  std::string message = failure(Builder().header(0, 2).kv_u32("k", 1).kv_u32("k", 2).bytes());
  EXPECT_NE(message.find("duplicate metadata key 'k'"), std::string::npos) << message;
  message = failure(Builder().header(2, 0).tensor("w", {8}, kF32, 0).tensor("w", {8}, kF32, 32).pad(32).zeros(64).bytes());
  EXPECT_NE(message.find("duplicate tensor name 'w'"), std::string::npos) << message;
}

TEST_F(GgufBytesTest, DataPastEndOfFile) {
  const std::string message = failure(Builder().header(1, 0).tensor("w", {16}, kF32, 0).pad(32).zeros(32).bytes());
  EXPECT_NE(message.find("end of the file"), std::string::npos) << message;
}

TEST_F(GgufBytesTest, InvalidUtf8IsEscapedAndNoted) {
  auto result = open_bytes(Builder().header(0, 1).str("name").u32(8).str("a\xFF" "b").bytes());
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  EXPECT_EQ((*result)->metadata()[0].value, "a\\xFF" "b");
  ASSERT_EQ((*result)->notes().size(), 1u);
  EXPECT_NE((*result)->notes()[0].find("UTF-8"), std::string::npos);
}

TEST_F(GgufBytesTest, TensorNamesThatAreNotUtf8AreKept) {
  auto result = open_bytes(Builder().header(1, 0).tensor("caf\xE9", {8}, kF32, 0).pad(32).zeros(32).bytes());
  ASSERT_TRUE(result.ok()) << result.status().to_string();
  EXPECT_EQ((*result)->tensors()[0].name, "caf\xE9");
}

// Messages quote file bytes escaped and cut: a hostile 2 MiB binary name gives a short error.
TEST_F(GgufBytesTest, HugeBinaryNameGivesAShortEscapedMessage) {
  std::string name;
  for (size_t i = 0; i < (size_t{2} << 20); ++i) name += static_cast<char>(i * 7 & 0xFF);
  const std::string message =
      failure(Builder().header(1, 0).tensor(name, {8}, 99, 0).pad(32).zeros(32).bytes(), StatusCode::kUnsupported);
  EXPECT_LT(message.size(), 1200u) << message.size();  // 200 bytes of the name, each at most 4 characters
  EXPECT_NE(message.find("unknown ggml type id 99"), std::string::npos) << message;
  EXPECT_NE(message.find("\\x00\\x07"), std::string::npos) << message;
  EXPECT_NE(message.find(" bytes)"), std::string::npos) << message;
  for (char c : message) {
    const auto byte = static_cast<unsigned char>(c);
    EXPECT_TRUE(byte >= 0x20 && byte != 0x7F) << "raw byte " << static_cast<int>(byte) << " in " << message;
  }
}

TEST_F(GgufBytesTest, KeysInMessagesAreEscaped) {
  const std::string message = failure(Builder().header(0, 1).str("k\x1b[2J").u32(13).u32(0).bytes());
  EXPECT_NE(message.find("key 'k\\x1B[2J'"), std::string::npos) << message;
  EXPECT_EQ(message.find('\x1b'), std::string::npos) << message;
}

}  // namespace
}  // namespace tensormorph
