// tm.tile_stats@1's last step: each tile's row-block partials merged in the canonical order
// (halving over the blocks' row residues k1), plus the dispatch to the dtype families.
#include "backends/cuda/tile_stats_kernel.cuh"

namespace tm_gpu {

cudaError_t launch_tile_rows_float(KernelDType dtype, const TilePlan& plan, const TileJob& job, uint64_t blocks,
                                   cudaStream_t stream);
cudaError_t launch_tile_rows_ggml(KernelDType dtype, const TilePlan& plan, const TileJob& job, uint64_t blocks,
                                  cudaStream_t stream);

namespace {

/// One warp per tile. Partial p = l + L * j (L = min(K1, 32) lanes): lane l first reduces its
/// partials over j (the high bits of p, so they come first in the halving order), visiting j in
/// bit-reversed order so that a binary-counter stack adds exactly the canonical pairs; the lanes
/// then combine by shuffles xor L/2 ... 1. Neighbouring lanes read neighbouring partials.
__global__ void tile_finalize(TileJob job, uint64_t tiles, TM_TileStats* out) {
  const uint64_t t = (static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kLanes;
  if (t >= tiles) return;  // warp-uniform
  const uint32_t lane = threadIdx.x % kLanes;
  const uint32_t lanes = min(job.partials_per_tile, static_cast<uint32_t>(kLanes));
  const uint32_t per_lane = job.partials_per_tile / lanes;
  const uint32_t log_per_lane = 31 - __clz(per_lane);
  const TilePartial* parts = job.partials + t * job.partials_per_tile;
  double sum = 0.0, sq = 0.0;
  LaneCounts counts = LaneCounts::empty();
  if (lane < lanes) {
    double stack_sum[14], stack_sq[14];
    int depth = 0;
    for (uint32_t i = 0; i < per_lane; ++i) {
      const uint32_t j = log_per_lane == 0 ? 0 : __brev(i) >> (32 - log_per_lane);
      const TilePartial& p = parts[lane + lanes * j];
      stack_sum[depth] = p.sum;
      stack_sq[depth] = p.sum_sq;
      ++depth;
      for (uint32_t bits = i; bits & 1u; bits >>= 1) {
        --depth;
        stack_sum[depth - 1] = stack_sum[depth - 1] + stack_sum[depth];
        stack_sq[depth - 1] = stack_sq[depth - 1] + stack_sq[depth];
      }
      counts.merge({p.nan, p.pos_inf, p.neg_inf, p.zeros, p.min_key, p.max_key, p.absmax_bits});
    }
    sum = stack_sum[0];
    sq = stack_sq[0];
  }
  for (uint32_t m = lanes / 2; m >= 1; m /= 2) {
    sum = sum + shuffle_xor(sum, static_cast<int>(m));
    sq = sq + shuffle_xor(sq, static_cast<int>(m));
  }
  counts.merge_warp();
  if (lane != 0) return;
  const uint64_t tile_row = t / job.tiles_across, tile_col = t % job.tiles_across;
  const uint64_t row0 = tile_row * job.tile, col0 = job.col_begin + tile_col * job.tile;
  const uint64_t rows = min(static_cast<uint64_t>(job.tile), job.view_rows - row0);
  const uint64_t cols = min(static_cast<uint64_t>(job.tile), job.col_end - col0);
  TM_TileStats s;
  s.count = rows * cols;
  s.nan = counts.nan;
  s.pos_inf = counts.pos_inf;
  s.neg_inf = counts.neg_inf;
  s.zeros = counts.zeros;
  s.sum = sum;
  s.sum_sq = sq;
  s.min = __uint_as_float(bits_from_key(counts.min_key));
  s.max = __uint_as_float(bits_from_key(counts.max_key));
  s.absmax = __uint_as_float(counts.absmax);
  s.reserved = 0;
  out[t] = s;
}

}  // namespace

cudaError_t launch_tile_rows(KernelDType dtype, const TilePlan& plan, const TileJob& job, uint64_t partials,
                             cudaStream_t stream) {
  switch (dtype) {
    case KernelDType::kQ8_0:
    case KernelDType::kQ4_0:
    case KernelDType::kQ4_K:
    case KernelDType::kQ6_K: return launch_tile_rows_ggml(dtype, plan, job, partials, stream);
    default: return launch_tile_rows_float(dtype, plan, job, partials, stream);
  }
}

cudaError_t launch_tile_finalize(const TileJob& job, uint64_t tiles, TM_TileStats* out, cudaStream_t stream) {
  constexpr uint64_t kThreads = 128;  // four tiles per block
  const uint64_t grid = (tiles * kLanes + kThreads - 1) / kThreads;
  if (grid > (uint64_t{1} << 31) - 1) return cudaErrorInvalidValue;  // far beyond any real tensor
  if (grid == 0) return cudaSuccess;
  tile_finalize<<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(job, tiles, out);
  return cudaGetLastError();
}

}  // namespace tm_gpu
