// Tests of the safetensors reader, index reader and writer (single files and sharded sets).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/printable.h"
#include "formats/safetensors/safetensors.h"
#include "test_util.h"

namespace tensormorph {
namespace {

using safetensors::kMaxHeaderBytes;
using safetensors::open_file;
using safetensors::open_index;
using safetensors::TensorToWrite;
using safetensors::write_file;
using testing::TempDir;
using testing::testdata_dir;
using testing::write_bytes;

using Metadata = std::vector<std::pair<std::string, std::string>>;

std::string le64(uint64_t value) {
  std::string out(8, '\0');
  for (size_t i = 0; i < 8; ++i) out[i] = static_cast<char>((value >> (8 * i)) & 0xFF);
  return out;
}

// A safetensors file from raw parts: length prefix, header text as given, data bytes.
std::string raw_file(std::string_view header, std::string_view data) {
  return le64(header.size()) + std::string(header) + std::string(data);
}

// The absolute file offset of `"key"` in a header written by raw_file.
std::string byte_of_key(std::string_view header, std::string_view key, size_t occurrence = 0) {
  const std::string quoted = "\"" + std::string(key) + "\"";
  size_t at = header.find(quoted);
  for (size_t i = 0; i < occurrence && at != std::string::npos; ++i) at = header.find(quoted, at + 1);
  EXPECT_NE(at, std::string::npos) << key;
  return "at byte " + std::to_string(8 + at);
}

template <typename T>
void expect_error(const Result<T>& result, StatusCode code, const std::vector<std::string>& fragments) {
  ASSERT_FALSE(result.ok()) << "expected " << status_code_name(code);
  EXPECT_EQ(result.status().code(), code) << result.status().to_string();
  for (const std::string& fragment : fragments) {
    EXPECT_NE(result.status().message().find(fragment), std::string::npos)
        << "missing '" << fragment << "' in: " << result.status().message();
  }
}

// Opens a one-off file holding `header` and `data`; errors must name the file.
Result<std::unique_ptr<Checkpoint>> open_raw(const TempDir& dir, std::string_view header, std::string_view data) {
  const auto path = dir / "case.safetensors";
  write_bytes(path, raw_file(header, data));
  return open_file(path);
}

std::vector<std::byte> pattern_bytes(size_t size, unsigned seed) {
  std::vector<std::byte> out(size);
  for (size_t i = 0; i < size; ++i) out[i] = static_cast<std::byte>((i * 31 + seed * 7 + 1) & 0xFF);
  return out;
}

std::vector<std::byte> span_copy(std::span<const std::byte> bytes) { return {bytes.begin(), bytes.end()}; }

// ---------------------------------------------------------------------------------------------
// Real files written by other projects.

TEST(SafetensorsReal, DfdxMnist) {
  const auto path = testdata_dir() / "real" / "dfdx_mnist.safetensors";
  auto checkpoint = open_file(path);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().to_string();
  const Checkpoint& ck = **checkpoint;
  EXPECT_EQ(ck.format(), CheckpointFormat::kSafetensors);
  ASSERT_EQ(ck.files().size(), 1u);
  EXPECT_EQ(ck.files()[0].size, 1888776u);
  EXPECT_TRUE(ck.metadata().empty());
  const std::vector<std::pair<std::string, std::vector<uint64_t>>> expected = {
      {"0.0.bias", {512}},  {"0.0.weight", {512, 784}}, {"1.0.bias", {128}}, {"1.0.weight", {128, 512}},
      {"2.0.bias", {32}},   {"2.0.weight", {32, 128}},  {"3.bias", {10}},    {"3.weight", {10, 32}},
  };
  ASSERT_EQ(ck.tensors().size(), expected.size());
  uint64_t next_offset = 8 + 600;
  for (size_t i = 0; i < expected.size(); ++i) {
    const TensorInfo& tensor = ck.tensors()[i];
    EXPECT_EQ(tensor.name, expected[i].first);
    EXPECT_EQ(tensor.shape, expected[i].second);
    EXPECT_EQ(tensor.dtype, DType::kF32);
    EXPECT_EQ(tensor.offset, next_offset) << tensor.name;  // contiguous, in file order
    EXPECT_EQ(tensor.nbytes, tensor.elements() * 4);
    next_offset = tensor.offset + tensor.nbytes;
  }
  EXPECT_EQ(next_offset, 1888776u);  // spans end exactly at the end of the file

  const TensorInfo* bias = ck.find("0.0.bias");
  ASSERT_NE(bias, nullptr);
  auto values = ck.decode_f32(*bias);
  ASSERT_TRUE(values.ok()) << values.status().to_string();
  EXPECT_FLOAT_EQ((*values)[0], -0.5798527598381042f);
  EXPECT_FLOAT_EQ((*values)[1], 0.10425153374671936f);
}

TEST(SafetensorsReal, PeftGpt2Adapter) {
  auto checkpoint = open_file(testdata_dir() / "real" / "peft-gpt2_adapter_model.safetensors");
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().to_string();
  const Checkpoint& ck = **checkpoint;
  ASSERT_EQ(ck.tensors().size(), 25u);
  for (const TensorInfo& tensor : ck.tensors()) EXPECT_EQ(tensor.dtype, DType::kF32) << tensor.name;
  ASSERT_EQ(ck.metadata().size(), 1u);
  EXPECT_EQ(ck.metadata()[0].key, "format");
  EXPECT_EQ(ck.metadata()[0].type, "string");
  EXPECT_EQ(ck.metadata()[0].value, "pt");
  EXPECT_EQ(ck.tensors()[0].name, "base_model.model.score.weight");
  EXPECT_EQ(ck.tensors()[0].shape, (std::vector<uint64_t>{6, 768}));
  EXPECT_EQ(ck.tensors()[0].offset, 8u + 3120u);
  const TensorInfo* lora_b = ck.find("base_model.model.transformer.h.11.attn.c_attn.lora_B.weight");
  ASSERT_NE(lora_b, nullptr);
  EXPECT_EQ(lora_b->shape, (std::vector<uint64_t>{2304, 8}));
  const TensorInfo& last = ck.tensors().back();
  EXPECT_EQ(last.name, "base_model.model.transformer.h.9.attn.c_attn.lora_B.weight");
  EXPECT_EQ(last.offset + last.nbytes, 1201208u);
}

TEST(SafetensorsReal, HqqsvdMixedDtypes) {
  auto checkpoint = open_file(testdata_dir() / "real" / "hqqsvd_test_bf16.safetensors");
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().to_string();
  const Checkpoint& ck = **checkpoint;
  ASSERT_EQ(ck.tensors().size(), 7u);
  std::map<DType, int> by_dtype;
  for (const TensorInfo& tensor : ck.tensors()) ++by_dtype[tensor.dtype];
  EXPECT_EQ(by_dtype[DType::kBF16], 5);
  EXPECT_EQ(by_dtype[DType::kU8], 1);
  EXPECT_EQ(by_dtype[DType::kI64], 1);
  const std::vector<std::string> order = {"nbits", "bias", "scale", "svd_down", "svd_up", "zero", "W_q"};
  for (size_t i = 0; i < order.size(); ++i) EXPECT_EQ(ck.tensors()[i].name, order[i]);
  const TensorInfo* w_q = ck.find("W_q");
  ASSERT_NE(w_q, nullptr);
  EXPECT_EQ(w_q->dtype, DType::kU8);
  EXPECT_EQ(w_q->shape, (std::vector<uint64_t>{1572864}));
  const TensorInfo* scale = ck.find("scale");
  ASSERT_NE(scale, nullptr);
  EXPECT_EQ(scale->shape, (std::vector<uint64_t>{2048, 24, 1}));
  const TensorInfo* nbits = ck.find("nbits");
  ASSERT_NE(nbits, nullptr);
  auto bytes = ck.tensor_bytes(*nbits);
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  ASSERT_EQ(bytes->size(), 8u);
  int64_t value = 0;
  std::memcpy(&value, bytes->data(), sizeof value);
  EXPECT_EQ(value, 2);  // 2-bit packed weights: 3072 x 2048 / 4 = 1572864 bytes
}

TEST(SafetensorsReal, GgufReferenceDequantized) {
  auto checkpoint = open_file(testdata_dir() / "gguf-ref" / "dequantized.safetensors");
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().to_string();
  const Checkpoint& ck = **checkpoint;
  ASSERT_EQ(ck.tensors().size(), 24u);
  EXPECT_EQ(ck.tensors()[0].name, "source");
  for (const TensorInfo& tensor : ck.tensors()) {
    EXPECT_EQ(tensor.dtype, DType::kF32) << tensor.name;
    EXPECT_EQ(tensor.shape, (std::vector<uint64_t>{64, 512})) << tensor.name;
  }
  EXPECT_NE(ck.find("ref.Q4_K"), nullptr);
  EXPECT_NE(ck.find("ref.IQ1_M"), nullptr);
  std::vector<std::string> keys;
  for (const MetadataEntry& entry : ck.metadata()) keys.push_back(entry.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"producer", "ggml_commit", "seed", "layout"}));
}

