// The reference tm.tile_stats@1: one tile at a time, one row at a time, scalar, in the
// canonical summation order of docs/COMPUTE.md.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "compute/ops/reference.h"
#include "tensormorph/decode.h"

namespace tensormorph::ops {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::string range_text(const ViewRange& r) {
  return "[" + std::to_string(r.row_begin) + ", " + std::to_string(r.row_end) + ") x [" +
         std::to_string(r.col_begin) + ", " + std::to_string(r.col_end) + ")";
}

/// Decodes columns [col_begin, col_end) of row `row`: the covering blocks, then the slice.
Status decode_columns(const MatrixView& matrix, uint64_t row_bytes, uint64_t row, uint64_t col_begin,
                      uint64_t col_end, std::vector<float>& scratch, std::span<const float>& values) {
  const DTypeInfo& info = dtype_info(matrix.dtype);
  const uint64_t first_block = col_begin / info.block_elems;
  const uint64_t end_block = (col_end + info.block_elems - 1) / info.block_elems;
  const uint64_t elems = (end_block - first_block) * info.block_elems;
  const uint64_t offset = row * row_bytes + first_block * info.block_bytes;
  scratch.resize(elems);
  TM_RETURN_IF_ERROR(decode_to_f32(matrix.dtype, matrix.bytes.subspan(offset, (end_block - first_block) * info.block_bytes),
                                   elems, scratch.data()));
  values = std::span<const float>(scratch).subspan(col_begin - first_block * info.block_elems, col_end - col_begin);
  return Status::Ok();
}

}  // namespace

TileGrid tile_grid(const ViewRange& range, uint32_t tile) {
  if (tile == 0 || range.row_end < range.row_begin || range.col_end < range.col_begin) return {};
  return {(range.row_end - range.row_begin + tile - 1) / tile, (range.col_end - range.col_begin + tile - 1) / tile};
}

Result<uint64_t> matrix_row_bytes(DType dtype, uint64_t cols) {
  auto bytes = dtype_storage_bytes(dtype, cols);
  if (!bytes.ok()) return Status::InvalidArgument("a row of " + bytes.status().message());
  return *bytes;
}

Status check_tile_stats_view(DType dtype, uint64_t rows, uint64_t cols, const ViewRange& range, uint32_t tile) {
  if (static_cast<size_t>(dtype) >= static_cast<size_t>(DType::kCount)) {
    return Status::InvalidArgument("tile_stats: unknown dtype value " + std::to_string(static_cast<int>(dtype)));
  }
  if (tile < kMinTile || tile > kMaxTile || !std::has_single_bit(tile)) {
    return Status::InvalidArgument("tile_stats: tile " + std::to_string(tile) + " is not a power of two in [" +
                                   std::to_string(kMinTile) + ", " + std::to_string(kMaxTile) + "]");
  }
  if (range.row_begin > range.row_end || range.row_end > rows || range.col_begin > range.col_end ||
      range.col_end > cols) {
    return Status::InvalidArgument("tile_stats: view " + range_text(range) + " is not inside the " +
                                   std::to_string(rows) + " x " + std::to_string(cols) + " matrix");
  }
  TM_ASSIGN_OR_RETURN(const uint64_t row_bytes, matrix_row_bytes(dtype, cols));
  uint64_t total = 0;
  if (__builtin_mul_overflow(row_bytes, rows, &total)) {
    return Status::InvalidArgument("tile_stats: the byte size of a " + std::to_string(rows) + " x " +
                                   std::to_string(cols) + " matrix overflows 64 bits");
  }
  return Status::Ok();
}

Status check_tile_stats_args(const MatrixView& matrix, const ViewRange& range, uint32_t tile,
                             uint64_t out_tiles) {
  TM_RETURN_IF_ERROR(check_tile_stats_view(matrix.dtype, matrix.rows, matrix.cols, range, tile));
  const uint64_t total = *matrix_row_bytes(matrix.dtype, matrix.cols) * matrix.rows;
  if (matrix.bytes.size() != total) {
    return Status::InvalidArgument("tile_stats: a " + std::to_string(matrix.rows) + " x " +
                                   std::to_string(matrix.cols) + " " + std::string(dtype_name(matrix.dtype)) +
                                   " matrix takes " + std::to_string(total) + " bytes, but " +
                                   std::to_string(matrix.bytes.size()) + " were given");
  }
  const TileGrid grid = tile_grid(range, tile);
  if (out_tiles != grid.count()) {
    return Status::InvalidArgument("tile_stats: the view " + range_text(range) + " has " + std::to_string(grid.rows) +
                                   " x " + std::to_string(grid.cols) + " tiles of " + std::to_string(tile) +
                                   ", but the output holds " + std::to_string(out_tiles));
  }
  return Status::Ok();
}

