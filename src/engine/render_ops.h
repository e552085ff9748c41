// Rendering a tile of a checkpoint tensor through the scheduler: the API the server uses.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "compute/scheduler.h"
#include "compute/ops/render_tile.h"
#include "tensormorph/checkpoint.h"

namespace tensormorph::engine {

/// A rendered tile, or the scheduler's "needs consent" answer with the rungs on offer.
struct RenderOutcome {
  bool needs_consent = false;
  std::string consent_reason;                 ///< why the exact render is out of reach
  std::vector<compute::LadderOffer> ladder;   ///< rungs the caller may consent to
  std::vector<uint8_t> rgba;                  ///< 256 x 256 x 4 when rendered
  compute::PlacementRecord record;            ///< where it ran, when rendered
};

/// Renders a values tile of `tensor` (seen as a matrix) with `params` (source must be kValues).
/// `consent` names a ladder rung the caller accepts ("" = exact only).
Result<RenderOutcome> render_tensor_tile(compute::Scheduler& scheduler, const Checkpoint& checkpoint,
                                         const TensorInfo& tensor, const ops::RenderParams& params,
                                         const std::string& consent = "");

/// Renders a values tile from a row-major float32 matrix held in memory (`rows` x `cols`, such as
/// a band of a - b); `params.row_begin` counts from the buffer's first row. `subject` names the
/// tensor in the placement record.
Result<RenderOutcome> render_f32_tile(compute::Scheduler& scheduler, std::span<const float> values, uint64_t rows,
                                      uint64_t cols, const ops::RenderParams& params, const std::string& subject = "");

/// Renders a tile from a row-major grid of tile statistics (`params.source` must be kTileStats).
/// `subject` names the tensor in the placement record.
Result<RenderOutcome> render_stats_tile(compute::Scheduler& scheduler, std::span<const TM_TileStats> grid,
                                        uint64_t grid_rows, uint64_t grid_cols, const ops::RenderParams& params,
                                        uint64_t residency_key = 0, const std::string& subject = "");

}  // namespace tensormorph::engine
