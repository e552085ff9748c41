// Pixel colours of tm.render_tile@1: which statistic a pixel shows and the colour maps. Every
// step is plain float64 arithmetic (no FMA contraction), so every exact backend gets the same bytes.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/render_tile.h"

namespace tensormorph::ops {
namespace {

using Rgb = std::array<uint8_t, 3>;

// Control points, evenly spaced, of each map. Diverging: Moreland's cool-warm (blue, grey, red),
// centred on zero. Sequential: viridis. Log magnitude: magma. Values from the published tables.
const std::vector<Rgb> kDivergingPoints = {{59, 76, 192}, {124, 159, 249}, {192, 212, 245}, {221, 221, 221},
                                           {242, 203, 183}, {238, 133, 105}, {180, 4, 38}};
const std::vector<Rgb> kViridisPoints = {{68, 1, 84},    {72, 40, 120},  {62, 74, 137},  {49, 104, 142}, {38, 130, 142},
                                         {31, 158, 137}, {53, 183, 121}, {109, 205, 89}, {180, 222, 44}, {253, 231, 37}};
const std::vector<Rgb> kMagmaPoints = {{0, 0, 4},      {28, 16, 68},    {79, 18, 123},   {129, 37, 129}, {181, 54, 122},
                                       {229, 80, 100}, {251, 135, 97}, {254, 194, 135}, {252, 253, 191}};

std::array<Rgb, 256> interpolate(const std::vector<Rgb>& points) {
  std::array<Rgb, 256> table{};
  const double segments = static_cast<double>(points.size() - 1);
  for (size_t i = 0; i < 256; ++i) {
    const double x = static_cast<double>(i) / 255.0 * segments;
    const size_t k = std::min(static_cast<size_t>(x), points.size() - 2);
    const double f = x - static_cast<double>(k);
    for (size_t c = 0; c < 3; ++c) {
      const double v = points[k][c] + (points[k + 1][c] - points[k][c]) * f;
      table[i][c] = static_cast<uint8_t>(std::clamp(std::floor(v + 0.5), 0.0, 255.0));
    }
  }
  return table;
}

const std::array<Rgb, 256>& table_of(ColorMap map) {
  static const std::array<Rgb, 256> diverging = interpolate(kDivergingPoints);
  static const std::array<Rgb, 256> sequential = interpolate(kViridisPoints);
  static const std::array<Rgb, 256> magnitude = interpolate(kMagmaPoints);
  switch (map) {
    case ColorMap::kDiverging: return diverging;
    case ColorMap::kSequential: return sequential;
    case ColorMap::kLogMagnitude: return magnitude;
  }
  return diverging;
}

// Position of t in [0, 1] on a 256-entry table.
size_t table_index(double t) {
  if (!(t > 0)) return 0;  // also NaN
  if (t >= 1) return 255;
  return static_cast<size_t>(std::floor(t * 255.0 + 0.5));
}

size_t colour_index(double v, const RenderParams& p) {
  switch (p.colormap) {
    case ColorMap::kDiverging: {
      const double m = std::max(std::fabs(p.lo), std::fabs(p.hi));
      return table_index((std::clamp(v / m, -1.0, 1.0) + 1.0) / 2.0);
    }
    case ColorMap::kSequential: return table_index((v - p.lo) / (p.hi - p.lo));
    case ColorMap::kLogMagnitude: {
      const double a = std::fabs(v);
      if (!(a > 0)) return 0;
      const double l0 = std::log10(p.lo);
      return table_index((std::log10(a) - l0) / (std::log10(p.hi) - l0));
    }
  }
  return 0;
}

}  // namespace

std::span<const std::array<uint8_t, 3>> color_map_table(ColorMap map) { return table_of(map); }

std::array<uint8_t, 4> render_pixel_colour(const TM_TileStats& s, const RenderParams& p) {
  if (s.count == 0) return {0, 0, 0, 0};
  // Non-finite elements are the outliers that matter most: every statistic shows them.
  if (s.nan > 0) return {255, 0, 255, 255};
  if (s.pos_inf > 0) return {255, 140, 0, 255};
  if (s.neg_inf > 0) return {0, 230, 255, 255};
  if (p.stat == PixelStat::kNonFinite) return {48, 48, 48, 255};
  const uint64_t finite = s.count;  // no non-finite element past this point
  const double mean = s.sum / static_cast<double>(finite);
  double v = 0;
  switch (p.stat) {
    case PixelStat::kMean: v = mean; break;
    case PixelStat::kAbsmax: v = s.absmax; break;
    case PixelStat::kMin: v = s.min; break;
    case PixelStat::kMax: v = s.max; break;
    case PixelStat::kEnvelope: v = std::fabs(s.min) > std::fabs(s.max) ? s.min : s.max; break;
    case PixelStat::kStd: v = std::sqrt(std::max(0.0, s.sum_sq / static_cast<double>(finite) - mean * mean)); break;
    case PixelStat::kNonFinite: break;
  }
  const Rgb& rgb = table_of(p.colormap)[colour_index(v, p)];
  return {rgb[0], rgb[1], rgb[2], 255};
}

}  // namespace tensormorph::ops