TM_TileStats empty_tile_stats() {
  TM_TileStats s{};
  s.min = kInf;
  s.max = -kInf;
  return s;
}

float ordered_min(float a, float b) {
  if (a < b) return a;
  if (b < a) return b;
  return std::signbit(a) ? a : b;
}

float ordered_max(float a, float b) {
  if (a > b) return a;
  if (b > a) return b;
  return std::signbit(a) ? b : a;
}

double halving_sum(std::span<double> slots) {
  for (size_t p = slots.size(); p > 1;) {
    p /= 2;
    for (size_t i = 0; i < p; ++i) slots[i] = slots[i] + slots[i + p];
  }
  return slots.empty() ? 0.0 : slots[0];
}

Status tile_stats_reference(const MatrixView& matrix, const ViewRange& range, uint32_t tile,
                            std::span<TM_TileStats> out) {
  TM_RETURN_IF_ERROR(check_tile_stats_args(matrix, range, tile, out.size()));
  if (!dtype_decodable(matrix.dtype)) return Status::Unsupported(std::string(dtype_not_decodable_reason(matrix.dtype)));
  TM_ASSIGN_OR_RETURN(const uint64_t row_bytes, matrix_row_bytes(matrix.dtype, matrix.cols));
  const TileGrid grid = tile_grid(range, tile);
  std::vector<float> scratch;
  std::vector<double> slots(tile), squares(tile), row_sums(tile), row_squares(tile);
  for (uint64_t ti = 0; ti < grid.rows; ++ti) {
    const uint64_t row_begin = range.row_begin + ti * tile;
    const uint64_t row_end = std::min<uint64_t>(row_begin + tile, range.row_end);
    for (uint64_t tj = 0; tj < grid.cols; ++tj) {
      const uint64_t col_begin = range.col_begin + tj * tile;
      const uint64_t col_end = std::min<uint64_t>(col_begin + tile, range.col_end);
      TM_TileStats s = empty_tile_stats();
      std::fill(row_sums.begin(), row_sums.end(), 0.0);
      std::fill(row_squares.begin(), row_squares.end(), 0.0);
      for (uint64_t r = row_begin; r < row_end; ++r) {
        std::span<const float> values;
        TM_RETURN_IF_ERROR(decode_columns(matrix, row_bytes, r, col_begin, col_end, scratch, values));
        std::fill(slots.begin(), slots.end(), 0.0);
        std::fill(squares.begin(), squares.end(), 0.0);
        for (size_t k = 0; k < values.size(); ++k) {
          const float v = values[k];
          ++s.count;
          if (std::isnan(v)) {
            ++s.nan;
            continue;
          }
          if (std::isinf(v)) {
            ++(v > 0 ? s.pos_inf : s.neg_inf);
            continue;
          }
          if (v == 0.0f) ++s.zeros;
          s.min = ordered_min(s.min, v);
          s.max = ordered_max(s.max, v);
          s.absmax = std::max(s.absmax, std::fabs(v));
          const double wide = v;
          slots[k] = wide;
          squares[k] = wide * wide;
        }
        row_sums[r - row_begin] = halving_sum(slots);
        row_squares[r - row_begin] = halving_sum(squares);
      }
      s.sum = halving_sum(row_sums);
      s.sum_sq = halving_sum(row_squares);
      out[ti * grid.cols + tj] = s;
    }
  }
  return Status::Ok();
}

void add_counts_and_extremes(TM_TileStats& into, const TM_TileStats& from) {
  into.count += from.count;
  into.nan += from.nan;
  into.pos_inf += from.pos_inf;
  into.neg_inf += from.neg_inf;
  into.zeros += from.zeros;
  into.min = ordered_min(into.min, from.min);
  into.max = ordered_max(into.max, from.max);
  into.absmax = std::max(into.absmax, from.absmax);
}

TM_TileStats merge_tile_stats(const TM_TileStats& top_left, const TM_TileStats& top_right,
                              const TM_TileStats& bottom_left, const TM_TileStats& bottom_right) {
  TM_TileStats m = empty_tile_stats();
  for (const TM_TileStats* c : {&top_left, &top_right, &bottom_left, &bottom_right}) add_counts_and_extremes(m, *c);
  m.sum = (top_left.sum + top_right.sum) + (bottom_left.sum + bottom_right.sum);
  m.sum_sq = (top_left.sum_sq + top_right.sum_sq) + (bottom_left.sum_sq + bottom_right.sum_sq);
  return m;
}

}  // namespace tensormorph::ops
