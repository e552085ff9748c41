// tm.render_tile@1 through the C ABI. The OpenCL plugin's renders from values (block statistics on
// the device) and from statistics grids are checked bit for bit against a plain reference: one
// block of tm.tile_stats@1 per pixel, coloured by the kit's tm_kit_pixel_colour. Also what it
// declares and refuses, the kit's validation messages, and the C kit plugin: a strict-C11 plugin
// built from plugin.h and plugin_kit.h alone.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "plugin_host.h"
#include "reference.h"
#include "test_support.h"

namespace tm_opencl_test {
namespace {

constexpr uint64_t kRows = 700, kCols = 768;  // the host's conformance matrix

/// Both verdicts a host gets on one call: estimate's and execute's.
struct Outcome {
  CallResult estimated;  ///< estimate's result
  CallResult executed;   ///< execute's result
};

/// Asks `api` to estimate, then to execute, `call` on `backend`.
Outcome estimate_and_execute(const TM_PluginApi* api, TM_Backend* backend, OpCall& call,
                             TM_ExecutionReport* report = nullptr) {
  Outcome outcome;
  TM_CostEstimate estimate{};
  estimate.struct_size = sizeof estimate;
  outcome.estimated = take_error(api, api->estimate(backend, call.instance(), &estimate));
  outcome.executed = take_error(api, api->execute(backend, call.instance(), nullptr, report));
  return outcome;
}

/// The kit's own verdict on a render instance.
TM_KitStatus kit_render_verdict(OpCall& call) {
  TM_KitRenderTile parsed;
  TM_KitStatus status = tm_kit_ok();
  tm_kit_parse_render_tile(call.instance(), &parsed, &status);
  return status;
}

/// "cell 8 at (0, 0), stat 4, map 0" for failure messages.
std::string describe(const RenderParams& p) {
  return "cell " + std::to_string(p.cell) + " magnify " + std::to_string(p.magnify) + " at (" +
         std::to_string(p.row_begin) + ", " + std::to_string(p.col_begin) + "), stat " + std::to_string(p.stat) +
         ", map " + std::to_string(p.colormap);
}

/// The colour range the tests use for each map.
RenderParams with_map(RenderParams p, int64_t colormap) {
  p.colormap = colormap;
  const bool log = (colormap & TM_COLORMAP_SCALE_MASK) == TM_COLORMAP_LOG_MAGNITUDE;
  p.lo = log ? 1e-4 : -0.05;
  p.hi = log ? 1.0 : 0.05;
  return p;
}

class RenderTest : public PluginTest {
 protected:
  /// Renders F32 `values` (rows x cols) on `b` and checks the pixels and the report.
  void expect_values_render(TM_Backend* b, const std::vector<float>& values, uint64_t rows, uint64_t cols,
                            const RenderParams& p) {
    std::vector<uint8_t> got;
    OpCall call = render_values_call(TM_DTYPE_F32, rows, cols, values.data(), values.size() * 4, p, got);
    TM_ExecutionReport report{};
    report.struct_size = sizeof report;
    const CallResult result = execute(b, call, nullptr, &report);
    ASSERT_EQ(result.code, TM_STATUS_OK) << describe(p) << ": " << result.message;
    EXPECT_TRUE(pixels_equal(got, reference_render_values(values, rows, cols, p))) << describe(p);
    EXPECT_EQ(report.exactness, TM_EXACT_BITWISE);
    EXPECT_EQ(report.bytes_written, kRenderTileBytes);
    EXPECT_EQ(report.output_nbytes[0], kRenderTileBytes);
  }