// ---------------------------------------------------------------------------------------------
// Writer round trips.

TEST(SafetensorsWriter, RoundTripsEverySafetensorsDtype) {
  TempDir dir;
  const std::vector<DType> dtypes = {
      DType::kBool, DType::kU8,     DType::kI8,     DType::kU16,    DType::kI16,    DType::kU32,    DType::kI32,
      DType::kU64,  DType::kI64,    DType::kF16,    DType::kBF16,   DType::kF32,    DType::kF64,    DType::kF8E4M3,
      DType::kF8E5M2, DType::kF8E8M0, DType::kF4E2M1, DType::kF6E2M3, DType::kF6E3M2, DType::kC64,
  };
  std::vector<std::vector<std::byte>> storage;
  std::vector<TensorToWrite> tensors;
  for (size_t i = 0; i < dtypes.size(); ++i) {
    const std::vector<uint64_t> shape = {3, 8};  // 24 elements: whole bytes even for F4 and F6
    auto bytes = dtype_storage_bytes(dtypes[i], 24);
    ASSERT_TRUE(bytes.ok());
    storage.push_back(pattern_bytes(*bytes, static_cast<unsigned>(i)));
    tensors.push_back(TensorToWrite{"t." + std::string(dtype_name(dtypes[i])), dtypes[i], shape, storage.back()});
  }
  storage.push_back({});
  tensors.push_back(TensorToWrite{"empty", DType::kF32, {0, 5}, storage.back()});
  storage.push_back(pattern_bytes(2, 99));
  tensors.push_back(TensorToWrite{"scalar", DType::kBF16, {}, storage.back()});
  const Metadata metadata = {{"format", "pt"}, {"note", "round trip \xC3\xA9"}};

  const auto path = dir / "all.safetensors";
  ASSERT_TRUE(write_file(path, tensors, metadata).ok());

  const std::string raw = testing::read_bytes(path);
  ASSERT_GE(raw.size(), 8u);
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, raw.data(), 8);
  EXPECT_EQ((8 + header_bytes) % 8, 0u);  // data section 8-byte aligned
  EXPECT_EQ(raw.substr(8, 15), "{\"__metadata__\"");

  auto checkpoint = open_file(path);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().to_string();
  const Checkpoint& ck = **checkpoint;
  ASSERT_EQ(ck.tensors().size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorInfo& read = ck.tensors()[i];
    EXPECT_EQ(read.name, tensors[i].name);
    EXPECT_EQ(read.dtype, tensors[i].dtype) << read.name;
    EXPECT_EQ(read.shape, tensors[i].shape) << read.name;
    auto bytes = ck.tensor_bytes(read);
    ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
    EXPECT_EQ(span_copy(*bytes), span_copy(tensors[i].data)) << read.name;
  }
  ASSERT_EQ(ck.metadata().size(), 2u);
  EXPECT_EQ(ck.metadata()[1].key, "note");
  EXPECT_EQ(ck.metadata()[1].value, "round trip \xC3\xA9");
  // Nothing but the target is left in the directory (the temporary file was renamed).
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);
}

