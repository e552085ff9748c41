#include "server/tiles.h"

#include <bit>
#include <cstdio>

#include "engine/matrix_shape.h"
#include "server/png.h"

namespace tensormorph::server {
namespace {

constexpr uint32_t kMagnifyShift = std::countr_zero(kDeepestMagnify);

uint64_t ceil_div(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

std::string cache_key(const TileRequest& r) {
  char range[64];
  std::snprintf(range, sizeof range, "%.17g/%.17g", r.lo, r.hi);
  return std::to_string(r.checkpoint) + "/" + r.tensor->name + "/" + std::to_string(r.level) + "/" +
         std::to_string(r.x) + "/" + std::to_string(r.y) + "/" + std::string(ops::pixel_stat_name(r.stat)) + "/" +
         std::string(ops::color_map_name(r.colormap)) + "/" + std::string(ops::palette_name(r.palette)) + "/" + range +
         "/" + r.consent;
}

}  // namespace

void ZoomGeometry::cell_of(uint32_t level, uint64_t& cell, uint32_t& magnify) const {
  const uint32_t shrink = max_level - std::min(level, max_level);
  if (shrink <= kMagnifyShift) {
    cell = 1;
    magnify = kDeepestMagnify >> shrink;
  } else {
    cell = uint64_t{1} << (shrink - kMagnifyShift);
    magnify = 1;
  }
}

uint64_t ZoomGeometry::tile_span(uint32_t level) const {
  uint64_t cell = 1;
  uint32_t magnify = 1;
  cell_of(level, cell, magnify);
  return magnify > 1 ? ops::kRenderTilePixels / magnify : ops::kRenderTilePixels * cell;
}

uint64_t ZoomGeometry::tiles_x(uint32_t level) const { return ceil_div(cols, tile_span(level)); }
uint64_t ZoomGeometry::tiles_y(uint32_t level) const { return ceil_div(rows, tile_span(level)); }

nlohmann::ordered_json ZoomGeometry::to_json() const {
  return {{"width", cols * kDeepestMagnify}, {"height", rows * kDeepestMagnify}, {"tile_size", ops::kRenderTilePixels},
          {"pixels_per_element", kDeepestMagnify}, {"min_level", min_level}, {"max_level", max_level}};
}

ZoomGeometry zoom_geometry(uint64_t rows, uint64_t cols) {
  ZoomGeometry g;
  g.rows = std::max<uint64_t>(rows, 1);
  g.cols = std::max<uint64_t>(cols, 1);
  const uint64_t side = std::max(g.rows, g.cols) * kDeepestMagnify;
  g.max_level = static_cast<uint32_t>(std::bit_width(side - 1));  // ceil(log2(side))
  g.min_level = g.max_level;
  while (g.min_level > 0 && (g.tiles_x(g.min_level) > 1 || g.tiles_y(g.min_level) > 1)) --g.min_level;
  return g;
}

Result<engine::RenderOutcome> TileRenderer::render(const TileRequest& r, const ZoomGeometry& g, std::string& source) {
  ops::RenderParams p;
  p.stat = r.stat;
  p.colormap = r.colormap;
  p.palette = r.palette;
  p.lo = r.lo;
  p.hi = r.hi;
  g.cell_of(r.level, p.cell, p.magnify);
  const uint64_t span = g.tile_span(r.level);
  const uint64_t elements = r.tensor->elements();
  const uint32_t fine_tile = Catalog::fine_tile_for(elements);
  if (p.cell <= ops::kMaxRenderCell && (elements <= kValuesOnlyElements || p.cell < fine_tile)) {
    p.row_begin = r.y * span;
    p.col_begin = r.x * span;
    source = "values";
    return engine::render_tensor_tile(scheduler_, *catalog_.at(r.checkpoint).checkpoint, *r.tensor, p, r.consent);
  }
  // Overview: one pixel per pyramid tile. The index serves cells that are its tiles; finer ones
  // come from the fine pyramid.
  std::shared_ptr<const void> keep_alive;
  const engine::PyramidLevel* level = nullptr;
  std::string state;
  auto contents = catalog_.index_of(r.checkpoint, &state);
  if (contents && p.cell >= contents->tile && p.cell % contents->tile == 0) {
    const index::TensorPyramid* pyramid = catalog_.indexed(r.checkpoint, *contents, r.tensor->name);
    const size_t k = static_cast<size_t>(std::countr_zero(p.cell / contents->tile));
    if (pyramid != nullptr && pyramid->rows == g.rows && pyramid->cols == g.cols && k < pyramid->levels.size()) {
      level = &pyramid->levels[k];
      keep_alive = contents;
      source = "index";
    }
  }
  if (level == nullptr) {
    TM_ASSIGN_OR_RETURN(auto fine, catalog_.fine_pyramid(scheduler_, r.checkpoint, *r.tensor));
    const size_t k = static_cast<size_t>(std::countr_zero(p.cell / fine->tile));
    if (k >= fine->levels.size()) return Status::Internal("no pyramid level for cell " + std::to_string(p.cell));
    level = &fine->levels[k];
    keep_alive = fine;
    source = "fine statistics";
  }
  p.source = ops::RenderSource::kTileStats;
  p.cell = 1;
  p.row_begin = r.y * ops::kRenderTilePixels;
  p.col_begin = r.x * ops::kRenderTilePixels;
  return engine::render_stats_tile(scheduler_, level->tiles, level->grid.rows, level->grid.cols, p, 0, r.tensor->name);
}

std::string tile_hint(const TileRequest& r) {
  const engine::DisplayView view = engine::display_view(*r.tensor);
  const ZoomGeometry g = zoom_geometry(view.rows, view.cols);
  if (r.level > g.max_level || r.level < g.min_level) {
    return "levels run from " + std::to_string(g.min_level) + " (the whole tensor in one tile) to " +
           std::to_string(g.max_level) + " (" + std::to_string(kDeepestMagnify) + " pixels per element)";
  }
  if (r.x >= g.tiles_x(r.level) || r.y >= g.tiles_y(r.level)) {
    return "level " + std::to_string(r.level) + " has x in [0, " + std::to_string(g.tiles_x(r.level)) + ") and y in [0, " +
           std::to_string(g.tiles_y(r.level)) + ")";
  }
  return "";
}

Result<TileResult> TileRenderer::tile(const TileRequest& request) {
  // A folded tensor renders as its own bytes reshaped to the view; overview pyramids of the
  // matrix view (the index's) do not fit it, so render() checks their shape.
  const engine::DisplayView view = engine::display_view(*request.tensor);
  const TensorInfo shown = engine::as_displayed(*request.tensor, view);
  TileRequest r = request;
  r.tensor = &shown;
  const ZoomGeometry g = zoom_geometry(view.rows, view.cols);
  if (r.level > g.max_level || r.level < g.min_level) {
    return Status::InvalidArgument("level " + std::to_string(r.level) + " is outside [" + std::to_string(g.min_level) +
                                   ", " + std::to_string(g.max_level) + "]");
  }
  if (r.x >= g.tiles_x(r.level) || r.y >= g.tiles_y(r.level)) {
    return Status::NotFound("tile (" + std::to_string(r.x) + ", " + std::to_string(r.y) + ") is outside level " +
                            std::to_string(r.level) + "'s " + std::to_string(g.tiles_x(r.level)) + " x " +
                            std::to_string(g.tiles_y(r.level)) + " tiles");
  }
  ops::RenderParams check;
  check.colormap = r.colormap;
  check.palette = r.palette;
  check.lo = r.lo;
  check.hi = r.hi;
  TM_RETURN_IF_ERROR(ops::check_render_params(check));
  const std::string key = cache_key(r);
  TileResult result;
  if (auto cached = cache_.get(key)) {
    result.png = std::move(cached);
    result.source = "cache";
    return result;
  }
  TM_ASSIGN_OR_RETURN(auto outcome, render(r, g, result.source));
  if (outcome.needs_consent) {
    nlohmann::ordered_json ladder = nlohmann::ordered_json::array();
    for (const auto& rung : outcome.ladder) {
      ladder.push_back({{"id", rung.id}, {"op", rung.op}, {"backend", rung.backend}, {"computes", rung.computes},
                        {"error_bound", rung.error_bound}, {"estimated_ms", rung.estimated_ns / 1e6}});
    }
    result.needs_consent = {{"op", ops::kOpRenderTile}, {"reason", outcome.consent_reason}, {"ladder", ladder}};
    return result;
  }
  TM_ASSIGN_OR_RETURN(auto png, encode_png(outcome.rgba, ops::kRenderTilePixels, ops::kRenderTilePixels));
  result.png = std::make_shared<const std::string>(std::move(png));
  cache_.put(key, result.png);
  return result;
}

}  // namespace tensormorph::server
