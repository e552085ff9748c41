// The reference tm.render_tile@1: block statistics in tm.tile_stats@1's canonical order with
// T = cell, then render_pixel_colour. Plain scalar code; the CPU backend runs it over pixel rows.
#include <algorithm>
#include <bit>
#include <cmath>
#include <string>
#include <vector>

#include "compute/ops/render_tile.h"
#include "tensormorph/c/plugin_kit.h"
#include "tensormorph/decode.h"

namespace tensormorph::ops {
namespace {

void put_pixel(std::span<uint8_t> rgba, uint32_t y, uint32_t x, const std::array<uint8_t, 4>& c) {
  std::copy(c.begin(), c.end(), rgba.begin() + (static_cast<size_t>(y) * kRenderTilePixels + x) * 4);
}

// Adds one finite-or-not element to a block's counts and extremes; returns it as a sum slot.
double account(TM_TileStats& s, float v) {
  ++s.count;
  if (std::isnan(v)) {
    ++s.nan;
    return 0.0;
  }
  if (std::isinf(v)) {
    ++(v > 0 ? s.pos_inf : s.neg_inf);
    return 0.0;
  }
  if (v == 0.0f) ++s.zeros;
  s.min = ordered_min(s.min, v);
  s.max = ordered_max(s.max, v);
  s.absmax = std::max(s.absmax, std::fabs(v));
  return v;
}

}  // namespace

Status check_render_params(const RenderParams& p) {
  const auto fail = [](const std::string& what) { return Status::InvalidArgument("render_tile: " + what); };
  if (p.source != RenderSource::kValues && p.source != RenderSource::kTileStats) return fail("unknown source");
  if (p.cell == 0 || !std::has_single_bit(p.cell) || p.cell > kMaxRenderCell) {
    return fail("cell " + std::to_string(p.cell) + " is not a power of two in [1, " + std::to_string(kMaxRenderCell) + "]");
  }
  if (p.magnify == 0 || !std::has_single_bit(p.magnify) || p.magnify > kMaxMagnify) {
    return fail("magnify " + std::to_string(p.magnify) + " is not a power of two in [1, " + std::to_string(kMaxMagnify) + "]");
  }
  if (p.magnify > 1 && p.cell > 1) return fail("magnify > 1 needs cell 1");
  if (p.source == RenderSource::kTileStats && p.cell != 1) return fail("a statistics grid renders with cell 1");
  if (static_cast<uint64_t>(p.stat) > static_cast<uint64_t>(PixelStat::kNonFinite)) return fail("unknown pixel statistic");
  if (static_cast<uint64_t>(p.colormap) > static_cast<uint64_t>(ColorMap::kLogMagnitude)) return fail("unknown colour map");
  if (static_cast<uint64_t>(p.palette) > static_cast<uint64_t>(TM_PALETTE_LAST)) return fail("unknown palette");
  if (const char* problem = tm_kit_colormap_problem(colormap_attribute(p.colormap, p.palette))) {
    return fail(std::string(palette_name(p.palette)) + " with the " + std::string(color_map_name(p.colormap)) +
                " scale: " + problem);
  }
  if (!std::isfinite(p.lo) || !std::isfinite(p.hi) || !(p.lo < p.hi)) {
    return fail("range [" + std::to_string(p.lo) + ", " + std::to_string(p.hi) + "] needs finite lo < hi");
  }
  if (p.colormap == ColorMap::kLogMagnitude && !(p.lo > 0)) return fail("the log colour map needs 0 < lo");
  if (p.colormap == ColorMap::kDiverging && !(std::max(std::fabs(p.lo), std::fabs(p.hi)) > 0)) {
    return fail("the diverging range is empty");
  }
  return Status::Ok();
}

uint64_t render_working_bytes(const RenderParams& p, uint64_t rows, uint64_t cols) {
  if (p.source == RenderSource::kTileStats) return kRenderTileBytes;
  const uint64_t cells = kRenderTilePixels / p.magnify;
  const uint64_t span = std::min<uint64_t>(cols - std::min(cols, p.col_begin), cells * p.cell);
  const uint64_t block_rows = p.sampled ? 1 : std::min<uint64_t>(p.cell, rows);
  const uint64_t cells_across = (span + p.cell - 1) / p.cell;
  // Decoded floats of the block rows, two float64 row-sum slots per row of each block, the tile.
  return block_rows * span * sizeof(float) + cells_across * p.cell * 2 * sizeof(double) + kRenderTileBytes;
}

Status render_values_rows(const MatrixView& m, const RenderParams& p, uint32_t y_begin, uint32_t y_end,
                          std::span<uint8_t> rgba) {
  TM_RETURN_IF_ERROR(check_render_params(p));
  if (rgba.size() != kRenderTileBytes) return Status::InvalidArgument("render_tile: output is not 256 x 256 RGBA");
  if (y_end > kRenderTilePixels || y_begin > y_end) return Status::InvalidArgument("render_tile: pixel rows out of range");
  TM_ASSIGN_OR_RETURN(const uint64_t row_bytes, matrix_row_bytes(m.dtype, m.cols));
  if (m.bytes.size() != row_bytes * m.rows) return Status::InvalidArgument("render_tile: input size does not match its shape");
  const DTypeInfo& info = dtype_info(m.dtype);
  const uint64_t cell = p.cell, cells = kRenderTilePixels / p.magnify;
  const uint64_t c0 = std::min(p.col_begin, m.cols), c1 = std::min<uint64_t>(m.cols, c0 + cells * cell);
  const uint64_t cells_across = (c1 - c0 + cell - 1) / cell;
  // The decoded span starts and ends on block boundaries; values[] is the [c0, c1) part of it.
  const uint64_t first_block = c0 / info.block_elems, end_block = (c1 + info.block_elems - 1) / info.block_elems;
  const uint64_t lead = c0 - first_block * info.block_elems;
  std::vector<float> decoded((end_block - first_block) * info.block_elems);
  std::vector<double> slots(cell), squares(cell), row_sums(cells_across * cell), row_squares(cells_across * cell);
  std::vector<TM_TileStats> stats(cells_across);
  const uint32_t transparent_from = static_cast<uint32_t>(cells_across * p.magnify);
  for (uint64_t cy = y_begin / p.magnify; cy * p.magnify < y_end; ++cy) {
    const uint64_t r0 = p.row_begin + cy * cell;
    const uint64_t r1 = r0 >= m.rows ? r0 : std::min(m.rows, p.sampled ? r0 + 1 : r0 + cell);
    std::fill(stats.begin(), stats.end(), empty_tile_stats());
    std::fill(row_sums.begin(), row_sums.end(), 0.0);
    std::fill(row_squares.begin(), row_squares.end(), 0.0);
    for (uint64_t r = r0; r < r1; ++r) {
      const auto src = m.bytes.subspan(r * row_bytes + first_block * info.block_bytes,
                                       (end_block - first_block) * info.block_bytes);
      TM_RETURN_IF_ERROR(decode_to_f32(m.dtype, src, decoded.size(), decoded.data()));
      for (uint64_t x = 0; x < cells_across; ++x) {
        const uint64_t begin = x * cell, end = std::min(begin + cell, c1 - c0);
        std::fill(slots.begin(), slots.end(), 0.0);
        std::fill(squares.begin(), squares.end(), 0.0);
        for (uint64_t k = begin; k < end; ++k) {
          const double v = account(stats[x], decoded[lead + k]);
          slots[k - begin] = v;
          squares[k - begin] = v * v;
        }
        row_sums[x * cell + (r - r0)] = halving_sum(slots);
        row_squares[x * cell + (r - r0)] = halving_sum(squares);
      }
    }
    const uint32_t py0 = std::max<uint32_t>(y_begin, static_cast<uint32_t>(cy * p.magnify));
    const uint32_t py1 = std::min<uint32_t>(y_end, static_cast<uint32_t>((cy + 1) * p.magnify));
    for (uint64_t x = 0; x < cells_across; ++x) {
      stats[x].sum = halving_sum(std::span(row_sums).subspan(x * cell, cell));
      stats[x].sum_sq = halving_sum(std::span(row_squares).subspan(x * cell, cell));
      const auto colour = render_pixel_colour(stats[x], p);
      for (uint32_t py = py0; py < py1; ++py) {
        for (uint32_t dx = 0; dx < p.magnify; ++dx) put_pixel(rgba, py, static_cast<uint32_t>(x * p.magnify + dx), colour);
      }
    }
    for (uint32_t py = py0; py < py1; ++py) {
      for (uint32_t px = transparent_from; px < kRenderTilePixels; ++px) put_pixel(rgba, py, px, {0, 0, 0, 0});
    }
  }
  return Status::Ok();
}

Status render_values_reference(const MatrixView& matrix, const RenderParams& params, std::span<uint8_t> rgba) {
  if (!dtype_decodable(matrix.dtype)) return Status::Unsupported(std::string(dtype_not_decodable_reason(matrix.dtype)));
  return render_values_rows(matrix, params, 0, kRenderTilePixels, rgba);
}

ViewRange render_cell_view(const RenderParams& p, uint64_t rows, uint64_t cols) {
  const uint64_t cells = kRenderTilePixels / p.magnify;
  const uint64_t r0 = std::min(p.row_begin, rows), c0 = std::min(p.col_begin, cols);
  return {r0, std::min(rows, r0 + cells * p.cell), c0, std::min(cols, c0 + cells * p.cell)};
}

Status render_cell_grid(std::span<const TM_TileStats> stats, const TileGrid& grid, const RenderParams& p,
                        std::span<uint8_t> rgba) {
  TM_RETURN_IF_ERROR(check_render_params(p));
  // The block grid is a statistics grid seen from its first cell: colour it like one.
  RenderParams as_grid = p;
  as_grid.source = RenderSource::kTileStats;
  as_grid.cell = 1;
  as_grid.row_begin = 0;
  as_grid.col_begin = 0;
  return render_stats_reference(stats, grid.rows, grid.cols, as_grid, rgba);
}

Status render_stats_reference(std::span<const TM_TileStats> grid, uint64_t grid_rows, uint64_t grid_cols,
                              const RenderParams& p, std::span<uint8_t> rgba) {
  TM_RETURN_IF_ERROR(check_render_params(p));
  if (rgba.size() != kRenderTileBytes) return Status::InvalidArgument("render_tile: output is not 256 x 256 RGBA");
  uint64_t cells = 0;
  if (__builtin_mul_overflow(grid_rows, grid_cols, &cells) || cells != grid.size()) {
    return Status::InvalidArgument("render_tile: the statistics grid does not hold rows x cols tiles");
  }
  for (uint32_t y = 0; y < kRenderTilePixels; ++y) {
    const uint64_t gy = p.row_begin + y / p.magnify;
    for (uint32_t x = 0; x < kRenderTilePixels; ++x) {
      const uint64_t gx = p.col_begin + x / p.magnify;
      const bool inside = gy < grid_rows && gx < grid_cols;
      put_pixel(rgba, y, x, inside ? render_pixel_colour(grid[gy * grid_cols + gx], p) : std::array<uint8_t, 4>{});
    }
  }
  return Status::Ok();
}

}  // namespace tensormorph::ops
