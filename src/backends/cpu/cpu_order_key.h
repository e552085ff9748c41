// The monotone integer keys the tile kernels track min/max with (scalar side).
#pragma once

#include <bit>
#include <cstdint>

namespace tensormorph::cpu::simd {

/// The float whose order key is `key`: key = bits ^ ((bits >> 31) & 0x7fffffff) is its own inverse.
inline float float_from_key(int32_t key) {
  const int32_t b = key ^ ((key >> 31) & 0x7fffffff);
  return std::bit_cast<float>(b);
}

/// The key of +Inf; larger keys are +NaN.
inline constexpr int32_t kKeyPosInf = 0x7f800000;
/// The key of -Inf; smaller keys are -NaN.
inline constexpr int32_t kKeyNegInf = static_cast<int32_t>(0xff800000u ^ 0x7fffffffu);

}  // namespace tensormorph::cpu::simd
