// tm.radix_histogram@1: counts of one digit of the elements' order keys, among the elements whose
// higher key bits equal one of a few prefixes. Order statistics (quantiles, the median absolute
// deviation, the k-th largest magnitude) are found by radix selection: a pass over the top digit
// says which bucket holds the wanted rank, a pass over the next digit among that bucket's elements
// narrows it, and so on until the key, and so the element, is known. Every count is an integer,
// so every backend returns the same answer bit for bit, and the host-side selection is the same
// code whichever backend counted.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <span>

#include "compute/ops/reference.h"
#include "tensormorph/c/plugin.h"
#include "tensormorph/status.h"

namespace tensormorph::ops {

/// Which order key tm.radix_histogram@1 counts (a TM_RADIX_KEY_* value).
enum class RadixKey : uint8_t {
  kValue = TM_RADIX_KEY_VALUE,          ///< 32 bits, orders the value (-0 below +0)
  kMagnitude = TM_RADIX_KEY_MAGNITUDE,  ///< 32 bits, orders |value|
  kDeviation = TM_RADIX_KEY_DEVIATION,  ///< 64 bits, orders |double(value) - center|
};

/// Bits in a key of `key`.
inline uint32_t radix_key_bits(RadixKey key) { return key == RadixKey::kDeviation ? 64 : 32; }

/// The order key of a finite float: unsigned comparison of keys is the order of the values, with
/// -0.0 below +0.0.
inline uint32_t value_order_key(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

/// The float whose value_order_key is `key`.
inline float value_from_order_key(uint32_t key) {
  return std::bit_cast<float>((key & 0x80000000u) ? (key & 0x7fffffffu) : ~key);
}

/// The magnitude key of a finite float: the bits of |x|.
inline uint32_t magnitude_key(float x) { return std::bit_cast<uint32_t>(x) & 0x7fffffffu; }

/// The deviation key of a finite float: the bits of the float64 |double(x) - center| (a
/// non-negative double, whose bits order it).
inline uint64_t deviation_key(float x, double center) {
  return std::bit_cast<uint64_t>(std::fabs(static_cast<double>(x) - center));
}

/// What one tm.radix_histogram@1 instance counts.
struct RadixParams {
  RadixKey key = RadixKey::kValue;
  uint32_t shift = 0;   ///< lowest bit of the digit
  uint32_t bits = 16;   ///< digit width, 1..TM_RADIX_MAX_BITS
  double center = 0;    ///< of the deviation key
};

/// The key of finite `x` under `params` (as 64 bits).
inline uint64_t radix_key(float x, const RadixParams& params) {
  switch (params.key) {
    case RadixKey::kValue: return value_order_key(x);
    case RadixKey::kMagnitude: return magnitude_key(x);
    case RadixKey::kDeviation: return deviation_key(x, params.center);
  }
  return 0;
}

/// Slots of tm.radix_histogram@1's second output: finite, NaN, +Inf and -Inf counts.
inline constexpr size_t kRadixClasses = 4;

/// Checks the parameters against each other and the prefix count: shift + bits within the key,
/// prefixes only below a digit that leaves higher bits, at most TM_RADIX_MAX_PREFIXES, the centre
/// finite. INVALID_ARGUMENT naming what is wrong.
Status check_radix_params(const RadixParams& params, uint64_t prefixes);

/// Counts the output holds: max(prefixes, 1) * 2^bits.
uint64_t radix_count_slots(const RadixParams& params, uint64_t prefixes);

/// tm.radix_histogram@1 as plain scalar code: `counts` (radix_count_slots of them) and `classes`.
Status radix_histogram_reference(const TensorView& tensor, const RadixParams& params,
                                 std::span<const uint64_t> prefixes, std::span<uint64_t> counts,
                                 std::span<uint64_t, kRadixClasses> classes);

}  // namespace tensormorph::ops
