// Launch shapes of the tile_stats kernels and block geometry of the kernel dtypes (host side).
#include <algorithm>

#include "backends/cuda/kernels.h"

namespace tm_gpu {
namespace {

/// Words one lane of the fast kernel may hold: 128 or 256 bytes of raw data (decoded floats for
/// the block types). Must match D::kMaxWords in device_decode.cuh.
uint32_t max_words(KernelDType dtype) {
  switch (dtype) {
    case KernelDType::kF32: return 16;
    case KernelDType::kF16:
    case KernelDType::kBF16: return 16;
    case KernelDType::kF8E4M3:
    case KernelDType::kF8E5M2: return 16;
    default: return 8;
  }
}

constexpr uint32_t kLanes = 32;
constexpr uint32_t kWarps = kTileBlockThreads / kLanes;

}  // namespace

KernelBlock kernel_block(KernelDType dtype) {
  switch (dtype) {
    case KernelDType::kF32: return {1, 4};
    case KernelDType::kF16:
    case KernelDType::kBF16: return {1, 2};
    case KernelDType::kF8E4M3:
    case KernelDType::kF8E5M2: return {1, 1};
    case KernelDType::kQ8_0: return {32, 34};
    case KernelDType::kQ4_0: return {32, 18};
    case KernelDType::kQ4_K: return {256, 144};
    case KernelDType::kQ6_K: return {256, 210};
  }
  return {1, 4};
}

TilePlan plan_tile_stats(KernelDType dtype, uint32_t tile, uint64_t col_begin, bool aligned, bool force_generic) {
  TilePlan plan;
  // Q4_K tiles of whole super-blocks: G = T / 256 lanes per row, one super-block each.
  if (dtype == KernelDType::kQ4_K && aligned && !force_generic && tile % 256 == 0 && tile <= 256 * kLanes &&
      col_begin % 256 == 0) {
    plan.fast = true;
    plan.q4_k_sums = true;
    plan.lanes_per_segment = tile / 256;
    plan.words_per_lane = 64;
    plan.rows_per_block = kLanes / plan.lanes_per_segment;
    plan.block_threads = kTileBlockThreads;
    return plan;
  }
  // Fast path: a row's T slots are G lanes x N words x 4 elements; a warp unit holds S = 32 / G
  // rows of one tile, which must not exceed the tile's T rows.
  uint32_t lanes = std::max<uint32_t>(1, tile / (4 * max_words(dtype)));
  uint32_t words = tile / (4 * lanes);
  while (kLanes / lanes > tile && words > 1) {
    words /= 2;
    lanes *= 2;
  }
  if (aligned && !force_generic && words >= 1 && lanes <= kLanes && kLanes / lanes <= tile) {
    plan.fast = true;
    plan.lanes_per_segment = lanes;
    plan.words_per_lane = words;
    plan.rows_per_block = kLanes / lanes;
    plan.block_threads = kTileBlockThreads;
    return plan;
  }
  // Generic path: L = min(32, T) lanes per row, 32 / L rows per warp, up to 8 warps, R <= T.
  const uint32_t row_lanes = std::min(tile, kLanes);
  const uint32_t rows_per_warp = kLanes / row_lanes;
  const uint32_t warps = std::max<uint32_t>(1, std::min(kWarps, tile / rows_per_warp));
  plan.fast = false;
  plan.lanes_per_segment = row_lanes;
  plan.words_per_lane = 0;
  plan.rows_per_block = warps * rows_per_warp;
  plan.block_threads = warps * kLanes;
  return plan;
}

}  // namespace tm_gpu
