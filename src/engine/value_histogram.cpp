#include "engine/value_histogram.h"

#include <cmath>
#include <limits>

namespace tensormorph::engine {

std::array<double, 2> value_histogram_bin(uint32_t bin) {
  constexpr uint32_t kShift = 32 - kValueHistogramBits;
  const uint32_t first = bin << kShift;
  const uint32_t last = first | ((uint32_t{1} << kShift) - 1);
  constexpr double kMax = std::numeric_limits<float>::max();
  const auto finite = [](float v) { return std::isfinite(v) ? static_cast<double>(v) : std::copysign(kMax, v); };
  return {finite(ops::value_from_order_key(first)), finite(ops::value_from_order_key(last))};
}

}  // namespace tensormorph::engine