TEST(SafetensorsWriter, OverwritesAtomicallyAndWritesEmptyFiles) {
  TempDir dir;
  const auto path = dir / "x.safetensors";
  write_bytes(path, "old contents");
  ASSERT_TRUE(write_file(path, {}, {}).ok());
  EXPECT_EQ(testing::read_bytes(path), le64(8) + "{}      ");
  auto checkpoint = open_file(path);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().to_string();
  EXPECT_TRUE((*checkpoint)->tensors().empty());
}

TEST(SafetensorsWriter, WritesTensorsLargerThanOneWriteChunk) {
  TempDir dir;
  const size_t size = (size_t{65} << 20) + 3;  // the writer hands the kernel 64 MiB at a time
  std::vector<std::byte> data(size, std::byte{0x5A});
  data.front() = std::byte{1};
  data.back() = std::byte{2};
  const TensorToWrite tensors[] = {{"big", DType::kU8, {size}, data}};
  const auto path = dir / "big.safetensors";
  ASSERT_TRUE(write_file(path, tensors, {}).ok());
  auto checkpoint = open_file(path);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().to_string();
  auto bytes = (*checkpoint)->tensor_bytes((*checkpoint)->tensors()[0]);
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  ASSERT_EQ(bytes->size(), size);
  EXPECT_EQ(bytes->front(), std::byte{1});
  EXPECT_EQ((*bytes)[size / 2], std::byte{0x5A});
  EXPECT_EQ(bytes->back(), std::byte{2});
}

TEST(SafetensorsWriter, RejectsInconsistentTensors) {
  TempDir dir;
  const auto path = dir / "bad.safetensors";
  const auto six = pattern_bytes(6, 1);
  const TensorToWrite short_data[] = {{"w", DType::kF32, {2}, six}};
  auto status = write_file(path, short_data, {});
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("'w'"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("needs 8 bytes"), std::string::npos) << status.message();

  const auto blocks = pattern_bytes(144, 1);
  const TensorToWrite quantized[] = {{"q", DType::kQ4_K, {256}, blocks}};
  EXPECT_EQ(write_file(path, quantized, {}).code(), StatusCode::kInvalidArgument);

  const auto four = pattern_bytes(4, 2);
  const TensorToWrite duplicate[] = {{"a", DType::kF32, {1}, four}, {"a", DType::kF32, {1}, four}};
  EXPECT_EQ(write_file(path, duplicate, {}).code(), StatusCode::kInvalidArgument);

  const auto two = pattern_bytes(2, 3);
  const TensorToWrite odd_f4[] = {{"f4", DType::kF4E2M1, {3}, two}};
  EXPECT_EQ(write_file(path, odd_f4, {}).code(), StatusCode::kInvalidArgument);

  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 0);
}

TEST(SafetensorsWriter, WritesProducedTensorsInFileOrder) {
  TempDir dir;
  // Both tensors are produced into one buffer, as the index writer packs its levels.
  std::vector<std::byte> buffer;
  std::vector<std::string> calls;
  auto producer = [&](std::string name, size_t size, unsigned seed) {
    return [&, name, size, seed] {
      calls.push_back(name);
      buffer = pattern_bytes(size, seed);
      return std::span<const std::byte>(buffer);
    };
  };
  const auto given = pattern_bytes(4, 7);
  const TensorToWrite tensors[] = {{"a", DType::kF32, {3}, {}, producer("a", 12, 1)},
                                   {"b", DType::kF32, {1}, given},
                                   {"c", DType::kU8, {5}, {}, producer("c", 5, 2)}};
  const auto path = dir / "produced.safetensors";
  ASSERT_TRUE(write_file(path, tensors, {}).ok());
  EXPECT_EQ(calls, (std::vector<std::string>{"a", "c"}));
  auto checkpoint = open_file(path);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().to_string();
  const auto& t = (*checkpoint)->tensors();
  ASSERT_EQ(t.size(), 3u);
  const std::vector<std::byte> expected[] = {pattern_bytes(12, 1), given, pattern_bytes(5, 2)};
  for (size_t i = 0; i < 3; ++i) {
    auto bytes = (*checkpoint)->tensor_bytes(t[i]);
    ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
    EXPECT_TRUE(std::equal(bytes->begin(), bytes->end(), expected[i].begin(), expected[i].end())) << t[i].name;
  }
}

