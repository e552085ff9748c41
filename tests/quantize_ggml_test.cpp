// Tests of the ggml-compatible encoders: byte equality with ggml's own quantizers on the gguf-ref
// fixtures (ggml_quantize_chunk on a synthetic matrix, llama-quantize on stories260K), round
// trips through the project's decoder, and the error and non-finite contracts.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "core/quantize/quantize.h"
#include "formats/gguf/gguf.h"
#include "formats/safetensors/safetensors.h"
#include "tensormorph/checkpoint.h"
#include "tensormorph/decode.h"
#include "tensormorph/dtype.h"
#include "fixture_files.h"
#include "test_util.h"

namespace tensormorph {
namespace {

using testing::load;
using testing::LoadedFile;
using testing::StoredTensor;

std::filesystem::path ref_dir() { return testing::testdata_dir() / "gguf-ref"; }

/// The F32 values of a stored F32 tensor.
std::vector<float> floats_of(const StoredTensor& t) {
  EXPECT_EQ(t.dtype, DType::kF32) << t.name;
  std::vector<float> v(t.elements);
  std::memcpy(v.data(), t.bytes.data(), v.size() * sizeof(float));
  return v;
}

/// Expects `actual` to equal `expected` byte for byte; on a mismatch reports the first differing
/// block and byte and how many blocks differ.
void expect_same_bytes(std::span<const std::byte> actual, std::span<const std::byte> expected, DType dtype,
                       const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  const uint64_t block = dtype_info(dtype).block_bytes;
  uint64_t first = actual.size(), differing_blocks = 0;
  for (uint64_t b = 0; b * block < actual.size(); ++b) {
    if (std::memcmp(actual.data() + b * block, expected.data() + b * block, block) == 0) continue;
    ++differing_blocks;
    if (first == actual.size()) {
      for (uint64_t i = b * block; i < (b + 1) * block; ++i) {
        if (actual[i] != expected[i]) {
          first = i;
          break;
        }
      }
    }
  }
  if (differing_blocks == 0) return;
  ADD_FAILURE() << what << ": " << differing_blocks << " of " << actual.size() / block
                << " blocks differ; first at block " << first / block << ", byte " << first % block << ": got 0x" << std::hex
                << static_cast<int>(actual[first]) << ", ggml wrote 0x" << static_cast<int>(expected[first]) << std::dec;
}

/// Every type ggml_quantize_chunk wrote into quantized.gguf without an importance matrix and that
/// encode_from_f32 covers.
const std::vector<DType> kCovered = {DType::kQ4_0,  DType::kQ4_1,   DType::kQ5_0,   DType::kQ5_1,  DType::kQ8_0,
                                     DType::kQ2_K,  DType::kQ3_K,   DType::kQ4_K,   DType::kQ5_K,  DType::kQ6_K,
                                     DType::kIQ4_NL, DType::kIQ4_XS, DType::kTQ1_0, DType::kTQ2_0, DType::kF16,
                                     DType::kBF16};

class GgufRefEncode : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    quantized_ = new LoadedFile(load(gguf::open_file(ref_dir() / "quantized.gguf")));
    dequantized_ = new LoadedFile(load(safetensors::open_file(ref_dir() / "dequantized.safetensors")));
  }
  static void TearDownTestSuite() {
    delete quantized_;
    delete dequantized_;
  }
  static const LoadedFile& quantized() { return *quantized_; }
  static const LoadedFile& dequantized() { return *dequantized_; }
  static std::string ref_name(DType dtype) { return "ref." + std::string(dtype_name(dtype)); }

 private:
  static inline LoadedFile* quantized_ = nullptr;
  static inline LoadedFile* dequantized_ = nullptr;
};

