// tm.render_tile@1: the reference against tm.tile_stats@1's independent reference, the CPU backend
// against the reference through the real scheduler, and the consent ladder under a memory budget.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include <filesystem>

#include "engine/compute_session.h"
#include "engine/matrix_shape.h"
#include "tensormorph/open.h"
#include "engine/pyramid.h"
#include "engine/render_ops.h"
#include "compute/constraints.h"
#include "compute/ops/render_tile.h"
#include "tensormorph/decode.h"

namespace tensormorph {
namespace {

using ops::ColorMap;
using ops::PixelStat;
using ops::RenderParams;

std::vector<float> random_matrix(uint64_t rows, uint64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> v(rows * cols);
  for (auto& x : v) x = normal(rng);
  return v;
}

std::vector<std::byte> bf16_bytes(const std::vector<float>& values) {
  std::vector<std::byte> out(values.size() * 2);
  for (size_t i = 0; i < values.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &values[i], 4);
    const uint16_t top = static_cast<uint16_t>(bits >> 16);  // truncation: exact for the test's purpose
    std::memcpy(out.data() + 2 * i, &top, 2);
  }
  return out;
}

std::array<uint8_t, 4> pixel(const std::vector<uint8_t>& rgba, uint32_t y, uint32_t x) {
  const size_t at = (static_cast<size_t>(y) * ops::kRenderTilePixels + x) * 4;
  return {rgba[at], rgba[at + 1], rgba[at + 2], rgba[at + 3]};
}

// Every pixel of a values tile equals the colour of tile_stats_reference's tile with T = cell.
void expect_matches_tile_stats(const ops::MatrixView& m, const RenderParams& p) {
  std::vector<uint8_t> rgba(ops::kRenderTileBytes);
  ASSERT_TRUE(ops::render_values_reference(m, p, rgba).ok());
  const uint64_t side = ops::kRenderTilePixels * p.cell;
  const ops::ViewRange range{p.row_begin, std::min(m.rows, p.row_begin + side), p.col_begin,
                             std::min(m.cols, p.col_begin + side)};
  const uint32_t tile = static_cast<uint32_t>(p.cell);
  const ops::TileGrid grid = ops::tile_grid(range, tile);
  std::vector<TM_TileStats> stats(grid.count());
  ASSERT_TRUE(ops::tile_stats_reference(m, range, tile, stats).ok());
  for (uint32_t y = 0; y < ops::kRenderTilePixels; ++y) {
    for (uint32_t x = 0; x < ops::kRenderTilePixels; ++x) {
      const bool inside = y < grid.rows && x < grid.cols;
      const auto want = inside ? ops::render_pixel_colour(stats[y * grid.cols + x], p) : std::array<uint8_t, 4>{};
      ASSERT_EQ(pixel(rgba, y, x), want) << "pixel " << y << "," << x << " stat " << ops::pixel_stat_name(p.stat);
    }
  }
}

TEST(RenderTile, BlocksAreTileStatisticsWithTEqualToTheCell) {
  auto values = random_matrix(700, 530, 1);
  values[3 * 530 + 9] = std::numeric_limits<float>::quiet_NaN();
  values[600 * 530 + 500] = -std::numeric_limits<float>::infinity();
  values[20 * 530 + 300] = 5.0f;  // an outlier the absmax/envelope pixel must show
  const auto bytes = bf16_bytes(values);
  const ops::MatrixView m{DType::kBF16, bytes, 700, 530};
  for (PixelStat stat : {PixelStat::kMean, PixelStat::kAbsmax, PixelStat::kEnvelope, PixelStat::kStd, PixelStat::kNonFinite}) {
    RenderParams p;
    p.cell = 8;
    p.stat = stat;
    p.lo = -0.05;
    p.hi = 0.05;
    expect_matches_tile_stats(m, p);
    p.row_begin = 16;
    p.col_begin = 64;
    p.cell = 16;
    expect_matches_tile_stats(m, p);
  }
}

TEST(RenderTile, DeepestLevelShowsEachElementAndMagnifies) {
  const auto values = random_matrix(40, 300, 2);
  const auto bytes = std::as_bytes(std::span(values));
  const ops::MatrixView m{DType::kF32, bytes, 40, 300};
  RenderParams p;
  p.colormap = ColorMap::kSequential;
  p.lo = -0.04;
  p.hi = 0.04;
  p.magnify = 4;
  p.row_begin = 10;
  p.col_begin = 250;
  std::vector<uint8_t> rgba(ops::kRenderTileBytes);
  ASSERT_TRUE(ops::render_values_reference(m, p, rgba).ok());
  // Pixel (y, x) shows element (10 + y / 4, 250 + x / 4); past the matrix it is transparent.
  for (uint32_t y = 0; y < 256; y += 3) {
    for (uint32_t x = 0; x < 256; x += 5) {
      const uint64_t r = 10 + y / 4, c = 250 + x / 4;
      std::array<uint8_t, 4> want{};
      if (r < 40 && c < 300) {
        TM_TileStats s = ops::empty_tile_stats();
        const float v = values[r * 300 + c];
        s.count = 1;
        s.min = s.max = v;
        s.absmax = std::fabs(v);
        s.sum = v;
        s.sum_sq = static_cast<double>(v) * v;
        want = ops::render_pixel_colour(s, p);
        EXPECT_EQ(want[3], 255);
      }
      ASSERT_EQ(pixel(rgba, y, x), want) << y << "," << x;
    }
  }
}

TEST(RenderTile, NonFiniteAlwaysShowsAndRangesAreChecked) {
  TM_TileStats s = ops::empty_tile_stats();
  s.count = 4;
  s.nan = 1;
  RenderParams p;
  for (PixelStat stat : {PixelStat::kMean, PixelStat::kStd, PixelStat::kMin}) {
    p.stat = stat;
    EXPECT_EQ(ops::render_pixel_colour(s, p), (std::array<uint8_t, 4>{255, 0, 255, 255}));
  }
  p.lo = 1;
  p.hi = 1;
  EXPECT_EQ(ops::check_render_params(p).code(), StatusCode::kInvalidArgument);
  p = {};
  p.cell = 3;
  EXPECT_EQ(ops::check_render_params(p).code(), StatusCode::kInvalidArgument);
  p = {};
  p.colormap = ColorMap::kLogMagnitude;
  p.lo = 0;
  EXPECT_EQ(ops::check_render_params(p).code(), StatusCode::kInvalidArgument);
  p = {};
  p.magnify = 2;
  p.cell = 2;
  EXPECT_EQ(ops::check_render_params(p).code(), StatusCode::kInvalidArgument);
}

class RenderThroughScheduler : public ::testing::Test {
 protected:
  std::unique_ptr<engine::ComputeSession> open(uint64_t budget) {
    engine::SessionOptions options;
    options.settings.memory_budget_bytes = budget;
    auto session = engine::ComputeSession::open(options);
    EXPECT_TRUE(session.ok()) << session.status().to_string();
    return std::move(session).value();
  }
};

TEST_F(RenderThroughScheduler, CpuBackendIsBitwiseTheReferenceAndLeavesARecord) {
  auto values = random_matrix(1000, 640, 3);
  values[999 * 640 + 639] = std::numeric_limits<float>::infinity();
  const auto bytes = bf16_bytes(values);
  auto session = open(0);
  // The CPU backend's bytes are what this checks; where cost places a render is other tests' (on a
  // loaded machine the CPU's calibration can make a software GPU look cheaper).
  session->scheduler().set_constraints(*compute::parse_constraints("only=cpu"));
  // Cells below 8 run the reference in bands, larger ones the SIMD tile_stats kernels: both must
  // give the reference's bytes, also for tiles that hang over the matrix's edges.
  // Palettes too (both render paths): the colours are the reference's whatever the palette.
  struct Case {
    uint64_t cell, row_begin, col_begin;
    PixelStat stat;
    ColorMap scale = ColorMap::kDiverging;
    ops::Palette palette = ops::Palette::kDefault;
  };
  for (const Case& c : {Case{1, 0, 0, PixelStat::kEnvelope}, Case{2, 0, 0, PixelStat::kEnvelope},
                        Case{4, 0, 0, PixelStat::kEnvelope}, Case{8, 0, 0, PixelStat::kEnvelope},
                        Case{8, 256, 128, PixelStat::kMean}, Case{32, 0, 0, PixelStat::kStd},
                        Case{16, 992, 600, PixelStat::kNonFinite}, Case{64, 0, 64, PixelStat::kAbsmax},
                        Case{2, 0, 0, PixelStat::kEnvelope, ColorMap::kDiverging, ops::Palette::kRdBu},
                        Case{16, 0, 0, PixelStat::kMean, ColorMap::kSequential, ops::Palette::kCividis}}) {
    const uint64_t cell = c.cell;
    RenderParams p;
    p.cell = cell;
    p.row_begin = c.row_begin;
    p.col_begin = c.col_begin;
    p.stat = c.stat;
    p.colormap = c.scale;
    p.palette = c.palette;
    p.lo = -0.06;
    p.hi = 0.06;
    std::vector<uint8_t> want(ops::kRenderTileBytes);
    ASSERT_TRUE(ops::render_values_reference({DType::kBF16, bytes, 1000, 640}, p, want).ok());
    compute::OpRequest request;
    request.op = ops::kOpRenderTile;
    std::vector<uint8_t> got(ops::kRenderTileBytes, 7);
    request.inputs.push_back({TM_DTYPE_BF16, {1000, 640}, bytes, 0});
    request.outputs.push_back({TM_DTYPE_U8, {256, 256, 4}, std::as_writable_bytes(std::span(got))});
    request.attributes = {{"source", 0, 0}, {"row_begin", static_cast<int64_t>(c.row_begin), 0},
                          {"col_begin", static_cast<int64_t>(c.col_begin), 0},
                          {"cell", static_cast<int64_t>(cell), 0}, {"magnify", 1, 0},
                          {"stat", static_cast<int64_t>(c.stat), 0},
                          {"colormap", ops::colormap_attribute(c.scale, c.palette), 0}, {"lo", 0, -0.06},
                          {"hi", 0, 0.06}};
    auto placed = session->scheduler().run(request);
    ASSERT_TRUE(placed.ok()) << placed.status().to_string();
    ASSERT_TRUE(placed->executed);
    EXPECT_EQ(placed->record.op, ops::kOpRenderTile);
    EXPECT_EQ(placed->record.backend, "cpu");
    EXPECT_EQ(placed->record.exactness, "bitwise");
    EXPECT_EQ(got, want) << "cell " << cell << " at (" << c.row_begin << ", " << c.col_begin << "), palette "
                         << ops::palette_name(c.palette);
  }
}

TEST_F(RenderThroughScheduler, StridedPyTorchViewsRenderTheirOwnElements) {
  // views.pt: one 3 x 4 F32 storage seen as a transpose, a row, a column and a broadcast.
  auto checkpoint = open_checkpoint(std::filesystem::path(TM_SOURCE_DIR) / "tests/fixtures/pytorch/views.pt");
  ASSERT_TRUE(checkpoint.ok()) << checkpoint.status().to_string();
  auto session = open(0);
  for (const char* name : {"transposed", "col1", "broadcast"}) {
    const TensorInfo* t = (*checkpoint)->find(name);
    ASSERT_NE(t, nullptr) << name;
    ASSERT_FALSE(t->contiguous()) << name;
    const auto values = (*checkpoint)->decode_f32(*t);
    ASSERT_TRUE(values.ok()) << values.status().to_string();
    const engine::MatrixShape m = engine::as_matrix(*t);
    const auto bytes = std::as_bytes(std::span(*values));
    for (uint64_t row_begin : {uint64_t{0}, m.rows - 1}) {
      RenderParams p;
      p.cell = 1;
      p.magnify = 32;
      p.row_begin = row_begin;
      p.lo = -12;
      p.hi = 12;
      std::vector<uint8_t> want(ops::kRenderTileBytes);
      ASSERT_TRUE(ops::render_values_reference({DType::kF32, bytes, m.rows, m.cols}, p, want).ok());
      auto got = engine::render_tensor_tile(session->scheduler(), **checkpoint, *t, p, "");
      ASSERT_TRUE(got.ok()) << name << ": " << got.status().to_string();
      ASSERT_FALSE(got->needs_consent);
      EXPECT_EQ(got->rgba, want) << name << " from row " << row_begin;
    }
  }
}

TEST_F(RenderThroughScheduler, StatisticsGridRendersThroughTheScheduler) {
  const auto values = random_matrix(64, 64, 4);
  const auto bytes = std::as_bytes(std::span(values));
  std::vector<TM_TileStats> grid(8 * 8);
  ASSERT_TRUE(ops::tile_stats_reference({DType::kF32, bytes, 64, 64}, {0, 64, 0, 64}, 8, grid).ok());
  RenderParams p;
  p.source = ops::RenderSource::kTileStats;
  p.stat = PixelStat::kAbsmax;
  p.colormap = ColorMap::kSequential;
  p.lo = 0;
  p.hi = 0.08;
  auto session = open(0);
  auto out = engine::render_stats_tile(session->scheduler(), grid, 8, 8, p);
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  ASSERT_FALSE(out->needs_consent);
  for (uint32_t y = 0; y < 10; ++y) {
    for (uint32_t x = 0; x < 10; ++x) {
      const auto want = y < 8 && x < 8 ? ops::render_pixel_colour(grid[y * 8 + x], p) : std::array<uint8_t, 4>{};
      EXPECT_EQ(pixel(out->rgba, y, x), want);
    }
  }
}

TEST_F(RenderThroughScheduler, OverBudgetNeedsConsentAndTheSampledRungRuns) {
  const auto values = random_matrix(2048, 2048, 5);
  const auto bytes = std::as_bytes(std::span(values));
  RenderParams p;
  p.cell = 8;
  const uint64_t exact = ops::render_working_bytes(p, 2048, 2048);
  RenderParams sampled = p;
  sampled.sampled = true;
  const uint64_t cheap = ops::render_working_bytes(sampled, 2048, 2048);
  ASSERT_LT(cheap, exact);
  auto session = open((exact + cheap) / 2);
  compute::OpRequest request;
  request.op = ops::kOpRenderTile;
  std::vector<uint8_t> got(ops::kRenderTileBytes);
  request.inputs.push_back({TM_DTYPE_F32, {2048, 2048}, bytes, 0});
  request.outputs.push_back({TM_DTYPE_U8, {256, 256, 4}, std::as_writable_bytes(std::span(got))});
  request.attributes = {{"source", 0, 0}, {"row_begin", 0, 0}, {"col_begin", 0, 0}, {"cell", 8, 0}, {"magnify", 1, 0},
                        {"stat", 0, 0},   {"colormap", 0, 0},  {"lo", 0, -1},      {"hi", 0, 1}};
  auto placed = session->scheduler().run(request);
  ASSERT_TRUE(placed.ok()) << placed.status().to_string();
  ASSERT_FALSE(placed->executed);
  EXPECT_NE(placed->needs_consent_reason.find("memory budget"), std::string::npos) << placed->needs_consent_reason;
  ASSERT_EQ(placed->ladder.size(), 1u);
  EXPECT_EQ(placed->ladder[0].id, ops::kOpRenderTileSampled);
  request.consent = ops::kOpRenderTileSampled;
  auto consented = session->scheduler().run(request);
  ASSERT_TRUE(consented.ok()) << consented.status().to_string();
  ASSERT_TRUE(consented->executed);
  EXPECT_EQ(consented->record.exactness, "approximate");
  EXPECT_EQ(consented->record.reason, compute::PlacementReason::kConsented);
  std::vector<uint8_t> want(ops::kRenderTileBytes);
  ASSERT_TRUE(ops::render_values_reference({DType::kF32, bytes, 2048, 2048}, sampled, want).ok());
  EXPECT_EQ(got, want);
}

}  // namespace
}  // namespace tensormorph
