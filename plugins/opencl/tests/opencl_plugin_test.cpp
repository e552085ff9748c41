// Tests of libtm_opencl.so through the C ABI only, as a host would use it: dlopen, version check,
// query answers, bitwise results against scalar references, refusals and argument validation
// (render_tile_test.cpp has tm.render_tile@1 and the C kit plugin).
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "plugin_host.h"
#include "reference.h"
#include "test_support.h"

extern char** environ;

namespace tm_opencl_test {
namespace {

// Set in a child copy of this binary: print device_count's answer and exit (see main).
constexpr const char* kProbeEnvironment = "TM_OPENCL_TEST_PROBE_DEVICE_COUNT";

// ------------------------------------------------------------------------------------------------
// ABI: symbols, version negotiation, refusal of another major.

TEST(PluginAbi, ExportsVersionAndTableForMajorOneOnly) {
  std::string error;
  auto library = PluginLibrary::open(TM_OPENCL_PLUGIN_PATH, error);
  ASSERT_TRUE(library) << error;
  EXPECT_EQ(library->abi_version(), TM_PLUGIN_ABI_VERSION_PACK(TM_PLUGIN_ABI_MAJOR, TM_PLUGIN_ABI_MINOR));  // as built
  const TM_PluginApi* api = library->get_api(1, 0);
  ASSERT_NE(api, nullptr);
  EXPECT_EQ(api->struct_size, sizeof(TM_PluginApi));
  EXPECT_EQ(api->abi_major, 1u);
  EXPECT_STREQ(api->name, "opencl");
  for (const void* fn : {reinterpret_cast<const void*>(api->error_code), reinterpret_cast<const void*>(api->execute),
                         reinterpret_cast<const void*>(api->device_count), reinterpret_cast<const void*>(api->query),
                         reinterpret_cast<const void*>(api->estimate), reinterpret_cast<const void*>(api->buffer_read)}) {
    EXPECT_NE(fn, nullptr);
  }
  EXPECT_EQ(library->get_api(1, 7), api) << "a newer minor host reads the same table up to its struct_size";
  EXPECT_EQ(library->get_api(2, 0), nullptr);
  EXPECT_EQ(library->get_api(0, 9), nullptr);
}

TEST(PluginAbi, HostRefusesMajorTwoPluginWithoutCallingIt) {
  std::string error;
  auto library = PluginLibrary::open(TM_ABI_V2_PLUGIN_PATH, error);
  ASSERT_TRUE(library) << error;
  EXPECT_EQ(library->abi_version() >> 16, 2u);
  // negotiate_api must stop at the version: tm_plugin_get_api of this library aborts.
  EXPECT_EQ(negotiate_api(*library, error), nullptr);
  EXPECT_NE(error.find("major 2"), std::string::npos) << error;
}

TEST(PluginAbi, MajorTwoPluginTrapsAnyOtherCall) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::string error;
  auto library = PluginLibrary::open(TM_ABI_V2_PLUGIN_PATH, error);
  ASSERT_TRUE(library) << error;
  EXPECT_DEATH(library->get_api(1, 0), "");
}

// ------------------------------------------------------------------------------------------------
// Devices.

// Runs this binary again with OCL_ICD_VENDORS pointing at an empty directory, so the ICD loader
// finds no platform, and returns what device_count printed there.
std::string device_count_without_icd() {
  char dir_template[] = "/tmp/tm_opencl_no_icd_XXXXXX";
  const char* empty_dir = mkdtemp(dir_template);
  if (empty_dir == nullptr) return "mkdtemp failed";
  std::vector<std::string> variables;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    if (std::strncmp(*entry, "OCL_ICD_VENDORS=", 16) != 0 && std::strncmp(*entry, "OCL_ICD_FILENAMES=", 18) != 0) {
      variables.emplace_back(*entry);
    }
  }
  variables.push_back(std::string("OCL_ICD_VENDORS=") + empty_dir);
  variables.push_back(std::string(kProbeEnvironment) + "=1");
  std::vector<char*> envp;
  for (std::string& variable : variables) envp.push_back(variable.data());
  envp.push_back(nullptr);

  int pipe_fds[2];
  if (pipe(pipe_fds) != 0) return "pipe failed";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addclose(&actions, pipe_fds[0]);
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  char* argv[] = {const_cast<char*>(self.c_str()), nullptr};
  pid_t child = 0;
  const int spawned = posix_spawn(&child, self.c_str(), &actions, nullptr, argv, envp.data());
  posix_spawn_file_actions_destroy(&actions);
  close(pipe_fds[1]);
  std::string output;
  char chunk[512];
  ssize_t n = 0;
  while (spawned == 0 && (n = read(pipe_fds[0], chunk, sizeof chunk)) > 0) output.append(chunk, static_cast<size_t>(n));
  close(pipe_fds[0]);
  int status = 0;
  if (spawned == 0) waitpid(child, &status, 0);
  std::filesystem::remove(empty_dir);
  if (spawned != 0) return "posix_spawn failed";
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return "probe crashed or failed: " + output;
  return output;
}

TEST(PluginDevices, DeviceCountExplainsMissingIcdWithoutCrashing) {
  const std::string output = device_count_without_icd();
  if (output.find("count=0") == std::string::npos && output.find("count=") != std::string::npos) {
    GTEST_SKIP() << "this ICD loader ignores OCL_ICD_VENDORS; child said: " << output;
  }
  EXPECT_NE(output.find("count=0\n"), std::string::npos) << output;
  EXPECT_NE(output.find("reason=no OpenCL platform found (is an ICD installed?)\n"), std::string::npos) << output;
  EXPECT_NE(output.find("create=2 "), std::string::npos) << "backend_create must answer NOT_FOUND: " << output;
}

class DeviceTest : public PluginTest {};