TEST(SafetensorsWriter, RefusesAProducerOfTheWrongSizeAndKeepsTheOldFile) {
  TempDir dir;
  const auto path = dir / "x.safetensors";
  write_bytes(path, "old contents");
  const auto five = pattern_bytes(5, 3);
  const TensorToWrite tensors[] = {{"w", DType::kF32, {2}, {}, [&] { return std::span<const std::byte>(five); }}};
  const Status status = write_file(path, tensors, {});
  EXPECT_EQ(status.code(), StatusCode::kInternal);
  EXPECT_NE(status.message().find("'w'"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("produced 5 bytes"), std::string::npos) << status.message();
  EXPECT_EQ(testing::read_bytes(path), "old contents");
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir.path()), {}), 1);
}

TEST(SafetensorsWriter, ReportsIoErrors) {
  TempDir dir;
  const auto path = dir / "missing-dir" / "x.safetensors";
  auto status = write_file(path, {}, {});
  EXPECT_EQ(status.code(), StatusCode::kIoError);
  EXPECT_NE(status.message().find("x.safetensors"), std::string::npos) << status.message();
}

// ---------------------------------------------------------------------------------------------
// Generated edge cases.

TEST(SafetensorsEdge, ZeroTensorsAndMetadataOnly) {
  TempDir dir;
  auto plain = open_raw(dir, "{}", "");
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  EXPECT_TRUE((*plain)->tensors().empty());
  auto with_metadata = open_raw(dir, R"({"__metadata__":{"a":"1","b":"two"}})", "");
  ASSERT_TRUE(with_metadata.ok()) << with_metadata.status().to_string();
  ASSERT_EQ((*with_metadata)->metadata().size(), 2u);
  EXPECT_EQ((*with_metadata)->metadata()[1].value, "two");
}

TEST(SafetensorsEdge, EmptyTensorIsValid) {
  TempDir dir;
  const std::string header = R"({"e":{"dtype":"F32","shape":[0,4],"data_offsets":[2,2]},)"
                             R"("a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})";
  auto checkpoint = open_raw(dir, header, "xy");
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().to_string();
  const Checkpoint& ck = **checkpoint;
  ASSERT_EQ(ck.tensors().size(), 2u);
  EXPECT_EQ(ck.tensors()[0].name, "a");  // file order, not header order
  const TensorInfo* empty = ck.find("e");
  ASSERT_NE(empty, nullptr);
  EXPECT_EQ(empty->nbytes, 0u);
  EXPECT_EQ(empty->elements(), 0u);
  EXPECT_EQ(empty->offset, 8 + header.size() + 2);
  auto bytes = ck.tensor_bytes(*empty);
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  EXPECT_TRUE(bytes->empty());
  auto a_bytes = ck.tensor_bytes(*ck.find("a"));
  ASSERT_TRUE(a_bytes.ok());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(a_bytes->data()), a_bytes->size()), "xy");
}

TEST(SafetensorsEdge, HeaderSizeLimitIsInclusive) {
  TempDir dir;
  const auto path = dir / "big.safetensors";
  {
    std::ofstream out(path, std::ios::binary);
    const std::string prefix = le64(kMaxHeaderBytes) + "{}";
    out.write(prefix.data(), static_cast<std::streamsize>(prefix.size()));
    const std::string spaces(1 << 20, ' ');
    uint64_t left = kMaxHeaderBytes - 2;
    while (left > 0) {
      const size_t chunk = static_cast<size_t>(std::min<uint64_t>(left, spaces.size()));
      out.write(spaces.data(), static_cast<std::streamsize>(chunk));
      left -= chunk;
    }
    ASSERT_TRUE(out.good());
  }
  ASSERT_EQ(std::filesystem::file_size(path), 8 + kMaxHeaderBytes);
  auto at_limit = open_file(path);
  ASSERT_TRUE(at_limit.ok()) << at_limit.status().to_string();
  EXPECT_TRUE((*at_limit)->tensors().empty());

  // One byte more: same file with a longer length and one more space.
  {
    std::fstream io(path, std::ios::binary | std::ios::in | std::ios::out);
    const std::string prefix = le64(kMaxHeaderBytes + 1);
    io.write(prefix.data(), 8);
    io.seekp(0, std::ios::end);
    io.put(' ');
    ASSERT_TRUE(io.good());
  }
  expect_error(open_file(path), StatusCode::kFormatError, {"big.safetensors", "100000001", "at byte 0", "limit"});
}

TEST(SafetensorsEdge, FileShorterThanLengthPrefix) {
  TempDir dir;
  const auto path = dir / "tiny.safetensors";
  write_bytes(path, "abcde");
  expect_error(open_file(path), StatusCode::kFormatError, {"tiny.safetensors", "5 bytes"});
}

TEST(SafetensorsEdge, MissingFileIsNotFound) {
  TempDir dir;
  expect_error(open_file(dir / "nope.safetensors"), StatusCode::kNotFound, {"nope.safetensors"});
}

