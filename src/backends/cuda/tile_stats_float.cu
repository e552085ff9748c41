// tm.tile_stats@1 for the float dtypes: F32, F16, BF16, F8_E4M3, F8_E5M2.
#include "backends/cuda/tile_stats_kernel.cuh"

namespace tm_gpu {

cudaError_t launch_tile_rows_float(KernelDType dtype, const TilePlan& plan, const TileJob& job, uint64_t blocks,
                                   cudaStream_t stream) {
  switch (dtype) {
    case KernelDType::kF32: return launch_tile_rows_for<DecF32>(plan, job, blocks, stream);
    case KernelDType::kF16: return launch_tile_rows_for<DecF16>(plan, job, blocks, stream);
    case KernelDType::kBF16: return launch_tile_rows_for<DecBF16>(plan, job, blocks, stream);
    case KernelDType::kF8E4M3:
    case KernelDType::kF8E5M2: return launch_tile_rows_for<DecF8>(plan, job, blocks, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace tm_gpu