TEST_F(GgufRefEncode, EveryCoveredTypeMatchesGgmlByteForByte) {
  const StoredTensor* source = dequantized().find("source");
  ASSERT_NE(source, nullptr);
  ASSERT_EQ(source->elements, 64u * 512u);
  const std::vector<float> values = floats_of(*source);
  for (DType dtype : kCovered) {
    SCOPED_TRACE(dtype_name(dtype));
    EXPECT_TRUE(dtype_encodable(dtype));
    const StoredTensor* ref = quantized().find(ref_name(dtype));
    ASSERT_NE(ref, nullptr);
    ASSERT_EQ(ref->dtype, dtype);
    auto encoded = encode_from_f32(dtype, values);
    ASSERT_TRUE(encoded.ok()) << encoded.status().to_string();
    expect_same_bytes(*encoded, ref->bytes, dtype, ref->name);
  }
}

TEST_F(GgufRefEncode, RoundTripThroughOurDecoderGivesGgmlsDequantizedValues) {
  const std::vector<float> values = floats_of(*dequantized().find("source"));
  for (DType dtype : kCovered) {
    SCOPED_TRACE(dtype_name(dtype));
    auto encoded = encode_from_f32(dtype, values);
    ASSERT_TRUE(encoded.ok()) << encoded.status().to_string();
    std::vector<float> decoded(values.size());
    ASSERT_TRUE(decode_to_f32(dtype, *encoded, values.size(), decoded.data()).ok());
    const std::vector<float> want = floats_of(*dequantized().find(ref_name(dtype)));
    size_t mismatches = 0, first = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      if (std::bit_cast<uint32_t>(decoded[i]) != std::bit_cast<uint32_t>(want[i]) && mismatches++ == 0) first = i;
    }
    EXPECT_EQ(mismatches, 0u) << "first at row " << first / 512 << " column " << first % 512 << ": "
                              << decoded[first] << " vs ggml " << want[first];
  }
}

TEST_F(GgufRefEncode, RowByRowEncodingEqualsWholeMatrix) {
  const std::vector<float> values = floats_of(*dequantized().find("source"));
  for (DType dtype : {DType::kQ5_1, DType::kQ3_K, DType::kIQ4_XS}) {
    SCOPED_TRACE(dtype_name(dtype));
    const auto whole = *encode_from_f32(dtype, values);
    const uint64_t row_bytes = whole.size() / 64;
    for (size_t r = 0; r < 64; ++r) {
      const auto row = *encode_from_f32(dtype, std::span(values).subspan(r * 512, 512));
      ASSERT_EQ(row.size(), row_bytes);
      EXPECT_EQ(std::memcmp(row.data(), whole.data() + r * row_bytes, row_bytes), 0) << "row " << r;
    }
  }
}

TEST(Stories260kEncode, LlamaQuantizeQ5_0Q8_0AndF16TensorsAreReproduced) {
  const LoadedFile quantized = load(gguf::open_file(ref_dir() / "stories260K-Q4_K_M.gguf"));
  const LoadedFile original = load(gguf::open_file(testing::testdata_dir() / "real" / "stories260K.gguf"));
  size_t q5_0 = 0, q8_0 = 0, f16 = 0;
  for (const StoredTensor& tensor : quantized.tensors) {
    if (tensor.dtype != DType::kQ5_0 && tensor.dtype != DType::kQ8_0 && tensor.dtype != DType::kF16) continue;
    SCOPED_TRACE(tensor.name + " (" + std::string(dtype_name(tensor.dtype)) + ")");
    const StoredTensor* source = original.find(tensor.name);
    ASSERT_NE(source, nullptr);
    ASSERT_EQ(source->elements, tensor.elements);
    auto encoded = encode_from_f32(tensor.dtype, floats_of(*source));
    ASSERT_TRUE(encoded.ok()) << encoded.status().to_string();
    expect_same_bytes(*encoded, tensor.bytes, tensor.dtype, tensor.name);
    (tensor.dtype == DType::kQ5_0 ? q5_0 : tensor.dtype == DType::kQ8_0 ? q8_0 : f16) += 1;
  }
  EXPECT_EQ(q5_0, 29u);
  EXPECT_EQ(q8_0, 3u);
  EXPECT_EQ(f16, 5u);
}

