// Tile-statistics kernels compiled for AVX-512.
#include "backends/cpu/tile_stats/kernels.h"

// Instantiations below inline vector-returning helpers; no vector crosses a real call.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace tensormorph::cpu {
#if TM_CPU_X86_TARGETS

namespace {
TM_DEFINE_TILE_KERNELS(avx512, TM_TARGET_AVX512, simd::Avx512Convert)
}  // namespace

/// The avx512 kernel table, chosen by tile_stats_kernels().
const TileStatsKernels& avx512_tile_stats_kernels() { return avx512_kernels; }

#endif

}  // namespace tensormorph::cpu
