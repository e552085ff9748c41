// The outliers report (`outliers`, the Python API's outliers()): each tensor's k finite values of
// largest magnitude with their row and column, and its outlier rows and columns; both kept beside
// the index.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/outliers.h"
#include "reports/report.h"

namespace tensormorph::reports {

/// What to compute.
struct OutliersRequest {
  std::vector<const TensorInfo*> tensors;  ///< in the order rows are wanted
  uint64_t k = 10;                         ///< values per tensor
  engine::OutlierRule rule;                ///< what makes a row or column an outlier
  bool recompute = false;                  ///< ignore results kept beside the index
  uint32_t threads = 0;                    ///< CPU threads (0: every core)
};

/// One tensor's extremes and outlier channels, or its error.
struct OutliersRow {
  const TensorInfo* tensor = nullptr;
  std::string error;
  std::vector<engine::ExtremeValue> extremes;
  std::vector<engine::OutlierChannel> channels;
};

/// The rows, and whether the results could be kept.
struct OutliersReport {
  std::vector<OutliersRow> rows;
  Status kept;  ///< the top-k lists' save, then the channel statistics'
};

/// Computes every requested tensor's row, reporting progress (stored bytes) after each; stops when
/// `progress` returns false. Fails only when the kept results cannot be opened.
Result<OutliersReport> outliers_report(compute::Scheduler& scheduler, const Checkpoint& ckpt,
                                       const OutliersRequest& request, engine::Records& records,
                                       const ProgressFn& progress = {});

/// The whole tensormorph.outliers/1 document (placements when `records` is given).
nlohmann::ordered_json outliers_document(const Checkpoint& ckpt, const OutliersRequest& request,
                                         const std::vector<OutliersRow>& rows, const engine::Records* records);

}  // namespace tensormorph::reports
