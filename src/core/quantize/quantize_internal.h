// Shared plumbing of the ggml-compatible encoders: the scalar primitives whose exact semantics
// (comparison order, rounding, what an out-of-range conversion yields) decide whether our bytes
// equal ggml's, plus the per-family encoder tables that quantize.cpp dispatches to.
//
// Non-finite inputs: the encoders reproduce what ggml's reference quantizers do when built for
// x86-64 (SSE2 scalar float, no FMA). ggml's MAX/MIN macros and comparisons are mirrored
// operand for operand, because their NaN behaviour is part of the result, and every float ->
// integer conversion goes through cvtt_i32/lround_i64 below, which return the x86 "integer
// indefinite" value for NaN and out-of-range inputs instead of invoking C++ undefined behaviour.
// The bytes are therefore deterministic, but as meaningless as ggml's (NaN/Inf scales, zeroed
// quants); callers that care should screen for non-finite values first.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>

#include "core/decode/decode_internal.h"
#include "core/quantize/quantize.h"
#include "tensormorph/dtype.h"

namespace tensormorph::quantize_internal {

/// Encodes `blocks` whole blocks of `values` into `blocks * block_bytes` bytes at `out`.
using EncodeFn = void (*)(const float* values, uint64_t blocks, std::byte* out);

/// How one dtype's blocks are produced.
struct BlockEncoder {
  uint32_t block_elems = 0;  ///< elements per block, as the encoder assumes
  uint32_t block_bytes = 0;  ///< bytes per block, as the encoder assumes
  EncodeFn encode = nullptr;  ///< the encoder
};

/// Encoder for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0; nullopt for others.
std::optional<BlockEncoder> find_ggml_legacy_encoder(DType dtype);
/// Encoder for Q2_K..Q6_K; nullopt for others.
std::optional<BlockEncoder> find_ggml_kquant_encoder(DType dtype);
/// Encoder for IQ4_NL and IQ4_XS; nullopt for others.
std::optional<BlockEncoder> find_ggml_iq4_encoder(DType dtype);
/// Encoder for TQ1_0 and TQ2_0; nullopt for others.
std::optional<BlockEncoder> find_ggml_ternary_encoder(DType dtype);

/// ggml's MAX(a, b): `a > b ? a : b`, so a NaN in `a` yields `b` and a NaN in `b` yields NaN.
inline float ggml_max(float a, float b) { return a > b ? a : b; }
/// ggml's MIN(a, b): `a < b ? a : b`.
inline float ggml_min(float a, float b) { return a < b ? a : b; }
/// ggml's MAX on ints.
inline int imax(int a, int b) { return a > b ? a : b; }
/// ggml's MIN on ints.
inline int imin(int a, int b) { return a < b ? a : b; }

/// Truncating float -> int32 as x86's cvttss2si does it: INT32_MIN for NaN and out-of-range
/// values. A cast of a float to a narrower integer in ggml compiles to this followed by taking
/// the low bits, which the callers do with a modular integer conversion.
inline int32_t cvtt_i32(float x) {
  if (!(x > -2147483904.0f && x < 2147483648.0f)) return std::numeric_limits<int32_t>::min();
  return static_cast<int32_t>(x);
}

/// lroundf as glibc on x86-64 computes it: half away from zero, INT64_MIN for NaN and
/// out-of-range values.
inline int64_t lround_i64(float x) {
  if (!(x > -9223373136366403584.0f && x < 9223372036854775808.0f)) return std::numeric_limits<int64_t>::min();
  return static_cast<int64_t>(std::round(x));
}

/// ggml's nearest_int: adds 1.5 * 2^23 so the FPU rounds to nearest even, then reads the
/// mantissa. Exact for |x| < 2^22; for larger or non-finite values it yields ggml's garbage.
inline int nearest_int(float x) {
  const float shifted = x + 12582912.0f;
  const int32_t bits = std::bit_cast<int32_t>(shifted);
  return (bits & 0x007fffff) - 0x00400000;
}

/// ggml's "all zero" threshold on a group's largest magnitude.
inline constexpr float kGroupMaxEps = 1e-15f;

/// float -> IEEE half as ggml's scalar GGML_FP32_TO_FP16 (round to nearest even; equal to
/// f32_to_f16 for every bit pattern).
inline uint16_t to_half(float x) { return f32_to_f16(x); }
/// IEEE half -> float, exact.
inline float from_half(uint16_t h) { return decode_internal::half_bits_to_float(h); }

/// Stores a little-endian u16 at `p`.
inline void store_u16(std::byte* p, uint16_t v) { std::memcpy(p, &v, sizeof v); }
/// Stores a little-endian u32 at `p`.
inline void store_u32(std::byte* p, uint32_t v) { std::memcpy(p, &v, sizeof v); }
/// Stores a byte at `p`.
inline void store_u8(std::byte* p, uint32_t v) { *p = static_cast<std::byte>(static_cast<uint8_t>(v)); }

}  // namespace tensormorph::quantize_internal
