// CPU reference implementations of the core operations: plain scalar code that follows
// docs/COMPUTE.md literally. Every backend is tested bit for bit against these.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

#include "tensormorph/c/plugin.h"
#include "tensormorph/dtype.h"
#include "tensormorph/status.h"

namespace tensormorph::ops {

/// A row-major 2-D tensor in host memory. A quantized row is dtype_storage_bytes(dtype, cols)
/// bytes: blocks never cross rows.
struct MatrixView {
  DType dtype = DType::kF32;
  std::span<const std::byte> bytes;
  uint64_t rows = 0;
  uint64_t cols = 0;
};

/// Any tensor in host memory, as a flat run of `elems` elements.
struct TensorView {
  DType dtype = DType::kF32;
  std::span<const std::byte> bytes;
  uint64_t elems = 0;
};

/// The rectangle [row_begin, row_end) x [col_begin, col_end) of a matrix.
struct ViewRange {
  uint64_t row_begin = 0;
  uint64_t row_end = 0;
  uint64_t col_begin = 0;
  uint64_t col_end = 0;
};

/// Checks that `tensor.bytes` holds exactly the storage of `tensor.elems` elements of a known
/// dtype; INVALID_ARGUMENT naming `op` otherwise.
Status check_tensor_bytes(const char* op, const TensorView& tensor);

/// Number of tiles along each axis of a view.
struct TileGrid {
  uint64_t rows = 0;
  uint64_t cols = 0;
  /// rows * cols.
  uint64_t count() const { return rows * cols; }
};

/// Smallest and largest tile size tm.tile_stats@1 accepts.
inline constexpr uint32_t kMinTile = 8;
inline constexpr uint32_t kMaxTile = 4096;

/// Largest bin count tm.histogram@1 accepts (keeps (bins + 3) * 8 bytes far from overflow).
inline constexpr uint64_t kMaxHistogramBins = uint64_t{1} << 32;

/// Tiles covering `range` with tiles of `tile` elements (ragged edge tiles count).
TileGrid tile_grid(const ViewRange& range, uint32_t tile);

/// Bytes of one row of `cols` elements of `dtype`; INVALID_ARGUMENT when `cols` is not a whole
/// number of blocks or the size overflows.
Result<uint64_t> matrix_row_bytes(DType dtype, uint64_t cols);

/// Checks tm.tile_stats@1's geometry: tile a power of two in [8, 4096], `cols` a whole number
/// of blocks, the matrix size representable, the view inside the matrix. INVALID_ARGUMENT otherwise.
Status check_tile_stats_view(DType dtype, uint64_t rows, uint64_t cols, const ViewRange& range, uint32_t tile);

/// Checks everything tm.tile_stats@1 requires of its arguments: tile a power of two in
/// [8, 4096], the view inside the matrix, `bytes` exactly rows * row_bytes, and `out_tiles`
/// equal to the tile grid's count. INVALID_ARGUMENT otherwise.
Status check_tile_stats_args(const MatrixView& matrix, const ViewRange& range, uint32_t tile,
                             uint64_t out_tiles);

/// Checks tm.histogram@1's parameters: lo < hi both finite, bins in [1, kMaxHistogramBins],
/// bins / (hi - lo) finite, `out_counts` == bins + 3.
Status check_histogram_params(double lo, double hi, uint64_t bins, uint64_t out_counts);

/// Checks tm.histogram@1's arguments: lo < hi both finite, bins in [1, kMaxHistogramBins],
/// bins / (hi - lo) finite, `bytes` exactly the storage of `elems`, `out_counts` == bins + 3.
Status check_histogram_args(const TensorView& tensor, double lo, double hi, uint64_t bins,
                            uint64_t out_counts);

/// The statistics of a tile with no element: zero counts, min +Inf, max -Inf, sums +0.
TM_TileStats empty_tile_stats();

/// The smaller of two finite floats, ordering -0.0 below +0.0 so the answer never depends on
/// the order the values were visited in.
float ordered_min(float a, float b);
/// The larger of two finite floats, ordering +0.0 above -0.0.
float ordered_max(float a, float b);

/// docs/COMPUTE.md's halving_sum over `slots` (a power-of-two count); destroys `slots`.
double halving_sum(std::span<double> slots);

/// tm.tile_stats@1: one TM_TileStats per tile of `range`, row-major over tiles.
Status tile_stats_reference(const MatrixView& matrix, const ViewRange& range, uint32_t tile,
                            std::span<TM_TileStats> out);

/// Adds `from`'s counts to `into` and combines their extremes (-0.0 below +0.0, +0.0 above -0.0);
/// the sums are left to the caller, whose order defines them.
void add_counts_and_extremes(TM_TileStats& into, const TM_TileStats& from);

/// The pyramid's 2x2 merge in the canonical order (top_left + top_right) + (bottom_left +
/// bottom_right); pass empty_tile_stats() for children outside the grid.
TM_TileStats merge_tile_stats(const TM_TileStats& top_left, const TM_TileStats& top_right,
                              const TM_TileStats& bottom_left, const TM_TileStats& bottom_right);

/// The bin of a decoded value under tm.histogram@1's rule: 0..bins-1, or bins (below lo),
/// bins + 1 (above hi), bins + 2 (NaN). `scale` is bins / (hi - lo). Inline so backends share it.
inline uint64_t histogram_slot(float value, double lo, double hi, double scale, uint64_t bins) {
  if (std::isnan(value)) return bins + 2;
  const double v = value;
  if (v < lo) return bins;
  if (v > hi) return bins + 1;
  const double b = std::floor((v - lo) * scale);
  return b >= static_cast<double>(bins) ? bins - 1 : static_cast<uint64_t>(b);
}

/// tm.histogram@1: `bins` counts, then below-lo, above-hi and NaN counts (bins + 3 in all).
Status histogram_reference(const TensorView& tensor, double lo, double hi, uint64_t bins,
                           std::span<uint64_t> out);

/// True for the dtypes tm.exact_summary@1 takes: F64, I32, U32, I64, U64 (the scalar types whose
/// values float32 cannot all hold).
bool exact_summary_supported(DType dtype);

/// tm.exact_summary@1: `tensor`'s statistics in its own domain (see TM_ExactSummary and
/// docs/COMPUTE.md); INVALID_ARGUMENT for another dtype or a byte count that does not match.
Status exact_summary_reference(const TensorView& tensor, TM_ExactSummary* out);

/// Checks tm.decode@1's arguments: `bytes` exactly the storage of `elems`, `out_elems` == elems.
Status check_decode_args(const TensorView& tensor, uint64_t out_elems);

/// tm.decode@1: every element of `tensor` as float32 (decode_to_f32 with size checks).
Status decode_reference(const TensorView& tensor, std::span<float> out);

}  // namespace tensormorph::ops
