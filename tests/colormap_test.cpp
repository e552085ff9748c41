// tm.render_tile@1's colours: the named palettes against entries of their published tables, the
// scales' own tables unchanged since ABI 1.3, and which scale takes which palette.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <string>

#include "compute/ops/render_tile.h"
#include "tensormorph/c/plugin_kit.h"

namespace tensormorph::ops {
namespace {

// Entries of the published 256-entry tables (components in [0, 1]), copied from matplotlib 3.6
// (_cm_listed.py for the listed maps; Greys, RdBu and coolwarm sampled as matplotlib interpolates
// their published control points). Indices 37, 100 and 201 fall between control points of the
// segmented palettes, where interpolation error would show.
struct PublishedEntry {
  int64_t palette;
  int index;
  double r, g, b;
};

constexpr PublishedEntry kPublished[] = {
    {TM_PALETTE_VIRIDIS, 0, 0.267004, 0.004874, 0.329415},   {TM_PALETTE_VIRIDIS, 37, 0.274128, 0.199721, 0.498911},
    {TM_PALETTE_VIRIDIS, 100, 0.166617, 0.463708, 0.558119}, {TM_PALETTE_VIRIDIS, 128, 0.127568, 0.566949, 0.550556},
    {TM_PALETTE_VIRIDIS, 201, 0.449368, 0.813768, 0.335384}, {TM_PALETTE_VIRIDIS, 255, 0.993248, 0.906157, 0.143936},
    {TM_PALETTE_CIVIDIS, 0, 0.0, 0.135112, 0.304751},        {TM_PALETTE_CIVIDIS, 37, 0.13683, 0.234216, 0.432148},
    {TM_PALETTE_CIVIDIS, 100, 0.394568, 0.406236, 0.438986}, {TM_PALETTE_CIVIDIS, 128, 0.488697, 0.485318, 0.471008},
    {TM_PALETTE_CIVIDIS, 201, 0.773486, 0.710373, 0.406422}, {TM_PALETTE_CIVIDIS, 255, 0.995737, 0.909344, 0.217772},
    {TM_PALETTE_MAGMA, 0, 0.001462, 0.000466, 0.013866},     {TM_PALETTE_MAGMA, 37, 0.140858, 0.068654, 0.324538},
    {TM_PALETTE_MAGMA, 100, 0.537755, 0.156894, 0.506551},   {TM_PALETTE_MAGMA, 128, 0.716387, 0.214982, 0.47529},
    {TM_PALETTE_MAGMA, 201, 0.993326, 0.602275, 0.41439},    {TM_PALETTE_MAGMA, 255, 0.987053, 0.991438, 0.749504},
    {TM_PALETTE_INFERNO, 0, 0.001462, 0.000466, 0.013866},   {TM_PALETTE_INFERNO, 37, 0.162689, 0.043554, 0.333277},
    {TM_PALETTE_INFERNO, 100, 0.565854, 0.143567, 0.408258}, {TM_PALETTE_INFERNO, 128, 0.735683, 0.215906, 0.330245},
    {TM_PALETTE_INFERNO, 201, 0.986502, 0.623105, 0.027814}, {TM_PALETTE_INFERNO, 255, 0.988362, 0.998364, 0.644924},
    {TM_PALETTE_GREYS, 0, 1.0, 1.0, 1.0},                    {TM_PALETTE_GREYS, 37, 0.926674, 0.926674, 0.926674},
    {TM_PALETTE_GREYS, 100, 0.720185, 0.720185, 0.720185},   {TM_PALETTE_GREYS, 128, 0.586082, 0.586082, 0.586082},
    {TM_PALETTE_GREYS, 201, 0.267589, 0.267589, 0.267589},   {TM_PALETTE_GREYS, 255, 0.0, 0.0, 0.0},
    {TM_PALETTE_COOLWARM, 0, 0.229806, 0.298718, 0.753683},  {TM_PALETTE_COOLWARM, 37, 0.409611, 0.540759, 0.935545},
    {TM_PALETTE_COOLWARM, 100, 0.743754, 0.825125, 0.965798}, {TM_PALETTE_COOLWARM, 128, 0.867428, 0.864377, 0.862602},
    {TM_PALETTE_COOLWARM, 201, 0.939254, 0.539581, 0.4239},  {TM_PALETTE_COOLWARM, 255, 0.705673, 0.015556, 0.150233},
    {TM_PALETTE_RDBU, 0, 0.403922, 0.0, 0.121569},           {TM_PALETTE_RDBU, 37, 0.761707, 0.221453, 0.228758},
    {TM_PALETTE_RDBU, 100, 0.989389, 0.842215, 0.75917},     {TM_PALETTE_RDBU, 128, 0.965705, 0.967243, 0.968089},
    {TM_PALETTE_RDBU, 201, 0.299193, 0.599539, 0.777163},    {TM_PALETTE_RDBU, 255, 0.019608, 0.188235, 0.380392},
};

int64_t scale_for(int64_t palette) {
  return palette == TM_PALETTE_COOLWARM || palette == TM_PALETTE_RDBU ? TM_COLORMAP_DIVERGING : TM_COLORMAP_SEQUENTIAL;
}

TEST(Palettes, StayWithinOneStepOfTheirPublishedTables) {
  for (const auto& e : kPublished) {
    unsigned char rgb[3];
    tm_kit_colormap_entry(TM_COLORMAP(scale_for(e.palette), e.palette), static_cast<size_t>(e.index), rgb);
    const double want[3] = {e.r, e.g, e.b};
    for (int c = 0; c < 3; ++c) {
      EXPECT_LE(std::fabs(rgb[c] - 255.0 * want[c]), 1.0)
          << "palette " << e.palette << " entry " << e.index << " component " << c << ": " << int(rgb[c]) << " vs "
          << 255.0 * want[c];
    }
  }
}

TEST(Palettes, ThePaletteNotTheScaleDecidesTheColours) {
  // The log and sequential scales share their sequential palettes' tables.
  const auto seq = color_map_table(ColorMap::kSequential, Palette::kInferno);
  const auto log = color_map_table(ColorMap::kLogMagnitude, Palette::kInferno);
  EXPECT_EQ(seq, log);
  EXPECT_NE(seq, color_map_table(ColorMap::kSequential, Palette::kMagma));
  // viridis drawn from its whole table is not the sequential scale's own coarser drawing of it.
  EXPECT_NE(color_map_table(ColorMap::kSequential, Palette::kViridis), color_map_table(ColorMap::kSequential));
}

// The scales' own tables are the ABI 1.3 colours bit for bit: entries and a weighted sum of all 256
// entries, computed from the 1.3 control points (7 cool-warm, 10 viridis, 9 magma) by the kit's formula.
TEST(Palettes, TheDefaultPaletteKeepsTheColoursOfAbi13) {
  struct Pinned {
    ColorMap map;
    std::array<std::array<int, 3>, 5> entries;  // at 0, 77, 128, 200, 255
    uint64_t weighted_sum;
  };
  const Pinned pinned[] = {
      {ColorMap::kDiverging, {{{59, 76, 192}, {179, 202, 246}, {221, 221, 221}, {239, 154, 128}, {180, 4, 38}}}, 57782261},
      {ColorMap::kSequential, {{{68, 1, 84}, {53, 96, 141}, {34, 144, 139}, {113, 206, 86}, {253, 231, 37}}}, 43245972},
      {ColorMap::kLogMagnitude, {{{0, 0, 4}, {100, 26, 125}, {182, 54, 122}, {252, 151, 107}, {252, 253, 191}}}, 47420106},
  };
  for (const auto& p : pinned) {
    const auto table = color_map_table(p.map, Palette::kDefault);
    const int at[] = {0, 77, 128, 200, 255};
    for (size_t k = 0; k < 5; ++k) {
      for (int c = 0; c < 3; ++c) EXPECT_EQ(table[at[k]][c], p.entries[k][c]) << color_map_name(p.map) << " " << at[k];
    }
    uint64_t sum = 0;
    for (size_t i = 0; i < table.size(); ++i) sum += (i + 1) * (table[i][0] + 3u * table[i][1] + 7u * table[i][2]);
    EXPECT_EQ(sum, p.weighted_sum) << color_map_name(p.map);
    // A 1.3 value (the scale alone) is palette 0.
    unsigned char rgb[3];
    tm_kit_colormap_entry(static_cast<int64_t>(p.map), 77, rgb);
    EXPECT_EQ(rgb[0], table[77][0]);
  }
}

TEST(Palettes, AScaleTakesPalettesOfItsKindOnly) {
  EXPECT_EQ(tm_kit_colormap_problem(TM_COLORMAP(TM_COLORMAP_SEQUENTIAL, TM_PALETTE_CIVIDIS)), nullptr);
  EXPECT_EQ(tm_kit_colormap_problem(TM_COLORMAP(TM_COLORMAP_LOG_MAGNITUDE, TM_PALETTE_GREYS)), nullptr);
  EXPECT_EQ(tm_kit_colormap_problem(TM_COLORMAP(TM_COLORMAP_DIVERGING, TM_PALETTE_RDBU)), nullptr);
  EXPECT_NE(tm_kit_colormap_problem(TM_COLORMAP(TM_COLORMAP_DIVERGING, TM_PALETTE_VIRIDIS)), nullptr);
  EXPECT_NE(tm_kit_colormap_problem(TM_COLORMAP(TM_COLORMAP_SEQUENTIAL, TM_PALETTE_COOLWARM)), nullptr);
  EXPECT_NE(tm_kit_colormap_problem(3), nullptr);                                     // no scale 3
  EXPECT_NE(tm_kit_colormap_problem(TM_COLORMAP(TM_COLORMAP_SEQUENTIAL, 8)), nullptr);  // no palette 8
  EXPECT_NE(tm_kit_colormap_problem(-1), nullptr);
  EXPECT_EQ(TM_COLORMAP_MAX, 114);

  RenderParams p;
  p.colormap = ColorMap::kDiverging;
  p.palette = Palette::kCoolwarm;
  EXPECT_TRUE(check_render_params(p).ok());
  p.palette = Palette::kInferno;
  const Status refused = check_render_params(p);
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("inferno with the diverging scale"), std::string::npos) << refused.message();
}

TEST(Palettes, NamesRoundTripAndIgnoreCase) {
  EXPECT_EQ(named_palettes().size(), static_cast<size_t>(TM_PALETTE_LAST));
  for (const auto& p : named_palettes()) EXPECT_EQ(palette_from_name(p.name), p.palette);
  EXPECT_EQ(palette_from_name("RdBu"), Palette::kRdBu);
  EXPECT_EQ(palette_from_name("Greys"), Palette::kGreys);
  EXPECT_EQ(palette_from_name("default"), Palette::kDefault);
  EXPECT_EQ(palette_from_name("jet"), std::nullopt);
  EXPECT_EQ(palette_name(Palette::kDefault), "default");
  EXPECT_EQ(drawn_from(ColorMap::kSequential), Palette::kViridis);
  EXPECT_EQ(colormap_attribute(ColorMap::kLogMagnitude, Palette::kInferno), 2 + (4 << 4));
}

}  // namespace
}  // namespace tensormorph::ops
