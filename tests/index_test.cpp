// Tests of the level-of-detail index (issue 4): the pyramid against a direct float64 computation,
// reproducible index files, staleness and reuse, resume after an interruption, the real files, and
// NaN/Inf handling. The expected values are computed here from decoded values, independently of
// src/ops and src/index.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/quantize/quantize.h"
#include "formats/gguf/gguf.h"
#include "formats/safetensors/safetensors.h"
#include "index/index_builder.h"
#include "engine/compute_session.h"
#include "engine/matrix_shape.h"
#include "engine/value_histogram.h"
#include "tensormorph/decode.h"
#include "tensormorph/open.h"
#include "test_util.h"

namespace tensormorph {
namespace {

namespace fs = std::filesystem;
using testing::read_bytes;
using testing::ScopedEnv;
using testing::TempDir;

constexpr double kInf = std::numeric_limits<double>::infinity();

// One compute session for the whole program: the registry and the CPU backend.
compute::Scheduler* scheduler() {
  static Result<std::unique_ptr<engine::ComputeSession>> session = engine::ComputeSession::open(engine::SessionOptions{});
  return session.ok() ? &session.value()->scheduler() : nullptr;
}

// ---------------------------------------------------------------------------------------------
// The independent reference: plain float64 loops over decoded values.

// Statistics of a set of decoded values, accumulated naively in float64.
struct Direct {
  uint64_t count = 0, nan = 0, pos_inf = 0, neg_inf = 0, zeros = 0, finite = 0;
  double sum = 0, sum_sq = 0, sum_abs = 0;
  double min = kInf, max = -kInf, absmax = 0;

  void add(float value) {
    ++count;
    if (std::isnan(value)) {
      ++nan;
      return;
    }
    if (std::isinf(value)) {
      ++(value > 0 ? pos_inf : neg_inf);
      return;
    }
    if (value == 0.0f) ++zeros;
    ++finite;
    const double v = value;
    sum += v;
    sum_sq += v * v;
    sum_abs += std::fabs(v);
    min = std::min(min, v);
    max = std::max(max, v);
    absmax = std::max(absmax, std::fabs(v));
  }
};

// Each tile's direct statistics when a rows x cols matrix is cut into span x span tiles.
std::vector<Direct> direct_tiles(const std::vector<float>& values, uint64_t rows, uint64_t cols, uint64_t span,
                                 ops::TileGrid* grid) {
  grid->rows = (rows + span - 1) / span;
  grid->cols = (cols + span - 1) / span;
  std::vector<Direct> tiles(grid->count());
  for (uint64_t r = 0; r < rows; ++r) {
    for (uint64_t c = 0; c < cols; ++c) tiles[(r / span) * grid->cols + c / span].add(values[r * cols + c]);
  }
  return tiles;
}

::testing::AssertionResult tile_matches(const TM_TileStats& got, const Direct& want) {
  auto fail = [&](const char* field, double g, double w) {
    return ::testing::AssertionFailure() << field << " is " << g << " but the direct computation gives " << w;
  };
  if (got.count != want.count) return fail("count", double(got.count), double(want.count));
  if (got.nan != want.nan) return fail("nan", double(got.nan), double(want.nan));
  if (got.pos_inf != want.pos_inf) return fail("pos_inf", double(got.pos_inf), double(want.pos_inf));
  if (got.neg_inf != want.neg_inf) return fail("neg_inf", double(got.neg_inf), double(want.neg_inf));
  if (got.zeros != want.zeros) return fail("zeros", double(got.zeros), double(want.zeros));
  if (double(got.min) != want.min) return fail("min", got.min, want.min);
  if (double(got.max) != want.max) return fail("max", got.max, want.max);
  if (double(got.absmax) != want.absmax) return fail("absmax", got.absmax, want.absmax);
  // Relative to the sum of magnitudes, so cancellation does not make the bound meaningless.
  if (std::fabs(got.sum - want.sum) > 1e-12 * want.sum_abs + 1e-300) return fail("sum", got.sum, want.sum);
  if (std::fabs(got.sum_sq - want.sum_sq) > 1e-12 * want.sum_sq + 1e-300) {
    return fail("sum_sq", got.sum_sq, want.sum_sq);
  }
  return ::testing::AssertionSuccess();
}

// Mean and population standard deviation of the finite values, two-pass in float64.
struct Moments {
  uint64_t finite = 0;
  double mean = 0, std = 0, mean_abs = 0, rms = 0;
};

Moments direct_moments(const std::vector<float>& values) {
  Moments m;
  double sum = 0, sum_abs = 0, sum_sq = 0;
  for (float v : values) {
    if (!std::isfinite(v)) continue;
    ++m.finite;
    sum += v;
    sum_abs += std::fabs(double(v));
    sum_sq += double(v) * double(v);
  }
  if (m.finite == 0) return m;
  const double n = double(m.finite);
  m.mean = sum / n;
  m.mean_abs = sum_abs / n;
  m.rms = std::sqrt(sum_sq / n);
  double squares = 0;
  for (float v : values) {
    if (std::isfinite(v)) squares += (double(v) - m.mean) * (double(v) - m.mean);
  }
  m.std = std::sqrt(squares / n);
  return m;
}

// The summary's mean and std agree with the two-pass reference within 1e-9 relative. The extra
// terms cover a mean near zero (relative to the values' magnitude), and the one-pass variance
// E[x^2] - mean^2 when std << |mean|: its rounding error is a few eps * E[x^2], i.e. about
// eps * rms^2 / std in std, and at most sqrt(eps) * rms for a constant tensor.
void expect_moments_match(const engine::TensorSummary& got, const Moments& want, const std::string& where) {
  EXPECT_EQ(got.finite, want.finite) << where;
  EXPECT_NEAR(got.mean(), want.mean, 1e-9 * std::fabs(want.mean) + 1e-12 * want.mean_abs) << where;
  const double cancellation =
      want.std > 0 ? std::min(1e-13 * want.rms * want.rms / want.std, 4e-8 * want.rms) : 4e-8 * want.rms;
  EXPECT_NEAR(got.stddev(), want.std, 1e-9 * want.std + cancellation) << where;
}

// ---------------------------------------------------------------------------------------------
// Checkpoint builders.

struct F32Tensor {
  std::string name;
  std::vector<uint64_t> shape;
  std::vector<float> values;
};

std::vector<float> random_values(std::mt19937_64& rng, uint64_t n, double scale = 1.0) {
  std::normal_distribution<float> normal(0.0f, static_cast<float>(scale));
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

void write_f32_safetensors(const fs::path& path, const std::vector<F32Tensor>& tensors) {
  std::vector<safetensors::TensorToWrite> out;
  for (const auto& t : tensors) out.push_back({t.name, DType::kF32, t.shape, std::as_bytes(std::span(t.values))});
  const Status written = safetensors::write_file(path, out, {});
  ASSERT_TRUE(written.ok()) << written.message();
}

// A sharded set: shard_names[i] holds shards[i]; the index JSON is model.safetensors.index.json.
void write_sharded(const fs::path& dir, const std::vector<std::string>& shard_names,
                   const std::vector<std::vector<F32Tensor>>& shards) {
  nlohmann::ordered_json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::ordered_json::object()}};
  for (size_t s = 0; s < shards.size(); ++s) {
    write_f32_safetensors(dir / shard_names[s], shards[s]);
    for (const auto& t : shards[s]) index["weight_map"][t.name] = shard_names[s];
  }
  testing::write_bytes(dir / "model.safetensors.index.json", index.dump(2));
}

std::unique_ptr<Checkpoint> open_or_fail(const fs::path& path) {
  auto opened = open_checkpoint(path);
  EXPECT_TRUE(opened.ok()) << opened.status().message();
  return opened.ok() ? std::move(opened).value() : nullptr;
}

Result<index::IndexReport> build(const Checkpoint& ckpt, index::IndexOptions options,
                                 index::IndexContents* out = nullptr) {
  return index::update_index(*scheduler(), ckpt, options, out);
}

index::IndexOptions at(const fs::path& location, uint32_t tile = 256) {
  index::IndexOptions o;
  o.location = location;
  o.tile = tile;
  return o;
}

const index::TensorPyramid* find_pyramid(const index::IndexContents& contents, const std::string& name) {
  for (const auto& p : contents.tensors) {
    if (p.name == name) return &p;
  }
  return nullptr;
}

std::vector<std::string> names_of(const index::IndexContents& contents) {
  std::vector<std::string> names;
  for (const auto& p : contents.tensors) names.push_back(p.name);
  return names;
}

bool same_pyramid(const index::TensorPyramid& a, const index::TensorPyramid& b) {
  if (a.name != b.name || a.dtype != b.dtype || a.shape != b.shape || a.rows != b.rows || a.cols != b.cols ||
      a.levels.size() != b.levels.size()) {
    return false;
  }
  for (size_t k = 0; k < a.levels.size(); ++k) {
    const auto& x = a.levels[k];
    const auto& y = b.levels[k];
    if (x.grid.rows != y.grid.rows || x.grid.cols != y.grid.cols || x.tiles.size() != y.tiles.size()) return false;
    if (std::memcmp(x.tiles.data(), y.tiles.data(), x.tiles.size() * sizeof(TM_TileStats)) != 0) return false;
  }
  return true;
}

// Sets a file's modification time `seconds` later than it is now recorded.
void bump_mtime(const fs::path& path, int seconds) {
  fs::last_write_time(path, fs::last_write_time(path) + std::chrono::seconds(seconds));
}

class IndexTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NE(scheduler(), nullptr) << "cannot open a compute session"; }
};

