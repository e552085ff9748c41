// Tests of the dtype decoders: bit-exact agreement with ggml's own dequantizer on the gguf-ref
// fixtures, hand-picked bit patterns for every scalar type, and argument checking.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "formats/gguf/gguf.h"
#include "formats/safetensors/safetensors.h"
#include "tensormorph/checkpoint.h"
#include "tensormorph/decode.h"
#include "tensormorph/dtype.h"
#include "fixture_files.h"
#include "test_util.h"

namespace tensormorph {
namespace {

// ---- Fixture access through the project's GGUF and safetensors readers ----------------------

using testing::LoadedFile;
using testing::load_gguf;
using testing::load_safetensors;
using testing::StoredTensor;

// ---- Helpers ------------------------------------------------------------------------------------

std::span<const std::byte> as_bytes_of(const std::vector<uint8_t>& v) { return std::as_bytes(std::span(v)); }

template <typename T>
std::vector<uint8_t> bytes_of(std::initializer_list<T> values) {
  std::vector<uint8_t> out(values.size() * sizeof(T));
  std::memcpy(out.data(), std::data(values), out.size());
  return out;
}

std::vector<float> decode32(DType dtype, const std::vector<uint8_t>& raw, uint64_t elems) {
  std::vector<float> out(elems);
  const Status status = decode_to_f32(dtype, as_bytes_of(raw), elems, out.data());
  EXPECT_TRUE(status.ok()) << status.to_string();
  return out;
}

std::vector<double> decode64(DType dtype, const std::vector<uint8_t>& raw, uint64_t elems) {
  std::vector<double> out(elems);
  const Status status = decode_to_f64(dtype, as_bytes_of(raw), elems, out.data());
  EXPECT_TRUE(status.ok()) << status.to_string();
  return out;
}

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

/// Expects `actual` to be bit-identical to `expected` (so -0 differs from +0).
void expect_same_bits(const std::vector<float>& actual, const std::vector<float>& expected,
                      const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  size_t mismatches = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (bits(actual[i]) != bits(expected[i])) {
      if (++mismatches <= 5) {
        ADD_FAILURE() << what << " element " << i << ": got " << actual[i] << " (0x" << std::hex
                      << bits(actual[i]) << "), ggml gives " << expected[i] << " (0x" << bits(expected[i])
                      << ")" << std::dec;
      }
    }
  }
  EXPECT_EQ(mismatches, 0u) << what;
}

/// Independent reference for small sign/exponent/mantissa floats: ldexp on the fields.
double reference_minifloat(uint32_t code, int exp_bits, int mant_bits) {
  const int bias = (1 << (exp_bits - 1)) - 1;
  const bool negative = (code >> (exp_bits + mant_bits)) & 1;
  const int exponent = static_cast<int>((code >> mant_bits) & ((1u << exp_bits) - 1));
  const int mantissa = static_cast<int>(code & ((1u << mant_bits) - 1));
  const double magnitude = exponent == 0 ? std::ldexp(mantissa, 1 - bias - mant_bits)
                                         : std::ldexp(mantissa + (1 << mant_bits), exponent - bias - mant_bits);
  return negative ? -magnitude : magnitude;
}

// ---- gguf-ref: bit-exact agreement with ggml ------------------------------------------------

/// Decodes every tensor of `gguf` and compares it bit for bit with the same-named F32 tensor.
/// Returns how many tensors were decoded.
size_t check_against_reference(const LoadedFile& gguf, const LoadedFile& expected) {
  size_t decoded = 0;
  for (const StoredTensor& tensor : gguf.tensors) {
    SCOPED_TRACE(tensor.name + " (" + std::string(dtype_name(tensor.dtype)) + ")");
    const StoredTensor* reference = expected.find(tensor.name);
    EXPECT_NE(reference, nullptr);
    if (reference == nullptr) continue;
    EXPECT_EQ(reference->dtype, DType::kF32);
    EXPECT_EQ(reference->elements, tensor.elements);
    std::vector<float> out(tensor.elements);
    const Status status = decode_to_f32(tensor.dtype, tensor.bytes, tensor.elements, out.data());
    EXPECT_TRUE(status.ok()) << status.to_string();
    if (!status.ok()) continue;
    std::vector<float> want(reference->elements);
    std::memcpy(want.data(), reference->bytes.data(), want.size() * sizeof(float));
    expect_same_bits(out, want, tensor.name);

    // The float64 path of a ggml type is the float32 result, widened (and chunking is invisible).
    std::vector<double> wide(tensor.elements);
    EXPECT_TRUE(decode_to_f64(tensor.dtype, tensor.bytes, tensor.elements, wide.data()).ok());
    size_t wide_mismatches = 0;
    for (size_t i = 0; i < wide.size(); ++i) {
      if (std::bit_cast<uint64_t>(wide[i]) != std::bit_cast<uint64_t>(static_cast<double>(out[i]))) {
        ++wide_mismatches;
      }
    }
    EXPECT_EQ(wide_mismatches, 0u);
    ++decoded;
  }
  return decoded;
}

TEST(DecodeGgufRef, SyntheticMatrixMatchesGgmlBitForBit) {
  const auto dir = testing::testdata_dir() / "gguf-ref";
  const LoadedFile gguf = load_gguf(dir / "quantized.gguf");
  const LoadedFile expected = load_safetensors(dir / "dequantized.safetensors");
  ASSERT_EQ(gguf.tensors.size(), 23u);
  for (const auto& t : gguf.tensors) {
    EXPECT_EQ(t.name, "ref." + std::string(dtype_name(t.dtype)));
    EXPECT_EQ(t.elements, 64u * 512u);
  }
  EXPECT_EQ(check_against_reference(gguf, expected), 23u);
}

TEST(DecodeGgufRef, Stories260kQ4KMMatchesGgmlBitForBit) {
  const auto dir = testing::testdata_dir() / "gguf-ref";
  const LoadedFile gguf = load_gguf(dir / "stories260K-Q4_K_M.gguf");
  const LoadedFile expected = load_safetensors(dir / "stories260K-Q4_K_M.dequantized.safetensors");
  ASSERT_EQ(gguf.tensors.size(), 48u);
  std::map<DType, int> type_counts;
  for (const auto& t : gguf.tensors) ++type_counts[t.dtype];
  EXPECT_EQ(type_counts[DType::kQ5_0], 29);
  EXPECT_EQ(type_counts[DType::kQ8_0], 3);
  EXPECT_EQ(type_counts[DType::kF16], 5);
  EXPECT_EQ(type_counts[DType::kF32], 11);
  EXPECT_EQ(check_against_reference(gguf, expected), 48u);
}

TEST(DecodeGgufRef, RowByRowDecodingEqualsWholeTensor) {
  // Callers may decode a tensor one row at a time (blocks never cross a row).
  const auto dir = testing::testdata_dir() / "gguf-ref";
  const LoadedFile gguf = load_gguf(dir / "quantized.gguf");
  const StoredTensor* q4k = gguf.find("ref.Q4_K");
  ASSERT_NE(q4k, nullptr);
  std::vector<float> whole(q4k->elements);
  ASSERT_TRUE(decode_to_f32(DType::kQ4_K, q4k->bytes, q4k->elements, whole.data()).ok());
  const uint64_t row_bytes = q4k->bytes.size() / 64;
  std::vector<float> rows(q4k->elements);
  for (uint64_t r = 0; r < 64; ++r) {
    ASSERT_TRUE(decode_to_f32(DType::kQ4_K, q4k->bytes.subspan(r * row_bytes, row_bytes), 512,
                              rows.data() + r * 512)
                    .ok());
  }
  expect_same_bits(rows, whole, "ref.Q4_K by rows");
}

// ---- Which dtypes decode ------------------------------------------------------------------------

TEST(DecodeDispatch, EveryDtypeButComplexDecodes) {
  for (size_t i = 0; i < static_cast<size_t>(DType::kCount); ++i) {
    const auto dtype = static_cast<DType>(i);
    const bool expect_decodable = dtype != DType::kC64;
    EXPECT_EQ(dtype_decodable(dtype), expect_decodable) << dtype_name(dtype);
    const std::string_view reason = dtype_not_decodable_reason(dtype);
    EXPECT_EQ(reason.empty(), expect_decodable) << dtype_name(dtype);
    if (!expect_decodable) {
      EXPECT_NE(reason.find(dtype_name(dtype)), std::string_view::npos) << reason;
    }
  }
  EXPECT_TRUE(dtype_not_decodable_reason(DType::kIQ2_XXS).empty());
}

TEST(DecodeDispatch, OneZeroBlockOfEveryDecodableDtypeMatchesTheDtypeTable) {
  // A zero-filled block decodes to zeros for every type except F8_E8M0, whose zero byte means
  // 2^-127. Decoding exactly one block also proves the decoders agree with the dtype table.
  for (size_t i = 0; i < static_cast<size_t>(DType::kCount); ++i) {
    const auto dtype = static_cast<DType>(i);
    if (!dtype_decodable(dtype)) continue;
    const DTypeInfo& info = dtype_info(dtype);
    std::vector<uint8_t> raw(info.block_bytes, 0);
    std::vector<float> out(info.block_elems, -1.0f);
    const Status status = decode_to_f32(dtype, as_bytes_of(raw), info.block_elems, out.data());
    ASSERT_TRUE(status.ok()) << info.name << ": " << status.to_string();
    for (float v : out) {
      EXPECT_EQ(v, dtype == DType::kF8E8M0 ? 0x1p-127f : 0.0f) << info.name;
    }
  }
}

TEST(DecodeDispatch, NotDecodableTypesAreUnsupportedNotGarbage) {
  std::vector<uint8_t> raw(8, 0);
  float out[1] = {42.0f};
  Status status = decode_to_f32(DType::kC64, as_bytes_of(raw), 1, out);
  EXPECT_EQ(status.code(), StatusCode::kUnsupported);
  EXPECT_NE(status.message().find("C64"), std::string::npos);
  EXPECT_EQ(out[0], 42.0f);

  std::vector<double> wide(1, 42.0);
  status = decode_to_f64(DType::kC64, as_bytes_of(raw), 1, wide.data());
  EXPECT_EQ(status.code(), StatusCode::kUnsupported);
  EXPECT_EQ(wide[0], 42.0);
}

// ---- Scalar types on hand-picked bit patterns --------------------------------------------------

TEST(DecodeScalar, F16AllBitPatternsMatchAnIndependentReference) {
  std::vector<uint8_t> raw(65536 * 2);
  for (uint32_t h = 0; h < 65536; ++h) {
    raw[2 * h] = static_cast<uint8_t>(h & 0xff);
    raw[2 * h + 1] = static_cast<uint8_t>(h >> 8);
  }
  const auto out = decode32(DType::kF16, raw, 65536);
  for (uint32_t h = 0; h < 65536; ++h) {
    const double want = reference_minifloat(h & 0x7fff, 5, 10) * ((h & 0x8000) ? -1.0 : 1.0);
    const uint32_t exponent = (h >> 10) & 0x1f;
    if (exponent == 0x1f) {
      if ((h & 0x3ff) == 0) {
        EXPECT_EQ(out[h], (h & 0x8000) ? -INFINITY : INFINITY) << h;
      } else {
        EXPECT_TRUE(std::isnan(out[h])) << h;
      }
    } else {
      ASSERT_EQ(bits(out[h]), bits(static_cast<float>(want))) << "half 0x" << std::hex << h;
    }
    ASSERT_EQ(bits(f16_to_f32(static_cast<uint16_t>(h))), bits(out[h])) << h;
  }
}

TEST(DecodeScalar, F16HandPickedValues) {
  const auto out = decode32(DType::kF16, bytes_of<uint16_t>({0x0000, 0x8000, 0x0001, 0x03ff, 0x0400, 0x3c00, 0x7bff,
                                                              0x7c00, 0xfc00, 0x7e00, 0x8001, 0xc000}),
                            12);
  EXPECT_EQ(bits(out[0]), 0u);
  EXPECT_EQ(bits(out[1]), 0x80000000u);
  EXPECT_EQ(out[2], 0x1p-24f);
  EXPECT_EQ(out[3], 1023 * 0x1p-24f);
  EXPECT_EQ(out[4], 0x1p-14f);
  EXPECT_EQ(out[5], 1.0f);
  EXPECT_EQ(out[6], 65504.0f);
  EXPECT_EQ(out[7], INFINITY);
  EXPECT_EQ(out[8], -INFINITY);
  EXPECT_TRUE(std::isnan(out[9]));
  EXPECT_EQ(out[10], -0x1p-24f);
  EXPECT_EQ(out[11], -2.0f);
}

TEST(DecodeScalar, Bf16IsTheHighHalfOfFloat32) {
  const auto out = decode32(DType::kBF16, bytes_of<uint16_t>({0x3f80, 0xc0a0, 0xff80, 0x0001, 0x8000, 0x7fc0}), 6);
  EXPECT_EQ(out[0], 1.0f);
  EXPECT_EQ(out[1], -5.0f);
  EXPECT_EQ(out[2], -INFINITY);
  EXPECT_EQ(bits(out[3]), 0x00010000u);  // a float32 subnormal
  EXPECT_EQ(bits(out[4]), 0x80000000u);
  EXPECT_TRUE(std::isnan(out[5]));
  EXPECT_EQ(bf16_to_f32(0x4049), std::bit_cast<float>(0x40490000u));
}

TEST(DecodeScalar, F8E4M3FnHasNoInfinityAndTwoNans) {
  std::vector<uint8_t> raw(256);
  for (uint32_t i = 0; i < 256; ++i) raw[i] = static_cast<uint8_t>(i);
  const auto out = decode32(DType::kF8E4M3, raw, 256);
  for (uint32_t code = 0; code < 256; ++code) {
    if ((code & 0x7f) == 0x7f) {
      EXPECT_TRUE(std::isnan(out[code])) << code;
    } else {
      EXPECT_EQ(bits(out[code]), bits(static_cast<float>(reference_minifloat(code, 4, 3)))) << code;
    }
  }
  EXPECT_EQ(out[0x01], 0x1p-9f);
  EXPECT_EQ(out[0x08], 0x1p-6f);
  EXPECT_EQ(out[0x38], 1.0f);
  EXPECT_EQ(out[0x78], 256.0f);  // the top exponent is finite in the fn variant
  EXPECT_EQ(out[0x7e], 448.0f);
  EXPECT_EQ(out[0xfe], -448.0f);
  EXPECT_EQ(bits(out[0x80]), 0x80000000u);
}

TEST(DecodeScalar, F8E5M2IsIeeeLike) {
  std::vector<uint8_t> raw(256);
  for (uint32_t i = 0; i < 256; ++i) raw[i] = static_cast<uint8_t>(i);
  const auto out = decode32(DType::kF8E5M2, raw, 256);
  for (uint32_t code = 0; code < 256; ++code) {
    // E5M2 is the top byte of an IEEE half.
    const float as_half = f16_to_f32(static_cast<uint16_t>(code << 8));
    if (std::isnan(as_half)) {
      EXPECT_TRUE(std::isnan(out[code])) << code;
    } else {
      EXPECT_EQ(bits(out[code]), bits(as_half)) << code;
    }
  }
  EXPECT_EQ(out[0x01], 0x1p-16f);
  EXPECT_EQ(out[0x3c], 1.0f);
  EXPECT_EQ(out[0x7b], 57344.0f);
  EXPECT_EQ(out[0x7c], INFINITY);
  EXPECT_EQ(out[0xfc], -INFINITY);
  EXPECT_TRUE(std::isnan(out[0x7d]) && std::isnan(out[0x7e]) && std::isnan(out[0xff]));
}

TEST(DecodeScalar, F8E8M0IsAPowerOfTwo) {
  const auto out = decode32(DType::kF8E8M0, {0, 1, 126, 127, 128, 254, 255}, 7);
  EXPECT_EQ(out[0], 0x1p-127f);
  EXPECT_EQ(out[1], 0x1p-126f);
  EXPECT_EQ(out[2], 0.5f);
  EXPECT_EQ(out[3], 1.0f);
  EXPECT_EQ(out[4], 2.0f);
  EXPECT_EQ(out[5], 0x1p127f);
  EXPECT_TRUE(std::isnan(out[6]));
  const auto wide = decode64(DType::kF8E8M0, {0, 254}, 2);
  EXPECT_EQ(wide[0], std::ldexp(1.0, -127));
  EXPECT_EQ(wide[1], std::ldexp(1.0, 127));
}

TEST(DecodeScalar, F4E2M1PacksLowNibbleFirst) {
  std::vector<uint8_t> raw(8);
  for (uint32_t i = 0; i < 8; ++i) raw[i] = static_cast<uint8_t>((2 * i) | ((2 * i + 1) << 4));
  const auto out = decode32(DType::kF4E2M1, raw, 16);
  const float want[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int i = 0; i < 16; ++i) EXPECT_EQ(bits(out[i]), bits(want[i])) << i;
  const auto swapped = decode32(DType::kF4E2M1, {0x71}, 2);
  EXPECT_EQ(swapped[0], 0.5f);
  EXPECT_EQ(swapped[1], 6.0f);
}

/// Packs four 6-bit codes as a little-endian bit stream, first code in the lowest bits.
std::vector<uint8_t> pack_f6(uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
  const uint32_t word = a | (b << 6) | (c << 12) | (d << 18);
  return {static_cast<uint8_t>(word), static_cast<uint8_t>(word >> 8), static_cast<uint8_t>(word >> 16)};
}

TEST(DecodeScalar, F6E2M3AndE3M2) {
  auto out = decode32(DType::kF6E2M3, pack_f6(0x01, 0x08, 0x1f, 0x3f), 4);
  EXPECT_EQ(out[0], 0.125f);  // subnormal: 1/8
  EXPECT_EQ(out[1], 1.0f);
  EXPECT_EQ(out[2], 7.5f);
  EXPECT_EQ(out[3], -7.5f);
  out = decode32(DType::kF6E3M2, pack_f6(0x01, 0x0c, 0x1f, 0x3f), 4);
  EXPECT_EQ(out[0], 0.0625f);
  EXPECT_EQ(out[1], 1.0f);
  EXPECT_EQ(out[2], 28.0f);
  EXPECT_EQ(out[3], -28.0f);
  // Every code of both formats against the ldexp reference, through all four stream positions.
  for (uint32_t code = 0; code < 64; ++code) {
    const auto raw = pack_f6(code, code, code, code);
    const auto e2m3 = decode32(DType::kF6E2M3, raw, 4);
    const auto e3m2 = decode32(DType::kF6E3M2, raw, 4);
    for (int k = 0; k < 4; ++k) {
      EXPECT_EQ(bits(e2m3[k]), bits(static_cast<float>(reference_minifloat(code, 2, 3)))) << code;
      EXPECT_EQ(bits(e3m2[k]), bits(static_cast<float>(reference_minifloat(code, 3, 2)))) << code;
    }
  }
}

TEST(DecodeScalar, IntegersAtTheirExtremesRoundToNearestEven) {
  EXPECT_EQ(decode32(DType::kU8, {0, 255}, 2), (std::vector<float>{0, 255}));
  EXPECT_EQ(decode32(DType::kI8, {0x80, 0x7f}, 2), (std::vector<float>{-128, 127}));
  EXPECT_EQ(decode32(DType::kU16, bytes_of<uint16_t>({65535}), 1), (std::vector<float>{65535}));
  EXPECT_EQ(decode32(DType::kI16, bytes_of<int16_t>({-32768, 32767}), 2), (std::vector<float>{-32768, 32767}));
  const auto i32 = decode32(DType::kI32, bytes_of<int32_t>({INT32_MIN, INT32_MAX, 16777217, 16777219}), 4);
  EXPECT_EQ(i32[0], -0x1p31f);
  EXPECT_EQ(i32[1], 0x1p31f);
  EXPECT_EQ(i32[2], 16777216.0f);  // tie, to even
  EXPECT_EQ(i32[3], 16777220.0f);  // tie, to even
  EXPECT_EQ(decode32(DType::kU32, bytes_of<uint32_t>({UINT32_MAX, 16777217}), 2),
            (std::vector<float>{0x1p32f, 16777216.0f}));
  const auto u64 = decode32(DType::kU64, bytes_of<uint64_t>({UINT64_MAX, (1ull << 63) + (1ull << 39)}), 2);
  EXPECT_EQ(u64[0], 0x1p64f);
  EXPECT_EQ(u64[1], 0x1p63f);  // exactly halfway: to even
  const auto i64 = decode32(DType::kI64, bytes_of<int64_t>({INT64_MIN, INT64_MAX, -3}), 3);
  EXPECT_EQ(i64[0], -0x1p63f);
  EXPECT_EQ(i64[1], 0x1p63f);
  EXPECT_EQ(i64[2], -3.0f);
}

TEST(DecodeScalar, BoolGivesZeroOrOne) {
  EXPECT_EQ(decode32(DType::kBool, {0, 1, 0, 1}, 4), (std::vector<float>{0, 1, 0, 1}));
  EXPECT_EQ(decode64(DType::kBool, {1, 0}, 2), (std::vector<double>{1, 0}));
}

TEST(DecodeScalar, F32AndF64) {
  const auto f32 = decode32(DType::kF32, bytes_of<float>({1.5f, -0.0f, 0x1p-149f, INFINITY}), 4);
  EXPECT_EQ(f32[0], 1.5f);
  EXPECT_EQ(bits(f32[1]), 0x80000000u);
  EXPECT_EQ(f32[2], 0x1p-149f);
  EXPECT_EQ(f32[3], INFINITY);
  const auto narrowed = decode32(DType::kF64, bytes_of<double>({0.1, 1e300, -1e-300, 1.0 + 0x1p-24}), 4);
  EXPECT_EQ(narrowed[0], 0.1f);
  EXPECT_EQ(narrowed[1], INFINITY);
  EXPECT_EQ(bits(narrowed[2]), 0x80000000u);
  EXPECT_EQ(narrowed[3], 1.0f);  // tie, to even
}

TEST(DecodeScalar, DecodeToF64IsExact) {
  EXPECT_EQ(decode64(DType::kI32, bytes_of<int32_t>({INT32_MIN, INT32_MAX, 16777217}), 3),
            (std::vector<double>{-2147483648.0, 2147483647.0, 16777217.0}));
  EXPECT_EQ(decode64(DType::kU32, bytes_of<uint32_t>({UINT32_MAX, 16777217}), 2),
            (std::vector<double>{4294967295.0, 16777217.0}));
  const std::initializer_list<double> doubles = {0.1, -1e300, 5e-324, 1.0 + 0x1p-52};
  const auto f64 = decode64(DType::kF64, bytes_of<double>(doubles), 4);
  EXPECT_EQ(f64, std::vector<double>(doubles));
  EXPECT_EQ(decode64(DType::kI64, bytes_of<int64_t>({1ll << 53, -(1ll << 53)}), 2),
            (std::vector<double>{0x1p53, -0x1p53}));
  EXPECT_EQ(decode64(DType::kF16, bytes_of<uint16_t>({0x0001}), 1), (std::vector<double>{0x1p-24}));
  EXPECT_EQ(decode64(DType::kF32, bytes_of<float>({0.1f}), 1), (std::vector<double>{double{0.1f}}));
}

// ---- Hand-built blocks of types the fixtures lack -------------------------------------------

TEST(DecodeBlocks, MxFp4UsesSplitHalvesAndAPowerOfTwoScale) {
  std::vector<uint8_t> raw(17, 0);
  raw[0] = 127;   // scale 1
  raw[1] = 0x71;  // element 0: code 1 (0.5), element 16: code 7 (6)
  raw[2] = 0xf9;  // element 1: code 9 (-0.5), element 17: code 15 (-6)
  auto out = decode32(DType::kMXFP4, raw, 32);
  EXPECT_EQ(out[0], 0.5f);
  EXPECT_EQ(out[16], 6.0f);
  EXPECT_EQ(out[1], -0.5f);
  EXPECT_EQ(out[17], -6.0f);
  EXPECT_EQ(out[2], 0.0f);
  raw[0] = 0;  // scale 2^-127: 0.5 * 2^-127 is a float subnormal, still exact
  out = decode32(DType::kMXFP4, raw, 32);
  EXPECT_EQ(out[0], 0x1p-128f);
  EXPECT_EQ(out[16], 6 * 0x1p-127f);
  raw[0] = 130;  // scale 8
  out = decode32(DType::kMXFP4, raw, 32);
  EXPECT_EQ(out[17], -48.0f);
}

TEST(DecodeBlocks, Q8KAndQ8_1) {
  std::vector<uint8_t> q8k(292, 0);
  const float d = 0.25f;
  std::memcpy(q8k.data(), &d, 4);
  for (int j = 0; j < 256; ++j) q8k[4 + j] = static_cast<uint8_t>(j - 128);
  auto out = decode32(DType::kQ8_K, q8k, 256);
  for (int j = 0; j < 256; ++j) EXPECT_EQ(out[j], 0.25f * static_cast<float>(static_cast<int8_t>(j - 128))) << j;

  std::vector<uint8_t> q81(36, 0);
  q81[0] = 0x00;  // d = 2.0 (0x4000)
  q81[1] = 0x40;
  q81[2] = 0xff;  // s: ignored
  q81[3] = 0x7b;
  for (int j = 0; j < 32; ++j) q81[4 + j] = static_cast<uint8_t>(j * 8 - 128);
  out = decode32(DType::kQ8_1, q81, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(out[j], 2.0f * static_cast<float>(j * 8 - 128)) << j;
}

// ---- Argument checking -------------------------------------------------------------------------

TEST(DecodeErrors, ElementCountNotAWholeNumberOfBlocks) {
  std::vector<uint8_t> raw(18, 0);
  std::vector<float> out(64);
  Status status = decode_to_f32(DType::kQ4_0, as_bytes_of(raw), 33, out.data());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("Q4_0"), std::string::npos) << status.message();
  status = decode_to_f32(DType::kQ4_K, as_bytes_of(raw), 32, out.data());
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  std::vector<uint8_t> byte(1, 0);
  EXPECT_EQ(decode_to_f32(DType::kF4E2M1, as_bytes_of(byte), 3, out.data()).code(), StatusCode::kInvalidArgument);
  std::vector<uint8_t> three(3, 0);
  EXPECT_EQ(decode_to_f32(DType::kF6E2M3, as_bytes_of(three), 6, out.data()).code(), StatusCode::kInvalidArgument);
  std::vector<double> wide(64);
  EXPECT_EQ(decode_to_f64(DType::kQ8_0, as_bytes_of(raw), 31, wide.data()).code(), StatusCode::kInvalidArgument);
}

TEST(DecodeErrors, SourceSpanOfTheWrongSize) {
  // The vectors are exactly as long as the spans, so AddressSanitizer would catch any overread.
  std::vector<float> out(256);
  for (size_t size : {size_t{0}, size_t{143}, size_t{145}, size_t{288}}) {
    std::vector<uint8_t> raw(size, 0x55);
    const Status status = decode_to_f32(DType::kQ4_K, as_bytes_of(raw), 256, out.data());
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << size;
    EXPECT_NE(status.message().find("144"), std::string::npos) << status.message();
  }
  std::vector<uint8_t> eleven(11, 0);
  std::vector<double> wide(3);
  EXPECT_EQ(decode_to_f64(DType::kF32, as_bytes_of(eleven), 3, wide.data()).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(decode_to_f32(DType::kF16, as_bytes_of(eleven), 5, out.data()).code(), StatusCode::kInvalidArgument);
}

TEST(DecodeErrors, OverflowingSizesNullOutputAndEmptyInput) {
  std::vector<uint8_t> raw(8, 0);
  float one = 0;
  // 2^62 F64 elements would need 2^65 bytes.
  EXPECT_EQ(decode_to_f32(DType::kF64, as_bytes_of(raw), uint64_t{1} << 62, &one).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(decode_to_f32(DType::kF64, as_bytes_of(raw), 1, nullptr).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(decode_to_f32(DType::kQ6_K, {}, 0, nullptr).ok());
  EXPECT_TRUE(decode_to_f64(DType::kQ6_K, {}, 0, nullptr).ok());
  EXPECT_EQ(decode_to_f32(DType::kCount, as_bytes_of(raw), 1, &one).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(dtype_decodable(DType::kCount));
}

}  // namespace
}  // namespace tensormorph
