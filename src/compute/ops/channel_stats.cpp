#include "compute/ops/channel_stats.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <string>
#include <vector>

#include "tensormorph/decode.h"

namespace tensormorph::ops {

double pairwise_sum(std::span<double> slots) {
  for (size_t step = 1; step < slots.size(); step *= 2) {
    for (size_t i = 0; i + step < slots.size(); i += 2 * step) slots[i] = slots[i] + slots[i + step];
  }
  return slots.empty() ? 0.0 : slots[0];
}

void add_to_extremes(TM_TileStats& s, float v) {
  ++s.count;
  if (std::isnan(v)) {
    ++s.nan;
    return;
  }
  if (std::isinf(v)) {
    ++(v > 0 ? s.pos_inf : s.neg_inf);
    return;
  }
  if (v == 0) ++s.zeros;
  s.min = ordered_min(s.min, v);
  s.max = ordered_max(s.max, v);
  s.absmax = std::max(s.absmax, std::fabs(v));
}

Status channel_stats_reference(const MatrixView& matrix, std::span<TM_TileStats> rows_out,
                               std::span<TM_TileStats> cols_out) {
  TM_ASSIGN_OR_RETURN(const uint64_t row_bytes, matrix_row_bytes(matrix.dtype, matrix.cols));
  if (matrix.bytes.size() != matrix.rows * row_bytes || rows_out.size() != matrix.rows ||
      cols_out.size() != matrix.cols) {
    return Status::InvalidArgument(std::string(TM_OP_CHANNEL_STATS) + ": the matrix, its bytes and the outputs disagree");
  }
  if (!dtype_decodable(matrix.dtype)) return Status::Unsupported(std::string(dtype_not_decodable_reason(matrix.dtype)));
  const uint64_t row_slots = std::bit_ceil(std::max<uint64_t>(matrix.cols, 1));
  const uint64_t col_slots = std::bit_ceil(std::max<uint64_t>(matrix.rows, 1));
  std::vector<double> col_sum(matrix.cols * col_slots, 0.0), col_sq(matrix.cols * col_slots, 0.0);
  std::vector<float> values(matrix.cols);
  std::vector<double> sum(row_slots), sq(row_slots);
  for (TM_TileStats& c : cols_out) c = empty_tile_stats();
  for (uint64_t r = 0; r < matrix.rows; ++r) {
    TM_RETURN_IF_ERROR(decode_to_f32(matrix.dtype, matrix.bytes.subspan(r * row_bytes, row_bytes), matrix.cols, values.data()));
    TM_TileStats s = empty_tile_stats();
    std::fill(sum.begin(), sum.end(), 0.0);
    std::fill(sq.begin(), sq.end(), 0.0);
    for (uint64_t c = 0; c < matrix.cols; ++c) {
      const float v = values[c];
      add_to_extremes(s, v);
      add_to_extremes(cols_out[c], v);
      if (!std::isfinite(v)) continue;
      const double d = v;
      sum[c] = d;
      sq[c] = d * d;
      col_sum[c * col_slots + r] = d;
      col_sq[c * col_slots + r] = d * d;
    }
    s.sum = halving_sum(sum);
    s.sum_sq = halving_sum(sq);
    rows_out[r] = s;
  }
  for (uint64_t c = 0; c < matrix.cols; ++c) {
    cols_out[c].sum = pairwise_sum(std::span(col_sum).subspan(c * col_slots, col_slots));
    cols_out[c].sum_sq = pairwise_sum(std::span(col_sq).subspan(c * col_slots, col_slots));
  }
  return Status::Ok();
}

}  // namespace tensormorph::ops