// ---------------------------------------------------------------------------------------------
// 1. The pyramid equals the direct computation at every level.

struct Generated {
  std::string name;
  DType dtype;
  std::vector<uint64_t> shape;
  std::vector<float> decoded;  // the reference values: decode_to_f32 of the stored bytes
};

TEST_F(IndexTest, PyramidEqualsDirectComputationAtEveryLevel) {
  TempDir dir;
  std::mt19937_64 rng(20261129);
  std::vector<Generated> generated;
  std::vector<std::vector<std::byte>> storage;
  std::vector<gguf::TensorToWrite> to_write;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16, DType::kQ8_0}) {
    const bool quantized = dtype == DType::kQ8_0;
    const uint64_t unit = quantized ? 32 : 1;  // Q8_0 rows are whole 32-element blocks
    std::uniform_int_distribution<uint64_t> rows(1, 160), units(1, quantized ? 14 : 450);
    std::vector<std::vector<uint64_t>> shapes = {
        {rows(rng), units(rng) * unit},   // random, ragged for every tile size
        {rows(rng), units(rng) * unit},
        {37 * unit + (quantized ? 0 : 2000)},  // 1-D: a 1 x N matrix
        {1, 3 * 256 * unit + unit},           // 1 x N spanning several tiles even at T = 256
        {700, unit},                          // N x 1 (N x one block for Q8_0)
        {64, 64 * unit},                      // exact multiples of every tile size but 256
        {3, 5, 7 * unit},                     // N-D: [15, 7]
    };
    for (size_t s = 0; s < shapes.size(); ++s) {
      uint64_t n = 1;
      for (uint64_t d : shapes[s]) n *= d;
      std::vector<float> values = random_values(rng, n, s % 2 ? 1e-3 : 3.0);
      std::uniform_real_distribution<double> u(0, 1);
      for (auto& v : values) {
        const double p = u(rng);
        if (p < 0.04) v = 0.0f;
        else if (p < 0.06) v = -0.0f;
        else if (p < 0.07) v *= 300.0f;  // outliers the envelope must keep
        else if (!quantized && p < 0.075) v = std::numeric_limits<float>::quiet_NaN();
        else if (!quantized && p < 0.078) v = std::numeric_limits<float>::infinity();
        else if (!quantized && p < 0.081) v = -std::numeric_limits<float>::infinity();
      }
      auto encoded = encode_from_f32(dtype, values);
      ASSERT_TRUE(encoded.ok()) << encoded.status().message();
      Generated g{"t." + std::string(dtype_name(dtype)) + "." + std::to_string(s), dtype, shapes[s],
                  std::vector<float>(n)};
      const Status decoded = decode_to_f32(dtype, *encoded, n, g.decoded.data());
      ASSERT_TRUE(decoded.ok()) << decoded.message();
      storage.push_back(std::move(encoded).value());
      generated.push_back(std::move(g));
    }
  }
  for (size_t i = 0; i < generated.size(); ++i) {
    to_write.push_back({generated[i].name, generated[i].dtype, generated[i].shape, storage[i]});
  }
  const fs::path file = dir / "pyramid.gguf";
  const Status written = gguf::write_file(file, {}, to_write);
  ASSERT_TRUE(written.ok()) << written.message();
  auto ckpt = open_or_fail(file);
  ASSERT_NE(ckpt, nullptr);

  for (uint32_t tile : {8u, 16u, 256u}) {
    const fs::path location = dir / ("pyramid." + std::to_string(tile) + ".tmindex");
    index::IndexContents built;
    auto report = build(*ckpt, at(location, tile), &built);
    ASSERT_TRUE(report.ok()) << report.status().message();
    EXPECT_EQ(report->tensors_indexed, generated.size());
    EXPECT_TRUE(report->skipped.empty());
    auto stored = index::read_index(location);
    ASSERT_TRUE(stored.ok()) << stored.status().message();
    EXPECT_EQ(stored->tile, tile);
    ASSERT_EQ(stored->tensors.size(), generated.size());

    for (const Generated& g : generated) {
      const std::string where = g.name + " " + ckpt->find(g.name)->shape_string() + " tile " + std::to_string(tile);
      const index::TensorPyramid* pyramid = find_pyramid(built, g.name);
      ASSERT_NE(pyramid, nullptr) << where;
      const index::TensorPyramid* from_disk = find_pyramid(*stored, g.name);
      ASSERT_NE(from_disk, nullptr) << where;
      EXPECT_TRUE(same_pyramid(*pyramid, *from_disk)) << where << ": the index file does not round-trip";

      // The documented matrix rule, written out independently.
      const uint64_t cols = g.shape.back();
      const uint64_t rows = g.decoded.size() / cols;
      EXPECT_EQ(pyramid->rows, rows) << where;
      EXPECT_EQ(pyramid->cols, cols) << where;
      size_t expected_levels = 1;
      for (uint64_t span = tile; (rows + span - 1) / span > 1 || (cols + span - 1) / span > 1; span *= 2) {
        ++expected_levels;
      }
      ASSERT_EQ(pyramid->levels.size(), expected_levels) << where;

      for (size_t k = 0; k < pyramid->levels.size(); ++k) {
        ops::TileGrid grid;
        const auto want = direct_tiles(g.decoded, rows, cols, uint64_t{tile} << k, &grid);
        const engine::PyramidLevel& level = pyramid->levels[k];
        ASSERT_EQ(level.grid.rows, grid.rows) << where << " level " << k;
        ASSERT_EQ(level.grid.cols, grid.cols) << where << " level " << k;
        ASSERT_EQ(level.tiles.size(), want.size()) << where << " level " << k;
        for (size_t i = 0; i < want.size(); ++i) {
          ASSERT_TRUE(tile_matches(level.tiles[i], want[i]))
              << where << " level " << k << " tile (" << i / grid.cols << ", " << i % grid.cols << ")";
        }
      }
      const engine::TensorSummary summary = engine::summarize(pyramid->levels.back().tiles[0]);
      expect_moments_match(summary, direct_moments(g.decoded), where);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// 2. Reproducible index files.

TEST_F(IndexTest, IndexFileIsBitwiseIdenticalForOneAndTwoThreads) {
  TempDir dir;
  std::mt19937_64 rng(7);
  std::vector<F32Tensor> tensors = {
      {"embed", {1000, 600}, {}}, {"proj", {333, 777}, {}}, {"conv", {4, 3, 50, 65}, {}}, {"norm", {5000}, {}}};
  for (auto& t : tensors) {
    uint64_t n = 1;
    for (uint64_t d : t.shape) n *= d;
    t.values = random_values(rng, n, 0.02);
  }
  write_f32_safetensors(dir / "model.safetensors", tensors);
  auto ckpt = open_or_fail(dir / "model.safetensors");
  ASSERT_NE(ckpt, nullptr);
  for (uint32_t tile : {16u, 256u}) {
    std::vector<std::string> files;
    for (uint32_t threads : {1u, 2u, 0u}) {
      // Same directory for all, so the recorded relative source path is the same.
      const fs::path location = dir / ("t" + std::to_string(threads) + "." + std::to_string(tile) + ".tmindex");
      auto options = at(location, tile);
      options.threads = threads;
      auto report = build(*ckpt, options);
      ASSERT_TRUE(report.ok()) << report.status().message();
      ASSERT_EQ(report->tensors_indexed, tensors.size());
      files.push_back(read_bytes(location));
    }
    ASSERT_FALSE(files[0].empty());
    EXPECT_TRUE(files[0] == files[1]) << "tile " << tile << ": 1 and 2 threads give different index files";
    EXPECT_TRUE(files[0] == files[2]) << "tile " << tile << ": 1 thread and all cores give different index files";
  }
}

// ---------------------------------------------------------------------------------------------
// 3. Staleness and reuse on a sharded set.

TEST_F(IndexTest, RerunReusesEverythingAndAChangedShardIsRebuilt) {
  TempDir dir;
  std::mt19937_64 rng(11);
  std::vector<std::vector<F32Tensor>> shards = {
      {{"a.weight", {64, 96}, random_values(rng, 64 * 96)}, {"a.bias", {96}, random_values(rng, 96)}},
      // Over 1 MiB + 64 KiB, so a change in the middle is outside the hashed head and tail: only
      // the modification time tells.
      {{"b.weight", {512, 1024}, random_values(rng, 512 * 1024)},
       {"b.bias", {1024}, random_values(rng, 1024)},
       {"b.scale", {7, 9}, random_values(rng, 63)}}};
  const std::vector<std::string> names = {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"};
  write_sharded(dir.path(), names, shards);
  const fs::path json = dir / "model.safetensors.index.json";

  auto ckpt = open_or_fail(json);
  ASSERT_NE(ckpt, nullptr);
  ASSERT_EQ(ckpt->files().size(), 2u);
  const fs::path sidecar = index::default_index_path(*ckpt);
  EXPECT_EQ(sidecar, dir / "model.safetensors.index.tmindex");
  index::IndexContents first;
  auto report = build(*ckpt, {}, &first);
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_EQ(report->index_path, sidecar);
  EXPECT_EQ(report->tensors_indexed, 5u);
  EXPECT_EQ(report->tensors_reused, 0u);
  EXPECT_TRUE(report->written);
  ASSERT_TRUE(fs::exists(sidecar));
  const std::string first_bytes = read_bytes(sidecar);

  // Re-running on an unchanged checkpoint does no data work and does not rewrite the file.
  ckpt = open_or_fail(json);
  ASSERT_NE(ckpt, nullptr);
  index::IndexContents second;
  report = build(*ckpt, {}, &second);
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_EQ(report->tensors_indexed, 0u);
  EXPECT_EQ(report->tensors_reused, 5u);
  EXPECT_EQ(report->bytes_indexed, 0u);
  EXPECT_FALSE(report->written);
  EXPECT_EQ(read_bytes(sidecar), first_bytes);
  ASSERT_EQ(names_of(second), names_of(first));
  for (size_t i = 0; i < first.tensors.size(); ++i) EXPECT_TRUE(same_pyramid(first.tensors[i], second.tensors[i]));

  // Change values in the middle of shard 2 (same size, same hashed head and tail), later mtime.
  const fs::path shard2 = dir / names[1];
  const auto old_mtime = fs::last_write_time(shard2);
  for (uint64_t i = 200 * 1024; i < 201 * 1024; ++i) shards[1][0].values[i] = 1000.0f + float(i % 7);
  write_f32_safetensors(shard2, shards[1]);
  fs::last_write_time(shard2, old_mtime + std::chrono::seconds(10));
  ckpt = open_or_fail(json);
  ASSERT_NE(ckpt, nullptr);
  index::IndexContents third;
  report = build(*ckpt, {}, &third);
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_EQ(report->tensors_indexed, shards[1].size());
  EXPECT_EQ(report->tensors_reused, shards[0].size());
  EXPECT_TRUE(report->written);
  ASSERT_EQ(names_of(third), names_of(first));
  for (size_t i = 0; i < shards[0].size(); ++i) EXPECT_TRUE(same_pyramid(first.tensors[i], third.tensors[i]));

  const auto* changed = find_pyramid(third, "b.weight");
  ASSERT_NE(changed, nullptr);
  const engine::TensorSummary summary = engine::summarize(changed->levels.back().tiles[0]);
  EXPECT_EQ(summary.max, 1006.0);
  expect_moments_match(summary, direct_moments(shards[1][0].values), "b.weight after the change");
  EXPECT_NE(summary.mean(), engine::summarize(find_pyramid(first, "b.weight")->levels.back().tiles[0]).mean());

  // What was written is what a fresh reader sees, and it is now current.
  auto stored = index::read_index(sidecar);
  ASSERT_TRUE(stored.ok()) << stored.status().message();
  ASSERT_EQ(names_of(*stored), names_of(third));
  for (size_t i = 0; i < third.tensors.size(); ++i) EXPECT_TRUE(same_pyramid(stored->tensors[i], third.tensors[i]));
  report = build(*ckpt, {});
  ASSERT_TRUE(report.ok());
  EXPECT_EQ(report->tensors_indexed, 0u);
  EXPECT_FALSE(report->written);
}

TEST_F(IndexTest, TouchingAShardOrChangingTheTileRebuilds) {
  TempDir dir;
  std::mt19937_64 rng(12);
  write_sharded(dir.path(), {"s1.safetensors", "s2.safetensors"},
                {{{"x", {10, 10}, random_values(rng, 100)}}, {{"y", {20, 3}, random_values(rng, 60)}}});
  const fs::path json = dir / "model.safetensors.index.json";
  auto ckpt = open_or_fail(json);
  ASSERT_NE(ckpt, nullptr);
  ASSERT_TRUE(build(*ckpt, {}).ok());

  bump_mtime(dir / "s1.safetensors", 5);
  ckpt = open_or_fail(json);
  auto report = build(*ckpt, {});
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_EQ(report->tensors_indexed, 1u);
  EXPECT_EQ(report->tensors_reused, 1u);

  auto options = at({}, 16);
  report = build(*ckpt, options);
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_EQ(report->tensors_indexed, 2u) << "an index of another tile size is not reusable";
  auto stored = index::read_index(report->index_path);
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->tile, 16u);
}

// ---------------------------------------------------------------------------------------------
// 4. Resume after an interruption.

std::vector<F32Tensor> four_tensors() {
  std::mt19937_64 rng(13);
  return {{"first", {300, 200}, random_values(rng, 60000)},
          {"second", {50, 1000}, random_values(rng, 50000)},
          {"third", {4096}, random_values(rng, 4096)},
          {"fourth", {2, 3, 400}, random_values(rng, 2400)}};
}

TEST_F(IndexTest, InterruptedRunLeavesAValidPrefixAndResumes) {
  TempDir dir;
  const auto tensors = four_tensors();
  write_f32_safetensors(dir / "model.safetensors", tensors);
  auto ckpt = open_or_fail(dir / "model.safetensors");
  ASSERT_NE(ckpt, nullptr);

  // The reference: one uninterrupted run into the same directory.
  auto reference = build(*ckpt, at(dir / "reference.tmindex"));
  ASSERT_TRUE(reference.ok()) << reference.status().message();

  const fs::path location = dir / "resumed.tmindex";
  std::atomic<bool> interrupted{false};
  auto options = at(location);
  options.snapshot_seconds = 0;
  options.interrupted = &interrupted;
  options.progress = [&](const index::IndexProgress& p) {
    if (p.bytes_done > 0) interrupted.store(true);  // as if Ctrl-C came during the first tensor
  };
  auto report = build(*ckpt, options);
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_TRUE(report->interrupted);
  EXPECT_EQ(report->tensors_indexed, 1u);
  EXPECT_TRUE(report->written);

  auto partial = index::read_index(location);
  ASSERT_TRUE(partial.ok()) << partial.status().message();
  ASSERT_EQ(partial->tensors.size(), 1u);
  EXPECT_EQ(partial->tensors[0].name, "first");

  options.interrupted = nullptr;
  options.progress = nullptr;
  report = build(*ckpt, options);
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_FALSE(report->interrupted);
  EXPECT_EQ(report->tensors_reused, 1u);
  EXPECT_EQ(report->tensors_indexed, 3u);
  EXPECT_TRUE(read_bytes(location) == read_bytes(dir / "reference.tmindex"))
      << "a resumed index differs from an uninterrupted one";
}

TEST_F(IndexTest, EverySnapshotOfAnInterruptedRunIsAValidPrefix) {
  TempDir dir;
  const auto tensors = four_tensors();
  write_f32_safetensors(dir / "model.safetensors", tensors);
  auto ckpt = open_or_fail(dir / "model.safetensors");
  ASSERT_NE(ckpt, nullptr);
  for (size_t stop_after = 0; stop_after < tensors.size(); ++stop_after) {
    const fs::path location = dir / ("stop" + std::to_string(stop_after) + ".tmindex");
    std::atomic<bool> interrupted{stop_after == 0};
    auto options = at(location);
    options.snapshot_seconds = 0;
    options.interrupted = &interrupted;
    size_t seen = 0;
    std::string last;
    options.progress = [&](const index::IndexProgress& p) {
      if (p.current != last) {
        ++seen;
        last = p.current;
      }
      if (seen >= stop_after) interrupted.store(true);
    };
    auto report = build(*ckpt, options);
    ASSERT_TRUE(report.ok()) << report.status().message();
    EXPECT_TRUE(report->interrupted);
    EXPECT_EQ(report->tensors_indexed, stop_after);
    auto partial = index::read_index(location);
    if (stop_after == 0 && !partial.ok()) {
      EXPECT_EQ(partial.status().code(), StatusCode::kNotFound);  // nothing done: no index is fine too
      continue;
    }
    ASSERT_TRUE(partial.ok()) << partial.status().message();
    ASSERT_EQ(partial->tensors.size(), stop_after);
    for (size_t i = 0; i < stop_after; ++i) EXPECT_EQ(partial->tensors[i].name, tensors[i].name);
  }
}

TEST_F(IndexTest, InterruptionKeepsCurrentTensorsOfOtherShards) {
  TempDir dir;
  auto tensors = four_tensors();
  write_sharded(dir.path(), {"s1.safetensors", "s2.safetensors"},
                {{tensors[0], tensors[1]}, {tensors[2], tensors[3]}});
  const fs::path json = dir / "model.safetensors.index.json";
  auto ckpt = open_or_fail(json);
  ASSERT_NE(ckpt, nullptr);
  ASSERT_TRUE(build(*ckpt, {}).ok());

  // Shard 1 goes stale; the run is interrupted during its first tensor. Shard 2's entries were
  // current and must survive the interruption, so the re-run does only the rest of shard 1.
  bump_mtime(dir / "s1.safetensors", 5);
  ckpt = open_or_fail(json);
  ASSERT_NE(ckpt, nullptr);
  std::atomic<bool> interrupted{false};
  index::IndexOptions options;
  options.snapshot_seconds = 0;
  options.interrupted = &interrupted;
  options.progress = [&](const index::IndexProgress& p) {
    if (p.bytes_done > 0) interrupted.store(true);
  };
  auto report = build(*ckpt, options);
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_TRUE(report->interrupted);
  EXPECT_EQ(report->tensors_indexed, 1u);
  auto partial = index::read_index(report->index_path);
  ASSERT_TRUE(partial.ok()) << partial.status().message();
  EXPECT_EQ(names_of(*partial), (std::vector<std::string>{"first", "third", "fourth"}));

  report = build(*ckpt, {});
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_EQ(report->tensors_indexed, 1u);
  EXPECT_EQ(report->tensors_reused, 3u);
}

// ---------------------------------------------------------------------------------------------
// 6. The real files index, and their statistics equal an independent float64 computation.

void check_real_file(const fs::path& file) {
  SCOPED_TRACE(file.string());
  TempDir dir;  // never write beside the shared test data
  auto ckpt = open_or_fail(file);
  ASSERT_NE(ckpt, nullptr);
  index::IndexContents contents;
  auto report = build(*ckpt, at(dir / "real.tmindex"), &contents);
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_FALSE(report->interrupted);
  size_t decodable = 0;
  for (const TensorInfo& t : ckpt->tensors()) {
    const std::string where = t.name + " (" + std::string(dtype_name(t.dtype)) + " " + t.shape_string() + ")";
    const index::TensorPyramid* pyramid = find_pyramid(contents, t.name);
    const bool listed_as_skipped =
        std::any_of(report->skipped.begin(), report->skipped.end(),
                    [&](const index::SkippedTensor& s) {
                      return s.name == t.name && s.kind == index::SkippedTensor::Kind::kNotDecodable;
                    });
    if (!dtype_decodable(t.dtype)) {
      EXPECT_EQ(pyramid, nullptr) << where;
      EXPECT_TRUE(listed_as_skipped) << where << " is not decodable and should be reported as skipped";
      continue;
    }
    ++decodable;
    EXPECT_FALSE(listed_as_skipped) << where << " is decodable but was skipped";
    ASSERT_NE(pyramid, nullptr) << where;
    const engine::MatrixShape m = engine::as_matrix(t);
    EXPECT_EQ(pyramid->rows, m.rows) << where;
    EXPECT_EQ(pyramid->cols, m.cols) << where;
    auto values = ckpt->decode_f32(t);
    ASSERT_TRUE(values.ok()) << where << ": " << values.status().message();
    Direct want;
    for (float v : *values) want.add(v);
    const TM_TileStats& top = pyramid->levels.back().tiles[0];
    EXPECT_TRUE(tile_matches(top, want)) << where;
    const engine::TensorSummary summary = engine::summarize(top);
    EXPECT_EQ(summary.count, t.elements()) << where;
    expect_moments_match(summary, direct_moments(*values), where);
  }
  EXPECT_EQ(report->tensors_indexed, decodable);
  EXPECT_EQ(report->skipped.size(), ckpt->tensors().size() - decodable) << "only non-decodable tensors are skipped";
  EXPECT_EQ(contents.tensors.size(), decodable);
}

TEST_F(IndexTest, RealFilesIndexAndMatchFloat64Statistics) {
  const fs::path real = testing::testdata_dir() / "real";
  ASSERT_TRUE(fs::is_directory(real)) << real;
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(real)) files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 6u);
  for (const auto& f : files) check_real_file(f);
}

