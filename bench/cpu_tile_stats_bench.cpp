// tm.tile_stats@1 throughput of the CPU backend against the machine's memory read bandwidth,
// measured in the same run: GB/s of stored input bytes for F32, BF16, F16, Q8_0 and Q4_K on
// ~1 GiB matrices, then the ratio tile_stats / bandwidth per dtype and tile size.
//
//   build/release/bench/cpu_tile_stats_bench
#include <benchmark/benchmark.h>
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/parallel_reduce.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "core/dtype_abi.h"
#include "tensormorph/dtype.h"

namespace tensormorph {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

/// Measured GB/s by benchmark label, for the closing ratio table.
std::map<std::string, double>& results() {
  static std::map<std::string, double> r;
  return r;
}

/// splitmix64: fast, good enough for filling benchmark data.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// A small finite fp16 (2^-10 .. 2^-2 in magnitude).
uint16_t sane_half(uint64_t r) {
  return static_cast<uint16_t>(((r >> 20) & 1) << 15 | (5 + (r >> 8) % 9) << 10 | (r & 0x3ff));
}

/// A finite float32 with exponent in [2^-27, 2^13).
uint32_t finite_f32_bits(uint64_t r) {
  return static_cast<uint32_t>((r & 0x807fffffu) | ((100 + (r >> 32) % 40) << 23));
}

/// The matrix a benchmark reads: about 1 GiB of valid, finite `dtype` storage.
struct Matrix {
  DType dtype;
  uint64_t rows = 0, cols = 0;
  std::unique_ptr<std::byte[]> bytes;
  uint64_t size = 0;
};

Matrix make_matrix(DType dtype) {
  Matrix m;
  m.dtype = dtype;
  m.cols = 16384;
  const uint64_t row_bytes = *dtype_storage_bytes(dtype, m.cols);
  m.rows = kGiB / row_bytes;
  m.size = m.rows * row_bytes;
  m.bytes.reset(new std::byte[m.size]);
  std::byte* data = m.bytes.get();
  const DTypeInfo& info = dtype_info(dtype);
  tbb::parallel_for(tbb::blocked_range<uint64_t>(0, m.rows), [&](const tbb::blocked_range<uint64_t>& r) {
    for (uint64_t row = r.begin(); row != r.end(); ++row) {
      std::byte* p = data + row * row_bytes;
      for (uint64_t i = 0; i < row_bytes / 8; ++i) {
        const uint64_t v = mix(row * row_bytes + i);
        std::memcpy(p + 8 * i, &v, 8);
      }
      if (dtype == DType::kF32) {
        for (uint64_t i = 0; i < m.cols; ++i) {
          const uint32_t bits = finite_f32_bits(mix(row * m.cols + i));
          std::memcpy(p + 4 * i, &bits, 4);
        }
      } else if (dtype == DType::kBF16) {
        for (uint64_t i = 0; i < m.cols; ++i) {
          const auto bits = static_cast<uint16_t>(finite_f32_bits(mix(row * m.cols + i)) >> 16);
          std::memcpy(p + 2 * i, &bits, 2);
        }
      } else if (dtype == DType::kF16) {
        for (uint64_t i = 0; i < m.cols; ++i) {
          const uint16_t bits = sane_half(mix(row * m.cols + i)) ^ static_cast<uint16_t>(0x2000);  // wider range
          std::memcpy(p + 2 * i, &bits, 2);
        }
      } else {
        // Quantized: random quants, sane fp16 scales (Q8_0: d at 0; Q4_K: d, dmin at 0, 2).
        for (uint64_t b = 0; b < m.cols / info.block_elems; ++b) {
          std::byte* block = p + b * info.block_bytes;
          const uint16_t d = sane_half(mix(row * 1000003 + b));
          std::memcpy(block, &d, 2);
          if (dtype == DType::kQ4_K) {
            const uint16_t dmin = sane_half(mix(row * 1000033 + b));
            std::memcpy(block + 2, &dmin, 2);
          }
        }
      }
    }
  });
  return m;
}

// ---- Memory read bandwidth -------------------------------------------------------------------

void BM_MemoryReadBandwidth(benchmark::State& state) {
  const uint64_t words = kGiB / sizeof(uint64_t);
  std::unique_ptr<uint64_t[]> buffer(new uint64_t[words]);
  uint64_t* data = buffer.get();
  tbb::parallel_for(tbb::blocked_range<uint64_t>(0, words), [&](const tbb::blocked_range<uint64_t>& r) {
    for (uint64_t i = r.begin(); i != r.end(); ++i) data[i] = i;
  });
  double seconds = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    const uint64_t sum = tbb::parallel_reduce(
        tbb::blocked_range<uint64_t>(0, words, uint64_t{1} << 16), uint64_t{0},
        [data](const tbb::blocked_range<uint64_t>& r, uint64_t acc) {
          for (uint64_t i = r.begin(); i != r.end(); ++i) acc += data[i];
          return acc;
        },
        [](uint64_t a, uint64_t b) { return a + b; });
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    benchmark::DoNotOptimize(sum);
  }
  const double bytes = static_cast<double>(words * sizeof(uint64_t)) * static_cast<double>(state.iterations());
  state.counters["GB/s"] = benchmark::Counter(bytes / seconds / 1e9);
  results()["bandwidth"] = bytes / seconds / 1e9;
}

