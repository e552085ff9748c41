// The diff report (`diff A B`, the Python API's diff()): two checkpoints' tensors matched by name
// (or through llama.cpp's converter names, or a user's map), each pair compared, most changed first.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/checkpoint_diff.h"
#include "reports/report.h"

namespace tensormorph::reports {

/// What to compare.
struct DiffRequest {
  std::vector<std::string> globs;  ///< only pairs with a name (on either side) matching one of them
  std::string sort = "rel_fro";    ///< a diff_metric_names() entry: most changed first by it
  std::string map_file;            ///< "NAME_IN_A NAME_IN_B" lines pairing tensors by hand ("" = none)
  uint32_t threads = 0;            ///< CPU threads (0: every core)
};

/// The matching and every matched pair's comparison, most changed first.
struct DiffReport {
  engine::TensorMatching matching;
  std::vector<engine::TensorComparison> comparisons;  ///< sorted by request.sort, most changed first
};

/// Matches and compares; progress counts both sides' bytes. INVALID_ARGUMENT for an unknown sort
/// metric, NOT_FOUND when globs match no tensor of either side; a pair's failure is its error.
Result<DiffReport> diff_report(compute::Scheduler& scheduler, const Checkpoint& a, const Checkpoint& b,
                               const DiffRequest& request, engine::Records& records, const ProgressFn& progress = {});

/// The whole tensormorph.diff/1 document (without a gate; placements when `records` is given).
nlohmann::ordered_json diff_document(const Checkpoint& a, const Checkpoint& b, const DiffRequest& request,
                                     const DiffReport& report, const engine::Records* records);

}  // namespace tensormorph::reports
