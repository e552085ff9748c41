// Comparing two checkpoints tensor by tensor: the matched pairs of tensor_matching.h, each read in
// bands and compared through tm.diff_stats@1 (difference statistics) and tm.subtract@1 (the
// difference a - b itself, for the difference pyramid and quantization error). The converter's
// transforms are undone on the way: a permuted side is read in the other side's row order, and a
// value offset is applied to the side that lacks it, so a faithful conversion compares as equal.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compute/ops/diff_stats.h"
#include "compute/scheduler.h"
#include "engine/diff_ops.h"
#include "engine/pyramid.h"
#include "engine/tensor_matching.h"
#include "engine/tensor_ops.h"

namespace tensormorph::engine {

/// The comparison of one matched pair (a failure to read or decode is kept per tensor).
struct TensorComparison {
  MatchedTensors match;
  TM_DiffStats stats{};       ///< merged over the whole tensor
  ops::DiffMetrics metrics;   ///< derived from `stats`
  std::string error;          ///< non-empty: why this pair could not be compared
};

/// Both sides of some rows of a pair, as the diff operations take them.
struct BandPair {
  MatrixRows a, b;          ///< stored bytes (mapped, or gathered when B's rows are regrouped)
  DiffOperand left, right;  ///< the same bytes with their dtypes and value offsets
};

/// Reads both sides of a matched pair by rows of A's matrix view: B's rows in A's order (undoing a
/// regrouping of rows) and the converter's value offset applied to the side that lacks it.
class PairReader {
 public:
  /// A reader of `match` (whose tensors belong to `a` and `b`, which outlive the reader).
  PairReader(const Checkpoint& a, const Checkpoint& b, const MatchedTensors& match);
  /// A's rows [r0, r1) and the B rows paired with them.
  Result<BandPair> rows(uint64_t r0, uint64_t r1) const;

 private:
  const Checkpoint* a_;
  const Checkpoint* b_;
  MatchedTensors match_;
  std::vector<uint64_t> b_row_;  // b_row_[r]: the B row paired with A's row r (empty: the same)
  double a_offset_ = 0, b_offset_ = 0;
};

/// Called after each band with the stored bytes it read from both sides.
using PairBandDone = std::function<void(uint64_t bytes)>;

/// Difference statistics of one matched pair: one scheduled tm.diff_stats@1 per band of rows
/// (bands start at multiples of TM_DIFF_CHUNK elements, so the merged result does not depend on
/// the band size). Indices refer to A's layout.
Result<TM_DiffStats> compare_tensors(compute::Scheduler& scheduler, const Checkpoint& a, const Checkpoint& b,
                                     const MatchedTensors& match, Records* records = nullptr,
                                     uint32_t max_threads = 0, const PairBandDone& band_done = {});

/// Rows [row_begin, row_end) of a - b in A's matrix view, as float32, through tm.subtract@1.
Result<std::vector<float>> difference_rows(compute::Scheduler& scheduler, const Checkpoint& a, const Checkpoint& b,
                                           const MatchedTensors& match, uint64_t row_begin, uint64_t row_end,
                                           Records* records = nullptr, uint32_t max_threads = 0);

/// Level 0 of the difference pyramid: tile statistics of a - b (tm.subtract@1, then
/// tm.tile_stats@1 on the difference, one band of whole tile rows at a time).
Result<PyramidLevel> difference_tile_stats(compute::Scheduler& scheduler, const Checkpoint& a, const Checkpoint& b,
                                           const MatchedTensors& match, uint32_t tile, Records* records = nullptr,
                                           uint32_t max_threads = 0);

/// Rows per band of the difference statistics of `match`: about 256 MiB of the larger side, each
/// band a whole number of TM_DIFF_CHUNK elements (all rows when that alignment is too coarse).
Result<uint64_t> diff_band_rows(const MatchedTensors& match);

/// INVALID_ARGUMENT when the pair's shapes differ, UNSUPPORTED when a side cannot be decoded.
Status check_pair(const Checkpoint& a, const Checkpoint& b, const MatchedTensors& match);

/// Bytes both sides of `match` store (what a comparison reads).
uint64_t pair_bytes(const MatchedTensors& match);

/// Names of the metrics a comparison reports, in the order tables show them.
const std::vector<std::string>& diff_metric_names();

/// True for the metrics where a smaller value means more change (cosine, snr_db).
bool smaller_is_more_changed(const std::string& metric);

/// How changed a comparison is under `metric`, as a key that sorts most changed first when larger:
/// pairs that could not be compared first, identical pairs last.
double most_changed_key(const TensorComparison& comparison, const std::string& metric);

/// The value of metric `name` (one of diff_metric_names()) of a comparison.
double diff_metric(const TensorComparison& comparison, const std::string& name);

/// A figure as JSON, which has no NaN or infinity: those become the strings "nan", "inf", "-inf".
nlohmann::ordered_json figure_json(double v);

/// A comparison as JSON: names, dtypes, shape, the transform, every metric and the raw counts.
nlohmann::ordered_json comparison_json(const TensorComparison& comparison);

/// The matching as JSON: how names were related, and the one-sided and shape-mismatched tensors.
nlohmann::ordered_json matching_json(const TensorMatching& matching);

}  // namespace tensormorph::engine