TEST(SafetensorsEdge, HeaderLongerThanFile) {
  TempDir dir;
  const auto path = dir / "case.safetensors";
  write_bytes(path, le64(1000) + "{}");
  expect_error(open_file(path), StatusCode::kFormatError, {"case.safetensors", "1000", "at byte 0", "2 bytes"});
}

TEST(SafetensorsEdge, DataSectionShorterThanOffsets) {
  TempDir dir;
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("w":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})";
  expect_error(open_raw(dir, header, std::string(12, 'x')), StatusCode::kFormatError,
               {"case.safetensors", "'w'", byte_of_key(header, "data_offsets", 1), "[8, 24)", "truncated"});
}

TEST(SafetensorsEdge, TrailingBytesAfterLastTensor) {
  TempDir dir;
  const std::string header = R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})";
  expect_error(open_raw(dir, header, "abcd"), StatusCode::kFormatError,
               {"case.safetensors", "2 unclaimed bytes", "'a'", "byte " + std::to_string(8 + header.size() + 2)});
}

TEST(SafetensorsEdge, OverlappingSpans) {
  TempDir dir;
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})";
  expect_error(open_raw(dir, header, std::string(12, 'x')), StatusCode::kFormatError,
               {"case.safetensors", "tensor 'b'", "overlap tensor 'a'", byte_of_key(header, "data_offsets", 1)});
}

TEST(SafetensorsEdge, HoleBetweenSpans) {
  TempDir dir;
  const std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                             R"("b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]}})";
  expect_error(open_raw(dir, header, std::string(20, 'x')), StatusCode::kFormatError,
               {"case.safetensors", "tensor 'b'", "hole of 4 bytes", "'a'", byte_of_key(header, "data_offsets", 1)});
}

TEST(SafetensorsEdge, HoleBeforeFirstTensor) {
  TempDir dir;
  const std::string header = R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[2,4]}})";
  expect_error(open_raw(dir, header, "abcd"), StatusCode::kFormatError,
               {"case.safetensors", "tensor 'a'", "hole of 2 bytes", "start of the data section"});
}

TEST(SafetensorsEdge, ShapeProductOverflows) {
  TempDir dir;
  const std::string header =
      R"({"huge":{"dtype":"F32","shape":[4294967296,4294967296,2],"data_offsets":[0,0]}})";
  expect_error(open_raw(dir, header, ""), StatusCode::kFormatError,
               {"case.safetensors", "tensor 'huge'", "2^64", byte_of_key(header, "shape")});
}

TEST(SafetensorsEdge, ByteSizeOverflows) {
  TempDir dir;
  const std::string header = R"({"huge":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]}})";
  expect_error(open_raw(dir, header, ""), StatusCode::kFormatError, {"tensor 'huge'", "overflows"});
}

TEST(SafetensorsEdge, WrongByteLengthForDtype) {
  TempDir dir;
  const std::string header = R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,20]}})";
  expect_error(open_raw(dir, header, std::string(20, 'x')), StatusCode::kFormatError,
               {"case.safetensors", "tensor 'w'", "20 bytes", "needs 24 bytes", byte_of_key(header, "data_offsets")});
}

TEST(SafetensorsEdge, SubByteDtypesMustFillWholeBytes) {
  TempDir dir;
  const std::string odd = R"({"f4":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}})";
  expect_error(open_raw(dir, odd, "ab"), StatusCode::kFormatError, {"tensor 'f4'", "whole"});
  const std::string even = R"({"f4":{"dtype":"F4","shape":[2,3],"data_offsets":[0,3]},)"
                           R"("f6":{"dtype":"F6_E3M2","shape":[8],"data_offsets":[3,9]}})";
  auto checkpoint = open_raw(dir, even, "abcdefghi");
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().to_string();
  EXPECT_EQ((*checkpoint)->find("f6")->dtype, DType::kF6E3M2);
}

TEST(SafetensorsEdge, UnknownDtype) {
  TempDir dir;
  for (std::string name : {"F33", "f32", "Q4_K", "F8_E4M3FN"}) {
    const std::string header = R"({"w":{"dtype":")" + name + R"(","shape":[1],"data_offsets":[0,4]}})";
    expect_error(open_raw(dir, header, "abcd"), StatusCode::kFormatError,
                 {"case.safetensors", "tensor 'w'", "unknown dtype '" + name + "'", byte_of_key(header, "dtype")});
  }
}

TEST(SafetensorsEdge, NonUtf8TensorName) {
  TempDir dir;
  const std::string header = "{\"bad\xFFname\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}";
  expect_error(open_raw(dir, header, "x"), StatusCode::kFormatError,
               {"case.safetensors", "UTF-8", "0xFF", "at byte 13", "'bad\\xFFname'", "key"});
}

// Names quoted in messages share one rule with every other reader and the CLI (core/printable.h).
TEST(SafetensorsEdge, EscapeSequenceInTensorNameIsShownEscaped) {
  TempDir dir;
  const std::string header = R"({"w\u001b[31m":{"dtype":"X","shape":[1],"data_offsets":[0,1]}})";
  Result<std::unique_ptr<Checkpoint>> result = open_raw(dir, header, "x");
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.status().message().find("tensor 'w\\x1B[31m'"), std::string::npos) << result.status().message();
  EXPECT_EQ(result.status().message().find('\x1b'), std::string::npos) << result.status().message();
}

