// The CPU backend's decode and histogram kernels (tile statistics: tile_stats/tile_stats.h).
#pragma once

#include <cstdint>
#include <span>

#include "compute/ops/reference.h"
#include "tensormorph/status.h"

namespace tensormorph::cpu {

/// tm.decode@1 over oneTBB (at most `max_threads`, 0: all), bit-identical to decode_reference.
Status decode(const ops::TensorView& tensor, std::span<float> out, uint32_t max_threads);

/// tm.histogram@1 over oneTBB, counts identical to histogram_reference.
Status histogram(const ops::TensorView& tensor, double lo, double hi, uint64_t bins, std::span<uint64_t> out,
                 uint32_t max_threads);

}  // namespace tensormorph::cpu
