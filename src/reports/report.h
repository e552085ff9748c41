// What the reports share: progress of an analysis over many tensors, and placement records as data.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

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

/// True when `name` matches one of the shell globs (every name when there is none).
bool name_selected(const std::string& name, const std::vector<std::string>& globs);

/// The tensors of `ckpt` whose names match `globs`, in file order; NOT_FOUND naming the patterns
/// when globs were given and match none.
Result<std::vector<const TensorInfo*>> select_tensors(const Checkpoint& ckpt, const std::vector<std::string>& globs);

/// Placement records as a JSON array (each PlacementRecord::to_json).
nlohmann::ordered_json placements_json(const engine::Records& records);

}  // namespace tensormorph::reports