TEST(Printable, EscapesControlsAndInvalidUtf8AndKeepsText) {
  EXPECT_EQ(printable("model.layers.0.weight"), "model.layers.0.weight");
  EXPECT_EQ(printable("caf\xC3\xA9 \xE4\xB8\xAD"), "caf\xC3\xA9 \xE4\xB8\xAD");
  EXPECT_EQ(printable("a\x1b[31mb"), "a\\x1B[31mb");
  EXPECT_EQ(printable("l1\nl2\tt\r"), "l1\\nl2\\tt\\r");
  EXPECT_EQ(printable(std::string_view("nul\0del\x7F", 8)), "nul\\x00del\\x7F");
  EXPECT_EQ(printable("c1 \xC2\x9B csi"), "c1 \\xC2\\x9B csi");          // U+009B, an 8-bit CSI
  EXPECT_EQ(printable("rtl \xE2\x80\xAE x"), "rtl \\xE2\\x80\\xAE x");  // U+202E
  EXPECT_EQ(printable("bad \xFF\xC3"), "bad \\xFF\\xC3");                // stray and cut-off bytes
  EXPECT_EQ(printable("\xED\xA0\x80"), "\\xED\\xA0\\x80");                // a UTF-16 surrogate
  EXPECT_EQ(printable("back\\slash"), "back\\\\slash");                    // so \xNN stays unambiguous
}

TEST(Printable, ShortensToMaxBytesWithoutSplittingACharacter) {
  EXPECT_EQ(printable(std::string(1000, 'a'), 10), "aaaaaaaaaa\xE2\x80\xA6 (+990 bytes)");
  EXPECT_EQ(printable("ab\xC3\xA9", 3), "ab\xE2\x80\xA6 (+2 bytes)");
  EXPECT_EQ(printable("abc", 3), "abc");
  EXPECT_EQ(quoted_name("w"), "'w'");
  EXPECT_LT(printable(std::string(1 << 20, '\x01')).size(), 1000u);
}

TEST(Printable, EscapeInvalidUtf8KeepsValidTextAndControls) {
  EXPECT_EQ(escape_invalid_utf8("ok \x1b"), "ok \x1b");
  EXPECT_EQ(escape_invalid_utf8("caf\xE9!"), "caf\\xE9!");
  EXPECT_EQ(first_invalid_utf8("ab\xFF"), std::optional<size_t>(2));
  EXPECT_EQ(first_invalid_utf8("ab\xC3\xA9"), std::nullopt);
}

TEST(SafetensorsEdge, DuplicateKey) {
  TempDir dir;
  const std::string header = R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                             R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})";
  expect_error(open_raw(dir, header, "xy"), StatusCode::kFormatError,
               {"case.safetensors", "duplicate key 'a'", byte_of_key(header, "a", 1)});
  const std::string field = R"({"a":{"dtype":"U8","dtype":"I8","shape":[1],"data_offsets":[0,1]}})";
  expect_error(open_raw(dir, field, "x"), StatusCode::kFormatError,
               {"duplicate key 'dtype' inside 'a'", byte_of_key(field, "dtype", 1)});
}

TEST(SafetensorsEdge, BadMetadata) {
  TempDir dir;
  const std::string number = R"({"__metadata__":{"ok":"yes","n":1}})";
  expect_error(open_raw(dir, number, ""), StatusCode::kFormatError,
               {"case.safetensors", "__metadata__ entry 'n'", "must be a string", byte_of_key(number, "n")});
  const std::string array = R"({"__metadata__":["a"]})";
  expect_error(open_raw(dir, array, ""), StatusCode::kFormatError,
               {"case.safetensors", "__metadata__", "must be an object", "at byte 9"});
}

TEST(SafetensorsEdge, MalformedEntries) {
  TempDir dir;
  const std::string unknown = R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"extra":1}})";
  expect_error(open_raw(dir, unknown, "x"), StatusCode::kFormatError,
               {"tensor 'w'", "unknown field 'extra'", byte_of_key(unknown, "extra")});
  const std::string missing = R"({"w":{"dtype":"U8","data_offsets":[0,1]}})";
  expect_error(open_raw(dir, missing, "x"), StatusCode::kFormatError,
               {"tensor 'w'", "missing field 'shape'", byte_of_key(missing, "w")});
  const std::string negative = R"({"w":{"dtype":"U8","shape":[-1],"data_offsets":[0,1]}})";
  expect_error(open_raw(dir, negative, "x"), StatusCode::kFormatError, {"tensor 'w'", "dimension 0", "-1"});
  const std::string fractional = R"({"w":{"dtype":"U8","shape":[1.5],"data_offsets":[0,1]}})";
  expect_error(open_raw(dir, fractional, "x"), StatusCode::kFormatError, {"tensor 'w'", "non-negative integers"});
  const std::string reversed = R"({"w":{"dtype":"U8","shape":[0],"data_offsets":[1,0]}})";
  expect_error(open_raw(dir, reversed, "x"), StatusCode::kFormatError,
               {"tensor 'w'", "[1, 0]", byte_of_key(reversed, "data_offsets")});
  const std::string three = R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}})";
  expect_error(open_raw(dir, three, "x"), StatusCode::kFormatError, {"tensor 'w'", "[begin, end]"});
  const std::string not_object = R"({"w":[1,2]})";
  expect_error(open_raw(dir, not_object, ""), StatusCode::kFormatError, {"tensor 'w'", "must be an object"});
}