  /// Renders the statistics `grid` (rows x cols) on `b` and checks the pixels.
  void expect_stats_render(TM_Backend* b, const std::vector<TM_TileStats>& grid, uint64_t rows, uint64_t cols,
                           const RenderParams& p) {
    std::vector<uint8_t> got;
    OpCall call = render_stats_call(grid.data(), rows, cols, p, got);
    TM_ExecutionReport report{};
    report.struct_size = sizeof report;
    const CallResult result = execute(b, call, nullptr, &report);
    ASSERT_EQ(result.code, TM_STATUS_OK) << describe(p) << ": " << result.message;
    EXPECT_TRUE(pixels_equal(got, reference_render_stats(grid, rows, cols, p))) << describe(p);
    EXPECT_EQ(report.exactness, TM_EXACT_BITWISE);
    EXPECT_EQ(report.output_nbytes[0], kRenderTileBytes);
  }
};

// ------------------------------------------------------------------------------------------------
// What the plugin declares.

TEST_F(RenderTest, DeclaresValuesAsPartialAndStatisticsAsFull) {
  TM_Backend* b = backend();
  ASSERT_NE(b, nullptr);
  TM_OpSupport support{};
  for (TM_DType dtype : {TM_DTYPE_F32, TM_DTYPE_F16}) {
    ASSERT_EQ(query(b, TM_OP_RENDER_TILE, dtype, TM_SHAPE_MATRIX, support).code, TM_STATUS_OK);
    EXPECT_EQ(support.level, TM_SUPPORT_PARTIAL);
    EXPECT_EQ(support.exactness, TM_EXACT_BITWISE);
    const std::string reason = support.reason;
    for (const char* named : {"cell < 8", "magnify > 1", "U8 TENSOR", TM_OP_RENDER_TILE_SAMPLED, "other dtypes"}) {
      EXPECT_NE(reason.find(named), std::string::npos) << "the reason should name " << named << ": " << reason;
    }
  }
  ASSERT_EQ(query(b, TM_OP_RENDER_TILE, TM_DTYPE_U8, TM_SHAPE_TENSOR, support).code, TM_STATUS_OK);
  EXPECT_EQ(support.level, TM_SUPPORT_FULL);
  EXPECT_EQ(support.exactness, TM_EXACT_BITWISE);
  for (const auto& [dtype, shape] : {std::pair{TM_DTYPE_BF16, TM_SHAPE_MATRIX}, std::pair{TM_DTYPE_Q8_0, TM_SHAPE_MATRIX},
                                     std::pair{TM_DTYPE_U8, TM_SHAPE_MATRIX}, std::pair{TM_DTYPE_F32, TM_SHAPE_TENSOR}}) {
    ASSERT_EQ(query(b, TM_OP_RENDER_TILE, dtype, shape, support).code, TM_STATUS_OK);
    EXPECT_EQ(support.level, TM_SUPPORT_NONE) << dtype << " " << shape;
    EXPECT_GT(std::strlen(support.reason), 0u);
  }
  ASSERT_EQ(query(b, TM_OP_RENDER_TILE_SAMPLED, TM_DTYPE_F32, TM_SHAPE_MATRIX, support).code, TM_STATUS_OK);
  EXPECT_EQ(support.level, TM_SUPPORT_NONE);
  EXPECT_NE(std::string(support.reason).find("does not implement " TM_OP_RENDER_TILE_SAMPLED), std::string::npos);
}

TEST_F(RenderTest, WithoutFloat64OnlyStatisticsAreOffered) {
  TM_Backend* b = backend("assume_no_fp64=1;bandwidth_probe_mib=0");
  ASSERT_NE(b, nullptr);
  TM_OpSupport support{};
  ASSERT_EQ(query(b, TM_OP_RENDER_TILE, TM_DTYPE_F32, TM_SHAPE_MATRIX, support).code, TM_STATUS_OK);
  EXPECT_EQ(support.level, TM_SUPPORT_NONE);
  EXPECT_NE(std::string(support.reason).find("cl_khr_fp64"), std::string::npos) << support.reason;
  ASSERT_EQ(query(b, TM_OP_RENDER_TILE, TM_DTYPE_U8, TM_SHAPE_TENSOR, support).code, TM_STATUS_OK);
  EXPECT_EQ(support.level, TM_SUPPORT_FULL);

  const std::vector<float> values = weights_f32(64 * 64, 3);
  std::vector<uint8_t> out;
  OpCall call = render_values_call(TM_DTYPE_F32, 64, 64, values.data(), values.size() * 4, RenderParams{}, out);
  const Outcome refused = estimate_and_execute(api_, b, call);
  EXPECT_EQ(refused.estimated.code, TM_STATUS_UNIMPLEMENTED);
  EXPECT_EQ(refused.executed.code, TM_STATUS_UNIMPLEMENTED);
  RenderParams stats;
  stats.source = TM_RENDER_SOURCE_TILE_STATS;
  stats.cell = 1;
  expect_stats_render(b, random_stats_grid(20, 30, 4), 20, 30, stats);
}

// ------------------------------------------------------------------------------------------------
// Renders from values, bit for bit, for both reduction strategies.

class RenderValuesTest : public RenderTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(RenderValuesTest, HostConformanceCasesOfF32) {
  TM_Backend* b = backend(GetParam());
  ASSERT_NE(b, nullptr);
  struct Case {
    uint64_t cell, row_begin, col_begin;
    int64_t stat;
  };
  const Case cases[] = {{8, 0, 0, TM_PIXEL_STAT_ENVELOPE}, {16, 64, 96, TM_PIXEL_STAT_MEAN},
                        {32, 0, 0, TM_PIXEL_STAT_STD},     {8, 512, 512, TM_PIXEL_STAT_NON_FINITE},
                        {64, 0, 64, TM_PIXEL_STAT_ABSMAX}};
  for (const std::vector<float>& values : {weights_f32(kRows * kCols, 21), random_f32(kRows * kCols, 22)}) {
    for (const Case& c : cases) {
      RenderParams p;
      p.cell = c.cell;
      p.row_begin = c.row_begin;
      p.col_begin = c.col_begin;
      p.stat = c.stat;
      expect_values_render(b, values, kRows, kCols, p);
    }
  }
}

TEST_P(RenderValuesTest, EveryStatisticWithEveryColourMap) {
  TM_Backend* b = backend(GetParam());
  ASSERT_NE(b, nullptr);
  const uint64_t rows = 300, cols = 500;
  const std::vector<float> values = weights_f32(rows * cols, 31);
  // The scales' own tables, then palettes (ABI 1.4) of each kind.
  for (int64_t colormap : {int64_t{TM_COLORMAP_DIVERGING}, int64_t{TM_COLORMAP_SEQUENTIAL},
                           int64_t{TM_COLORMAP_LOG_MAGNITUDE}, TM_COLORMAP(TM_COLORMAP_SEQUENTIAL, TM_PALETTE_CIVIDIS),
                           TM_COLORMAP(TM_COLORMAP_LOG_MAGNITUDE, TM_PALETTE_INFERNO),
                           TM_COLORMAP(TM_COLORMAP_DIVERGING, TM_PALETTE_RDBU)}) {
    for (int64_t stat = TM_PIXEL_STAT_MEAN; stat <= TM_PIXEL_STAT_NON_FINITE; ++stat) {
      RenderParams p = with_map(RenderParams{}, colormap);
      p.cell = 16;
      p.row_begin = 8;  // not a multiple of the cell: blocks need not align with anything
      p.col_begin = 24;
      p.stat = stat;
      expect_values_render(b, values, rows, cols, p);
    }
  }
}

TEST_P(RenderValuesTest, EdgesOfTheMatrix) {
  TM_Backend* b = backend(GetParam());
  ASSERT_NE(b, nullptr);
  const std::vector<float> values = weights_f32(kRows * kCols, 41);
  const RenderParams base;
  const auto at = [&](uint64_t cell, uint64_t row, uint64_t col) {
    RenderParams p = base;
    p.cell = cell;
    p.row_begin = row;
    p.col_begin = col;
    return p;
  };
  for (const RenderParams& p : {at(8, 699, 767),    // one element in the corner block, the rest transparent
                                at(8, 700, 0),      // starts past the last row: all transparent
                                at(8, 0, 768),      // starts past the last column
                                at(512, 100, 300),  // ragged blocks on both edges
                                at(4096, 0, 0),     // one block holds the whole matrix
                                at(128, 3, 5)}) {
    expect_values_render(b, values, kRows, kCols, p);
  }
  // A matrix larger than the tile: 256 x 256 whole blocks inside it.
  const uint64_t rows = 2300, cols = 2100;
  const std::vector<float> big = weights_f32(rows * cols, 42);
  expect_values_render(b, big, rows, cols, at(8, 100, 36));
}

TEST_P(RenderValuesTest, F16Values) {
  TM_Backend* b = backend(GetParam());
  ASSERT_NE(b, nullptr);
  for (const std::vector<uint16_t>& halves : {weights_f16(kRows * kCols, 51), random_f16(kRows * kCols, 52)}) {
    const std::vector<float> widened = widen_f16(halves);
    RenderParams p;
    for (const auto& [cell, row, col, stat] :
         {std::tuple<uint64_t, uint64_t, uint64_t, int64_t>{8, 0, 0, TM_PIXEL_STAT_MEAN},
          {32, 64, 96, TM_PIXEL_STAT_ENVELOPE},
          {16, 512, 512, TM_PIXEL_STAT_STD}}) {
      p.cell = cell;
      p.row_begin = row;
      p.col_begin = col;
      p.stat = stat;
      std::vector<uint8_t> got;
      OpCall call = render_values_call(TM_DTYPE_F16, kRows, kCols, halves.data(), halves.size() * 2, p, got);
      const CallResult result = execute(b, call);
      ASSERT_EQ(result.code, TM_STATUS_OK) << result.message;
      EXPECT_TRUE(pixels_equal(got, reference_render_values(widened, kRows, kCols, p))) << describe(p);
    }
  }
}

TEST_P(RenderValuesTest, FromDeviceBuffers) {
  TM_Backend* b = backend(GetParam());
  ASSERT_NE(b, nullptr);
  const uint64_t rows = 333, cols = 250;
  RenderParams p;
  p.cell = 16;
  p.row_begin = 5;
  p.col_begin = 7;
  p.stat = TM_PIXEL_STAT_ENVELOPE;

  const std::vector<float> values = weights_f32(rows * cols, 61);
  BufferPtr f32 = upload(b, values.data(), values.size() * 4, 12);
  ASSERT_TRUE(f32);
  std::vector<uint8_t> got;
  OpCall call = render_values_call(TM_DTYPE_F32, rows, cols, nullptr, values.size() * 4, p, got);
  call.inputs[0].buffer = f32.get();
  call.inputs[0].byte_offset = 12;
  CallResult result = execute(b, call);
  ASSERT_EQ(result.code, TM_STATUS_OK) << result.message;
  EXPECT_TRUE(pixels_equal(got, reference_render_values(values, rows, cols, p)));

  const std::vector<uint16_t> halves = weights_f16(rows * cols, 62);
  BufferPtr f16 = upload(b, halves.data(), halves.size() * 2, 6);
  ASSERT_TRUE(f16);
  call = render_values_call(TM_DTYPE_F16, rows, cols, nullptr, halves.size() * 2, p, got);
  call.inputs[0].buffer = f16.get();
  call.inputs[0].byte_offset = 6;
  result = execute(b, call);
  ASSERT_EQ(result.code, TM_STATUS_OK) << result.message;
  EXPECT_TRUE(pixels_equal(got, reference_render_values(widen_f16(halves), rows, cols, p)));
}

INSTANTIATE_TEST_SUITE_P(Reductions, RenderValuesTest, ::testing::Values("reduction=seq", "reduction=group"));

TEST_F(RenderTest, ChunkedBlockStatisticsGiveTheSamePixels) {
  // 1 MiB of staging holds about 14 blocks of 128 x 128: the tile's 10 x 11 blocks take many chunks.
  TM_Backend* b = backend("staging_mib=1");
  ASSERT_NE(b, nullptr);
  const uint64_t rows = 1200, cols = 1300;
  const std::vector<float> values = weights_f32(rows * cols, 71);
  RenderParams p;
  p.cell = 128;
  p.stat = TM_PIXEL_STAT_STD;
  expect_values_render(b, values, rows, cols, p);

  std::vector<uint8_t> got;
  OpCall call = render_values_call(TM_DTYPE_F32, rows, cols, values.data(), values.size() * 4, p, got);
  TM_ExecutionPolicy tiny = make_policy(TM_EXACT_BITWISE, 0.0, 1000);
  EXPECT_EQ(execute(b, call, &tiny).code, TM_STATUS_RESOURCE_EXHAUSTED) << "one block needs more than the budget";
}

// ------------------------------------------------------------------------------------------------
// Refusals: well-formed instances the plugin does not take are UNIMPLEMENTED from estimate (so the
// host places them elsewhere before anything runs) and from execute.

TEST_F(RenderTest, RefusesWhatItDoesNotTake) {
  TM_Backend* b = backend();
  ASSERT_NE(b, nullptr);
  const std::vector<float> values = weights_f32(kRows * kCols, 81);
  const std::vector<uint8_t> raw(kRows * kCols * 2, 0);
  struct Case {
    const char* what;
    std::function<void(OpCall&)> mutate;
    const char* message;
  };
  const auto with_cell = [](uint64_t cell, uint64_t magnify) {
    return [cell, magnify](OpCall& c) {
      c.attributes[3].i = static_cast<int64_t>(cell);
      c.attributes[4].i = static_cast<int64_t>(magnify);
    };
  };
  const Case cases[] = {
      {"cell 4 (the host's conformance case)", with_cell(4, 1), "cell >= 8 and magnify 1 only, not cell 4"},
      {"cell 1", with_cell(1, 1), "not cell 1 with magnify 1"},
      {"magnify 4", with_cell(1, 4), "not cell 1 with magnify 4"},
      {"the sampled variant", [](OpCall& c) { c.op = TM_OP_RENDER_TILE_SAMPLED; },
       "does not implement " TM_OP_RENDER_TILE_SAMPLED},
      {"BF16 values",
       [&](OpCall& c) {
         c.inputs[0].dtype = TM_DTYPE_BF16;
         c.inputs[0].host_data = raw.data();
         c.inputs[0].nbytes = kRows * kCols * 2;
       },
       "F32 and F16 only (not BF16)"},
      {"Q8_0 values",
       [&](OpCall& c) {
         c.inputs[0].dtype = TM_DTYPE_Q8_0;
         c.inputs[0].host_data = raw.data();
         c.inputs[0].nbytes = kRows * kCols / 32 * 34;
       },
       "F32 and F16 only (not Q8_0)"},
      {"U8 values",
       [&](OpCall& c) {
         c.inputs[0].dtype = TM_DTYPE_U8;
         c.inputs[0].host_data = raw.data();
         c.inputs[0].nbytes = kRows * kCols;
       },
       "F32 and F16 only (not U8)"},
      {"an output buffer", [](OpCall& c) { c.outputs[0].host_out = nullptr; c.outputs[0].buffer = nullptr; },
       nullptr},
  };
  BufferPtr buffer = upload(b, values.data(), kRenderTileBytes, 0);
  ASSERT_TRUE(buffer);
  for (const Case& c : cases) {
    std::vector<uint8_t> out;
    OpCall call = render_values_call(TM_DTYPE_F32, kRows, kCols, values.data(), values.size() * 4, RenderParams{}, out);
    c.mutate(call);
    if (c.message == nullptr) call.outputs[0].buffer = buffer.get();
    const Outcome outcome = estimate_and_execute(api_, b, call);
    EXPECT_EQ(outcome.estimated.code, TM_STATUS_UNIMPLEMENTED) << c.what << ": " << outcome.estimated.message;
    EXPECT_EQ(outcome.executed.code, TM_STATUS_UNIMPLEMENTED) << c.what << ": " << outcome.executed.message;
    if (c.message != nullptr) {
      EXPECT_NE(outcome.estimated.message.find(c.message), std::string::npos) << c.what << ": " << outcome.estimated.message;
    }
    EXPECT_EQ(out, std::vector<uint8_t>(kRenderTileBytes, 0xa5)) << c.what << ": a refused render wrote its output";
  }
}

// ------------------------------------------------------------------------------------------------
// Validation: malformed instances are INVALID_ARGUMENT with the kit's messages.

TEST_F(RenderTest, MalformedInstancesAreInvalidWithTheKitsMessages) {
  TM_Backend* b = backend();
  ASSERT_NE(b, nullptr);
  const std::vector<float> values(16 * 16, 0.01f);
  const std::vector<TM_TileStats> grid = random_stats_grid(4, 4, 91);
  const double nan = std::numeric_limits<double>::quiet_NaN();
  struct Case {
    std::function<void(OpCall&)> mutate;
    const char* message;  // what the kit says, after "tm.render_tile@1: "
    bool statistics;      // mutate a statistics render instead of a values render
  };
  const Case cases[] = {
      {[](OpCall& c) { c.attributes.erase(c.attributes.begin() + 7); }, "missing attribute 'lo'", false},
      {[](OpCall& c) { c.attributes[7].f = 0.05; }, "the range needs lo < hi", false},
      {[&](OpCall& c) { c.attributes[8].f = nan; }, "attribute 'hi' is out of range", false},
      {[](OpCall& c) { c.attributes[3].i = 12; }, "cell and magnify must be powers of two", false},
      {[](OpCall& c) { c.attributes[4].i = 2; }, "magnify > 1 needs cell 1", false},
      {[](OpCall& c) { c.attributes[6].i = TM_COLORMAP_LOG_MAGNITUDE; c.attributes[7].f = 0.0; },
       "the log colour map needs 0 < lo", false},
      {[](OpCall& c) { c.attributes[1].i = 17; }, "the tile starts outside the input", false},
      {[](OpCall& c) { c.outputs[0].shape[2] = 3; c.outputs[0].nbytes = 256 * 256 * 3; },
       "output must be U8[256, 256, 4]", false},
      {[](OpCall& c) { c.inputs[0].rank = 3; c.inputs[0].shape[2] = 1; }, "a values input has rank 2", false},
      {[](OpCall& c) { c.attributes[0].i = 2; }, "attribute 'source' is out of range [0, 1]", false},
      {[](OpCall& c) { c.attributes[5].i = 7; }, "attribute 'stat' is out of range [0, 6]", false},
      {[](OpCall& c) { c.attributes[6].i = TM_COLORMAP_MAX + 1; }, "attribute 'colormap' is out of range [0, 114]", false},
      {[](OpCall& c) { c.attributes[6].i = TM_COLORMAP(TM_COLORMAP_DIVERGING, TM_PALETTE_VIRIDIS); },
       "colormap 16: the diverging scale takes a diverging palette", false},
      {[](OpCall& c) { c.attributes.push_back(int_attribute("tile", 8)); }, "unknown attribute 'tile'", false},
      {[](OpCall& c) { c.attributes.push_back(int_attribute(TM_ATTR_CELL, 8)); }, "attribute 'cell' given twice", false},
      {[](OpCall& c) { c.outputs.clear(); }, "takes 1 input and 1 output, got 1 and 0", false},
      {[](OpCall& c) { c.inputs[0].nbytes -= 4; }, "input takes 1024 bytes, but nbytes is 1020", false},
      {[](OpCall& c) { c.outputs[0].host_out = nullptr; }, "output has neither host memory nor a buffer", false},
      // (The kit's message says 64; the check is against sizeof(TM_TileStats), which is 72.)
      {[](OpCall& c) { c.inputs[0].shape[2] = sizeof(TM_TileStats) / 2; c.inputs[0].nbytes /= 2; },
       "a statistics input is U8[grid_rows, grid_cols, ", true},
      {[](OpCall& c) { c.attributes[3].i = 8; }, "a statistics grid renders with cell 1", true},
      {[](OpCall& c) { c.attributes[2].i = 5; }, "the tile starts outside the input", true},
  };
  for (const Case& c : cases) {
    std::vector<uint8_t> out;
    RenderParams stats;
    stats.source = TM_RENDER_SOURCE_TILE_STATS;
    stats.cell = 1;
    OpCall call = c.statistics ? render_stats_call(grid.data(), 4, 4, stats, out)
                               : render_values_call(TM_DTYPE_F32, 16, 16, values.data(), values.size() * 4,
                                                    RenderParams{}, out);
    c.mutate(call);
    const Outcome outcome = estimate_and_execute(api_, b, call);
    const TM_KitStatus kit = kit_render_verdict(call);
    EXPECT_EQ(outcome.estimated.code, TM_STATUS_INVALID_ARGUMENT) << c.message;
    EXPECT_EQ(outcome.executed.code, TM_STATUS_INVALID_ARGUMENT) << c.message;
    EXPECT_EQ(outcome.executed.message, kit.message) << c.message;
    EXPECT_EQ(outcome.estimated.message, kit.message) << c.message;
    EXPECT_EQ(outcome.executed.message.rfind(std::string(TM_OP_RENDER_TILE ": ") + c.message, 0), 0u)
        << outcome.executed.message;
  }
  // The sampled variant is validated before it is refused.
  std::vector<uint8_t> out;
  OpCall call = render_values_call(TM_DTYPE_F32, 16, 16, values.data(), values.size() * 4, RenderParams{}, out);
  call.op = TM_OP_RENDER_TILE_SAMPLED;
  call.attributes[3].i = 12;
  const Outcome sampled = estimate_and_execute(api_, b, call);
  EXPECT_EQ(sampled.executed.code, TM_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(sampled.executed.message, TM_OP_RENDER_TILE_SAMPLED ": cell and magnify must be powers of two");
}

// ------------------------------------------------------------------------------------------------
// Renders from statistics grids.

TEST_F(RenderTest, StatisticsRendersMatchTheReference) {
  TM_Backend* b = backend();
  ASSERT_NE(b, nullptr);
  const uint64_t rows = 90, cols = 300;  // the host's conformance grid
  struct Case {
    uint64_t row, col, magnify;
    int64_t stat, colormap;
  };
  std::vector<Case> cases = {{0, 0, 1, TM_PIXEL_STAT_MEAN, TM_COLORMAP_DIVERGING},
                             {3, 5, 4, TM_PIXEL_STAT_ABSMAX, TM_COLORMAP_LOG_MAGNITUDE},
                             {0, 0, 2, TM_PIXEL_STAT_STD, TM_COLORMAP_SEQUENTIAL},
                             {89, 299, 256, TM_PIXEL_STAT_MEAN, TM_COLORMAP_DIVERGING},  // one cell fills the tile
                             {90, 0, 1, TM_PIXEL_STAT_MEAN, TM_COLORMAP_DIVERGING},      // nothing shown
                             {10, 290, 8, TM_PIXEL_STAT_ENVELOPE, TM_COLORMAP_DIVERGING}};
  for (int64_t stat = TM_PIXEL_STAT_MEAN; stat <= TM_PIXEL_STAT_NON_FINITE; ++stat) {
    cases.push_back({7, 11, 1, stat, stat % 3});
  }
  for (const std::vector<TM_TileStats>& grid : {random_stats_grid(rows, cols, 101), random_bytes_grid(rows, cols, 102)}) {
    for (const Case& c : cases) {
      RenderParams p = with_map(RenderParams{}, c.colormap);
      p.source = TM_RENDER_SOURCE_TILE_STATS;
      p.cell = 1;
      p.row_begin = c.row;
      p.col_begin = c.col;
      p.magnify = c.magnify;
      p.stat = c.stat;
      if (c.colormap == TM_COLORMAP_SEQUENTIAL) p.lo = 0.0;
      expect_stats_render(b, grid, rows, cols, p);
    }
  }
}

TEST_F(RenderTest, StatisticsFromADeviceBuffer) {
  TM_Backend* b = backend();
  ASSERT_NE(b, nullptr);
  const uint64_t rows = 40, cols = 70;
  const std::vector<TM_TileStats> grid = random_stats_grid(rows, cols, 111);
  BufferPtr buffer = upload(b, grid.data(), grid.size() * sizeof(TM_TileStats), 8);
  ASSERT_TRUE(buffer);
  RenderParams p;
  p.source = TM_RENDER_SOURCE_TILE_STATS;
  p.cell = 1;
  p.row_begin = 3;
  p.col_begin = 7;
  p.magnify = 2;
  std::vector<uint8_t> got;
  OpCall call = render_stats_call(nullptr, rows, cols, p, got);
  call.inputs[0].buffer = buffer.get();
  call.inputs[0].byte_offset = 8;
  const CallResult result = execute(b, call);
  ASSERT_EQ(result.code, TM_STATUS_OK) << result.message;
  EXPECT_TRUE(pixels_equal(got, reference_render_stats(grid, rows, cols, p)));
}

TEST_F(RenderTest, AnEmptyStatisticsGridIsTransparent) {
  TM_Backend* b = backend();
  ASSERT_NE(b, nullptr);
  RenderParams p;
  p.source = TM_RENDER_SOURCE_TILE_STATS;
  p.cell = 1;
  std::vector<uint8_t> got;
  OpCall call = render_stats_call(nullptr, 0, 0, p, got);
  const CallResult result = execute(b, call);
  ASSERT_EQ(result.code, TM_STATUS_OK) << result.message;
  EXPECT_EQ(got, std::vector<uint8_t>(kRenderTileBytes, 0));
}

// ------------------------------------------------------------------------------------------------
// The C kit plugin: strict C11, plugin.h and plugin_kit.h only.

/// The C kit plugin, loaded once for the suite.
class CKitPluginTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    library_ = PluginLibrary::open(TM_C_KIT_PLUGIN_PATH, error_).release();
    if (library_ != nullptr) api_ = negotiate_api(*library_, error_);
    if (api_ == nullptr) return;
    TM_BackendCreateArgs args{};
    args.struct_size = sizeof args;
    const CallResult created = take_error(api_, api_->backend_create(&args, &backend_));
    if (created.code != TM_STATUS_OK) error_ = created.message;
  }