TEST_F(DeviceTest, DeviceCountValidatesAndClearsReason) {
  uint32_t count = 0;
  char why[64];
  std::memset(why, 'x', sizeof why);
  EXPECT_EQ(take_error(api_, api_->device_count(&count, why, sizeof why)).code, TM_STATUS_OK);
  EXPECT_GE(count, 1u);
  EXPECT_STREQ(why, "");
  EXPECT_EQ(take_error(api_, api_->device_count(nullptr, why, sizeof why)).code, TM_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(take_error(api_, api_->device_count(&count, nullptr, 0)).code, TM_STATUS_OK);
}

TEST_F(DeviceTest, TraitsDescribeTheDevice) {
  TM_Backend* b = backend();
  ASSERT_NE(b, nullptr);
  TM_DeviceTraits traits{};
  traits.struct_size = sizeof traits;
  ASSERT_EQ(take_error(api_, api_->device_traits(b, &traits)).code, TM_STATUS_OK);
  EXPECT_EQ(traits.struct_size, sizeof traits);
  const std::string name = traits.device_name;
  std::printf("device: %s, %llu bytes, %u compute units, %.2f GB/s to device, %.2f GB/s back, unified %u\n",
              name.c_str(), static_cast<unsigned long long>(traits.memory_bytes), traits.compute_units,
              traits.host_to_device_gbps, traits.device_to_host_gbps, traits.host_memory_visible);
  EXPECT_NE(name.find(" ("), std::string::npos) << name;
  EXPECT_EQ(name.back(), ')') << name;
  EXPECT_GT(traits.memory_bytes, 0u);
  EXPECT_EQ(traits.memory_space_count, 1u);
  EXPECT_GT(traits.compute_units, 0u);
  EXPECT_EQ(traits.bandwidth_measured, 1u);
  EXPECT_GT(traits.host_to_device_gbps, 0.0);
  EXPECT_GT(traits.device_to_host_gbps, 0.0);
}

TEST_F(DeviceTest, TraitsWriteNoFurtherThanTheCallersStructSize) {
  TM_Backend* b = backend();
  ASSERT_NE(b, nullptr);
  TM_DeviceTraits traits;
  std::memset(&traits, 0xAB, sizeof traits);
  traits.struct_size = offsetof(TM_DeviceTraits, memory_bytes);  // an older host: name only
  ASSERT_EQ(take_error(api_, api_->device_traits(b, &traits)).code, TM_STATUS_OK);
  EXPECT_EQ(traits.struct_size, offsetof(TM_DeviceTraits, memory_bytes));
  EXPECT_GT(std::strlen(traits.device_name), 0u);
  EXPECT_EQ(traits.memory_space_count, 0xABABABABu) << "wrote past the caller's struct_size";
}

TEST_F(DeviceTest, BackendCreateValidatesItsArguments) {
  TM_Backend* out = nullptr;
  TM_BackendCreateArgs args{};
  args.struct_size = sizeof args;
  args.device_index = 9999;
  EXPECT_EQ(take_error(api_, api_->backend_create(&args, &out)).code, TM_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(out, nullptr);
  args.device_index = 0;
  args.options = "no_such_option=1";
  EXPECT_EQ(take_error(api_, api_->backend_create(&args, &out)).code, TM_STATUS_INVALID_ARGUMENT);
  args.options = "staging_mib=0";
  EXPECT_EQ(take_error(api_, api_->backend_create(&args, &out)).code, TM_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(take_error(api_, api_->backend_create(nullptr, &out)).code, TM_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(take_error(api_, api_->backend_create(&args, nullptr)).code, TM_STATUS_INVALID_ARGUMENT);
  // A host whose args end before `options`: the garbage there must not be read.
  args.struct_size = offsetof(TM_BackendCreateArgs, options);
  args.options = "no_such_option=1";
  const CallResult created = take_error(api_, api_->backend_create(&args, &out));
  EXPECT_EQ(created.code, TM_STATUS_OK) << created.message;
  ASSERT_NE(out, nullptr);
  api_->backend_destroy(out);
}

// ------------------------------------------------------------------------------------------------
// query.

class QueryTest : public PluginTest {};

TEST_F(QueryTest, AnswersWhatItSupportsAndWhyNot) {
  TM_Backend* b = backend();
  ASSERT_NE(b, nullptr);
  TM_OpSupport support{};
  for (TM_DType dtype : {TM_DTYPE_F32, TM_DTYPE_F16}) {
    ASSERT_EQ(query(b, TM_OP_TILE_STATS, dtype, TM_SHAPE_MATRIX, support).code, TM_STATUS_OK);
    EXPECT_EQ(support.level, TM_SUPPORT_FULL) << support.reason;
    EXPECT_EQ(support.exactness, TM_EXACT_BITWISE);
    EXPECT_EQ(support.struct_size, sizeof support);
  }
  ASSERT_EQ(query(b, TM_OP_TILE_STATS, TM_DTYPE_BF16, TM_SHAPE_MATRIX, support).code, TM_STATUS_OK);
  EXPECT_EQ(support.level, TM_SUPPORT_NONE);
  EXPECT_NE(std::string(support.reason).find("tile_stats for F32 and F16 only"), std::string::npos) << support.reason;

  ASSERT_EQ(query(b, TM_OP_TILE_STATS, TM_DTYPE_F32, TM_SHAPE_TENSOR, support).code, TM_STATUS_OK);
  EXPECT_EQ(support.level, TM_SUPPORT_NONE);
  EXPECT_GT(std::strlen(support.reason), 0u);

  ASSERT_EQ(query(b, TM_OP_DECODE, TM_DTYPE_Q8_0, TM_SHAPE_VECTOR, support).code, TM_STATUS_OK);
  EXPECT_EQ(support.level, TM_SUPPORT_FULL);
  EXPECT_EQ(support.exactness, TM_EXACT_BITWISE);
  for (TM_DType dtype : {TM_DTYPE_Q4_K, TM_DTYPE_F32, TM_DTYPE_Q8_1}) {
    ASSERT_EQ(query(b, TM_OP_DECODE, dtype, TM_SHAPE_VECTOR, support).code, TM_STATUS_OK);
    EXPECT_EQ(support.level, TM_SUPPORT_NONE);
    EXPECT_NE(std::string(support.reason).find("decode for Q8_0 only"), std::string::npos) << support.reason;
  }
  ASSERT_EQ(query(b, TM_OP_HISTOGRAM, TM_DTYPE_F32, TM_SHAPE_VECTOR, support).code, TM_STATUS_OK);
  EXPECT_EQ(support.level, TM_SUPPORT_NONE);
  EXPECT_NE(std::string(support.reason).find("does not implement tm.histogram@1"), std::string::npos);
}

TEST_F(QueryTest, RejectsMalformedQuestions) {
  TM_Backend* b = backend();
  ASSERT_NE(b, nullptr);
  TM_OpSupport support{};
  EXPECT_EQ(query(b, nullptr, TM_DTYPE_F32, TM_SHAPE_VECTOR, support).code, TM_STATUS_INVALID_ARGUMENT);
  TM_OpQuery question{};
  question.struct_size = sizeof question;
  question.op = TM_OP_DECODE;
  store_raw_enum(question.input_dtype, 999);
  EXPECT_EQ(take_error(api_, api_->query(b, &question, &support)).code, TM_STATUS_INVALID_ARGUMENT);
  question.input_dtype = TM_DTYPE_Q8_0;
  store_raw_enum(question.shape_class, 7);
  EXPECT_EQ(take_error(api_, api_->query(b, &question, &support)).code, TM_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(take_error(api_, api_->query(b, &question, nullptr)).code, TM_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(query(nullptr, TM_OP_DECODE, TM_DTYPE_Q8_0, TM_SHAPE_VECTOR, support).code, TM_STATUS_INVALID_ARGUMENT);
}

TEST_F(QueryTest, ReadsAndWritesOnlyUpToStructSize) {
  TM_Backend* b = backend();
  ASSERT_NE(b, nullptr);
  // A question that ends before input_dtype: the dtype reads as 0 (INVALID), not as what follows.
  TM_OpQuery question{};
  question.struct_size = offsetof(TM_OpQuery, input_dtype);
  question.op = TM_OP_DECODE;
  question.input_dtype = TM_DTYPE_Q8_0;
  TM_OpSupport support{};
  support.struct_size = sizeof support;
  EXPECT_EQ(take_error(api_, api_->query(b, &question, &support)).code, TM_STATUS_INVALID_ARGUMENT);

  // An answer struct that ends before error_bound: nothing after it is written.
  question.struct_size = sizeof question;
  std::memset(&support, 0xCD, sizeof support);
  support.struct_size = offsetof(TM_OpSupport, error_bound);
  ASSERT_EQ(take_error(api_, api_->query(b, &question, &support)).code, TM_STATUS_OK);
  EXPECT_EQ(support.struct_size, offsetof(TM_OpSupport, error_bound));
  EXPECT_EQ(support.level, TM_SUPPORT_FULL);
  EXPECT_EQ(static_cast<unsigned char>(support.reason[0]), 0xCDu) << "wrote past the caller's struct_size";
}

// ------------------------------------------------------------------------------------------------
// tile_stats against the canonical reference, for both reduction strategies.

struct TileCase {
  uint64_t rows, cols, r0, r1, c0, c1, tile;
};

const TileCase kTileCases[] = {
    {37, 53, 0, 37, 0, 53, 8},         // ragged in both directions
    {64, 64, 3, 61, 5, 64, 16},        // a view inside the tensor
    {100, 300, 0, 100, 0, 300, 32},    //
    {130, 70, 1, 129, 2, 69, 64},      // tiles wider than half the view
    {20, 5000, 0, 20, 0, 5000, 4096},  // the largest tile, mostly padding
    {300, 300, 0, 300, 0, 300, 256},   //
    {1, 1, 0, 1, 0, 1, 8},             // one element
    {50, 40, 10, 10, 0, 40, 8},        // an empty view: no tiles
};

class TileStatsTest : public PluginTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(TileStatsTest, F32MatchesCanonicalOrderBitwise) {
  TM_Backend* b = backend(GetParam());
  ASSERT_NE(b, nullptr);
  uint64_t seed = 1;
  for (const TileCase& c : kTileCases) {
    SCOPED_TRACE(testing::Message() << c.rows << "x" << c.cols << " view [" << c.r0 << "," << c.r1 << ")x[" << c.c0
                                    << "," << c.c1 << ") tile " << c.tile);
    const std::vector<float> values = random_f32(c.rows * c.cols, seed++);
    std::vector<TM_TileStats> got;
    OpCall call = tile_stats_call(TM_DTYPE_F32, c.rows, c.cols, values.data(), 4, c.r0, c.r1, c.c0, c.c1, c.tile, got);
    TM_ExecutionReport report{};
    report.struct_size = sizeof report;
    const CallResult result = execute(b, call, nullptr, &report);
    ASSERT_EQ(result.code, TM_STATUS_OK) << result.message;
    EXPECT_TRUE(tiles_bitwise_equal(got, reference_tile_stats(values, c.cols, c.r0, c.r1, c.c0, c.c1, c.tile)));
    EXPECT_EQ(report.exactness, TM_EXACT_BITWISE);
    EXPECT_EQ(report.bytes_read, (c.r1 - c.r0) * (c.c1 - c.c0) * 4);
    EXPECT_EQ(report.bytes_written, got.size() * sizeof(TM_TileStats));
    EXPECT_EQ(report.output_nbytes[0], got.size() * sizeof(TM_TileStats));
  }
}

TEST_P(TileStatsTest, OrderSensitiveDataAtEveryTileSize) {
  // Finite values with full mantissas over 2^-24..2^24: their float64 sums need more than 53 bits,
  // so any other association order changes the low bits. This pins the halving tree itself, both
  // across a row (wide matrix) and across a tile's rows (tall matrix), at every tile size.
  TM_Backend* b = backend(GetParam());
  ASSERT_NE(b, nullptr);
  for (const auto& [rows, cols] : {std::pair<uint64_t, uint64_t>{40, 4100}, {1100, 40}}) {
    std::vector<float> values = random_f32(rows * cols, 555);
    for (size_t i = 0; i < values.size(); ++i) {
      float& v = values[i];
      if (!std::isfinite(v) || v == 0.0f) v = 1.0f;
      int exponent = 0;
      const float mantissa = std::frexp(v, &exponent);
      v = std::ldexp(mantissa, static_cast<int>((i * 7919) % 49) - 24);
    }
    // Huge row sums of both signs cancel differently in every other tree, exposing the low bits.
    for (uint64_t r = 0; r < rows; ++r) {
      values[r * cols] = std::ldexp((r * 2654435761u) % 3 == 0 ? -1.0f : 1.0f, static_cast<int>(40 + r % 21));
    }
    for (uint64_t tile = 8; tile <= 4096; tile *= 2) {
      std::vector<TM_TileStats> got;
      OpCall call = tile_stats_call(TM_DTYPE_F32, rows, cols, values.data(), 4, 0, rows, 0, cols, tile, got);
      const CallResult result = execute(b, call);
      ASSERT_EQ(result.code, TM_STATUS_OK) << result.message;
      EXPECT_TRUE(tiles_bitwise_equal(got, reference_tile_stats(values, cols, 0, rows, 0, cols, tile)))
          << rows << "x" << cols << " tile " << tile;
    }
  }
}

TEST_P(TileStatsTest, F16MatchesCanonicalOrderBitwise) {
  TM_Backend* b = backend(GetParam());
  ASSERT_NE(b, nullptr);
  uint64_t seed = 100;
  for (const TileCase& c : kTileCases) {
    SCOPED_TRACE(testing::Message() << c.rows << "x" << c.cols << " tile " << c.tile);
    const std::vector<uint16_t> halves = random_f16(c.rows * c.cols, seed++);
    std::vector<TM_TileStats> got;
    OpCall call = tile_stats_call(TM_DTYPE_F16, c.rows, c.cols, halves.data(), 2, c.r0, c.r1, c.c0, c.c1, c.tile, got);
    const CallResult result = execute(b, call);
    ASSERT_EQ(result.code, TM_STATUS_OK) << result.message;
    EXPECT_TRUE(tiles_bitwise_equal(got, reference_tile_stats(widen_f16(halves), c.cols, c.r0, c.r1, c.c0, c.c1, c.tile)));
  }
}

TEST_P(TileStatsTest, ReadsInputsFromDeviceBuffers) {
  TM_Backend* b = backend(GetParam());
  ASSERT_NE(b, nullptr);
  const uint64_t rows = 45, cols = 77;
  const std::vector<float> values = random_f32(rows * cols, 7);
  BufferPtr f32 = upload(b, values.data(), values.size() * 4, 12);
  ASSERT_TRUE(f32);
  std::vector<TM_TileStats> got;
  OpCall call = tile_stats_call(TM_DTYPE_F32, rows, cols, nullptr, 4, 2, 44, 3, 77, 16, got);
  call.inputs[0].buffer = f32.get();
  call.inputs[0].byte_offset = 12;
  CallResult result = execute(b, call);
  ASSERT_EQ(result.code, TM_STATUS_OK) << result.message;
  EXPECT_TRUE(tiles_bitwise_equal(got, reference_tile_stats(values, cols, 2, 44, 3, 77, 16)));

  const std::vector<uint16_t> halves = random_f16(rows * cols, 8);
  BufferPtr f16 = upload(b, halves.data(), halves.size() * 2, 6);
  ASSERT_TRUE(f16);
  call = tile_stats_call(TM_DTYPE_F16, rows, cols, nullptr, 2, 0, 45, 0, 77, 8, got);
  call.inputs[0].buffer = f16.get();
  call.inputs[0].byte_offset = 6;
  result = execute(b, call);
  ASSERT_EQ(result.code, TM_STATUS_OK) << result.message;
  EXPECT_TRUE(tiles_bitwise_equal(got, reference_tile_stats(widen_f16(halves), cols, 0, 45, 0, 77, 8)));
}

TEST_P(TileStatsTest, SignedZerosFollowTheDefinition) {
  TM_Backend* b = backend(GetParam());
  ASSERT_NE(b, nullptr);
  // Full 8x8 tiles of -0 sum to -0; ragged ones are padded with +0 and sum to +0.
  std::vector<float> values(12 * 12, -0.0f);
  values[10] = 0.0f;  // one +0 in the ragged tile to the right: its min stays -0, its max is +0
  std::vector<TM_TileStats> got;
  OpCall call = tile_stats_call(TM_DTYPE_F32, 12, 12, values.data(), 4, 0, 12, 0, 12, 8, got);
  const CallResult result = execute(b, call);
  ASSERT_EQ(result.code, TM_STATUS_OK) << result.message;
  const std::vector<TM_TileStats> want = reference_tile_stats(values, 12, 0, 12, 0, 12, 8);
  ASSERT_EQ(want.size(), 4u);
  EXPECT_TRUE(std::signbit(want[0].sum));
  EXPECT_FALSE(std::signbit(want[1].sum));
  EXPECT_TRUE(std::signbit(want[0].max));
  EXPECT_TRUE(std::signbit(want[1].min));
  EXPECT_FALSE(std::signbit(want[1].max));
  EXPECT_TRUE(tiles_bitwise_equal(got, want));
}

TEST_P(TileStatsTest, ChunksSmallerThanTheViewGiveTheSameBits) {
  // 1 MiB of staging: T=64 runs ~50 tiles per chunk, T=512 one tile per chunk.
  TM_Backend* b = backend(std::string("staging_mib=1;") + GetParam());
  ASSERT_NE(b, nullptr);
  const uint64_t rows = 600, cols = 700;
  const std::vector<float> values = random_f32(rows * cols, 99);
  for (uint64_t tile : {uint64_t{64}, uint64_t{512}}) {
    std::vector<TM_TileStats> got;
    OpCall call = tile_stats_call(TM_DTYPE_F32, rows, cols, values.data(), 4, 0, rows, 1, cols, tile, got);
    const CallResult result = execute(b, call);
    ASSERT_EQ(result.code, TM_STATUS_OK) << result.message;
    EXPECT_TRUE(tiles_bitwise_equal(got, reference_tile_stats(values, cols, 0, rows, 1, cols, tile))) << "tile " << tile;
  }
}

TEST_P(TileStatsTest, RespectsThePolicysMemoryBudget) {
  TM_Backend* b = backend(GetParam());
  ASSERT_NE(b, nullptr);
  const std::vector<float> values = random_f32(200 * 200, 5);
  std::vector<TM_TileStats> got;
  OpCall call = tile_stats_call(TM_DTYPE_F32, 200, 200, values.data(), 4, 0, 200, 0, 200, 64, got);
  TM_ExecutionPolicy tiny = make_policy(TM_EXACT_BITWISE, 0.0, 1000);
  EXPECT_EQ(execute(b, call, &tiny).code, TM_STATUS_RESOURCE_EXHAUSTED);
  TM_ExecutionPolicy small = make_policy(TM_EXACT_BITWISE, 0.0, 60000);  // ~3 tiles per chunk
  const CallResult result = execute(b, call, &small);
  ASSERT_EQ(result.code, TM_STATUS_OK) << result.message;
  EXPECT_TRUE(tiles_bitwise_equal(got, reference_tile_stats(values, 200, 0, 200, 0, 200, 64)));
}

INSTANTIATE_TEST_SUITE_P(Reductions, TileStatsTest, ::testing::Values("reduction=seq", "reduction=group"));

// ------------------------------------------------------------------------------------------------
// decode Q8_0 against ggml's formula.

class DecodeTest : public PluginTest {};

TEST_F(DecodeTest, Q8_0MatchesReferenceBitwiseIncludingSpecialScales) {
  TM_Backend* b = backend();
  ASSERT_NE(b, nullptr);
  const std::vector<uint8_t> blocks = random_q8_0(333, 42);
  std::vector<float> got;
  OpCall call = decode_q8_0_call(blocks.data(), 333, got);
  TM_ExecutionReport report{};
  report.struct_size = sizeof report;
  const CallResult result = execute(b, call, nullptr, &report);
  ASSERT_EQ(result.code, TM_STATUS_OK) << result.message;
  EXPECT_TRUE(floats_bitwise_equal(got, reference_decode_q8_0(blocks)));
  EXPECT_EQ(report.exactness, TM_EXACT_BITWISE);
  EXPECT_EQ(report.bytes_read, 333u * 34);
  EXPECT_EQ(report.bytes_written, 333u * 32 * 4);
  EXPECT_EQ(report.output_nbytes[0], 333u * 32 * 4);
}

TEST_F(DecodeTest, Q8_0FromAnUnalignedDeviceBuffer) {
  TM_Backend* b = backend();
  ASSERT_NE(b, nullptr);
  const std::vector<uint8_t> blocks = random_q8_0(100, 43);
  BufferPtr buffer = upload(b, blocks.data(), blocks.size(), 3);
  ASSERT_TRUE(buffer);
  std::vector<float> got;
  OpCall call = decode_q8_0_call(nullptr, 100, got);
  call.inputs[0].buffer = buffer.get();
  call.inputs[0].byte_offset = 3;
  const CallResult result = execute(b, call);
  ASSERT_EQ(result.code, TM_STATUS_OK) << result.message;
  EXPECT_TRUE(floats_bitwise_equal(got, reference_decode_q8_0(blocks)));
}

TEST_F(DecodeTest, Q8_0InSeveralChunks) {
  TM_Backend* b = backend("staging_mib=1");  // ~6400 blocks per chunk
  ASSERT_NE(b, nullptr);
  const std::vector<uint8_t> blocks = random_q8_0(20000, 44);
  std::vector<float> got;
  OpCall call = decode_q8_0_call(blocks.data(), 20000, got);
  const CallResult result = execute(b, call);
  ASSERT_EQ(result.code, TM_STATUS_OK) << result.message;
  EXPECT_TRUE(floats_bitwise_equal(got, reference_decode_q8_0(blocks)));
}

// ------------------------------------------------------------------------------------------------
// Exactness floors.

class ExactnessTest : public PluginTest {};

TEST_F(ExactnessTest, RefusesBelowTheFloorAndHonoursTheBound) {
  // As on a device without CL_FP_DENORM: decode is declared BOUNDED by 2^-23.
  TM_Backend* b = backend("assume_no_denormals=1;bandwidth_probe_mib=0");
  ASSERT_NE(b, nullptr);
  TM_OpSupport support{};
  ASSERT_EQ(query(b, TM_OP_DECODE, TM_DTYPE_Q8_0, TM_SHAPE_VECTOR, support).code, TM_STATUS_OK);
  EXPECT_EQ(support.level, TM_SUPPORT_FULL);
  EXPECT_EQ(support.exactness, TM_EXACT_BOUNDED);
  EXPECT_EQ(support.error_bound, std::ldexp(1.0, -23));

  const std::vector<uint8_t> blocks = random_q8_0(40, 45);
  std::vector<float> got;
  OpCall call = decode_q8_0_call(blocks.data(), 40, got);
  CallResult refused = execute(b, call);  // no policy: bitwise required
  EXPECT_EQ(refused.code, TM_STATUS_UNIMPLEMENTED);
  EXPECT_NE(refused.message.find("requires BITWISE"), std::string::npos) << refused.message;
  TM_ExecutionPolicy bitwise = make_policy(TM_EXACT_BITWISE);
  EXPECT_EQ(execute(b, call, &bitwise).code, TM_STATUS_UNIMPLEMENTED);
  TM_ExecutionPolicy too_tight = make_policy(TM_EXACT_BOUNDED, 1e-9);
  refused = execute(b, call, &too_tight);
  EXPECT_EQ(refused.code, TM_STATUS_UNIMPLEMENTED);
  EXPECT_NE(refused.message.find("max_error_bound"), std::string::npos) << refused.message;

  TM_ExecutionPolicy bounded = make_policy(TM_EXACT_BOUNDED, 1e-6);
  TM_ExecutionReport report{};
  report.struct_size = sizeof report;
  const CallResult accepted = execute(b, call, &bounded, &report);
  ASSERT_EQ(accepted.code, TM_STATUS_OK) << accepted.message;
  EXPECT_EQ(report.exactness, TM_EXACT_BOUNDED);
  EXPECT_EQ(report.error_bound, std::ldexp(1.0, -23));
  EXPECT_TRUE(floats_bitwise_equal(got, reference_decode_q8_0(blocks)));

  TM_ExecutionPolicy approximate = make_policy(TM_EXACT_APPROXIMATE);
  EXPECT_EQ(execute(b, call, &approximate).code, TM_STATUS_OK);
  TM_ExecutionPolicy nonsense = make_policy(TM_EXACT_BITWISE);
  store_raw_enum(nonsense.exactness_floor, 7);
  EXPECT_EQ(execute(b, call, &nonsense).code, TM_STATUS_INVALID_ARGUMENT);
}

TEST_F(ExactnessTest, WithoutFloat64TileStatsIsNotOffered) {
  TM_Backend* b = backend("assume_no_fp64=1;bandwidth_probe_mib=0");
  ASSERT_NE(b, nullptr);
  TM_OpSupport support{};
  ASSERT_EQ(query(b, TM_OP_TILE_STATS, TM_DTYPE_F32, TM_SHAPE_MATRIX, support).code, TM_STATUS_OK);
  EXPECT_EQ(support.level, TM_SUPPORT_NONE);
  EXPECT_NE(std::string(support.reason).find("cl_khr_fp64"), std::string::npos) << support.reason;
  const std::vector<float> values(64, 1.0f);
  std::vector<TM_TileStats> got;
  OpCall call = tile_stats_call(TM_DTYPE_F32, 8, 8, values.data(), 4, 0, 8, 0, 8, 8, got);
  EXPECT_EQ(execute(b, call).code, TM_STATUS_UNIMPLEMENTED);
}

TEST_F(ExactnessTest, PolicyIsReadOnlyUpToItsStructSize) {
  TM_Backend* b = backend("assume_no_denormals=1;bandwidth_probe_mib=0");
  ASSERT_NE(b, nullptr);
  const std::vector<uint8_t> blocks = random_q8_0(4, 46);
  std::vector<float> got;
  OpCall call = decode_q8_0_call(blocks.data(), 4, got);
  // The floor field lies past struct_size, so it reads as BITWISE and the call is refused.
  TM_ExecutionPolicy truncated = make_policy(TM_EXACT_APPROXIMATE);
  truncated.struct_size = offsetof(TM_ExecutionPolicy, exactness_floor);
  EXPECT_EQ(execute(b, call, &truncated).code, TM_STATUS_UNIMPLEMENTED);
}

// ------------------------------------------------------------------------------------------------
// Argument validation.

class ValidationTest : public PluginTest {
 protected:
  // Runs `mutate` on a valid 16x16 F32 tile_stats call and returns execute's and estimate's codes;
  // their messages and the kit's own verdict on the instance are kept for the caller.
  template <typename Mutate>
  std::pair<TM_StatusCode, TM_StatusCode> tile_stats_with(Mutate mutate) {
    TM_Backend* b = backend();
    std::vector<TM_TileStats> out;
    OpCall call = tile_stats_call(TM_DTYPE_F32, 16, 16, values_.data(), 4, 0, 16, 0, 16, 8, out);
    mutate(call);
    TM_OpInstance* instance = call.instance();
    mutate_instance_(*instance);
    const CallResult executed = take_error(api_, api_->execute(b, instance, nullptr, nullptr));
    TM_CostEstimate estimate{};
    estimate.struct_size = sizeof estimate;
    const CallResult estimated = take_error(api_, api_->estimate(b, instance, &estimate));
    TM_KitTileStats parsed;
    kit_ = tm_kit_ok();
    tm_kit_parse_tile_stats(instance, &parsed, &kit_);
    executed_message_ = executed.message;
    estimated_message_ = estimated.message;
    mutate_instance_ = [](TM_OpInstance&) {};
    return {executed.code, estimated.code};
  }

  std::vector<float> values_ = std::vector<float>(256, 0.5f);
  std::function<void(TM_OpInstance&)> mutate_instance_ = [](TM_OpInstance&) {};
  std::string executed_message_, estimated_message_;  ///< of the last tile_stats_with
  TM_KitStatus kit_ = tm_kit_ok();                    ///< the kit's verdict on the last instance
};

TEST_F(ValidationTest, ValidCallSucceeds) {
  const auto [executed, estimated] = tile_stats_with([](OpCall&) {});
  EXPECT_EQ(executed, TM_STATUS_OK);
  EXPECT_EQ(estimated, TM_STATUS_OK);
}

TEST_F(ValidationTest, BadTileStatsArgumentsAreInvalid) {
  using Mutation = std::function<void(OpCall&)>;
  const std::pair<const char*, Mutation> cases[] = {
      {"dtype not in TM_DType", [](OpCall& c) { store_raw_enum(c.inputs[0].dtype, 999); }},
      {"rank above 8", [](OpCall& c) { c.inputs[0].rank = 9; }},
      {"nbytes short", [](OpCall& c) { c.inputs[0].nbytes -= 4; }},
      {"no host_data", [](OpCall& c) { c.inputs[0].host_data = nullptr; }},
      {"tile not a power of two", [](OpCall& c) { c.attributes[4].i = 12; }},
      {"tile below 8", [](OpCall& c) { c.attributes[4].i = 4; }},
      {"tile above 4096", [](OpCall& c) { c.attributes[4].i = 8192; }},
      {"row_end past the tensor", [](OpCall& c) { c.attributes[1].i = 17; }},
      {"row_begin after row_end", [](OpCall& c) { c.attributes[0].i = 9; c.attributes[1].i = 8; }},
      {"negative col_begin", [](OpCall& c) { c.attributes[2].i = -1; }},
      {"missing tile", [](OpCall& c) { c.attributes.pop_back(); }},
      {"unknown attribute", [](OpCall& c) { c.attributes.push_back(int_attribute("stride", 2)); }},
      {"duplicate attribute", [](OpCall& c) { c.attributes.push_back(int_attribute("tile", 8)); }},
      {"output nbytes wrong", [](OpCall& c) { c.outputs[0].nbytes += 1; }},
      {"null host_out", [](OpCall& c) { c.outputs[0].host_out = nullptr; }},
      {"two inputs", [](OpCall& c) { c.inputs.push_back(c.inputs[0]); }},
      {"no output", [](OpCall& c) { c.outputs.clear(); }},
      {"input struct_size too small", [](OpCall& c) { c.inputs[0].struct_size = 4; }},
      {"null attribute name", [](OpCall& c) { c.attributes[0].name = nullptr; }},
      {"rank-3 input", [](OpCall& c) { c.inputs[0].rank = 3; c.inputs[0].shape[2] = 1; }},
      {"output dtype F32", [](OpCall& c) { c.outputs[0].dtype = TM_DTYPE_F32; c.outputs[0].shape[0] /= 4; }},
  };
  for (const auto& [what, mutation] : cases) {
    const auto [executed, estimated] = tile_stats_with(mutation);
    EXPECT_EQ(executed, TM_STATUS_INVALID_ARGUMENT) << what;
    EXPECT_EQ(estimated, TM_STATUS_INVALID_ARGUMENT) << what;
    // The plugin validates with the kit: the message is the kit's, word for word.
    EXPECT_EQ(kit_.code, TM_STATUS_INVALID_ARGUMENT) << what;
    EXPECT_EQ(executed_message_, kit_.message) << what;
    EXPECT_EQ(estimated_message_, kit_.message) << what;
  }
}

TEST_F(ValidationTest, KitMessagesNameTheProblem) {
  const std::pair<std::function<void(OpCall&)>, const char*> cases[] = {
      {[](OpCall& c) { c.attributes[4].i = 12; }, "tm.tile_stats@1: tile 12 is not a power of two in [8, 4096]"},
      {[](OpCall& c) { c.attributes[4].i = 4; }, "tm.tile_stats@1: attribute 'tile' is out of range [8, 4096]"},
      {[](OpCall& c) { c.attributes.push_back(int_attribute("stride", 2)); }, "tm.tile_stats@1: unknown attribute 'stride'"},
      {[](OpCall& c) { c.attributes.push_back(int_attribute("tile", 8)); }, "tm.tile_stats@1: attribute 'tile' given twice"},
      {[](OpCall& c) { c.attributes.pop_back(); }, "tm.tile_stats@1: missing attribute 'tile'"},
      {[](OpCall& c) { c.inputs[0].nbytes -= 4; }, "tm.tile_stats@1: input takes 1024 bytes, but nbytes is 1020"},
      {[](OpCall& c) { c.attributes[1].i = 17; },
       "tm.tile_stats@1: the view [0, 17) x [0, 16) is not inside the 16 x 16 matrix"},
      {[](OpCall& c) { c.inputs.push_back(c.inputs[0]); }, "tm.tile_stats@1: takes 1 input and 1 output, got 2 and 1"},
  };
  for (const auto& [mutation, message] : cases) {
    const auto [executed, estimated] = tile_stats_with(mutation);
    EXPECT_EQ(executed, TM_STATUS_INVALID_ARGUMENT) << message;
    EXPECT_EQ(executed_message_, message);
  }
}

TEST_F(ValidationTest, BadInstancesAreInvalid) {
  const std::pair<const char*, std::function<void(TM_OpInstance&)>> cases[] = {
      {"null op id", [](TM_OpInstance& i) { i.op = nullptr; }},
      {"null inputs", [](TM_OpInstance& i) { i.inputs = nullptr; }},
      {"attributes null with a count", [](TM_OpInstance& i) { i.attributes = nullptr; }},
  };
  for (const auto& [what, mutation] : cases) {
    mutate_instance_ = mutation;
    const auto [executed, estimated] = tile_stats_with([](OpCall&) {});
    EXPECT_EQ(executed, TM_STATUS_INVALID_ARGUMENT) << what;
    EXPECT_EQ(estimated, TM_STATUS_INVALID_ARGUMENT) << what;
  }
  TM_Backend* b = backend();
  std::vector<TM_TileStats> out;
  OpCall call = tile_stats_call(TM_DTYPE_F32, 16, 16, values_.data(), 4, 0, 16, 0, 16, 8, out);
  EXPECT_EQ(take_error(api_, api_->execute(b, nullptr, nullptr, nullptr)).code, TM_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(take_error(api_, api_->execute(nullptr, call.instance(), nullptr, nullptr)).code,
            TM_STATUS_INVALID_ARGUMENT);
}

TEST_F(ValidationTest, UnsupportedButWellFormedCallsAreUnimplemented) {
  const std::pair<const char*, std::function<void(OpCall&)>> cases[] = {
      {"BF16 input", [](OpCall& c) { c.inputs[0].dtype = TM_DTYPE_BF16; c.inputs[0].nbytes /= 2; }},
      {"Q8_0 input", [](OpCall& c) {
         c.inputs[0].dtype = TM_DTYPE_Q8_0;
         c.inputs[0].shape[1] = 32;
         c.inputs[0].nbytes = 16 * 34;
       }},
      {"histogram", [](OpCall& c) { c.op = TM_OP_HISTOGRAM; }},
      {"unknown operation", [](OpCall& c) { c.op = "tm.unknown@7"; }},
  };
  for (const auto& [what, mutation] : cases) {
    const auto [executed, estimated] = tile_stats_with(mutation);
    EXPECT_EQ(executed, TM_STATUS_UNIMPLEMENTED) << what;
    EXPECT_EQ(estimated, TM_STATUS_UNIMPLEMENTED) << what;
  }
}

TEST_F(ValidationTest, BufferInputsAreChecked) {
  TM_Backend* b = backend();
  ASSERT_NE(b, nullptr);
  BufferPtr small = upload(b, values_.data(), 100, 0);
  BufferPtr big = upload(b, values_.data(), values_.size() * 4, 4);
  ASSERT_TRUE(small && big);
  auto run = [&](TM_Buffer* buffer, uint64_t offset, bool keep_host) {
    std::vector<TM_TileStats> out;
    OpCall call = tile_stats_call(TM_DTYPE_F32, 16, 16, keep_host ? values_.data() : nullptr, 4, 0, 16, 0, 16, 8, out);
    call.inputs[0].buffer = buffer;
    call.inputs[0].byte_offset = offset;
    return execute(b, call).code;
  };
  EXPECT_EQ(run(small.get(), 0, false), TM_STATUS_INVALID_ARGUMENT) << "nbytes past the buffer's end";
  EXPECT_EQ(run(big.get(), 2, false), TM_STATUS_INVALID_ARGUMENT) << "offset not a multiple of 4";
  EXPECT_EQ(run(big.get(), 4, true), TM_STATUS_INVALID_ARGUMENT) << "both host_data and buffer";
  EXPECT_EQ(run(big.get(), 4, false), TM_STATUS_OK);

  TM_Backend* other = backend("bandwidth_probe_mib=0");
  ASSERT_NE(other, nullptr);
  std::vector<TM_TileStats> out;
  OpCall call = tile_stats_call(TM_DTYPE_F32, 16, 16, nullptr, 4, 0, 16, 0, 16, 8, out);
  call.inputs[0].buffer = big.get();
  call.inputs[0].byte_offset = 4;
  EXPECT_EQ(execute(other, call).code, TM_STATUS_INVALID_ARGUMENT) << "a buffer of another backend";
  call.inputs[0].byte_offset = 0;
  call.inputs[0].buffer = nullptr;
  call.inputs[0].host_data = values_.data();
  call.outputs[0].buffer = big.get();
  EXPECT_EQ(execute(b, call).code, TM_STATUS_INVALID_ARGUMENT) << "both host_out and a buffer";
  call.outputs[0].host_out = nullptr;
  const CallResult into_buffer = execute(b, call);
  EXPECT_EQ(into_buffer.code, TM_STATUS_UNIMPLEMENTED) << "outputs into device buffers";
  EXPECT_NE(into_buffer.message.find("device buffer is not implemented"), std::string::npos) << into_buffer.message;
}

TEST_F(ValidationTest, BadDecodeArgumentsAreInvalid) {
  TM_Backend* b = backend();
  ASSERT_NE(b, nullptr);
  const std::vector<uint8_t> blocks = random_q8_0(2, 47);
  const std::pair<const char*, std::function<void(OpCall&)>> cases[] = {
      {"output dtype F16", [](OpCall& c) { c.outputs[0].dtype = TM_DTYPE_F16; }},
      {"partial block", [](OpCall& c) { c.inputs[0].shape[0] = 33; }},
      {"rank 0", [](OpCall& c) { c.inputs[0].rank = 0; }},
      {"output count differs", [](OpCall& c) { c.outputs[0].shape[0] = 32; }},
      {"input nbytes wrong", [](OpCall& c) { c.inputs[0].nbytes = 64; }},
      {"an attribute", [](OpCall& c) { c.attributes.push_back(int_attribute("tile", 8)); }},
  };
  for (const auto& [what, mutation] : cases) {
    std::vector<float> out;
    OpCall call = decode_q8_0_call(blocks.data(), 2, out);
    mutation(call);
    const CallResult result = execute(b, call);
    EXPECT_EQ(result.code, TM_STATUS_INVALID_ARGUMENT) << what;
    TM_KitDecode parsed;
    TM_KitStatus kit = tm_kit_ok();
    EXPECT_EQ(tm_kit_parse_decode(call.instance(), &parsed, &kit), 0) << what;
    EXPECT_EQ(result.message, kit.message) << what;
  }
  std::vector<float> out;
  OpCall call = decode_q8_0_call(blocks.data(), 2, out);
  call.outputs[0].dtype = TM_DTYPE_F16;
  call.outputs[0].nbytes /= 2;
  EXPECT_EQ(execute(b, call).message, "tm.decode@1: output dtype is not F32");
}

TEST_F(ValidationTest, WellFormedDecodesOfOtherDtypesAreUnimplemented) {
  TM_Backend* b = backend();
  ASSERT_NE(b, nullptr);
  const std::vector<float> values(64, 1.0f);
  std::vector<float> out(64);
  OpCall call;
  call.op = TM_OP_DECODE;
  TM_TensorArg input = tensor_arg(TM_DTYPE_F32, {64});
  input.host_data = values.data();
  input.nbytes = 256;
  call.inputs.push_back(input);
  TM_TensorArg output = tensor_arg(TM_DTYPE_F32, {64});
  output.host_out = out.data();
  output.nbytes = 256;
  call.outputs.push_back(output);
  const CallResult result = execute(b, call);
  EXPECT_EQ(result.code, TM_STATUS_UNIMPLEMENTED);
  EXPECT_NE(result.message.find("decode for Q8_0 only"), std::string::npos) << result.message;
}

// ------------------------------------------------------------------------------------------------
// Buffers and estimates.

class BufferTest : public PluginTest {};

TEST_F(BufferTest, AllocateWriteReadAndRefuse) {
  TM_Backend* b = backend();
  ASSERT_NE(b, nullptr);
  TM_Buffer* raw = nullptr;
  EXPECT_EQ(take_error(api_, api_->buffer_alloc(b, 0, 64, &raw)).code, TM_STATUS_INVALID_ARGUMENT) << "host space";
  EXPECT_EQ(take_error(api_, api_->buffer_alloc(b, 2, 64, &raw)).code, TM_STATUS_INVALID_ARGUMENT) << "no space 2";
  EXPECT_EQ(take_error(api_, api_->buffer_alloc(b, 1, 0, &raw)).code, TM_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(take_error(api_, api_->buffer_alloc(b, 1, uint64_t{1} << 62, &raw)).code, TM_STATUS_RESOURCE_EXHAUSTED);
  EXPECT_EQ(raw, nullptr);

  ASSERT_EQ(take_error(api_, api_->buffer_alloc(b, 1, 1024, &raw)).code, TM_STATUS_OK);
  BufferPtr buffer(raw, BufferDeleter{api_, b});
  std::vector<uint8_t> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<uint8_t>(i * 7 + 1);
  ASSERT_EQ(take_error(api_, api_->buffer_write(b, raw, 24, data.data(), data.size())).code, TM_STATUS_OK);
  std::vector<uint8_t> back(1000, 0);
  ASSERT_EQ(take_error(api_, api_->buffer_read(b, raw, 24, back.data(), back.size())).code, TM_STATUS_OK);
  EXPECT_EQ(back, data);
  EXPECT_EQ(take_error(api_, api_->buffer_write(b, raw, 25, data.data(), data.size())).code, TM_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(take_error(api_, api_->buffer_read(b, raw, ~uint64_t{0}, back.data(), 2)).code, TM_STATUS_INVALID_ARGUMENT);
  EXPECT_EQ(take_error(api_, api_->buffer_write(b, raw, 0, nullptr, 8)).code, TM_STATUS_INVALID_ARGUMENT);
  api_->buffer_free(b, nullptr);  // must be harmless
}

TEST_F(BufferTest, EstimatesScaleWithTheWork) {
  TM_Backend* b = backend();
  ASSERT_NE(b, nullptr);
  auto estimate_for = [&](uint64_t n) {
    const std::vector<float> values(n * n, 1.0f);
    std::vector<TM_TileStats> out;
    OpCall call = tile_stats_call(TM_DTYPE_F32, n, n, values.data(), 4, 0, n, 0, n, 32, out);
    TM_CostEstimate estimate{};
    estimate.struct_size = sizeof estimate;
    EXPECT_EQ(take_error(api_, api_->estimate(b, call.instance(), &estimate)).code, TM_STATUS_OK);
    EXPECT_EQ(estimate.bytes_read, n * n * 4);
    EXPECT_EQ(estimate.bytes_written, out.size() * sizeof(TM_TileStats));
    return estimate.compute_ns;
  };
  const double small = estimate_for(64);
  const double large = estimate_for(1024);
  EXPECT_GT(small, 0.0);
  EXPECT_GT(large, small);

  const std::vector<uint8_t> blocks = random_q8_0(10, 48);
  std::vector<float> out;
  OpCall call = decode_q8_0_call(blocks.data(), 10, out);
  TM_CostEstimate estimate{};
  estimate.struct_size = sizeof estimate;
  ASSERT_EQ(take_error(api_, api_->estimate(b, call.instance(), &estimate)).code, TM_STATUS_OK);
  EXPECT_EQ(estimate.bytes_read, 340u);
  EXPECT_EQ(estimate.bytes_written, 1280u);
  EXPECT_GT(estimate.compute_ns, 0.0);
}

// Child mode for DeviceCountExplainsMissingIcdWithoutCrashing: report device_count and exit.
int run_device_count_probe() {
  std::string error;
  auto library = PluginLibrary::open(TM_OPENCL_PLUGIN_PATH, error);
  const TM_PluginApi* api = library ? negotiate_api(*library, error) : nullptr;
  if (api == nullptr) {
    std::printf("error=%s\n", error.c_str());
    return 1;
  }
  uint32_t count = 99;
  char why[256] = {};
  const CallResult result = take_error(api, api->device_count(&count, why, sizeof why));
  TM_BackendCreateArgs args{};
  args.struct_size = sizeof args;
  TM_Backend* backend = nullptr;
  const CallResult created = take_error(api, api->backend_create(&args, &backend));
  std::printf("code=%d\ncount=%u\nreason=%s\ncreate=%d %s\n", static_cast<int>(result.code), count, why,
              static_cast<int>(created.code), created.message.c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace tm_opencl_test

int main(int argc, char** argv) {
  if (const char* probe = std::getenv(tm_opencl_test::kProbeEnvironment); probe != nullptr && probe[0] == '1') {
    return tm_opencl_test::run_device_count_probe();
  }
  ::testing::InitGoogleTest(&argc, argv);
  ::testing::AddGlobalTestEnvironment(new tm_opencl_test::BackendCacheEnvironment);
  return RUN_ALL_TESTS();
}