TEST(SafetensorsEdge, HeaderSyntax) {
  TempDir dir;
  expect_error(open_raw(dir, " {}", ""), StatusCode::kFormatError, {"case.safetensors", "start with '{'", "byte 8"});
  expect_error(open_raw(dir, "[1]", ""), StatusCode::kFormatError, {"start with '{'"});
  expect_error(open_raw(dir, R"({"a":)", ""), StatusCode::kFormatError, {"case.safetensors", "invalid JSON at byte"});
  expect_error(open_raw(dir, "{} x", ""), StatusCode::kFormatError, {"invalid JSON at byte 11"});
  const auto path = dir / "zero.safetensors";
  write_bytes(path, le64(0));
  expect_error(open_file(path), StatusCode::kFormatError, {"zero.safetensors", "header length at byte 0 is 0"});
}

// ---------------------------------------------------------------------------------------------
// Sharded sets.

// Writes `shards` (file name -> tensor names, each a U8 [2] tensor) and returns their tensors' bytes.
void write_shards(const TempDir& dir, const std::vector<std::pair<std::string, std::vector<std::string>>>& shards) {
  for (const auto& [file, names] : shards) {
    std::vector<std::vector<std::byte>> storage;
    std::vector<TensorToWrite> tensors;
    storage.reserve(names.size());
    for (const std::string& name : names) {
      storage.push_back(pattern_bytes(2, static_cast<unsigned>(name.size())));
      tensors.push_back(TensorToWrite{name, DType::kU8, {2}, storage.back()});
    }
    ASSERT_TRUE(write_file(dir / file, tensors, {}).ok());
  }
}

std::string index_json(const std::vector<std::pair<std::string, std::string>>& weight_map) {
  nlohmann::ordered_json index;
  index["metadata"] = {{"total_size", 1234}};
  index["weight_map"] = nlohmann::ordered_json::object();
  for (const auto& [tensor, shard] : weight_map) index["weight_map"][tensor] = shard;
  return index.dump(2);
}

TEST(SafetensorsIndex, ThousandTensorsOverFourShards) {
  TempDir dir;
  constexpr int kShards = 4;
  constexpr int kTensors = 1000;
  std::vector<std::pair<std::string, std::string>> weight_map;
  std::vector<std::vector<std::byte>> storage(kTensors);
  uint64_t total = 0;
  for (int shard = 0; shard < kShards; ++shard) {
    const std::string file = "model-0000" + std::to_string(shard + 1) + "-of-00004.safetensors";
    std::vector<TensorToWrite> tensors;
    for (int i = shard; i < kTensors; i += kShards) {
      const std::string name = "layers." + std::to_string(i) + ".weight";
      const std::vector<uint64_t> shape = {static_cast<uint64_t>(i % 5 + 1), 3};
      storage[i] = pattern_bytes(shape[0] * shape[1] * 2, static_cast<unsigned>(i));
      total += storage[i].size();
      tensors.push_back(TensorToWrite{name, DType::kF16, shape, storage[i]});
      weight_map.emplace_back(name, file);
    }
    const Metadata metadata = {{"format", "pt"}};
    ASSERT_TRUE(write_file(dir / file, tensors, metadata).ok());
  }
  std::sort(weight_map.begin(), weight_map.end());  // like transformers' index files
  nlohmann::ordered_json index;
  index["metadata"] = {{"total_size", total}, {"note", "x"}};
  index["weight_map"] = nlohmann::ordered_json::object();
  for (const auto& [tensor, shard] : weight_map) index["weight_map"][tensor] = shard;
  const auto index_path = dir / "model.safetensors.index.json";
  write_bytes(index_path, index.dump(2));

  auto checkpoint = open_index(index_path);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().to_string();
  const Checkpoint& ck = **checkpoint;
  EXPECT_EQ(ck.path(), index_path);
  ASSERT_EQ(ck.files().size(), 4u);
  ASSERT_EQ(ck.tensors().size(), 1000u);
  EXPECT_TRUE(ck.notes().empty());
  // Shards in order of first appearance in the (sorted) weight map: layers.0 is in shard 1, layers.1 in 2...
  EXPECT_EQ(ck.files()[0].path.filename(), "model-00001-of-00004.safetensors");
  EXPECT_EQ(ck.files()[1].path.filename(), "model-00002-of-00004.safetensors");
  EXPECT_EQ(ck.tensors()[0].name, "layers.0.weight");
  EXPECT_EQ(ck.tensors()[1].name, "layers.4.weight");
  for (int i : {0, 1, 2, 3, 517, 998, 999}) {
    const TensorInfo* tensor = ck.find("layers." + std::to_string(i) + ".weight");
    ASSERT_NE(tensor, nullptr) << i;
    EXPECT_EQ(ck.files()[tensor->file].path.filename(),
              "model-0000" + std::to_string(i % kShards + 1) + "-of-00004.safetensors");
    EXPECT_EQ(tensor->shape, (std::vector<uint64_t>{static_cast<uint64_t>(i % 5 + 1), 3}));
    auto bytes = ck.tensor_bytes(*tensor);
    ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
    EXPECT_EQ(span_copy(*bytes), storage[i]) << i;
  }
  ASSERT_GE(ck.metadata().size(), 3u);
  EXPECT_EQ(ck.metadata()[0].key, "total_size");
  EXPECT_EQ(ck.metadata()[0].type, "u64");
  EXPECT_EQ(ck.metadata()[0].value, total);
  EXPECT_EQ(ck.metadata()[1].type, "string");
  EXPECT_EQ(ck.metadata()[2].key, "format");  // from the shards' __metadata__
}