TEST(EncodeErrors, PartialBlockIsInvalidArgumentNamingTheBlockSize) {
  const std::vector<float> values(300, 0.5f);
  for (DType dtype : {DType::kQ4_0, DType::kQ4_K, DType::kIQ4_XS, DType::kTQ1_0}) {
    auto encoded = encode_from_f32(dtype, values);
    ASSERT_FALSE(encoded.ok()) << dtype_name(dtype);
    EXPECT_EQ(encoded.status().code(), StatusCode::kInvalidArgument);
    const std::string m = encoded.status().message();
    EXPECT_NE(m.find("300"), std::string::npos) << m;
    EXPECT_NE(m.find(dtype_name(dtype)), std::string::npos) << m;
    EXPECT_NE(m.find(std::to_string(dtype_info(dtype).block_elems) + "-element"), std::string::npos) << m;
  }
}

TEST(EncodeErrors, LatticeIqTypesAreUnimplemented) {
  for (DType dtype : {DType::kIQ2_XXS, DType::kIQ3_S, DType::kIQ1_M, DType::kQ8_K, DType::kMXFP4}) {
    EXPECT_FALSE(dtype_encodable(dtype)) << dtype_name(dtype);
    auto encoded = encode_from_f32(dtype, std::vector<float>(256, 0.0f));
    ASSERT_FALSE(encoded.ok());
    EXPECT_EQ(encoded.status().code(), StatusCode::kUnimplemented);
  }
}

TEST(EncodeErrors, EmptyInputGivesNoBytes) {
  for (DType dtype : kCovered) {
    auto encoded = encode_from_f32(dtype, {});
    ASSERT_TRUE(encoded.ok()) << dtype_name(dtype);
    EXPECT_TRUE(encoded->empty());
  }
}

// Non-finite values are encoded, not rejected, and stay inside their block: the bytes of every
// other block are those of the finite data alone, and the same input always gives the same bytes.
TEST(EncodeNonFinite, StaysInItsBlockAndIsDeterministic) {
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  constexpr float kInf = std::numeric_limits<float>::infinity();
  std::vector<float> clean(1024);
  for (size_t i = 0; i < clean.size(); ++i) clean[i] = 0.01f * std::sin(0.37f * static_cast<float>(i));
  for (DType dtype : kCovered) {
    SCOPED_TRACE(dtype_name(dtype));
    const DTypeInfo& info = dtype_info(dtype);
    if (info.block_elems == 1) continue;  // F16/BF16 keep NaN and Inf as values
    const auto reference = *encode_from_f32(dtype, clean);
    for (float special : {kNaN, -kNaN, kInf, -kInf}) {
      for (size_t at : {size_t{0}, size_t{17}, info.block_elems - size_t{1}}) {
        std::vector<float> dirty = clean;
        dirty[at] = special;
        auto first = encode_from_f32(dtype, dirty);
        ASSERT_TRUE(first.ok()) << first.status().to_string();
        auto second = encode_from_f32(dtype, dirty);
        EXPECT_EQ(*first, *second);
        const size_t block_bytes = info.block_bytes;
        EXPECT_EQ(std::memcmp(first->data() + block_bytes, reference.data() + block_bytes,
                              reference.size() - block_bytes),
                  0)
            << "value " << special << " at " << at;
      }
    }
  }
}

// A block holding +Inf gets an infinite scale in the amax-scaled types, so its values decode to
// NaN or Inf rather than to plausible numbers; ggml writes the same.
TEST(EncodeNonFinite, InfinityMakesTheScaleInfinite) {
  std::vector<float> v(256, 0.25f);
  v[3] = std::numeric_limits<float>::infinity();
  for (DType dtype : {DType::kQ8_0, DType::kTQ2_0}) {
    const auto bytes = *encode_from_f32(dtype, v);
    uint16_t d;
    std::memcpy(&d, bytes.data() + (dtype == DType::kQ8_0 ? 0 : 64), 2);
    EXPECT_EQ(d, 0x7c00) << dtype_name(dtype);
  }
}

}  // namespace
}  // namespace tensormorph
