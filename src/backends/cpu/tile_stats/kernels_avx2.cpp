// Tile-statistics kernels compiled for AVX2 (+F16C).
#include "backends/cpu/tile_stats/kernels.h"

// Instantiations below inline vector-returning helpers; no vector crosses a real call.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace tensormorph::cpu {
#if TM_CPU_X86_TARGETS

namespace {
TM_DEFINE_TILE_KERNELS(avx2, TM_TARGET_AVX2, simd::Avx2Convert)
}  // namespace

/// The avx2 kernel table, chosen by tile_stats_kernels().
const TileStatsKernels& avx2_tile_stats_kernels() { return avx2_kernels; }

#endif

}  // namespace tensormorph::cpu
