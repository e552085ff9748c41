#include "engine/render_ops.h"

#include <algorithm>

#include "core/dtype_abi.h"
#include "engine/matrix_shape.h"
#include "engine/tensor_ops.h"

namespace tensormorph::engine {
namespace {

std::vector<compute::AttributeValue> attributes_of(const ops::RenderParams& p) {
  auto i = [](const char* name, uint64_t v) { return compute::AttributeValue{name, static_cast<int64_t>(v), 0}; };
  return {i(TM_ATTR_SOURCE, static_cast<uint64_t>(p.source)), i(TM_ATTR_ROW_BEGIN, p.row_begin), i(TM_ATTR_COL_BEGIN, p.col_begin),
          i(TM_ATTR_CELL, p.cell), i(TM_ATTR_MAGNIFY, p.magnify), i(TM_ATTR_STAT, static_cast<uint64_t>(p.stat)),
          {TM_ATTR_COLORMAP, ops::colormap_attribute(p.colormap, p.palette), 0}, {TM_ATTR_LO, 0, p.lo},
          {TM_ATTR_HI, 0, p.hi}};
}

Result<RenderOutcome> run(compute::Scheduler& scheduler, compute::OpRequest& request, RenderOutcome outcome) {
  request.op = ops::kOpRenderTile;
  request.outputs.push_back({TM_DTYPE_U8, {ops::kRenderTilePixels, ops::kRenderTilePixels, 4},
                             std::as_writable_bytes(std::span(outcome.rgba))});
  TM_ASSIGN_OR_RETURN(auto placement, scheduler.run(request));
  if (!placement.executed) {
    outcome.needs_consent = true;
    outcome.consent_reason = std::move(placement.needs_consent_reason);
    outcome.ladder = std::move(placement.ladder);
    outcome.rgba.clear();
    return outcome;
  }
  outcome.record = std::move(placement.record);
  return outcome;
}

}  // namespace

Result<RenderOutcome> render_tensor_tile(compute::Scheduler& scheduler, const Checkpoint& checkpoint,
                                         const TensorInfo& tensor, const ops::RenderParams& params,
                                         const std::string& consent) {
  if (params.source != ops::RenderSource::kValues) return Status::InvalidArgument("render_tensor_tile renders values");
  TM_RETURN_IF_ERROR(ops::check_render_params(params));
  const MatrixShape m = as_matrix(tensor);
  // A strided view: gather only the rows the tile covers into a band (not cached on devices) and
  // render the band; the pixels depend on those rows alone, so they are the same.
  const bool whole = tensor.contiguous();
  const uint64_t band_begin = whole ? 0 : std::min(params.row_begin, m.rows);
  const uint64_t band_end = whole ? m.rows : std::min(m.rows, band_begin + ops::kRenderTilePixels / params.magnify * params.cell);
  TM_ASSIGN_OR_RETURN(auto band, matrix_rows(checkpoint, tensor, band_begin, band_end));
  ops::RenderParams in_band = params;
  in_band.row_begin -= band_begin;
  compute::OpRequest request;
  request.subject = tensor.name;
  request.inputs.push_back({to_abi_dtype(tensor.dtype), {band_end - band_begin, m.cols}, band.bytes,
                            whole ? residency_key(checkpoint, tensor, 0, band.bytes.size()) : 0});
  request.attributes = attributes_of(in_band);
  request.consent = consent;
  RenderOutcome outcome;
  outcome.rgba.assign(ops::kRenderTileBytes, 0);
  return run(scheduler, request, std::move(outcome));
}

Result<RenderOutcome> render_f32_tile(compute::Scheduler& scheduler, std::span<const float> values, uint64_t rows,
                                      uint64_t cols, const ops::RenderParams& params, const std::string& subject) {
  if (params.source != ops::RenderSource::kValues) return Status::InvalidArgument("render_f32_tile renders values");
  if (values.size() != rows * cols) return Status::InvalidArgument("render_f32_tile: buffer size mismatch");
  TM_RETURN_IF_ERROR(ops::check_render_params(params));
  compute::OpRequest request;
  request.subject = subject;
  request.inputs.push_back({TM_DTYPE_F32, {rows, cols}, std::as_bytes(values), 0});
  request.attributes = attributes_of(params);
  RenderOutcome outcome;
  outcome.rgba.assign(ops::kRenderTileBytes, 0);
  return run(scheduler, request, std::move(outcome));
}

Result<RenderOutcome> render_stats_tile(compute::Scheduler& scheduler, std::span<const TM_TileStats> grid,
                                        uint64_t grid_rows, uint64_t grid_cols, const ops::RenderParams& params,
                                        uint64_t residency_key, const std::string& subject) {
  if (params.source != ops::RenderSource::kTileStats) return Status::InvalidArgument("render_stats_tile renders statistics");
  if (grid.size() != grid_rows * grid_cols) return Status::InvalidArgument("render_stats_tile: grid size mismatch");
  compute::OpRequest request;
  request.subject = subject;
  request.inputs.push_back({TM_DTYPE_U8, {grid_rows, grid_cols, sizeof(TM_TileStats)}, std::as_bytes(grid), residency_key});
  request.attributes = attributes_of(params);
  RenderOutcome outcome;
  outcome.rgba.assign(ops::kRenderTileBytes, 0);
  return run(scheduler, request, std::move(outcome));
}

}  // namespace tensormorph::engine
