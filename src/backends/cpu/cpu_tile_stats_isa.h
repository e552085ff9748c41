// The tile-statistics item kernels as a macro that one translation unit per instruction set
// expands (cpu_tile_stats_isa_*.cpp): the kernel templates are always_inline, so each expansion
// compiles them for its own target, and the instruction sets compile in parallel.
#pragma once

#include "backends/cpu/cpu_tile_stats_kernel.h"
#include "backends/cpu/cpu_tile_stats_q4_k.h"
#include "backends/cpu/cpu_tile_stats_q8_0.h"
#include "tensormorph/decode.h"

namespace tensormorph::cpu::tile_kernel {

/// decode_to_f32 for the dtypes without a dedicated kernel.
inline void generic_decode(const ItemSpec& item, KernelScratch& scratch, const std::byte* src, uint64_t blocks, float* out) {
  const uint64_t elems = blocks * item.block_elems;
  Status status = decode_to_f32(item.dtype, std::span<const std::byte>(src, blocks * item.block_bytes), elems, out);
  if (!status.ok()) scratch.fail(std::move(status));
}

}  // namespace tensormorph::cpu::tile_kernel

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
  const TileStatsKernels PREFIX##_kernels = {&PREFIX##_f32,  &PREFIX##_bf16, &PREFIX##_f16,              \
                                             &PREFIX##_q8_0, &PREFIX##_q4_k, &PREFIX##_generic};
