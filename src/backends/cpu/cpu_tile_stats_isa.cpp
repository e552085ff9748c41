// The tile-statistics item kernels, instantiated once per instruction set. The kernel templates
// are always_inline, so each wrapper below compiles them for its own target.
#include "backends/cpu/cpu_tile_stats_kernel.h"
#include "tensormorph/decode.h"

// Instantiations below inline vector-returning helpers; no vector crosses a real call.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace tensormorph::cpu {
namespace {

using tile_kernel::process_decoded;
using tile_kernel::process_direct;

/// decode_to_f32 for the dtypes without a dedicated kernel.
void generic_decode(const ItemSpec& item, KernelScratch& scratch, const std::byte* src, uint64_t blocks, float* out) {
  const uint64_t elems = blocks * item.block_elems;
  Status status = decode_to_f32(item.dtype, std::span<const std::byte>(src, blocks * item.block_bytes), elems, out);
  if (!status.ok()) scratch.fail(std::move(status));
}

#define TM_DEFINE_TILE_KERNELS(PREFIX, TARGET, CVT)                                                          \
  TARGET void PREFIX##_f32(const ItemSpec& item, KernelScratch& scratch) {                               \
    process_direct<simd::F32Source<CVT>>(item, scratch);                                                    \
  }                                                                                                       \
  TARGET void PREFIX##_bf16(const ItemSpec& item, KernelScratch& scratch) {                              \
    process_direct<simd::BF16Source<CVT>>(item, scratch);                                                   \
  }                                                                                                       \
  TARGET void PREFIX##_f16(const ItemSpec& item, KernelScratch& scratch) {                               \
    process_direct<simd::F16Source<CVT>>(item, scratch);                                                    \
  }                                                                                                       \
  TARGET void PREFIX##_q8_0(const ItemSpec& item, KernelScratch& scratch) {                              \
    process_decoded<simd::F32Source<CVT>>(item, scratch, [](const std::byte* src, uint64_t blocks, float* out)                  \
                                       __attribute__((always_inline)) { tile_kernel::decode_q8_0(src, blocks, out); }); \
  }                                                                                                       \
  TARGET void PREFIX##_q4_k(const ItemSpec& item, KernelScratch& scratch) {                              \
    process_decoded<simd::F32Source<CVT>>(item, scratch, [](const std::byte* src, uint64_t blocks, float* out)                  \
                                       __attribute__((always_inline)) { tile_kernel::decode_q4_k(src, blocks, out); }); \
  }                                                                                                       \
  TARGET void PREFIX##_generic(const ItemSpec& item, KernelScratch& scratch) {                           \
    process_decoded<simd::F32Source<CVT>>(item, scratch, [&](const std::byte* src, uint64_t blocks, float* out)                 \
                                       __attribute__((always_inline)) { generic_decode(item, scratch, src, blocks, out); }); \
  }                                                                                                       \
  const TileStatsKernels PREFIX##_kernels = {&PREFIX##_f32,  &PREFIX##_bf16, &PREFIX##_f16,              \
                                             &PREFIX##_q8_0, &PREFIX##_q4_k, &PREFIX##_generic};

#define TM_NO_TARGET
TM_DEFINE_TILE_KERNELS(baseline, TM_NO_TARGET, simd::PortableConvert)
#if TM_CPU_X86_TARGETS
TM_DEFINE_TILE_KERNELS(avx2, TM_TARGET_AVX2, simd::Avx2Convert)
TM_DEFINE_TILE_KERNELS(avx512, TM_TARGET_AVX512, simd::Avx512Convert)
#endif

}  // namespace

const TileStatsKernels& tile_stats_kernels(Isa isa) {
#if TM_CPU_X86_TARGETS
  if (isa == Isa::kAvx512) return avx512_kernels;
  if (isa == Isa::kAvx2) return avx2_kernels;
#else
  (void)isa;
#endif
  return baseline_kernels;
}

}  // namespace tensormorph::cpu
