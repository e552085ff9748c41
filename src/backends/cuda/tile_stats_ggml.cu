// tm.tile_stats@1 for the ggml block types: Q8_0, Q4_0, Q4_K, Q6_K, decoded in registers.
#include "backends/cuda/tile_stats_kernel.cuh"

namespace tm_gpu {

cudaError_t launch_tile_rows_ggml(KernelDType dtype, const TilePlan& plan, const TileJob& job, uint64_t blocks,
                                  cudaStream_t stream) {
  switch (dtype) {
    case KernelDType::kQ8_0: return launch_tile_rows_for<DecQ8_0>(plan, job, blocks, stream);
    case KernelDType::kQ4_0: return launch_tile_rows_for<DecQ4_0>(plan, job, blocks, stream);
    case KernelDType::kQ4_K:
      if (plan.q4_k_sums) return launch_tile_rows_q4_k(plan, job, blocks, stream);
      return launch_tile_rows_for<DecQ4_K>(plan, job, blocks, stream);
    case KernelDType::kQ6_K: return launch_tile_rows_for<DecQ6_K>(plan, job, blocks, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace tm_gpu
