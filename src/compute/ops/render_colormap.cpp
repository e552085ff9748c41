// Pixel colours of tm.render_tile@1. The mapping is the plugin kit's (plugin_kit.h): one function
// for the reference, the built-in backends and every plugin, so all of them produce the same bytes.
#include <array>

#include "compute/ops/render_tile.h"
#include "tensormorph/c/plugin_kit.h"

namespace tensormorph::ops {
namespace {

using Rgb = std::array<uint8_t, 3>;

std::array<Rgb, 256> table(ColorMap map) {
  std::array<Rgb, 256> t{};
  for (size_t i = 0; i < t.size(); ++i) tm_kit_colormap_entry(static_cast<int64_t>(map), i, t[i].data());
  return t;
}

}  // namespace

std::span<const std::array<uint8_t, 3>> color_map_table(ColorMap map) {
  static const std::array<Rgb, 256> diverging = table(ColorMap::kDiverging);
  static const std::array<Rgb, 256> sequential = table(ColorMap::kSequential);
  static const std::array<Rgb, 256> magnitude = table(ColorMap::kLogMagnitude);
  switch (map) {
    case ColorMap::kDiverging: return diverging;
    case ColorMap::kSequential: return sequential;
    case ColorMap::kLogMagnitude: return magnitude;
  }
  return diverging;
}

std::array<uint8_t, 4> render_pixel_colour(const TM_TileStats& s, const RenderParams& p) {
  std::array<uint8_t, 4> rgba{};
  tm_kit_pixel_colour(&s, static_cast<int64_t>(p.stat), static_cast<int64_t>(p.colormap), p.lo, p.hi, rgba.data());
  return rgba;
}

}  // namespace tensormorph::ops