TEST_F(IndexTest, QuantizedReferenceGgufIndexesWithUndecodableTypesSkipped) {
  check_real_file(testing::testdata_dir() / "gguf-ref" / "quantized.gguf");
  check_real_file(testing::testdata_dir() / "gguf-ref" / "stories260K-Q4_K_M.gguf");
}

// ---------------------------------------------------------------------------------------------
// 7. NaN and Inf are counted, never propagated.

TEST_F(IndexTest, NanAndInfAreCountedNotPropagated) {
  TempDir dir;
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<F32Tensor> tensors = {
      {"mixed", {3, 5}, {1.5f, nan, -2.0f, inf, 0.0f, -inf, 4.0f, nan, -0.0f, 3.25f, inf, -1.0f, 0.5f, nan, 2.0f}},
      {"all_nan", {4, 4}, std::vector<float>(16, nan)},
      {"inf_only", {2, 3}, {inf, -inf, inf, nan, -inf, inf}}};
  // A wide tensor too, so NaN/Inf cross tile and pyramid boundaries.
  std::vector<float> wide(3 * 1000, 0.25f);
  for (size_t i = 0; i < wide.size(); i += 97) wide[i] = nan;
  for (size_t i = 5; i < wide.size(); i += 101) wide[i] = inf;
  for (size_t i = 9; i < wide.size(); i += 103) wide[i] = -inf;
  wide[1234] = -7.0f;
  tensors.push_back({"wide", {3, 1000}, wide});
  write_f32_safetensors(dir / "nan.safetensors", tensors);
  auto ckpt = open_or_fail(dir / "nan.safetensors");
  ASSERT_NE(ckpt, nullptr);
  index::IndexContents contents;
  auto report = build(*ckpt, at(dir / "nan.tmindex", 8), &contents);
  ASSERT_TRUE(report.ok()) << report.status().message();
  ASSERT_EQ(contents.tensors.size(), tensors.size());

  auto summary_of = [&](const std::string& name) {
    const auto* p = find_pyramid(contents, name);
    EXPECT_NE(p, nullptr) << name;
    return p ? engine::summarize(p->levels.back().tiles[0]) : engine::TensorSummary{};
  };
  const engine::TensorSummary mixed = summary_of("mixed");
  EXPECT_EQ(mixed.count, 15u);
  EXPECT_EQ(mixed.nan, 3u);
  EXPECT_EQ(mixed.pos_inf, 2u);
  EXPECT_EQ(mixed.neg_inf, 1u);
  EXPECT_EQ(mixed.zeros, 2u);
  EXPECT_EQ(mixed.finite, 9u);
  EXPECT_EQ(mixed.min, -2.0);
  EXPECT_EQ(mixed.max, 4.0);
  EXPECT_EQ(mixed.absmax, 4.0);
  EXPECT_DOUBLE_EQ(mixed.mean(), 8.25 / 9);
  EXPECT_TRUE(std::isfinite(mixed.stddev()));
  expect_moments_match(mixed, direct_moments(tensors[0].values), "mixed");

  const engine::TensorSummary all_nan = summary_of("all_nan");
  EXPECT_EQ(all_nan.count, 16u);
  EXPECT_EQ(all_nan.nan, 16u);
  EXPECT_EQ(all_nan.finite, 0u);
  EXPECT_EQ(all_nan.min, 0.0);
  EXPECT_EQ(all_nan.max, 0.0);
  EXPECT_EQ(all_nan.mean(), 0.0);
  EXPECT_EQ(all_nan.stddev(), 0.0);
  const TM_TileStats& top = find_pyramid(contents, "all_nan")->levels.back().tiles[0];
  EXPECT_EQ(top.min, std::numeric_limits<float>::infinity()) << "no finite element: min is +Inf in the tiles";
  EXPECT_EQ(top.max, -std::numeric_limits<float>::infinity());
  EXPECT_EQ(top.sum, 0.0);

  const engine::TensorSummary inf_only = summary_of("inf_only");
  EXPECT_EQ(inf_only.finite, 0u);
  EXPECT_EQ(inf_only.pos_inf, 3u);
  EXPECT_EQ(inf_only.neg_inf, 2u);
  EXPECT_EQ(inf_only.nan, 1u);
  EXPECT_EQ(inf_only.mean(), 0.0);

  const engine::TensorSummary w = summary_of("wide");
  Direct want;
  for (float v : wide) want.add(v);
  EXPECT_EQ(w.nan, want.nan);
  EXPECT_EQ(w.pos_inf, want.pos_inf);
  EXPECT_EQ(w.neg_inf, want.neg_inf);
  EXPECT_EQ(w.min, -7.0);
  EXPECT_EQ(w.max, 0.25);
  EXPECT_TRUE(std::isfinite(w.mean()) && std::isfinite(w.stddev()));
  expect_moments_match(w, direct_moments(wide), "wide");
  // The value histogram counts each finite value in the bin of its order key's top bits, and is
  // read back as written.
  auto stored = index::read_index(dir / "nan.tmindex");
  ASSERT_TRUE(stored.ok()) << stored.status().message();
  for (size_t i = 0; i < tensors.size(); ++i) {
    std::vector<uint64_t> want_bins(engine::kValueHistogramBins, 0);
    for (float v : tensors[i].values) {
      if (std::isfinite(v)) ++want_bins[ops::value_order_key(v) >> (32 - engine::kValueHistogramBits)];
    }
    const auto* p = find_pyramid(contents, tensors[i].name);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->value_histogram, want_bins) << tensors[i].name;
    EXPECT_EQ(find_pyramid(*stored, tensors[i].name)->value_histogram, want_bins) << tensors[i].name;
  }
  // Every level's tiles keep NaN/Inf out of their envelopes, too.
  for (const auto& level : find_pyramid(contents, "wide")->levels) {
    for (const auto& t : level.tiles) {
      EXPECT_FALSE(std::isnan(t.sum) || std::isinf(t.sum) || std::isnan(t.min) || std::isnan(t.max));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The index file itself.

TEST_F(IndexTest, IndexFileIsAPlainSafetensorsFile) {
  TempDir dir;
  write_f32_safetensors(dir / "m.safetensors", {{"w", {40, 20}, std::vector<float>(800, 1.0f)}});
  auto ckpt = open_or_fail(dir / "m.safetensors");
  ASSERT_NE(ckpt, nullptr);
  ASSERT_TRUE(build(*ckpt, at(dir / "m.tmindex", 8)).ok());
  auto as_safetensors = safetensors::open_file(dir / "m.tmindex");
  ASSERT_TRUE(as_safetensors.ok()) << as_safetensors.status().message();
  const TensorInfo* level0 = (*as_safetensors)->find("w/L0");
  ASSERT_NE(level0, nullptr);
  EXPECT_EQ(level0->dtype, DType::kF64);
  EXPECT_EQ(level0->shape, (std::vector<uint64_t>{5, 3, index::kFieldsPerTile}));
  const TensorInfo* top = (*as_safetensors)->find("w/L3");
  ASSERT_NE(top, nullptr);
  EXPECT_EQ(top->shape, (std::vector<uint64_t>{1, 1, index::kFieldsPerTile}));
  auto values = (*as_safetensors)->decode_f32(*top);
  ASSERT_TRUE(values.ok());
  EXPECT_EQ((*values)[0], 800.0f);  // count
  EXPECT_EQ((*values)[5], 800.0f);  // sum
}

TEST_F(IndexTest, DamagedOrForeignIndexIsRejectedAndRebuilt) {
  TempDir dir;
  write_f32_safetensors(dir / "m.safetensors", {{"w", {40, 20}, std::vector<float>(800, 2.0f)}});
  auto ckpt = open_or_fail(dir / "m.safetensors");
  ASSERT_NE(ckpt, nullptr);
  const fs::path location = dir / "m.tmindex";

  // A valid safetensors file that is not an index.
  write_f32_safetensors(location, {{"x", {2}, {1.0f, 2.0f}}});
  auto read = index::read_index(location);
  EXPECT_EQ(read.status().code(), StatusCode::kFormatError);
  // Garbage.
  testing::write_bytes(location, "not an index at all");
  EXPECT_FALSE(index::read_index(location).ok());
  EXPECT_EQ(index::read_index(dir / "absent.tmindex").status().code(), StatusCode::kNotFound);

  auto report = build(*ckpt, at(location));
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_EQ(report->tensors_indexed, 1u);
  auto rebuilt = index::read_index(location);
  ASSERT_TRUE(rebuilt.ok()) << rebuilt.status().message();
  ASSERT_EQ(rebuilt->tensors.size(), 1u);
  EXPECT_EQ(rebuilt->tensors[0].levels.back().tiles[0].sum, 1600.0);
}

TEST_F(IndexTest, IndexWithImpossibleGeometryIsRejectedAndRebuilt) {
  TempDir dir;
  write_f32_safetensors(dir / "m.safetensors", {{"w", {40, 20}, std::vector<float>(800, 2.0f)}});
  auto ckpt = open_or_fail(dir / "m.safetensors");
  ASSERT_NE(ckpt, nullptr);
  const fs::path location = dir / "m.tmindex";
  index::IndexContents good;
  ASSERT_TRUE(build(*ckpt, at(location, 8), &good).ok());
  ASSERT_EQ(good.tensors.size(), 1u);
  ASSERT_EQ(good.tensors[0].levels.size(), 4u);

  // Each damage keeps the recorded source identity, so only validation stops it from being reused.
  std::vector<std::pair<std::string, index::IndexContents>> damaged;
  damaged.emplace_back("no levels", good);
  damaged.back().second.tensors[0].levels.clear();
  damaged.emplace_back("top level missing", good);
  damaged.back().second.tensors[0].levels.pop_back();
  damaged.emplace_back("level 0 of the wrong grid", good);
  damaged.back().second.tensors[0].levels[0].grid = {1, 15};
  damaged.emplace_back("matrix shape disagrees with the shape", good);
  damaged.back().second.tensors[0].rows = 41;
  damaged.emplace_back("a count beyond 2^53", good);
  damaged.back().second.tensors[0].levels[1].tiles[0].count = ~uint64_t{0};  // stored as 1.8e19
  damaged.emplace_back("a value histogram that counts other values than the pyramid", good);
  damaged.back().second.tensors[0].value_histogram[0] += 1;
  for (const auto& [what, contents] : damaged) {
    ASSERT_TRUE(index::write_index(location, contents).ok()) << what;
    auto read = index::read_index(location);
    EXPECT_EQ(read.status().code(), StatusCode::kFormatError) << what;
    index::IndexContents rebuilt;
    auto report = build(*ckpt, at(location, 8), &rebuilt);
    ASSERT_TRUE(report.ok()) << what << ": " << report.status().message();
    EXPECT_EQ(report->tensors_indexed, 1u) << what;
    ASSERT_EQ(rebuilt.tensors.size(), 1u) << what;
    EXPECT_TRUE(same_pyramid(rebuilt.tensors[0], good.tensors[0])) << what;
  }
}

TEST_F(IndexTest, TensorNameThatIsNotUtf8IsSkippedNotFatal) {
  TempDir dir;
  const std::vector<float> values(64, 0.5f);
  const std::vector<gguf::TensorToWrite> tensors = {
      {"good", DType::kF32, {8, 8}, std::as_bytes(std::span(values))},
      {"bad\xff\xfename", DType::kF32, {8, 8}, std::as_bytes(std::span(values))}};
  ASSERT_TRUE(gguf::write_file(dir / "names.gguf", {}, tensors).ok());
  auto ckpt = open_or_fail(dir / "names.gguf");
  ASSERT_NE(ckpt, nullptr);
  index::IndexContents contents;
  auto report = build(*ckpt, at(dir / "names.tmindex"), &contents);
  ASSERT_TRUE(report.ok()) << report.status().message();
  EXPECT_EQ(report->tensors_indexed, 1u);
  ASSERT_EQ(report->skipped.size(), 1u);
  EXPECT_EQ(report->skipped[0].kind, index::SkippedTensor::Kind::kUnstorableName);
  EXPECT_NE(report->skipped[0].reason.find("UTF-8"), std::string::npos) << report->skipped[0].reason;
  auto stored = index::read_index(dir / "names.tmindex");
  ASSERT_TRUE(stored.ok()) << stored.status().message();
  EXPECT_EQ(names_of(*stored), std::vector<std::string>{"good"});
}

TEST_F(IndexTest, TileSizeThatIsNotAPowerOfTwoIsRefused) {
  TempDir dir;
  write_f32_safetensors(dir / "m.safetensors", {{"w", {40, 20}, std::vector<float>(800, 1.0f)}});
  auto ckpt = open_or_fail(dir / "m.safetensors");
  ASSERT_NE(ckpt, nullptr);
  for (uint32_t tile : {0u, 4u, 100u, 8192u}) {
    auto report = build(*ckpt, at(dir / "m.tmindex", tile));
    EXPECT_EQ(report.status().code(), StatusCode::kInvalidArgument) << "tile " << tile;
    EXPECT_FALSE(fs::exists(dir / "m.tmindex")) << "tile " << tile;
  }
}

TEST_F(IndexTest, DefaultIndexPathIsBesideTheCheckpointOrInTheCache) {
  TempDir dir;
  write_f32_safetensors(dir / "m.safetensors", {{"w", {2, 2}, {1, 2, 3, 4}}});
  auto ckpt = open_or_fail(dir / "m.safetensors");
  ASSERT_NE(ckpt, nullptr);
  EXPECT_EQ(index::default_index_path(*ckpt), dir / "m.safetensors.tmindex");

  // A checkpoint whose directory cannot be written (here: does not exist) goes to the cache.
  fs::path cached;
  {
    const ScopedEnv cache_home("XDG_CACHE_HOME", (dir / "cache").string());
    const Checkpoint elsewhere(CheckpointFormat::kSafetensors, "/nonexistent-tensormorph-dir/m.safetensors",
                               {{"/nonexistent-tensormorph-dir/m.safetensors", 0}}, {}, {}, {});
    cached = index::default_index_path(elsewhere);
  }
  EXPECT_EQ(cached.parent_path(), dir / "cache" / "tensormorph");
  const std::string name = cached.filename().string();
  EXPECT_TRUE(name.size() > 17 && name.substr(16) == "-m.safetensors.tmindex") << name;
}

}  // namespace
}  // namespace tensormorph
