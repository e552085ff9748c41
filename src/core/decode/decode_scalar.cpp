// Plain scalar dtypes: BOOL, integers, IEEE floats, bfloat16 and the OCP 8/6/4-bit floats.
#include <array>
#include <cstring>
#include <limits>

#include "core/decode/decode_internal.h"
#include "tensormorph/decode.h"

namespace tensormorph {
namespace decode_internal {
namespace {

// ---- Exact tables for the small floats --------------------------------------------------

/// 2^e, exact (every step is a multiplication or division by two).
constexpr double pow2(int e) {
  double v = 1.0;
  for (; e > 0; --e) v *= 2.0;
  for (; e < 0; ++e) v /= 2.0;
  return v;
}

/// How a small float format spends its largest exponent.
enum class TopExponent {
  kFinite,      // no inf/NaN at all (F4_E2M1, F6_E2M3, F6_E3M2)
  kIeee,        // all-ones exponent: inf when the mantissa is 0, NaN otherwise (F8_E5M2)
  kNanOnlyAll,  // finite except sign-less all-ones exponent+mantissa, which is NaN (F8_E4M3FN)
};

/// The value of the `code` bit pattern of a sign/exponent/mantissa format with the given widths.
constexpr double minifloat_value(uint32_t code, int exp_bits, int mant_bits, TopExponent top) {
  const int bias = (1 << (exp_bits - 1)) - 1;
  const uint32_t mant_mask = (1u << mant_bits) - 1;
  const uint32_t exp_max = (1u << exp_bits) - 1;
  const bool negative = ((code >> (exp_bits + mant_bits)) & 1u) != 0;
  const uint32_t exponent = (code >> mant_bits) & exp_max;
  const uint32_t mantissa = code & mant_mask;
  double magnitude = 0.0;
  if (top == TopExponent::kIeee && exponent == exp_max) {
    magnitude = mantissa == 0 ? std::numeric_limits<double>::infinity()
                              : std::numeric_limits<double>::quiet_NaN();
  } else if (top == TopExponent::kNanOnlyAll && exponent == exp_max && mantissa == mant_mask) {
    magnitude = std::numeric_limits<double>::quiet_NaN();
  } else if (exponent == 0) {
    magnitude = static_cast<double>(mantissa) * pow2(1 - bias - mant_bits);
  } else {
    magnitude = static_cast<double>(mantissa + (1u << mant_bits)) *
                pow2(static_cast<int>(exponent) - bias - mant_bits);
  }
  return negative ? -magnitude : magnitude;
}

/// Table of all 2^(1+exp_bits+mant_bits) values of a small float format.
template <size_t N>
constexpr std::array<float, N> minifloat_table(int exp_bits, int mant_bits, TopExponent top) {
  std::array<float, N> table{};
  for (uint32_t code = 0; code < N; ++code) {
    table[code] = static_cast<float>(minifloat_value(code, exp_bits, mant_bits, top));
  }
  return table;
}

/// E8M0: an unsigned power-of-two exponent 2^(e-127); 0xff is NaN. 2^-127 is a float subnormal.
constexpr std::array<float, 256> e8m0_table() {
  std::array<float, 256> table{};
  for (int e = 0; e < 255; ++e) table[static_cast<size_t>(e)] = static_cast<float>(pow2(e - 127));
  table[255] = std::numeric_limits<float>::quiet_NaN();
  return table;
}

constexpr auto kF8E4M3 = minifloat_table<256>(4, 3, TopExponent::kNanOnlyAll);
constexpr auto kF8E5M2 = minifloat_table<256>(5, 2, TopExponent::kIeee);
constexpr auto kF8E8M0 = e8m0_table();
constexpr auto kF4E2M1 = minifloat_table<16>(2, 1, TopExponent::kFinite);
constexpr auto kF6E2M3 = minifloat_table<64>(2, 3, TopExponent::kFinite);
constexpr auto kF6E3M2 = minifloat_table<64>(3, 2, TopExponent::kFinite);

static_assert(kF8E4M3[0x7e] == 448.0f && kF8E4M3[0x01] == 0x1p-9f);
static_assert(kF8E5M2[0x7b] == 57344.0f && kF8E5M2[0x7c] == std::numeric_limits<float>::infinity());
static_assert(kF4E2M1[0x7] == 6.0f && kF4E2M1[0x1] == 0.5f && kF4E2M1[0xf] == -6.0f);
static_assert(kF6E2M3[0x1f] == 7.5f && kF6E3M2[0x1f] == 28.0f && kF6E3M2[0x01] == 0.0625f);
static_assert(kF8E8M0[127] == 1.0f && kF8E8M0[0] == 0x1p-127f);

// ---- Decoders ---------------------------------------------------------------------------

/// out[i] = convert(src, i) for i < n. The fixed-length inner loop lets GCC's default -O2 cost
/// model vectorise without a scalar epilogue; the remainder runs one element at a time.
template <typename Out, typename Convert>
inline void convert_each(const std::byte* __restrict src, uint64_t n, Out* __restrict out, Convert convert) {
  constexpr uint64_t kChunk = 16;
  uint64_t i = 0;
  for (; i + kChunk <= n; i += kChunk) {
    for (uint64_t k = 0; k < kChunk; ++k) out[i + k] = convert(src, i + k);
  }
  for (; i < n; ++i) out[i] = convert(src, i);
}

template <typename Out>
void decode_bool(const std::byte* __restrict src, uint64_t n, Out* __restrict out) {
  convert_each(src, n, out, [](const std::byte* p, uint64_t i) { return p[i] != std::byte{0} ? Out{1} : Out{0}; });
}

// Integer -> float conversion by the compiler rounds to nearest-even, as the API promises.
template <typename Int, typename Out>
void decode_int(const std::byte* __restrict src, uint64_t n, Out* __restrict out) {
  convert_each(src, n, out, [](const std::byte* p, uint64_t i) {
    Int v;
    std::memcpy(&v, p + i * sizeof(Int), sizeof(Int));
    return static_cast<Out>(v);
  });
}

template <typename Out>
void decode_f16(const std::byte* __restrict src, uint64_t n, Out* __restrict out) {
  convert_each(src, n, out, [](const std::byte* p, uint64_t i) {
    return static_cast<Out>(half_bits_to_float(load_u16(p + 2 * i)));
  });
}

template <typename Out>
void decode_bf16(const std::byte* __restrict src, uint64_t n, Out* __restrict out) {
  convert_each(src, n, out, [](const std::byte* p, uint64_t i) {
    return static_cast<Out>(std::bit_cast<float>(static_cast<uint32_t>(load_u16(p + 2 * i)) << 16));
  });
}

template <typename Out>
void decode_f32(const std::byte* __restrict src, uint64_t n, Out* __restrict out) {
  convert_each(src, n, out, [](const std::byte* p, uint64_t i) { return static_cast<Out>(load_f32(p + 4 * i)); });
}

template <typename Out>
void decode_f64(const std::byte* __restrict src, uint64_t n, Out* __restrict out) {
  convert_each(src, n, out, [](const std::byte* p, uint64_t i) {
    double v;
    std::memcpy(&v, p + 8 * i, sizeof v);
    return static_cast<Out>(v);  // float32: IEEE round-to-nearest, overflow to inf
  });
}

template <const std::array<float, 256>& kTable, typename Out>
void decode_byte_table(const std::byte* __restrict src, uint64_t n, Out* __restrict out) {
  for (uint64_t i = 0; i < n; ++i) out[i] = static_cast<Out>(kTable[byte_at(src + i)]);
}

// F4_E2M1 packs two values per byte; the first value is in the low nibble.
template <typename Out>
void decode_f4(const std::byte* __restrict src, uint64_t blocks, Out* __restrict out) {
  for (uint64_t i = 0; i < blocks; ++i) {
    const uint8_t b = byte_at(src + i);
    out[2 * i] = static_cast<Out>(kF4E2M1[b & 0xf]);
    out[2 * i + 1] = static_cast<Out>(kF4E2M1[b >> 4]);
  }
}

// F6 types: assumption (safetensors' F6 spelling is not precisely specified anywhere we could
// find): values form a little-endian bit stream, so 4 values fill 3 bytes read as one 24-bit
// little-endian word, the first value in its lowest 6 bits.
template <const std::array<float, 64>& kTable, typename Out>
void decode_f6(const std::byte* __restrict src, uint64_t blocks, Out* __restrict out) {
  for (uint64_t i = 0; i < blocks; ++i) {
    const std::byte* p = src + 3 * i;
    const uint32_t word = static_cast<uint32_t>(byte_at(p)) | (static_cast<uint32_t>(byte_at(p + 1)) << 8) |
                          (static_cast<uint32_t>(byte_at(p + 2)) << 16);
    for (uint32_t k = 0; k < 4; ++k) out[4 * i + k] = static_cast<Out>(kTable[(word >> (6 * k)) & 0x3f]);
  }
}

template <typename Int>
constexpr BlockDecoder int_decoder() {
  return {1, sizeof(Int), &decode_int<Int, float>, &decode_int<Int, double>};
}

}  // namespace

std::optional<BlockDecoder> find_scalar_decoder(DType dtype) {
  switch (dtype) {
    case DType::kBool: return BlockDecoder{1, 1, &decode_bool<float>, &decode_bool<double>};
    case DType::kU8: return int_decoder<uint8_t>();
    case DType::kI8: return int_decoder<int8_t>();
    case DType::kU16: return int_decoder<uint16_t>();
    case DType::kI16: return int_decoder<int16_t>();
    case DType::kU32: return int_decoder<uint32_t>();
    case DType::kI32: return int_decoder<int32_t>();
    case DType::kU64: return int_decoder<uint64_t>();
    case DType::kI64: return int_decoder<int64_t>();
    case DType::kF16: return BlockDecoder{1, 2, &decode_f16<float>, &decode_f16<double>};
    case DType::kBF16: return BlockDecoder{1, 2, &decode_bf16<float>, &decode_bf16<double>};
    case DType::kF32: return BlockDecoder{1, 4, &decode_f32<float>, &decode_f32<double>};
    case DType::kF64: return BlockDecoder{1, 8, &decode_f64<float>, &decode_f64<double>};
    case DType::kF8E4M3:
      return BlockDecoder{1, 1, &decode_byte_table<kF8E4M3, float>, &decode_byte_table<kF8E4M3, double>};
    case DType::kF8E5M2:
      return BlockDecoder{1, 1, &decode_byte_table<kF8E5M2, float>, &decode_byte_table<kF8E5M2, double>};
    case DType::kF8E8M0:
      return BlockDecoder{1, 1, &decode_byte_table<kF8E8M0, float>, &decode_byte_table<kF8E8M0, double>};
    case DType::kF4E2M1: return BlockDecoder{2, 1, &decode_f4<float>, &decode_f4<double>};
    case DType::kF6E2M3: return BlockDecoder{4, 3, &decode_f6<kF6E2M3, float>, &decode_f6<kF6E2M3, double>};
    case DType::kF6E3M2: return BlockDecoder{4, 3, &decode_f6<kF6E3M2, float>, &decode_f6<kF6E3M2, double>};
    default: return std::nullopt;
  }
}

}  // namespace decode_internal

float f16_to_f32(uint16_t bits) { return decode_internal::half_bits_to_float(bits); }

float bf16_to_f32(uint16_t bits) { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }

}  // namespace tensormorph
