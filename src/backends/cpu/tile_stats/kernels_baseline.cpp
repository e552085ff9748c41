// Tile-statistics kernels for the baseline instruction set, and the choice of kernel table by
// instruction set.
#include "backends/cpu/tile_stats/kernels.h"

// Instantiations below inline vector-returning helpers; no vector crosses a real call.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace tensormorph::cpu {

#if TM_CPU_X86_TARGETS
/// The AVX2 kernel table (kernels_avx2.cpp).
const TileStatsKernels& avx2_tile_stats_kernels();
/// The AVX-512 kernel table (kernels_avx512.cpp).
const TileStatsKernels& avx512_tile_stats_kernels();
#endif

namespace {
#define TM_NO_TARGET
TM_DEFINE_TILE_KERNELS(baseline, TM_NO_TARGET, simd::PortableConvert)
}  // namespace

const TileStatsKernels& tile_stats_kernels(Isa isa) {
#if TM_CPU_X86_TARGETS
  if (isa == Isa::kAvx512) return avx512_tile_stats_kernels();
  if (isa == Isa::kAvx2) return avx2_tile_stats_kernels();
#else
  (void)isa;
#endif
  return baseline_kernels;
}

}  // namespace tensormorph::cpu
