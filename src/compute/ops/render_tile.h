// tm.render_tile@1: one 256x256 RGBA tile of a heatmap of a tensor, from its values (one pixel per
// cell x cell block of elements, or `magnify` pixels per element) or from a grid of tile statistics
// (one pixel per pyramid tile). The CPU reference here is the ground truth every backend matches.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "compute/ops/op_instance.h"
#include "compute/ops/reference.h"

namespace tensormorph::ops {

/// The exact operation and its approximate rung (one sampled row per block, offered for consent).
inline constexpr const char* kOpRenderTile = TM_OP_RENDER_TILE;
inline constexpr const char* kOpRenderTileSampled = TM_OP_RENDER_TILE_SAMPLED;

/// Tiles are square and this many pixels on a side.
inline constexpr uint32_t kRenderTilePixels = TM_RENDER_TILE_PIXELS;
/// Bytes of one RGBA tile.
inline constexpr uint64_t kRenderTileBytes = uint64_t{kRenderTilePixels} * kRenderTilePixels * 4;
/// Largest cell (elements per pixel side) rendered from values; larger cells come from statistics.
inline constexpr uint64_t kMaxRenderCell = TM_RENDER_MAX_CELL;
/// Largest magnification (pixels per element side).
inline constexpr uint32_t kMaxMagnify = TM_RENDER_MAX_MAGNIFY;

/// What a pixel shows of the block of elements it covers.
enum class PixelStat : int64_t {
  kMean = TM_PIXEL_STAT_MEAN,
  kAbsmax = TM_PIXEL_STAT_ABSMAX,
  kMin = TM_PIXEL_STAT_MIN,
  kMax = TM_PIXEL_STAT_MAX,
  kEnvelope = TM_PIXEL_STAT_ENVELOPE,
  kStd = TM_PIXEL_STAT_STD,
  kNonFinite = TM_PIXEL_STAT_NON_FINITE
};
/// How a value becomes a position in [0, 1] (the colour scale; the palette colours the positions).
enum class ColorMap : int64_t {
  kDiverging = TM_COLORMAP_DIVERGING,
  kSequential = TM_COLORMAP_SEQUENTIAL,
  kLogMagnitude = TM_COLORMAP_LOG_MAGNITUDE
};
/// The colours of a scale's positions: its own table (kDefault) or a named palette.
enum class Palette : int64_t {
  kDefault = TM_PALETTE_DEFAULT,
  kViridis = TM_PALETTE_VIRIDIS,
  kCividis = TM_PALETTE_CIVIDIS,
  kMagma = TM_PALETTE_MAGMA,
  kInferno = TM_PALETTE_INFERNO,
  kGreys = TM_PALETTE_GREYS,
  kCoolwarm = TM_PALETTE_COOLWARM,
  kRdBu = TM_PALETTE_RDBU
};
/// What the faces say about a named palette.
struct PaletteInfo {
  Palette palette;
  std::string_view name;       ///< "viridis", ... (what the API and the viewer call it)
  bool diverging;              ///< a diverging palette (for the diverging scale), else sequential
  bool colorblind_safe;        ///< readable with the common colour-vision deficiencies
  bool perceptually_uniform;   ///< equal steps of value look like equal steps of colour
};
/// Where the pixels' statistics come from.
enum class RenderSource : int64_t { kValues = TM_RENDER_SOURCE_VALUES, kTileStats = TM_RENDER_SOURCE_TILE_STATS };

/// "mean", "absmax", "min", "max", "envelope", "std", "nonfinite" and back.
std::string_view pixel_stat_name(PixelStat stat);
std::optional<PixelStat> pixel_stat_from_name(std::string_view name);
/// "diverging", "sequential", "log" and back.
std::string_view color_map_name(ColorMap map);
std::optional<ColorMap> color_map_from_name(std::string_view name);
/// The named palettes (not kDefault), in TM_PALETTE_* order.
std::span<const PaletteInfo> named_palettes();
/// "default", "viridis", ... and back (case-insensitive: "RdBu" is "rdbu").
std::string_view palette_name(Palette palette);
std::optional<Palette> palette_from_name(std::string_view name);
/// The named palette a scale's own table is drawn from (coolwarm, viridis, magma).
Palette drawn_from(ColorMap map);
/// The colormap attribute of a scale and a palette (TM_COLORMAP(scale, palette)).
int64_t colormap_attribute(ColorMap map, Palette palette);

/// The attributes of one render instance.
struct RenderParams {
  RenderSource source = RenderSource::kValues;
  uint64_t row_begin = 0;  ///< first element row (values) or grid row (statistics) of the tile
  uint64_t col_begin = 0;  ///< first element column (values) or grid column (statistics)
  uint64_t cell = 1;       ///< elements per pixel side (values; a power of two <= kMaxRenderCell), 1 for statistics
  uint32_t magnify = 1;    ///< pixels per cell side (a power of two <= kMaxMagnify; > 1 only with cell 1)
  PixelStat stat = PixelStat::kMean;
  ColorMap colormap = ColorMap::kDiverging;
  Palette palette = Palette::kDefault;  ///< of the scale's kind (a diverging palette only with kDiverging)
  double lo = -1, hi = 1;  ///< the colour range (log: magnitudes, 0 < lo)
  bool sampled = false;    ///< the approximate rung: only the first row of each block is read
};

/// Checks the parameters alone (powers of two, limits, a palette of the scale's kind, lo < hi
/// finite, log needs 0 < lo).
Status check_render_params(const RenderParams& params);

/// The colour of a pixel whose block has statistics `s` (counts, finite min/max/absmax, sums).
/// Non-finite elements always show (NaN magenta, +Inf orange, -Inf cyan); empty blocks are transparent.
std::array<uint8_t, 4> render_pixel_colour(const TM_TileStats& s, const RenderParams& params);

/// The 256-entry RGB table of a scale under a palette (for colour bars); the palette must suit the scale.
std::array<std::array<uint8_t, 3>, 256> color_map_table(ColorMap map, Palette palette = Palette::kDefault);

/// Bytes a values render needs at its peak (decoded rows, row-sum slots, the tile itself); a
/// backend reports what exceeds the tile as working memory, so the memory budget applies to it.
uint64_t render_working_bytes(const RenderParams& params, uint64_t rows, uint64_t cols);

/// Renders pixel rows [y_begin, y_end) of a values tile into `rgba` (the whole tile's buffer).
/// Each block's statistics follow tm.tile_stats@1 with T = cell (canonical sums, -0.0 below +0.0).
Status render_values_rows(const MatrixView& matrix, const RenderParams& params, uint32_t y_begin, uint32_t y_end,
                          std::span<uint8_t> rgba);

/// tm.render_tile@1 from values: the whole tile (pixels outside the matrix are transparent).
Status render_values_reference(const MatrixView& matrix, const RenderParams& params, std::span<uint8_t> rgba);

/// Smallest cell whose blocks are tm.tile_stats@1 tiles (its smallest T): a backend may render such
/// a values tile as tile_stats over render_cell_view with T = cell, then render_cell_grid.
inline constexpr uint64_t kMinTileStatsCell = 8;

/// The elements a values tile covers, clipped to a rows x cols matrix (empty past its edges).
ViewRange render_cell_view(const RenderParams& params, uint64_t rows, uint64_t cols);

/// Colours a values tile from its blocks' statistics (`grid`, row-major, from render_cell_view):
/// the bytes render_values_reference gives; pixels past the grid are transparent.
Status render_cell_grid(std::span<const TM_TileStats> stats, const TileGrid& grid, const RenderParams& params,
                        std::span<uint8_t> rgba);

/// tm.render_tile@1 from statistics: pixel (y, x) shows grid cell (row_begin + y / magnify,
/// col_begin + x / magnify) of the row-major `grid_rows` x `grid_cols` grid.
Status render_stats_reference(std::span<const TM_TileStats> grid, uint64_t grid_rows, uint64_t grid_cols,
                              const RenderParams& params, std::span<uint8_t> rgba);

/// A validated render instance.
struct RenderArgs {
  TensorArgument input;   ///< values: [rows, cols] any decodable dtype; statistics: U8[rows, cols, 64]
  TensorArgument output;  ///< U8[256, 256, 4]
  uint64_t rows = 0, cols = 0;  ///< the matrix or the statistics grid
  RenderParams params;
};

/// Reads and checks a tm.render_tile@1 / tm.render_tile_sampled@1 instance; INVALID_ARGUMENT naming
/// what is wrong.
Result<RenderArgs> parse_render_tile(const TM_OpInstance& op);

/// True for the two render operation ids.
bool is_render_op(std::string_view id);

}  // namespace tensormorph::ops
