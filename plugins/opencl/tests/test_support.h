// Fixture, data generators and comparisons shared by the OpenCL plugin tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "plugin_host.h"
#include "tensormorph/c/plugin.h"

namespace tm_opencl_test {

/// The plugin under test, loaded once per process and never unloaded (OpenCL runtimes keep
/// threads that must not outlive their code).
struct LoadedPlugin {
  std::unique_ptr<PluginLibrary> library;  ///< the dlopened library
  const TM_PluginApi* api = nullptr;       ///< its table, or null with `error`
  std::string error;                       ///< why loading failed
};

/// The process-wide plugin.
LoadedPlugin& loaded_plugin();

/// Destroys cached backends before the process exits (registered as a gtest Environment).
class BackendCacheEnvironment : public ::testing::Environment {
 public:
  /// Destroys every cached backend.
  void TearDown() override;
};

/// Base fixture: skips when no OpenCL device exists, caches one backend per options string.
class PluginTest : public ::testing::Test {
 protected:
  void SetUp() override;

  /// The backend for device 0 created with `options` (cached for the whole run); null on failure
  /// (after recording a test failure).
  TM_Backend* backend(const std::string& options = "");

  /// Runs `call` on `backend`.
  CallResult execute(TM_Backend* backend, OpCall& call, const TM_ExecutionPolicy* policy = nullptr,
                     TM_ExecutionReport* report = nullptr);

  /// Asks `backend` about (op, dtype, shape class).
  CallResult query(TM_Backend* backend, const char* op, TM_DType dtype, TM_ShapeClass shape_class, TM_OpSupport& out);

  /// A device buffer holding `bytes` of `data` at `offset` (the rest zero).
  BufferPtr upload(TM_Backend* backend, const void* data, uint64_t bytes, uint64_t offset);

  const TM_PluginApi* api_ = nullptr;  ///< the plugin's table
};

/// A policy with struct_size set.
TM_ExecutionPolicy make_policy(TM_Exactness floor, double max_error_bound = 0.0, uint64_t memory_budget = 0);

/// Random float32 values of every class: normals of many magnitudes, subnormals, +-0, +-Inf, NaNs.
std::vector<float> random_f32(size_t count, uint64_t seed);
/// Random half bit patterns (every class occurs), with extra zeros.
std::vector<uint16_t> random_f16(size_t count, uint64_t seed);
/// Random Q8_0 blocks; the first blocks use special scales (zeros, subnormals, max, Inf, NaNs).
std::vector<uint8_t> random_q8_0(size_t blocks, uint64_t seed);

/// Weight-like float32 values (normal around 0, spread `scale`) with a sprinkling of zeros, NaN and
/// +-Inf, so that renders over lo/hi of about +-scale use the whole colour range.
std::vector<float> weights_f32(size_t count, uint64_t seed, float scale = 0.03f);
/// Weight-like halves: magnitudes 2^-10..2 of either sign, some zeros, NaN and +-Inf.
std::vector<uint16_t> weights_f16(size_t count, uint64_t seed);
/// A grid of plausible tile statistics (64-element tiles, means and spreads near +-0.05, some
/// empty tiles and tiles with NaN or infinities).
std::vector<TM_TileStats> random_stats_grid(uint64_t rows, uint64_t cols, uint64_t seed);
/// A grid of tile statistics made of random bytes (any count, any double and float bit pattern).
std::vector<TM_TileStats> random_bytes_grid(uint64_t rows, uint64_t cols, uint64_t seed);

/// Success when two RGBA tiles are byte-for-byte equal; otherwise names the first differing pixel.
::testing::AssertionResult pixels_equal(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want);

/// Success when `got` and `want` are bit-for-bit equal; otherwise names the first differing tile.
::testing::AssertionResult tiles_bitwise_equal(const std::vector<TM_TileStats>& got,
                                               const std::vector<TM_TileStats>& want);
/// Success when the float arrays are bit-for-bit equal; otherwise names the first difference.
::testing::AssertionResult floats_bitwise_equal(const std::vector<float>& got, const std::vector<float>& want);

}  // namespace tm_opencl_test
