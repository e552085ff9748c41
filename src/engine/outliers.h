// Where a tensor's extreme values are: the k elements of largest magnitude (tm.top_k@1), with
// their positions in the tensor's matrix view; the statistics of every row and column
// (tm.channel_stats@1); and the outlier channels among them.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "compute/scheduler.h"
#include "engine/tensor_ops.h"
#include "tensormorph/checkpoint.h"

namespace tensormorph::engine {

/// One element of a top-k list.
struct ExtremeValue {
  uint64_t index = 0;  ///< flat, row-major
  uint64_t row = 0;    ///< in the matrix view (engine::as_matrix)
  uint64_t col = 0;
  float value = 0;
};

/// The min(k, finite elements) finite elements of largest |value|, by |value| descending, then by
/// position: one scheduled tm.top_k@1 per band of rows, the bands' lists merged in that order.
Result<std::vector<ExtremeValue>> tensor_top_k(compute::Scheduler& scheduler, const Checkpoint& checkpoint,
                                               const TensorInfo& tensor, uint64_t k, Records* records = nullptr,
                                               uint32_t max_threads = 0);

/// A top-k list as JSON: [{index, row, col, value}].
nlohmann::ordered_json extremes_json(const std::vector<ExtremeValue>& extremes);

/// A top-k list back from extremes_json; nullopt when `j` is not one.
std::optional<std::vector<ExtremeValue>> extremes_from_json(const nlohmann::json& j);

/// Statistics of every row and every column of a tensor's matrix view.
struct ChannelStats {
  std::vector<TM_TileStats> rows, cols;
};

/// tm.channel_stats@1 over the whole matrix (one scheduled operation; a strided view gathered).
Result<ChannelStats> tensor_channel_stats(compute::Scheduler& scheduler, const Checkpoint& checkpoint,
                                          const TensorInfo& tensor, Records* records = nullptr, uint32_t max_threads = 0);

/// A channel's record as JSON: count, finite, min, max, absmax, mean, l2, nan, pos_inf, neg_inf, zeros.
nlohmann::ordered_json channel_json(const TM_TileStats& s);

/// The L2 norm of a channel's finite values: sqrt(sum_sq).
inline double channel_l2(const TM_TileStats& s) { return std::sqrt(s.sum_sq); }

/// What makes a channel an outlier (docs/COMPUTE.md#outlier-channels).
struct OutlierRule {
  /// A channel holding a finite |x| at least this large (LLM.int8's outlier features: 6).
  double magnitude = 6.0;
  /// A channel whose L2 norm's modified z-score 0.6745 (norm - median) / MAD over the axis' norms
  /// is at least this (Iglewicz and Hoaglin: 3.5).
  double robust_z = 3.5;
};

/// One flagged channel.
struct OutlierChannel {
  bool is_row = true;
  uint64_t index = 0;
  double absmax = 0, l2 = 0;
  double z = 0;  ///< the modified z-score of its norm (0 when the norms' MAD is 0)
  bool by_magnitude = false, by_norm = false;
};

/// The rows and columns that meet either rule, rows first, each axis by index.
std::vector<OutlierChannel> outlier_channels(const ChannelStats& stats, const OutlierRule& rule);

/// Flagged channels as JSON: [{axis, index, absmax, l2, robust_z, why: ["magnitude", "norm"]}].
nlohmann::ordered_json outlier_channels_json(const std::vector<OutlierChannel>& channels);

}  // namespace tensormorph::engine
