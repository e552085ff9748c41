// What the reports share: progress of an analysis over many tensors, and placement records as data.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/ladder.h"
#include "engine/tensor_ops.h"

namespace tensormorph::reports {

/// Progress of an analysis over tensors of unequal cost.
struct AnalysisProgress {
  size_t items_done = 0;   ///< tensors finished
  size_t items_total = 0;  ///< tensors requested
  double work_done = 0;    ///< modelled work finished (drives the fraction and the ETA)
  double work_total = 0;   ///< modelled work requested
  std::string current;     ///< the tensor just finished
  double seconds = 0;      ///< since the analysis started
};

/// Called after each tensor; returning false stops the analysis (Ctrl-C in a notebook).
using ProgressFn = std::function<bool(const AnalysisProgress&)>;

/// Reports an analysis's progress tensor by tensor, each weighted by its stored bytes or its
/// modelled work, and says when the caller asked it to stop.
class TensorProgress {
 public:
  /// `items` tensors of `work_total` work in all; `progress` may be empty.
  TensorProgress(const ProgressFn& progress, size_t items, double work_total);
  /// Reports one more tensor finished, `current`, of `work`; false when the analysis must stop.
  bool finished(double work, const std::string& current);
  /// What a stopped analysis returns: how far it got and what of it is kept (`kept`, in words).
  Status stopped(const std::string& kept) const;

 private:
  const ProgressFn& progress_;
  size_t items_done_ = 0, items_;
  double work_done_ = 0, work_total_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
};

/// The bytes the tensors store, together: the work of analyses that read each tensor once.
double stored_bytes(const std::vector<const TensorInfo*>& tensors);

/// The start of every report's row: {"name", "dtype", "shape"}, with `matrix` also the "rows" and
/// "cols" of the tensor's matrix view.
nlohmann::ordered_json row_head(const TensorInfo& tensor, bool matrix = false);

/// Ends a row that has no result: "error" when `error` is set, else "needs_consent" with the ladder
/// when `plan` is; false (nothing added) for a row with a result.
bool ended_without_result(nlohmann::ordered_json& row, const std::string& error, const engine::LadderPlan* plan);

/// True when `name` matches one of the shell globs (every name when there is none).
bool name_selected(const std::string& name, const std::vector<std::string>& globs);

/// The tensors of `ckpt` whose names match `globs`, in file order; NOT_FOUND naming the patterns
/// when globs were given and match none.
Result<std::vector<const TensorInfo*>> select_tensors(const Checkpoint& ckpt, const std::vector<std::string>& globs);

/// Placement records as a JSON array (each PlacementRecord::to_json).
nlohmann::ordered_json placements_json(const engine::Records& records);

}  // namespace tensormorph::reports