TEST(SafetensorsIndex, MissingShardIsNotFound) {
  TempDir dir;
  write_shards(dir, {{"a.safetensors", {"x"}}});
  const auto index_path = dir / "model.safetensors.index.json";
  write_bytes(index_path, index_json({{"x", "a.safetensors"}, {"y", "b.safetensors"}}));
  expect_error(open_index(index_path), StatusCode::kNotFound,
               {"model.safetensors.index.json", "'b.safetensors'", "'y'"});
}

TEST(SafetensorsIndex, TensorMissingFromItsShard) {
  TempDir dir;
  write_shards(dir, {{"a.safetensors", {"x"}}});
  const auto index_path = dir / "model.safetensors.index.json";
  const std::string json = index_json({{"x", "a.safetensors"}, {"ghost", "a.safetensors"}});
  write_bytes(index_path, json);
  const std::string at = "at byte " + std::to_string(json.find("\"ghost\""));
  expect_error(open_index(index_path), StatusCode::kFormatError,
               {"model.safetensors.index.json", "'ghost'", "'a.safetensors'", "missing", at});
}

TEST(SafetensorsIndex, TensorInWrongShardOrTwoShards) {
  TempDir dir;
  write_shards(dir, {{"a.safetensors", {"x"}}, {"b.safetensors", {"y"}}, {"c.safetensors", {"y"}}});
  const auto wrong = dir / "wrong.index.json";
  write_bytes(wrong, index_json({{"x", "b.safetensors"}, {"y", "b.safetensors"}, {"z", "a.safetensors"}}));
  expect_error(open_index(wrong), StatusCode::kFormatError, {"wrong.index.json", "'x'", "'a.safetensors'", "'b.safetensors'"});
  const auto twice = dir / "twice.index.json";
  write_bytes(twice, index_json({{"y", "b.safetensors"}, {"y2", "c.safetensors"}}));
  expect_error(open_index(twice), StatusCode::kFormatError,
               {"twice.index.json", "'y'", "both", "'b.safetensors'", "'c.safetensors'"});
}

TEST(SafetensorsIndex, UnlistedTensorIsANote) {
  TempDir dir;
  std::filesystem::create_directories(dir / "sub");
  write_shards(dir, {{"sub/a.safetensors", {"x", "extra"}}});
  const auto index_path = dir / "model.safetensors.index.json";
  write_bytes(index_path, index_json({{"x", "sub/a.safetensors"}}));
  auto checkpoint = open_index(index_path);
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().to_string();
  EXPECT_EQ((*checkpoint)->tensors().size(), 2u);
  ASSERT_EQ((*checkpoint)->notes().size(), 1u);
  EXPECT_NE((*checkpoint)->notes()[0].find("'extra'"), std::string::npos) << (*checkpoint)->notes()[0];
  EXPECT_NE((*checkpoint)->notes()[0].find("'sub/a.safetensors'"), std::string::npos);
}

TEST(SafetensorsIndex, ShardPathsMustStayInsideTheDirectory) {
  TempDir dir;
  std::filesystem::create_directories(dir / "inner");
  write_shards(dir, {{"outside.safetensors", {"x"}}});
  const auto index_path = dir / "inner" / "model.safetensors.index.json";
  for (const std::string shard : {"../outside.safetensors", "sub/../../outside.safetensors"}) {
    const std::string json = index_json({{"x", shard}});
    write_bytes(index_path, json);
    expect_error(open_index(index_path), StatusCode::kFormatError,
                 {"model.safetensors.index.json", "'x'", "'..'", "at byte " + std::to_string(json.find("\"x\""))});
  }
  const std::string absolute = (dir / "outside.safetensors").string();
  write_bytes(index_path, index_json({{"x", absolute}}));
  expect_error(open_index(index_path), StatusCode::kFormatError, {"'x'", "absolute"});
}

TEST(SafetensorsIndex, BadShardHeaderNamesIndexAndShard) {
  TempDir dir;
  write_bytes(dir / "a.safetensors", raw_file(R"({"x":{"dtype":"F99","shape":[1],"data_offsets":[0,1]}})", "z"));
  const auto index_path = dir / "model.safetensors.index.json";
  write_bytes(index_path, index_json({{"x", "a.safetensors"}}));
  expect_error(open_index(index_path), StatusCode::kFormatError,
               {"model.safetensors.index.json", "a.safetensors", "tensor 'x'", "unknown dtype 'F99'"});
}

TEST(SafetensorsIndex, MalformedIndex) {
  TempDir dir;
  const auto index_path = dir / "model.safetensors.index.json";
  write_bytes(index_path, R"({"metadata":{}})");
  expect_error(open_index(index_path), StatusCode::kFormatError, {"model.safetensors.index.json", "weight_map"});
  write_bytes(index_path, R"({"weight_map":{"x":7}})");
  expect_error(open_index(index_path), StatusCode::kFormatError, {"'x'", "at byte 15", "shard file"});
  write_bytes(index_path, R"({"weight_map":{"x":"a","x":"b"}})");
  expect_error(open_index(index_path), StatusCode::kFormatError, {"duplicate key 'x'", "at byte 23"});
  write_bytes(index_path, "{\"weight_map\":");
  expect_error(open_index(index_path), StatusCode::kFormatError, {"invalid JSON"});
}

}  // namespace
}  // namespace tensormorph
