#include "test_support.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>

namespace tm_opencl_test {
namespace {

std::map<std::string, BackendPtr>& backend_cache() {
  static auto* cache = new std::map<std::string, BackendPtr>();
  return *cache;
}

std::string hex_bits(float value) {
  char text[64];
  std::snprintf(text, sizeof text, "%a (0x%08x)", static_cast<double>(value), std::bit_cast<uint32_t>(value));
  return text;
}

std::string hex_bits(double value) {
  char text[64];
  std::snprintf(text, sizeof text, "%a (0x%016llx)", value,
                static_cast<unsigned long long>(std::bit_cast<uint64_t>(value)));
  return text;
}

std::string describe(const TM_TileStats& s) {
  return "count=" + std::to_string(s.count) + " nan=" + std::to_string(s.nan) + " +inf=" + std::to_string(s.pos_inf) +
         " -inf=" + std::to_string(s.neg_inf) + " zeros=" + std::to_string(s.zeros) + " sum=" + hex_bits(s.sum) +
         " sum_sq=" + hex_bits(s.sum_sq) + " min=" + hex_bits(s.min) + " max=" + hex_bits(s.max) +
         " absmax=" + hex_bits(s.absmax) + " reserved=" + std::to_string(s.reserved);
}

}  // namespace

LoadedPlugin& loaded_plugin() {
  static LoadedPlugin* plugin = [] {
    auto* loaded = new LoadedPlugin();
    loaded->library = PluginLibrary::open(TM_OPENCL_PLUGIN_PATH, loaded->error);
    if (loaded->library) loaded->api = negotiate_api(*loaded->library, loaded->error);
    return loaded;
  }();
  return *plugin;
}

void BackendCacheEnvironment::TearDown() { backend_cache().clear(); }

void PluginTest::SetUp() {
  api_ = loaded_plugin().api;
  ASSERT_NE(api_, nullptr) << loaded_plugin().error;
  uint32_t count = 0;
  char why[256] = {};
  const CallResult result = take_error(api_, api_->device_count(&count, why, sizeof why));
  ASSERT_EQ(result.code, TM_STATUS_OK) << result.message;
  if (count == 0) GTEST_SKIP() << "no OpenCL device to test on: " << why;
}

TM_Backend* PluginTest::backend(const std::string& options) {
  auto& cache = backend_cache();
  if (auto found = cache.find(options); found != cache.end()) return found->second.get();
  TM_BackendCreateArgs args{};
  args.struct_size = sizeof args;
  args.device_index = 0;
  args.options = options.c_str();
  TM_Backend* raw = nullptr;
  const CallResult result = take_error(api_, api_->backend_create(&args, &raw));
  EXPECT_EQ(result.code, TM_STATUS_OK) << "backend_create(\"" << options << "\"): " << result.message;
  if (raw == nullptr) return nullptr;
  cache.emplace(options, BackendPtr(raw, BackendDeleter{api_}));
  return raw;
}

CallResult PluginTest::execute(TM_Backend* target, OpCall& call, const TM_ExecutionPolicy* policy,
                               TM_ExecutionReport* report) {
  return take_error(api_, api_->execute(target, call.instance(), policy, report));
}

CallResult PluginTest::query(TM_Backend* target, const char* op, TM_DType dtype, TM_ShapeClass shape_class,
                             TM_OpSupport& out) {
  TM_OpQuery question{};
  question.struct_size = sizeof question;
  question.op = op;
  question.input_dtype = dtype;
  question.shape_class = shape_class;
  out = TM_OpSupport{};
  out.struct_size = sizeof out;
  return take_error(api_, api_->query(target, &question, &out));
}

BufferPtr PluginTest::upload(TM_Backend* target, const void* data, uint64_t bytes, uint64_t offset) {
  TM_Buffer* raw = nullptr;
  const CallResult alloc = take_error(api_, api_->buffer_alloc(target, 1, offset + bytes, &raw));
  EXPECT_EQ(alloc.code, TM_STATUS_OK) << alloc.message;
  BufferPtr buffer(raw, BufferDeleter{api_, target});
  if (raw == nullptr) return buffer;
  const std::vector<uint8_t> zeros(offset, 0);
  if (offset != 0) {
    EXPECT_EQ(take_error(api_, api_->buffer_write(target, raw, 0, zeros.data(), offset)).code, TM_STATUS_OK);
  }
  const CallResult write = take_error(api_, api_->buffer_write(target, raw, offset, data, bytes));
  EXPECT_EQ(write.code, TM_STATUS_OK) << write.message;
  return buffer;
}

TM_ExecutionPolicy make_policy(TM_Exactness floor, double max_error_bound, uint64_t memory_budget) {
  TM_ExecutionPolicy policy{};
  policy.struct_size = sizeof policy;
  policy.exactness_floor = floor;
  policy.max_error_bound = max_error_bound;
  policy.memory_budget_bytes = memory_budget;
  return policy;
}

std::vector<float> random_f32(size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> values(count);
  for (float& value : values) {
    const uint32_t sign = (rng() & 1) != 0 ? 0x80000000u : 0u;
    const auto mantissa = static_cast<uint32_t>(rng() & 0x7fffffu);
    const uint64_t kind = rng() % 100;
    uint32_t bits = 0;
    if (kind < 3) bits = sign | 0x7f800000u | (mantissa | 1u);                          // NaN, any payload
    else if (kind < 5) bits = sign | 0x7f800000u;                                       // +-Inf
    else if (kind < 10) bits = sign;                                                    // +-0
    else if (kind < 14) bits = sign | (mantissa | 1u);                                  // subnormal
    else if (kind < 17) bits = sign | static_cast<uint32_t>(250 + rng() % 5) << 23 | mantissa;  // near FLT_MAX
    else bits = sign | static_cast<uint32_t>(100 + rng() % 55) << 23 | mantissa;        // everyday magnitudes
    value = std::bit_cast<float>(bits);
  }
  return values;
}

std::vector<uint16_t> random_f16(size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint16_t> values(count);
  for (uint16_t& value : values) {
    value = static_cast<uint16_t>(rng());
    if (rng() % 20 == 0) value &= 0x8000u;  // +-0
  }
  return values;
}

std::vector<uint8_t> random_q8_0(size_t blocks, uint64_t seed) {
  // Zeros, half subnormals, the largest half, Inf, quiet and signalling NaNs with payloads, 1.0.
  static constexpr uint16_t kSpecialScales[] = {0x0000, 0x8000, 0x0001, 0x03ff, 0x8001, 0x7bff, 0xfbff, 0x7c00,
                                                0xfc00, 0x7e00, 0xfe00, 0x7c01, 0xfd23, 0x3c00, 0x0400};
  constexpr size_t kSpecialCount = sizeof kSpecialScales / sizeof kSpecialScales[0];
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> data(blocks * 34);
  for (size_t b = 0; b < blocks; ++b) {
    uint16_t scale = 0;
    if (b < kSpecialCount) {
      scale = kSpecialScales[b];
    } else {
      // A normal half of modest magnitude, either sign.
      scale = static_cast<uint16_t>((rng() & 0x8000u) | ((1 + rng() % 29) << 10) | (rng() & 0x3ffu));
    }
    std::memcpy(&data[b * 34], &scale, 2);
    for (size_t j = 0; j < 32; ++j) data[b * 34 + 2 + j] = static_cast<uint8_t>(rng());
    data[b * 34 + 2] = 0;      // q = 0 (0 * Inf is NaN)
    data[b * 34 + 3] = 0x80;   // q = -128
    data[b * 34 + 4] = 0x7f;   // q = 127
  }
  return data;
}

std::vector<float> weights_f32(size_t count, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> values(count);
  for (float& value : values) {
    const uint64_t kind = rng() % 1000;
    if (kind == 0) value = std::numeric_limits<float>::quiet_NaN();
    else if (kind == 1) value = std::numeric_limits<float>::infinity();
    else if (kind == 2) value = -std::numeric_limits<float>::infinity();
    else if (kind < 20) value = (kind & 1) != 0 ? -0.0f : 0.0f;
    else value = normal(rng);
  }
  return values;
}

std::vector<uint16_t> weights_f16(size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint16_t> values(count);
  for (uint16_t& value : values) {
    const uint64_t kind = rng() % 1000;
    const auto sign = static_cast<uint16_t>((rng() & 1) != 0 ? 0x8000u : 0u);
    if (kind == 0) value = 0x7e00;  // NaN
    else if (kind == 1) value = 0x7c00;
    else if (kind == 2) value = 0xfc00;
    else if (kind < 20) value = sign;
    else value = static_cast<uint16_t>(sign | ((5 + rng() % 11) << 10) | (rng() & 0x3ffu));
  }
  return values;
}

std::vector<TM_TileStats> random_stats_grid(uint64_t rows, uint64_t cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> mean_of(-0.08, 0.08);
  std::uniform_real_distribution<double> spread_of(0.0, 0.06);
  std::vector<TM_TileStats> grid(rows * cols);
  for (TM_TileStats& s : grid) {
    s = TM_TileStats{};
    const uint64_t kind = rng() % 100;
    if (kind < 4) {
      s.min = std::numeric_limits<float>::infinity();
      s.max = -std::numeric_limits<float>::infinity();
      continue;  // an empty tile
    }
    s.count = 64;
    if (kind == 4) s.nan = 1 + rng() % 3;
    if (kind == 5) s.pos_inf = 1;
    if (kind == 6) s.neg_inf = 2;
    s.zeros = rng() % 4;
    const double mean = mean_of(rng);
    const double spread = spread_of(rng);
    s.sum = mean * 64.0;
    s.sum_sq = (mean * mean + spread * spread) * 64.0;
    s.min = static_cast<float>(mean - 2.0 * spread);
    s.max = static_cast<float>(mean + 2.0 * spread);
    s.absmax = std::max(std::fabs(s.min), std::fabs(s.max));
  }
  return grid;
}

std::vector<TM_TileStats> random_bytes_grid(uint64_t rows, uint64_t cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> words(rows * cols * sizeof(TM_TileStats) / sizeof(uint64_t));
  for (uint64_t& word : words) word = rng();
  std::vector<TM_TileStats> grid(rows * cols);
  if (!grid.empty()) std::memcpy(grid.data(), words.data(), grid.size() * sizeof(TM_TileStats));
  return grid;
}

::testing::AssertionResult pixels_equal(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << got.size() << " bytes, expected " << want.size();
  }
  for (size_t i = 0; i < got.size(); i += 4) {
    if (std::memcmp(&got[i], &want[i], 4) != 0) {
      const size_t pixel = i / 4;
      return ::testing::AssertionFailure()
             << "pixel (" << pixel / TM_RENDER_TILE_PIXELS << ", " << pixel % TM_RENDER_TILE_PIXELS << "): got rgba("
             << +got[i] << ", " << +got[i + 1] << ", " << +got[i + 2] << ", " << +got[i + 3] << "), want rgba("
             << +want[i] << ", " << +want[i + 1] << ", " << +want[i + 2] << ", " << +want[i + 3] << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult tiles_bitwise_equal(const std::vector<TM_TileStats>& got,
                                               const std::vector<TM_TileStats>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << got.size() << " tiles, expected " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(TM_TileStats)) != 0) {
      return ::testing::AssertionFailure() << "tile " << i << " differs:\n  got:  " << describe(got[i])
                                           << "\n  want: " << describe(want[i]);
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult floats_bitwise_equal(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << got.size() << " values, expected " << want.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(want[i])) {
      return ::testing::AssertionFailure() << "value " << i << " (block " << i / 32 << ", element " << i % 32
                                           << "): got " << hex_bits(got[i]) << ", want " << hex_bits(want[i]);
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace tm_opencl_test
