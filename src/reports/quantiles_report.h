// The quantiles report (`quantiles`, the Python API's quantiles()): exact order statistics of each
// tensor's finite values when they fit the budgets, a consented rung of the ladder otherwise (the
// index's value histogram is one), kept beside the index.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/quantile_ladder.h"
#include "engine/quantiles.h"
#include "reports/report.h"

namespace tensormorph::reports {

/// What to compute.
struct QuantilesRequest {
  std::vector<const TensorInfo*> tensors;  ///< in the order rows are wanted
  std::vector<double> probabilities = {0, 0.001, 0.01, 0.5, 0.99, 0.999, 1};
  bool mad = false;        ///< also the median absolute deviation
  std::string consent;     ///< a rung id or "approximate"; "" accepts none
  bool recompute = false;  ///< ignore results kept beside the index
  uint32_t threads = 0;    ///< CPU threads (0: every core)
};

/// One tensor's quantiles, its error, or the ladder it waits on.
struct QuantilesRow {
  const TensorInfo* tensor = nullptr;
  std::string error;
  engine::Quantiles q;
  bool stored = false;                                 ///< read from the results kept beside the index
  std::optional<engine::QuantilePlan> needs_consent;   ///< exact is out of the budgets and no rung was consented to
};

/// The rows, and whether the results could be kept.
struct QuantilesReport {
  std::vector<QuantilesRow> rows;
  Status kept;
};

/// Computes every requested tensor's row, reporting progress (stored bytes) after each; stops when
/// `progress` returns false. Fails only when the kept results cannot be opened.
Result<QuantilesReport> quantiles_report(compute::Scheduler& scheduler, const Checkpoint& ckpt,
                                         const QuantilesRequest& request, engine::Records& records,
                                         const ProgressFn& progress = {});

/// The whole tensormorph.quantiles/1 document (placements when `records` is given).
nlohmann::ordered_json quantiles_document(const Checkpoint& ckpt, const QuantilesRequest& request,
                                          const std::vector<QuantilesRow>& rows, const engine::Records* records);

}  // namespace tensormorph::reports
