// The tile-statistics item kernels as a macro that one translation unit per instruction set
// expands (cpu_tile_stats_isa_*.cpp): the kernel templates are always_inline, so each expansion
// compiles them for its own target, and the instruction sets compile in parallel.
#pragma once

#include "backends/cpu/cpu_tile_stats_kernel.h"
#include "backends/cpu/cpu_tile_stats_q4_k.h"
#include "backends/cpu/cpu_tile_stats_q8_0.h"
#include "compute/ops/reference.h"
#include "tensormorph/decode.h"

// See cpu_simd.h: vectors only travel between always_inline functions.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace tensormorph::cpu::tile_kernel {

/// ops::halving_sum over `count` (a power of two) slots in place, the levels wider than a vector
/// in vectors (each level's additions are independent, so any grouping of them gives its bits),
/// the last ones by ops::halving_sum itself.
TM_CPU_INLINE double halving_slots(double* slots, uint64_t count) {
  for (; count > simd::kLanes; count /= 2) {
    const uint64_t half = count / 2;
    for (uint64_t i = 0; i < half; i += simd::kLanes) {
      simd::store(slots + i, simd::load<simd::f64x8>(slots + i) + simd::load<simd::f64x8>(slots + i + half));
    }
  }
  return ops::halving_sum(std::span<double>(slots, count));
}

/// decode_to_f32 for the dtypes without a dedicated kernel.
inline void generic_decode(const ItemSpec& item, KernelScratch& scratch, const std::byte* src, uint64_t blocks, float* out) {
  const uint64_t elems = blocks * item.block_elems;
  Status status = decode_to_f32(item.dtype, std::span<const std::byte>(src, blocks * item.block_bytes), elems, out);
  if (!status.ok()) scratch.fail(std::move(status));
}

}  // namespace tensormorph::cpu::tile_kernel

#pragma GCC diagnostic pop

/// Defines PREFIX_kernels: the item kernels compiled with function attribute TARGET and converter CVT.
#define TM_DEFINE_TILE_KERNELS(PREFIX, TARGET, CVT)                                                          \
  TARGET void PREFIX##_f32(const ItemSpec& item, KernelScratch& scratch) {                               \
    tile_kernel::process_direct<simd::F32Source<CVT>>(item, scratch);                                                    \
  }                                                                                                       \
  TARGET void PREFIX##_bf16(const ItemSpec& item, KernelScratch& scratch) {                              \
    tile_kernel::process_direct<simd::BF16Source<CVT>>(item, scratch);                                                   \
  }                                                                                                       \
  TARGET void PREFIX##_f16(const ItemSpec& item, KernelScratch& scratch) {                               \
    tile_kernel::process_direct<simd::F16Source<CVT>>(item, scratch);                                                    \
  }                                                                                                       \
  TARGET void PREFIX##_q8_0(const ItemSpec& item, KernelScratch& scratch) {                              \
    tile_kernel::process_q8_0<simd::F32Source<CVT>>(item, scratch);                                       \
  }                                                                                                       \
  TARGET void PREFIX##_q4_k(const ItemSpec& item, KernelScratch& scratch) {                              \
    tile_kernel::process_q4_k<simd::F32Source<CVT>>(item, scratch);                                       \
  }                                                                                                       \
  TARGET void PREFIX##_generic(const ItemSpec& item, KernelScratch& scratch) {                           \
    tile_kernel::process_decoded<simd::F32Source<CVT>>(item, scratch, [&](const std::byte* src, uint64_t blocks, float* out)                 \
                                       __attribute__((always_inline)) { tile_kernel::generic_decode(item, scratch, src, blocks, out); }); \
  }                                                                                                       \
  TARGET double PREFIX##_halving(double* slots, uint64_t count) { return tile_kernel::halving_slots(slots, count); } \
  const TileStatsKernels PREFIX##_kernels = {&PREFIX##_f32,  &PREFIX##_bf16, &PREFIX##_f16,              \
                                             &PREFIX##_q8_0, &PREFIX##_q4_k, &PREFIX##_generic,          \
                                             &PREFIX##_halving};