  static void TearDownTestSuite() {
    if (backend_ != nullptr) api_->backend_destroy(backend_);
    backend_ = nullptr;
    api_ = nullptr;
    delete library_;
    library_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(api_, nullptr) << error_;
    ASSERT_NE(backend_, nullptr) << error_;
  }

  static PluginLibrary* library_;
  static const TM_PluginApi* api_;
  static TM_Backend* backend_;
  static std::string error_;
};

PluginLibrary* CKitPluginTest::library_ = nullptr;
const TM_PluginApi* CKitPluginTest::api_ = nullptr;
TM_Backend* CKitPluginTest::backend_ = nullptr;
std::string CKitPluginTest::error_;

TEST_F(CKitPluginTest, LoadsAsAPluginOfThisAbi) {
  EXPECT_EQ(library_->abi_version(), TM_PLUGIN_ABI_VERSION_PACK(TM_PLUGIN_ABI_MAJOR, TM_PLUGIN_ABI_MINOR));
  EXPECT_EQ(library_->get_api(2, 0), nullptr);
  EXPECT_STREQ(api_->name, "c_kit");
  EXPECT_EQ(api_->struct_size, sizeof(TM_PluginApi));
  EXPECT_EQ(api_->buffer_alloc, nullptr) << "it works in host memory only";
  TM_DeviceTraits traits{};
  traits.struct_size = sizeof traits;
  ASSERT_EQ(take_error(api_, api_->device_traits(backend_, &traits)).code, TM_STATUS_OK);
  EXPECT_EQ(traits.host_memory_visible, 1u);
  EXPECT_EQ(traits.memory_space_count, 0u);
}

TEST_F(CKitPluginTest, DeclaresStatisticsRendersOnly) {
  TM_OpQuery question{};
  question.struct_size = sizeof question;
  question.op = TM_OP_RENDER_TILE;
  question.input_dtype = TM_DTYPE_U8;
  question.shape_class = TM_SHAPE_TENSOR;
  TM_OpSupport support{};
  support.struct_size = sizeof support;
  ASSERT_EQ(take_error(api_, api_->query(backend_, &question, &support)).code, TM_STATUS_OK);
  EXPECT_EQ(support.level, TM_SUPPORT_FULL);
  EXPECT_EQ(support.exactness, TM_EXACT_BITWISE);
  question.input_dtype = TM_DTYPE_F32;
  question.shape_class = TM_SHAPE_MATRIX;
  ASSERT_EQ(take_error(api_, api_->query(backend_, &question, &support)).code, TM_STATUS_OK);
  EXPECT_EQ(support.level, TM_SUPPORT_NONE);
  EXPECT_NE(std::string(support.reason).find("statistics grids"), std::string::npos) << support.reason;
}

TEST_F(CKitPluginTest, RendersStatisticsBitForBit) {
  const uint64_t rows = 90, cols = 300;
  for (const std::vector<TM_TileStats>& grid : {random_stats_grid(rows, cols, 121), random_bytes_grid(rows, cols, 122)}) {
    for (const auto& [row, col, magnify, stat, colormap] :
         {std::tuple<uint64_t, uint64_t, uint64_t, int64_t, int64_t>{0, 0, 1, TM_PIXEL_STAT_MEAN, TM_COLORMAP_DIVERGING},
          {3, 5, 4, TM_PIXEL_STAT_ABSMAX, TM_COLORMAP_LOG_MAGNITUDE},
          {0, 0, 2, TM_PIXEL_STAT_STD, TM_COLORMAP_SEQUENTIAL},
          {80, 250, 16, TM_PIXEL_STAT_NON_FINITE, TM_COLORMAP_DIVERGING}}) {
      RenderParams p = with_map(RenderParams{}, colormap);
      p.source = TM_RENDER_SOURCE_TILE_STATS;
      p.cell = 1;
      p.row_begin = row;
      p.col_begin = col;
      p.magnify = magnify;
      p.stat = stat;
      std::vector<uint8_t> got;
      OpCall call = render_stats_call(grid.data(), rows, cols, p, got);
      TM_ExecutionReport report{};
      report.struct_size = sizeof report;
      const Outcome outcome = estimate_and_execute(api_, backend_, call, &report);
      ASSERT_EQ(outcome.estimated.code, TM_STATUS_OK) << outcome.estimated.message;
      ASSERT_EQ(outcome.executed.code, TM_STATUS_OK) << outcome.executed.message;
      EXPECT_TRUE(pixels_equal(got, reference_render_stats(grid, rows, cols, p))) << describe(p);
      EXPECT_EQ(report.exactness, TM_EXACT_BITWISE);
      EXPECT_EQ(report.output_nbytes[0], kRenderTileBytes);
    }
  }
}

TEST_F(CKitPluginTest, ValidatesWithTheKitAndDeclinesTheRest) {
  const std::vector<TM_TileStats> grid = random_stats_grid(4, 4, 131);
  RenderParams p;
  p.source = TM_RENDER_SOURCE_TILE_STATS;
  p.cell = 1;
  const std::pair<std::function<void(OpCall&)>, const char*> malformed[] = {
      {[](OpCall& c) { c.attributes[4].i = 3; }, "cell and magnify must be powers of two"},
      {[](OpCall& c) { c.attributes[7].f = 1.0; }, "the range needs lo < hi"},
      {[](OpCall& c) { c.attributes.pop_back(); }, "missing attribute 'hi'"},
      {[](OpCall& c) { c.inputs[0].nbytes = 64; }, "input takes 1152 bytes, but nbytes is 64"},
  };
  static_assert(4 * 4 * sizeof(TM_TileStats) == 1152);
  for (const auto& [mutate, message] : malformed) {
    std::vector<uint8_t> out;
    OpCall call = render_stats_call(grid.data(), 4, 4, p, out);
    mutate(call);
    const Outcome outcome = estimate_and_execute(api_, backend_, call);
    EXPECT_EQ(outcome.executed.code, TM_STATUS_INVALID_ARGUMENT) << message;
    EXPECT_EQ(outcome.estimated.code, TM_STATUS_INVALID_ARGUMENT) << message;
    EXPECT_EQ(outcome.executed.message, kit_render_verdict(call).message);
    EXPECT_EQ(outcome.executed.message, std::string(TM_OP_RENDER_TILE ": ") + message);
  }
  // Well-formed work it does not do.
  const std::vector<float> values(64 * 64, 0.0f);
  std::vector<uint8_t> out;
  OpCall from_values = render_values_call(TM_DTYPE_F32, 64, 64, values.data(), values.size() * 4, RenderParams{}, out);
  EXPECT_EQ(estimate_and_execute(api_, backend_, from_values).estimated.code, TM_STATUS_UNIMPLEMENTED);
  std::vector<TM_TileStats> tiles;
  OpCall tile_stats = tile_stats_call(TM_DTYPE_F32, 64, 64, values.data(), 4, 0, 64, 0, 64, 8, tiles);
  const Outcome declined = estimate_and_execute(api_, backend_, tile_stats);
  EXPECT_EQ(declined.executed.code, TM_STATUS_UNIMPLEMENTED);
  EXPECT_EQ(declined.executed.message, "c_kit plugin does not implement " TM_OP_TILE_STATS);
  EXPECT_EQ(take_error(api_, api_->execute(backend_, nullptr, nullptr, nullptr)).code, TM_STATUS_INVALID_ARGUMENT);
}

TEST_F(RenderTest, OpenClAndCKitPluginsGiveTheSamePixels) {
  TM_Backend* b = backend();
  ASSERT_NE(b, nullptr);
  std::string error;
  auto library = PluginLibrary::open(TM_C_KIT_PLUGIN_PATH, error);
  ASSERT_TRUE(library) << error;
  const TM_PluginApi* c_api = negotiate_api(*library, error);
  ASSERT_NE(c_api, nullptr) << error;
  TM_BackendCreateArgs args{};
  args.struct_size = sizeof args;
  TM_Backend* c_backend = nullptr;
  ASSERT_EQ(take_error(c_api, c_api->backend_create(&args, &c_backend)).code, TM_STATUS_OK);
  const std::vector<TM_TileStats> grid = random_bytes_grid(90, 300, 141);
  RenderParams p;
  p.source = TM_RENDER_SOURCE_TILE_STATS;
  p.cell = 1;
  p.magnify = 2;
  p.stat = TM_PIXEL_STAT_STD;
  std::vector<uint8_t> from_opencl, from_c;
  OpCall opencl_call = render_stats_call(grid.data(), 90, 300, p, from_opencl);
  OpCall c_call = render_stats_call(grid.data(), 90, 300, p, from_c);
  EXPECT_EQ(execute(b, opencl_call).code, TM_STATUS_OK);
  EXPECT_EQ(take_error(c_api, c_api->execute(c_backend, c_call.instance(), nullptr, nullptr)).code, TM_STATUS_OK);
  EXPECT_TRUE(pixels_equal(from_opencl, from_c));
  c_api->backend_destroy(c_backend);
}

}  // namespace
}  // namespace tm_opencl_test
