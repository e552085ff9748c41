// tm.channel_stats@1: the statistics of every row and of every column of a matrix, in one pass.
// Each row's and each column's record is a TM_TileStats. Row sums follow the tile order (the
// halving tree over bit_ceil(cols) slots); column sums a contiguous pairwise tree over
// bit_ceil(rows) row slots, which a pass down the rows builds as it goes (docs/COMPUTE.md).
#pragma once

#include <cstdint>
#include <span>

#include "compute/ops/reference.h"
#include "tensormorph/status.h"

namespace tensormorph::ops {

/// The contiguous pairwise sum of `slots` (a power-of-two count): the sum of the first half plus
/// the sum of the second, recursively. Leaves `slots` unspecified.
double pairwise_sum(std::span<double> slots);

/// Adds finite `v` to the counts and extremes of `s` (not its sums); counts NaN and +-Inf.
void add_to_extremes(TM_TileStats& s, float v);

/// tm.channel_stats@1 as plain code: one record per row in `rows_out`, one per column in `cols_out`.
Status channel_stats_reference(const MatrixView& matrix, std::span<TM_TileStats> rows_out,
                               std::span<TM_TileStats> cols_out);

}  // namespace tensormorph::ops
