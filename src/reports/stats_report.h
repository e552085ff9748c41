// The statistics report (`stats`, the Python API's stats()): each tensor's exact statistics, from
// the index where it holds the tensor, computed where it does not, in the tensor's own domain for
// the types float32 cannot hold.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/tensor_ops.h"
#include "index/index_builder.h"

namespace tensormorph::reports {

/// One tensor's statistics. NaN and ±Inf are counted, never folded into min/max/mean.
struct StatsRow {
  const TensorInfo* tensor = nullptr;
  std::string error;  ///< non-empty when the tensor could not be computed
  uint64_t count = 0, nan = 0, pos_inf = 0, neg_inf = 0, zeros = 0, finite = 0;
  double min = 0, max = 0, absmax = 0, mean = 0, std = 0;
  /// Integer and float64 tensors summarized in their own domain: the extremes as exact numbers.
  std::optional<nlohmann::ordered_json> exact_min, exact_max, exact_absmax;
};

/// Every requested tensor's statistics, with the index of the checkpoint at hand.
class StatsSource {
 public:
  /// `contents`/`report`: the checkpoint's index as brought up to date; operations that run for a
  /// tensor the index lacks append their placement records to `records` (which must outlive this).
  StatsSource(compute::Scheduler& scheduler, const Checkpoint& ckpt, const index::IndexContents& contents,
              const index::IndexReport& report, uint32_t tile, engine::Records& records);

  /// The statistics of `t` (the placement records of what ran for it name it: OpRequest::subject).
  StatsRow stats_of(const TensorInfo& t);

  /// Tensors whose statistics came from the index with no operation run.
  size_t from_index() const { return from_index_; }

 private:
  StatsRow compute(const TensorInfo& t);

  compute::Scheduler& scheduler_;
  const Checkpoint& ckpt_;
  uint32_t tile_;
  engine::Records& records_;
  std::unordered_map<std::string_view, const index::TensorPyramid*> pyramids_;
  std::unordered_map<std::string_view, std::string_view> failed_;
  size_t from_index_ = 0;
};

/// NaN, +Inf and -Inf together.
uint64_t non_finite(const StatsRow& row);

/// The value `stats --sort KEY` orders by, descending (absmax, std, mean, min, max, nan, inf,
/// zeros/sparsity, count/params; 0 for any other key).
double stats_sort_value(const StatsRow& row, const std::string& key);

/// One row of tensormorph.stats/1: name, dtype, shape, count, and the statistics or "error".
nlohmann::ordered_json stats_row_json(const StatsRow& row);

/// The whole tensormorph.stats/1 document: path, tensors, nonfinite_tensors, and with `records`
/// the placements and how many tensors came from the index.
nlohmann::ordered_json stats_document(const Checkpoint& ckpt, const std::vector<StatsRow>& rows,
                                      const engine::Records* records, size_t from_index);

}  // namespace tensormorph::reports
