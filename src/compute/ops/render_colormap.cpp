// Pixel colours of tm.render_tile@1. The mapping is the plugin kit's (plugin_kit.h): one function
// for the reference, the built-in backends and every plugin, so all of them produce the same bytes.
#include <algorithm>
#include <array>
#include <cctype>

#include "compute/ops/render_tile.h"
#include "tensormorph/c/plugin_kit.h"

namespace tensormorph::ops {
namespace {

// Colour-vision safety and uniformity as the palettes' authors state them: the viridis family was
// designed for both (cividis for deuteranomaly in particular); ColorBrewer marks Greys and RdBu
// colour-blind safe; Moreland chose cool-warm's blue and red to stay apart for red-green
// deficiencies. Only the viridis family is perceptually uniform by construction.
constexpr PaletteInfo kPalettes[] = {
    {Palette::kViridis, "viridis", false, true, true},   {Palette::kCividis, "cividis", false, true, true},
    {Palette::kMagma, "magma", false, true, true},       {Palette::kInferno, "inferno", false, true, true},
    {Palette::kGreys, "greys", false, true, false},      {Palette::kCoolwarm, "coolwarm", true, true, false},
    {Palette::kRdBu, "rdbu", true, true, false},
};

}  // namespace

std::span<const PaletteInfo> named_palettes() { return kPalettes; }

std::string_view palette_name(Palette palette) {
  for (const auto& p : kPalettes) {
    if (p.palette == palette) return p.name;
  }
  return "default";
}

std::optional<Palette> palette_from_name(std::string_view name) {
  const auto same = [](std::string_view a, std::string_view b) {
    return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
             return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
           });
  };
  if (same(name, "default")) return Palette::kDefault;
  for (const auto& p : kPalettes) {
    if (same(name, p.name)) return p.palette;
  }
  return std::nullopt;
}

Palette drawn_from(ColorMap map) {
  switch (map) {
    case ColorMap::kDiverging: return Palette::kCoolwarm;
    case ColorMap::kSequential: return Palette::kViridis;
    case ColorMap::kLogMagnitude: return Palette::kMagma;
  }
  return Palette::kDefault;
}

int64_t colormap_attribute(ColorMap map, Palette palette) {
  return TM_COLORMAP(static_cast<int64_t>(map), static_cast<int64_t>(palette));
}

std::array<std::array<uint8_t, 3>, 256> color_map_table(ColorMap map, Palette palette) {
  std::array<std::array<uint8_t, 3>, 256> t{};
  for (size_t i = 0; i < t.size(); ++i) tm_kit_colormap_entry(colormap_attribute(map, palette), i, t[i].data());
  return t;
}

std::array<uint8_t, 4> render_pixel_colour(const TM_TileStats& s, const RenderParams& p) {
  std::array<uint8_t, 4> rgba{};
  tm_kit_pixel_colour(&s, static_cast<int64_t>(p.stat), colormap_attribute(p.colormap, p.palette), p.lo, p.hi,
                      rgba.data());
  return rgba;
}

}  // namespace tensormorph::ops
