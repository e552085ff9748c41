// The channels report (`channels`, the Python API's channels()): the statistics of every row or
// column of each tensor's matrix view, kept beside the index.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "reports/report.h"

namespace tensormorph::reports {

/// What to compute.
struct ChannelsRequest {
  std::vector<const TensorInfo*> tensors;  ///< in the order rows are wanted
  bool rows = true;                        ///< rows, else columns
  bool recompute = false;                  ///< ignore results kept beside the index
  uint32_t threads = 0;                    ///< CPU threads (0: every core)
};

/// One tensor's channel statistics, or its error.
struct ChannelsRow {
  const TensorInfo* tensor = nullptr;
  std::string error;
  std::vector<TM_TileStats> channels;  ///< in index order
};

/// The rows, and whether the results could be kept.
struct ChannelsReport {
  std::vector<ChannelsRow> rows;
  Status kept;
};

/// Computes every requested tensor's row, reporting progress (stored bytes) after each; stops when
/// `progress` returns false. Fails only when the kept results cannot be opened.
Result<ChannelsReport> channels_report(compute::Scheduler& scheduler, const Checkpoint& ckpt,
                                       const ChannelsRequest& request, engine::Records& records,
                                       const ProgressFn& progress = {});

/// The whole tensormorph.channels/1 document (placements when `records` is given).
nlohmann::ordered_json channels_document(const Checkpoint& ckpt, const ChannelsRequest& request,
                                         const std::vector<ChannelsRow>& rows, const engine::Records* records);

}  // namespace tensormorph::reports
