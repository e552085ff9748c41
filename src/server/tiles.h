// Deep-zoom geometry of a tensor's heatmap and the rendering of one tile: values or statistics,
// through the scheduler, encoded as PNG and cached.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "compute/scheduler.h"
#include "engine/render_ops.h"
#include "server/catalog.h"
#include "server/tile_cache.h"

namespace tensormorph::server {

/// Pixels per element at the deepest zoom level (cells past single elements are magnified).
inline constexpr uint32_t kDeepestMagnify = 32;

/// The zoom levels of one tensor, numbered like deep-zoom images: level L shows the matrix at
/// scale 2^(L - max_level) of cols*32 x rows*32 pixels.
struct ZoomGeometry {
  uint64_t rows = 0, cols = 0;
  uint32_t max_level = 0;  ///< deepest level: 32 pixels per element
  uint32_t min_level = 0;  ///< the first level where one tile holds the whole matrix
  /// The cell (elements per pixel side) and magnification of `level` (<= max_level).
  void cell_of(uint32_t level, uint64_t& cell, uint32_t& magnify) const;
  /// Elements on one side of a tile at `level`.
  uint64_t tile_span(uint32_t level) const;
  /// Tiles across and down at `level`.
  uint64_t tiles_x(uint32_t level) const;
  uint64_t tiles_y(uint32_t level) const;
  /// JSON for the web UI.
  nlohmann::ordered_json to_json() const;
};

/// The geometry of a rows x cols matrix.
ZoomGeometry zoom_geometry(uint64_t rows, uint64_t cols);

/// What a tile request asks for: a tile of the tensor's display view (engine::display_view).
struct TileRequest {
  size_t checkpoint = 0;
  const TensorInfo* tensor = nullptr;
  uint32_t level = 0;
  uint64_t x = 0, y = 0;
  ops::PixelStat stat = ops::PixelStat::kMean;
  ops::ColorMap colormap = ops::ColorMap::kDiverging;
  ops::Palette palette = ops::Palette::kDefault;
  double lo = -1, hi = 1;
  std::string consent;  ///< a ladder rung the user accepted, or ""
};

/// A rendered tile or the "needs consent" answer.
struct TileResult {
  std::shared_ptr<const std::string> png;  ///< null when consent is needed
  nlohmann::ordered_json needs_consent;    ///< reason and ladder when consent is needed
  std::string source;                      ///< "values", "fine statistics", "index" or "cache"
};

/// Renders tiles with a rendered-tile cache.
class TileRenderer {
 public:
  /// `cache_bytes` is the rendered-tile cache's budget.
  TileRenderer(Catalog& catalog, compute::Scheduler& scheduler, uint64_t cache_bytes)
      : catalog_(catalog), scheduler_(scheduler), cache_(cache_bytes) {}
  /// The tile, from the cache or rendered now. INVALID_ARGUMENT / NOT_FOUND for bad coordinates.
  Result<TileResult> tile(const TileRequest& request);
  /// The cache (for statistics).
  const TileCache& cache() const { return cache_; }

 private:
  Result<engine::RenderOutcome> render(const TileRequest& request, const ZoomGeometry& geometry, std::string& source);
  Catalog& catalog_;
  compute::Scheduler& scheduler_;
  TileCache cache_;
};

/// What the user can do about a tile request outside the tensor's levels or tiles: the levels
/// there are, or the tiles of the level asked for ("" when the request is inside them).
std::string tile_hint(const TileRequest& request);

/// Tensors with more elements than this take overview levels from statistics pyramids.
inline constexpr uint64_t kValuesOnlyElements = uint64_t{1} << 22;

}  // namespace tensormorph::server
