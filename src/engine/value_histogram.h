// The compact histogram of a tensor's finite values the index keeps beside its pyramid: counts by
// the top 12 bits of the float32 value order key (sign, exponent, three mantissa bits), so bins are
// log-spaced, 1/8 of a power of two wide, for both signs. Counted by tm.radix_histogram@1 on the
// bands the index reads anyway; approximate quantiles read it without touching the data.
#pragma once

#include <array>
#include <cstdint>

#include "compute/ops/radix_histogram.h"

namespace tensormorph::engine {

/// Key bits per bin index.
inline constexpr uint32_t kValueHistogramBits = 12;
/// Bins of the histogram (finite values only; NaN and infinities are the pyramid's counts).
inline constexpr uint64_t kValueHistogramBins = uint64_t{1} << kValueHistogramBits;

/// The tm.radix_histogram@1 parameters that count it (value key, no prefixes).
inline ops::RadixParams value_histogram_params() {
  ops::RadixParams p;
  p.key = ops::RadixKey::kValue;
  p.shift = 32 - kValueHistogramBits;
  p.bits = kValueHistogramBits;
  return p;
}

/// The finite float32 values bin `bin` holds, [lower, upper], both inclusive (empty bins of NaN
/// keys clamp to the largest finite magnitude).
std::array<double, 2> value_histogram_bin(uint32_t bin);

}  // namespace tensormorph::engine
