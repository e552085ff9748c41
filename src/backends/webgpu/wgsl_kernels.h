// The WGSL kernels of the WebGPU backend, as source text per (operation, input dtype).
//
// WGSL has no float64 and lets implementations flush float32 denormals and assume no NaN or
// infinity, so every kernel works on float32 *bits* with integer arithmetic: classes, order keys
// and extremes are integer comparisons, the halving sums are an IEEE float64 addition (round to
// nearest even) written in 32-bit integers, and the only float instructions are the decoders'
// multiplies and subtractions of finite, normal values, which every Vulkan, Metal and D3D12
// device rounds as IEEE does.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "tensormorph/dtype.h"

namespace tensormorph::webgpu {

/// The input dtypes the kernels decode.
bool kernel_dtype_supported(DType dtype);

/// Element index -> float32 bits: tm.decode@1 (one invocation per element).
std::string decode_kernel(DType dtype);
/// tm.tile_stats@1, first pass: per (row, tile column), the row's halving sums and its counts.
std::string tile_rows_kernel(DType dtype);
/// tm.tile_stats@1, first pass for T >= kLanesTileMin: per (tile, residue of its rows mod T / 32),
/// the halving levels of 32 rows read by 8 lanes each. One kernel serves T = 32, one every larger T.
std::string tile_lanes_kernel(DType dtype, uint32_t tile);
/// The tiles tile_words_kernel takes.
inline constexpr uint32_t kWordsTileMin = 128;
inline constexpr uint32_t kWordsTileMax = 1024;
/// Values one invocation of the words kernel holds.
inline constexpr uint32_t kWordsValues = 32;
/// tm.tile_stats@1, first pass for F32, F16 and BF16 with kWordsTileMin <= T <= kWordsTileMax:
/// T / V invocations per row, each holding V = `values` (16 or 32) of its values, per (tile, residue
/// of its rows mod words_tile_parts(T, V)) the halving tree over 256 V / T rows. One kernel per dtype
/// serves every T; `aligned` (words_aligned) loads whole words, the other one any 2-byte alignment.
std::string tile_words_kernel(DType dtype, bool aligned, uint32_t values = kWordsValues);
/// Whether every row of a view starts its words at a multiple of 4 bytes.
inline bool words_aligned(uint64_t base_byte, uint64_t row_bytes, uint64_t col_begin, uint64_t elem_bytes) {
  return base_byte % 4 == 0 && row_bytes % 4 == 0 && (col_begin * elem_bytes) % 4 == 0;
}
/// Whether the backend runs tile_words_kernel for `dtype` with tile T (F32 only: see there).
bool words_kernel_takes(DType dtype, uint64_t tile);
/// Partial records per tile after tile_words_kernel (its workgroups' residues): T * T / (256 V).
inline constexpr uint64_t words_tile_parts(uint64_t tile, uint32_t values = kWordsValues) {
  return tile * tile / (256 * values);
}
/// tm.tile_stats@1, second pass: per tile, the halving sums over its S = tile_stats_parts(dtype, T)
/// partial records; TM_TileStats out.
std::string tile_reduce_kernel();

/// Lanes that share one row in tile_lanes_kernel, and rows one of its workgroups covers.
inline constexpr uint32_t kLanesPerRow = 8;
inline constexpr uint32_t kRowsPerGroup = 32;
/// The smallest tile tile_lanes_kernel takes.
inline constexpr uint32_t kLanesTileMin = 32;
/// Partial records per tile the first tile_stats pass writes for `dtype` and tile T.
inline uint64_t tile_stats_parts(DType dtype, uint64_t tile) {
  if (words_kernel_takes(dtype, tile)) return words_tile_parts(tile);
  return tile >= kLanesTileMin ? tile / kRowsPerGroup : tile;
}
/// tm.histogram@1 with bin edges precomputed on the host as float32 order keys.
std::string histogram_kernel(DType dtype);

/// tm.radix_histogram@1: digit counts per prefix row and the four classes, in u32 counters (one
/// chunk of at most 2^31 elements per dispatch; the host adds chunks in 64 bits).
std::string radix_histogram_kernel(DType dtype);

/// tm.subtract@1 for sides of dtypes `a` and `b` staged in one binding (one invocation per pair).
std::string subtract_kernel(DType a, DType b);
/// tm.diff_stats@1 likewise, one workgroup per chunk of 65,536 pairs, kDiffRecordWords per chunk:
/// the eight counts (finite, differing, bits differing, class mismatch, NaN a, NaN b, Inf a,
/// Inf b), the maximum's index in the chunk (0xffffffff: none), its a and b bits, a pad word, then
/// the maximum |a - b| and the five sums as float64 words (low, high).
std::string diff_stats_kernel(DType a, DType b);
inline constexpr uint32_t kDiffRecordWords = 24;

/// tm.channel_stats@1, rows: one workgroup per row of a band, a TM_TileStats (18 words) each.
std::string channel_rows_kernel(DType dtype);
/// tm.channel_stats@1, columns: one invocation per column, a band of rows per dispatch, each
/// column's state between bands in binding 3; a TM_TileStats (18 words) each after the last band.
std::string channel_cols_kernel(DType dtype);

/// Words of one row record the first tile_stats pass writes.
inline constexpr uint32_t kRowRecordWords = 12;

}  // namespace tensormorph::webgpu
