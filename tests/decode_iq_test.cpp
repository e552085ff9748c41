// Tests of the IQ decoders (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S and the IQ4 pair):
// bit-exact agreement with ggml's to_float on the gguf-ref fixture, read through the project's own
// GGUF and safetensors readers, hand-built blocks that pin down the layouts, the grid tables'
// invariants, and size checks on short buffers.
#include <gtest/gtest.h>

#include <bit>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <memory>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "core/decode/ggml_iq_grids.h"
#include "formats/gguf/gguf.h"
#include "formats/safetensors/safetensors.h"
#include "tensormorph/checkpoint.h"
#include "tensormorph/decode.h"
#include "tensormorph/dtype.h"
#include "test_util.h"

namespace tensormorph {
namespace {

namespace grids = decode_internal;

/// The types whose decoders read the lattice grids.
const std::vector<DType> kLatticeTypes = {DType::kIQ2_XXS, DType::kIQ2_XS, DType::kIQ2_S, DType::kIQ3_XXS,
                                          DType::kIQ3_S,   DType::kIQ1_S,  DType::kIQ1_M};

constexpr uint64_t kRows = 64;
constexpr uint64_t kCols = 512;

std::filesystem::path ref_dir() { return testing::testdata_dir() / "gguf-ref"; }

std::unique_ptr<Checkpoint> open_or_fail(Result<std::unique_ptr<Checkpoint>> opened) {
  EXPECT_TRUE(opened.ok()) << opened.status().to_string();
  if (!opened.ok()) return nullptr;
  return std::move(opened).value();
}

const TensorInfo* find_tensor(const Checkpoint& ckpt, std::string_view name) {
  for (const TensorInfo& t : ckpt.tensors()) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

/// The F32 bit patterns of `tensor`, read straight from the file's bytes.
std::vector<uint32_t> stored_bits(const Checkpoint& ckpt, const TensorInfo& tensor) {
  auto bytes = ckpt.tensor_bytes(tensor);
  EXPECT_TRUE(bytes.ok()) << bytes.status().to_string();
  if (!bytes.ok()) return {};
  std::vector<uint32_t> out(bytes->size() / sizeof(uint32_t));
  std::memcpy(out.data(), bytes->data(), out.size() * sizeof(uint32_t));
  return out;
}

std::vector<uint32_t> bits_of(const std::vector<float>& values) {
  std::vector<uint32_t> out(values.size());
  std::memcpy(out.data(), values.data(), values.size() * sizeof(float));
  return out;
}

/// "value (0xBITS)" for a float32 bit pattern. AssertionResult streams each piece separately, so
/// a std::hex manipulator would not carry over to the next number.
std::string described(uint32_t pattern) {
  char hex[16];
  std::snprintf(hex, sizeof hex, "0x%08x", pattern);
  std::ostringstream text;
  text << std::bit_cast<float>(pattern) << " (" << hex << ")";
  return text.str();
}

/// Compares bit patterns and names the first mismatch by flat index and (row, col).
::testing::AssertionResult same_bits(const std::vector<uint32_t>& actual, const std::vector<uint32_t>& expected) {
  if (actual.size() != expected.size()) {
    return ::testing::AssertionFailure() << actual.size() << " values, expected " << expected.size();
  }
  size_t mismatches = 0;
  size_t first = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (actual[i] != expected[i] && mismatches++ == 0) first = i;
  }
  if (mismatches == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << mismatches << " of " << actual.size() << " values differ; the first at index " << first << " (row "
         << first / kCols << ", col " << first % kCols << "): got " << described(actual[first]) << ", ggml gives "
         << described(expected[first]);
}

/// The gguf-ref fixture: quantized blocks and ggml's decoding of them.
class IqGgufRef : public ::testing::Test {
 protected:
  void SetUp() override {
    quantized_ = open_or_fail(gguf::open_file(ref_dir() / "quantized.gguf"));
    expected_ = open_or_fail(safetensors::open_file(ref_dir() / "dequantized.safetensors"));
    ASSERT_NE(quantized_, nullptr);
    ASSERT_NE(expected_, nullptr);
  }

  /// Decodes ref.<TYPE> with decode_to_f32 and compares it with ggml's output.
  void check(const TensorInfo& tensor) {
    SCOPED_TRACE(tensor.name);
    const TensorInfo* reference = find_tensor(*expected_, tensor.name);
    ASSERT_NE(reference, nullptr);
    ASSERT_EQ(reference->dtype, DType::kF32);
    ASSERT_EQ(reference->shape, (std::vector<uint64_t>{kRows, kCols}));
    ASSERT_EQ(tensor.elements(), kRows * kCols);
    auto bytes = quantized_->tensor_bytes(tensor);
    ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
    ASSERT_TRUE(dtype_decodable(tensor.dtype));
    std::vector<float> out(tensor.elements());
    const Status status = decode_to_f32(tensor.dtype, *bytes, tensor.elements(), out.data());
    ASSERT_TRUE(status.ok()) << status.to_string();
    EXPECT_TRUE(same_bits(bits_of(out), stored_bits(*expected_, *reference)));
  }

  std::unique_ptr<Checkpoint> quantized_;
  std::unique_ptr<Checkpoint> expected_;
};

TEST_F(IqGgufRef, EveryLatticeTypeMatchesGgmlBitForBit) {
  for (DType dtype : kLatticeTypes) {
    const std::string name = "ref." + std::string(dtype_name(dtype));
    const TensorInfo* tensor = find_tensor(*quantized_, name);
    ASSERT_NE(tensor, nullptr) << name;
    EXPECT_EQ(tensor->dtype, dtype) << name;
    check(*tensor);
  }
}

TEST_F(IqGgufRef, AllTwentyThreeTensorsMatchGgmlBitForBit) {
  ASSERT_EQ(quantized_->tensors().size(), 23u);
  for (const TensorInfo& tensor : quantized_->tensors()) check(tensor);
}

TEST_F(IqGgufRef, CheckpointDecodeRowsAndFloat64AgreeWithTheWholeTensor) {
  // The same values through Checkpoint::decode_f32, row by row (blocks never cross a row), and
  // through the float64 path, which for ggml types is the float32 result widened.
  for (DType dtype : kLatticeTypes) {
    const TensorInfo* tensor = find_tensor(*quantized_, "ref." + std::string(dtype_name(dtype)));
    ASSERT_NE(tensor, nullptr);
    SCOPED_TRACE(tensor->name);
    auto whole = quantized_->decode_f32(*tensor);
    ASSERT_TRUE(whole.ok()) << whole.status().to_string();
    auto bytes = quantized_->tensor_bytes(*tensor);
    ASSERT_TRUE(bytes.ok());
    const uint64_t row_bytes = bytes->size() / kRows;
    std::vector<float> rows(kRows * kCols);
    for (uint64_t r = 0; r < kRows; ++r) {
      ASSERT_TRUE(decode_to_f32(dtype, bytes->subspan(r * row_bytes, row_bytes), kCols, rows.data() + r * kCols).ok());
    }
    EXPECT_TRUE(same_bits(bits_of(rows), bits_of(*whole)));
    std::vector<double> wide(kRows * kCols);
    ASSERT_TRUE(decode_to_f64(dtype, *bytes, wide.size(), wide.data()).ok());
    size_t wide_mismatches = 0;
    for (size_t i = 0; i < wide.size(); ++i) {
      wide_mismatches += std::bit_cast<uint64_t>(wide[i]) != std::bit_cast<uint64_t>(static_cast<double>((*whole)[i]));
    }
    EXPECT_EQ(wide_mismatches, 0u);
  }
}

TEST(IqStoriesFixture, HoldsNoIqTensors) {
  // The llama-quantize fixture is Q5_0/Q8_0/F16/F32 only (decode_test checks it bit for bit), so it
  // exercises none of these decoders; this pins that down so a regenerated fixture gets noticed.
  auto ckpt = open_or_fail(gguf::open_file(ref_dir() / "stories260K-Q4_K_M.gguf"));
  ASSERT_NE(ckpt, nullptr);
  std::set<DType> types;
  for (const TensorInfo& t : ckpt->tensors()) types.insert(t.dtype);
  EXPECT_EQ(types, (std::set<DType>{DType::kQ5_0, DType::kQ8_0, DType::kF16, DType::kF32}));
}

// ---- Size checks ----------------------------------------------------------------------------

TEST(IqDecodeSizes, ShortLongAndRaggedBuffersAreRejectedWithoutWriting) {
  for (DType dtype : kLatticeTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    const DTypeInfo& info = dtype_info(dtype);
    ASSERT_EQ(info.block_elems, 256u);
    const std::vector<std::byte> two_blocks(2 * info.block_bytes);
    std::vector<float> out(512, 42.0f);

    // One byte short of two blocks: the decoder must not read past the span.
    const auto short_span = std::span(two_blocks).first(two_blocks.size() - 1);
    Status status = decode_to_f32(dtype, short_span, 512, out.data());
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find(std::string(dtype_name(dtype))), std::string::npos) << status.message();
    EXPECT_NE(status.message().find(std::to_string(two_blocks.size())), std::string::npos) << status.message();
    EXPECT_NE(status.message().find(std::to_string(short_span.size())), std::string::npos) << status.message();

    // One block's bytes for two blocks' elements, and a byte more than two blocks.
    EXPECT_EQ(decode_to_f32(dtype, std::span(two_blocks).first(info.block_bytes), 512, out.data()).code(),
              StatusCode::kInvalidArgument);
    std::vector<std::byte> long_buffer(two_blocks.size() + 1);
    EXPECT_EQ(decode_to_f32(dtype, long_buffer, 512, out.data()).code(), StatusCode::kInvalidArgument);

    // Not a whole number of 256-element blocks.
    status = decode_to_f32(dtype, two_blocks, 300, out.data());
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(status.message().find("256-element blocks"), std::string::npos) << status.message();

    std::vector<double> wide(512, 42.0);
    EXPECT_EQ(decode_to_f64(dtype, short_span, 512, wide.data()).code(), StatusCode::kInvalidArgument);
    for (float v : out) ASSERT_EQ(v, 42.0f);
    for (double v : wide) ASSERT_EQ(v, 42.0);

    // Nothing to decode is fine, even with no output buffer.
    EXPECT_TRUE(decode_to_f32(dtype, {}, 0, nullptr).ok());
  }
}

// ---- Hand-built blocks ----------------------------------------------------------------------

constexpr uint16_t kHalfOne = 0x3c00;

std::vector<float> decode_block(DType dtype, const std::vector<uint8_t>& block) {
  std::vector<float> out(256);
  const Status status = decode_to_f32(dtype, std::as_bytes(std::span(block)), 256, out.data());
  EXPECT_TRUE(status.ok()) << status.to_string();
  return out;
}

void put_u16(std::vector<uint8_t>& block, size_t at, uint16_t v) {
  block[at] = static_cast<uint8_t>(v & 0xff);
  block[at + 1] = static_cast<uint8_t>(v >> 8);
}

TEST(IqBlocks, Iq2XxsScaleIndexAndSigns) {
  std::vector<uint8_t> block(66, 0);
  put_u16(block, 0, kHalfOne);
  // Sub-block 1: grid entry 1 for its first run of 8, sign pattern 1 for it, scale nibble 3.
  block[2 + 8] = 1;
  const uint32_t meta = 1u | (3u << 28);
  std::memcpy(block.data() + 2 + 8 + 4, &meta, 4);
  const auto out = decode_block(DType::kIQ2_XXS, block);
  // Sub-block 0: scale (1 * 0.5) * 0.25 on entry 0, which is all 8s.
  for (int i = 0; i < 32; ++i) EXPECT_EQ(out[i], 1.0f) << i;
  // Entry 1 is 0x080808080808082b; sign pattern 1 is 129 (elements 0 and 7 negated).
  const float db = 3.5f * 0.25f;
  EXPECT_EQ(out[32], -db * 43);
  for (int i = 33; i < 39; ++i) EXPECT_EQ(out[i], db * 8) << i;
  EXPECT_EQ(out[39], -db * 8);
  for (int i = 40; i < 64; ++i) EXPECT_EQ(out[i], db * 8) << i;
}

TEST(IqBlocks, Iq3SHighIndexBitAndExplicitSigns) {
  std::vector<uint8_t> block(110, 0);
  put_u16(block, 0, kHalfOne);
  block[2 + 1] = 0;        // sub-block 0, second 4-wide entry: low index bits 0 ...
  block[66] = 0x02;        // ... and bit 8 from qh bit 1: index 256
  block[74] = 0x81;        // signs of the first run: elements 0 and 7
  block[106] = 0x02;       // sub-block 0 scale nibble 2: d * 5
  const auto out = decode_block(DType::kIQ3_S, block);
  const uint32_t e0 = grids::kIq3SGrid[0];
  const uint32_t e256 = grids::kIq3SGrid[256];
  EXPECT_EQ(out[0], -5.0f * static_cast<float>(e0 & 0xff));
  for (int j = 1; j < 4; ++j) EXPECT_EQ(out[j], 5.0f * static_cast<float>((e0 >> (8 * j)) & 0xff)) << j;
  for (int j = 0; j < 3; ++j) EXPECT_EQ(out[4 + j], 5.0f * static_cast<float>((e256 >> (8 * j)) & 0xff)) << j;
  EXPECT_EQ(out[7], -5.0f * static_cast<float>(e256 >> 24));
  // Sub-block 1 takes the high nibble of scales[0], which is 0: scale d * 1.
  EXPECT_EQ(out[32], static_cast<float>(e0 & 0xff));
}

TEST(IqBlocks, Iq1MScaleIsSpreadOverTheTopNibbles) {
  std::vector<uint8_t> block(56, 0);
  // d = 1.0 (0x3c00): nibbles 0, 0, c, 3 from the low end, one per scale word's top nibble.
  put_u16(block, 48 + 4, 0xc000);
  put_u16(block, 48 + 6, 0x3000);
  block[32] = 0x80;  // sub-block 0, second run of 8: negative delta
  const auto out = decode_block(DType::kIQ1_M, block);
  // Grid entry 0 is all -1; every 3-bit scale is 0, so each sub-block scale is d * 1.
  for (int i = 0; i < 8; ++i) EXPECT_EQ(out[i], -0.875f) << i;
  for (int i = 8; i < 16; ++i) EXPECT_EQ(out[i], -1.125f) << i;
  for (int i = 16; i < 256; ++i) EXPECT_EQ(out[i], -0.875f) << i;
}

TEST(IqBlocks, Iq1SZeroScaleGivesSignedZeros) {
  // d = 0 makes every value 0 * (-1 + 0.125): ggml's result is -0.0, and so is ours.
  const std::vector<uint8_t> block(50, 0);
  for (float v : decode_block(DType::kIQ1_S, block)) EXPECT_EQ(std::bit_cast<uint32_t>(v), 0x80000000u);
}

// ---- The grid tables ------------------------------------------------------------------------

template <typename T, size_t N>
std::set<uint32_t> bytes_in(const T (&table)[N]) {
  std::set<uint32_t> values;
  for (T entry : table) {
    for (size_t j = 0; j < sizeof(T); ++j) values.insert(static_cast<uint32_t>((entry >> (8 * j)) & 0xff));
  }
  return values;
}

template <typename T, size_t N>
size_t distinct(const T (&table)[N]) {
  return std::set<T>(std::begin(table), std::end(table)).size();
}

TEST(IqGrids, SignTableHasEvenParity) {
  for (uint32_t i = 0; i < 128; ++i) {
    EXPECT_EQ(grids::kIq2XsSigns[i] & 127u, i);
    EXPECT_EQ(std::popcount(static_cast<uint32_t>(grids::kIq2XsSigns[i])) % 2, 0) << i;
  }
}

TEST(IqGrids, EntriesAreDistinctAndUseOnlyTheFormatsMagnitudes) {
  EXPECT_EQ(bytes_in(grids::kIq2XxsGrid), (std::set<uint32_t>{8, 25, 43}));
  EXPECT_EQ(bytes_in(grids::kIq2XsGrid), (std::set<uint32_t>{8, 25, 43}));
  EXPECT_EQ(bytes_in(grids::kIq2SGrid), (std::set<uint32_t>{8, 25, 43}));
  EXPECT_EQ(bytes_in(grids::kIq3XxsGrid), (std::set<uint32_t>{4, 12, 20, 28, 36, 44, 52, 62}));
  EXPECT_EQ(bytes_in(grids::kIq3SGrid), (std::set<uint32_t>{1, 3, 5, 7, 9, 11, 13, 15}));
  EXPECT_EQ(bytes_in(grids::kIq1SGrid), (std::set<uint32_t>{0x00, 0x01, 0xff}));
  EXPECT_EQ(distinct(grids::kIq2XxsGrid), 256u);
  EXPECT_EQ(distinct(grids::kIq2XsGrid), 512u);
  EXPECT_EQ(distinct(grids::kIq2SGrid), 1024u);
  EXPECT_EQ(distinct(grids::kIq3XxsGrid), 256u);
  EXPECT_EQ(distinct(grids::kIq3SGrid), 512u);
  EXPECT_EQ(distinct(grids::kIq1SGrid), 2048u);
}

}  // namespace
}  // namespace tensormorph