// ---- tile_stats through the backend's ABI ----------------------------------------------------

/// The matrix of the last dtype asked for (one ~1 GiB matrix alive at a time; Google Benchmark
/// calls a benchmark several times while it settles the iteration count).
const Matrix& cached_matrix(DType dtype) {
  static std::unique_ptr<Matrix> cached;
  if (!cached || cached->dtype != dtype) {
    cached.reset();
    cached = std::make_unique<Matrix>(make_matrix(dtype));
  }
  return *cached;
}

void BM_TileStats(benchmark::State& state, DType dtype) {
  const auto tile = static_cast<uint32_t>(state.range(0));
  const Matrix& m = cached_matrix(dtype);
  const TM_PluginApi* api = tm_cpu_backend_get_api(TM_PLUGIN_ABI_MAJOR, TM_PLUGIN_ABI_MINOR);
  TM_BackendCreateArgs args{};
  args.struct_size = sizeof args;
  args.options = "bandwidth_gbps=10";  // the estimate is not used here: skip the calibration
  TM_Backend* backend = nullptr;
  if (api->backend_create(&args, &backend) != nullptr) {
    state.SkipWithError("cannot create the cpu backend");
    return;
  }
  const uint64_t grid_rows = (m.rows + tile - 1) / tile, grid_cols = (m.cols + tile - 1) / tile;
  std::vector<TM_TileStats> out(grid_rows * grid_cols);
  TM_TensorArg input{};
  input.struct_size = sizeof input;
  input.dtype = to_abi_dtype(dtype);
  input.rank = 2;
  input.shape[0] = m.rows;
  input.shape[1] = m.cols;
  input.host_data = m.bytes.get();
  input.nbytes = m.size;
  TM_TensorArg output{};
  output.struct_size = sizeof output;
  output.dtype = TM_DTYPE_U8;
  output.rank = 1;
  output.shape[0] = output.nbytes = out.size() * sizeof(TM_TileStats);
  output.host_out = out.data();
  const char* names[] = {"row_begin", "row_end", "col_begin", "col_end", "tile"};
  const int64_t values[] = {0, static_cast<int64_t>(m.rows), 0, static_cast<int64_t>(m.cols), tile};
  TM_Attribute attrs[5]{};
  for (int i = 0; i < 5; ++i) {
    attrs[i].struct_size = sizeof attrs[i];
    attrs[i].name = names[i];
    attrs[i].i = values[i];
  }
  TM_OpInstance op{};
  op.struct_size = sizeof op;
  op.op = TM_OP_TILE_STATS;
  op.inputs = &input;
  op.input_count = 1;
  op.outputs = &output;
  op.output_count = 1;
  op.attributes = attrs;
  op.attribute_count = 5;
  TM_ExecutionPolicy policy{};
  policy.struct_size = sizeof policy;
  double seconds = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    TM_Error* error = api->execute(backend, &op, &policy, nullptr);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (error != nullptr) {
      state.SkipWithError(api->error_message(error));
      api->error_destroy(error);
      break;
    }
    benchmark::DoNotOptimize(out.data());
  }
  api->backend_destroy(backend);
  const double bytes = static_cast<double>(m.size) * static_cast<double>(state.iterations());
  state.counters["GB/s"] = benchmark::Counter(bytes / seconds / 1e9);
  results()[std::string(dtype_name(dtype)) + " T=" + std::to_string(tile)] = bytes / seconds / 1e9;
}

BENCHMARK(BM_MemoryReadBandwidth)->Unit(benchmark::kMillisecond)->UseRealTime()->MinTime(1.0);
BENCHMARK_CAPTURE(BM_TileStats, F32, DType::kF32)->Arg(8)->Arg(64)->Arg(256)->Arg(4096)
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_TileStats, BF16, DType::kBF16)->Arg(8)->Arg(64)->Arg(256)->Arg(4096)
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_TileStats, F16, DType::kF16)->Arg(8)->Arg(64)->Arg(256)->Arg(4096)
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_TileStats, Q8_0, DType::kQ8_0)->Arg(8)->Arg(64)->Arg(256)->Arg(4096)
    ->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_TileStats, Q4_K, DType::kQ4_K)->Arg(8)->Arg(64)->Arg(256)->Arg(4096)
    ->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace tensormorph

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  const auto& r = tensormorph::results();
  const auto bandwidth = r.find("bandwidth");
  if (bandwidth == r.end() || bandwidth->second <= 0) return 0;
  std::printf("\nmemory read bandwidth: %.2f GB/s\n%-14s %10s %12s\n", bandwidth->second, "dtype, tile", "GB/s",
              "of bandwidth");
  for (const auto& [label, gbps] : r) {
    if (label != "bandwidth") std::printf("%-14s %10.2f %11.0f%%\n", label.c_str(), gbps, 100.0 * gbps / bandwidth->second);
  }
  return 0;
}
