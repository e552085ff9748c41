// tm.tile_stats@1 throughput of the CPU backend against the machine's memory read bandwidth,
// measured in the same run: GB/s of stored input bytes for F32, BF16, F16, Q8_0 and Q4_K on
// ~1 GiB matrices, then the ratio tile_stats / bandwidth per dtype and tile size. First, the
// kernel's arithmetic ceiling: one core on a matrix that stays in cache. Data is weight-like.
//
//   build/release/bench/cpu_tile_stats_bench
#include <benchmark/benchmark.h>
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/parallel_reduce.h>

#include <algorithm>
#include <bit>
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

/// One-core in-cache G elements/s by dtype (and "F32 [n,W]" for narrow views).
std::map<std::string, double>& in_cache_results() {
  static std::map<std::string, double> r;
  return r;
}

/// One-core in-cache G elements/s by dtype, then by instruction set.
std::map<std::string, std::map<std::string, double>>& isa_results() {
  static std::map<std::string, std::map<std::string, double>> r;
  return r;
}

/// splitmix64: fast, good enough for filling benchmark data.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/// A uniform double in [0, 1) from 53 random bits.
double uniform(uint64_t r) { return static_cast<double>(r >> 11) * 0x1p-53; }

/// A weight-like value: roughly N(0, 0.02) (the sum of four uniforms, rescaled to unit variance).
float weight(uint64_t seed) {
  double s = 0;
  for (uint64_t k = 0; k < 4; ++k) s += uniform(mix(seed * 4 + k));
  return static_cast<float>((s - 2.0) * 1.7320508075688772 * 0.02);
}

/// fp16 bits of `x` (round to nearest even).
uint16_t half_bits(float x) {
  const auto h = static_cast<_Float16>(x);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}

/// A fp16 block scale uniform in [lo, hi), as ggml's quantizers produce for weight-like data.
uint16_t scale_bits(uint64_t r, double lo, double hi) {
  return half_bits(static_cast<float>(lo + (hi - lo) * uniform(r)));
}

/// The matrix a benchmark reads: `rows` x 16384 weight-like `dtype` values (floats ~N(0, 0.02);
/// quantized blocks with random quants and scales in the ranges of real checkpoints).
struct Matrix {
  DType dtype;
  uint64_t rows = 0, cols = 0;
  std::unique_ptr<std::byte[]> bytes;
  uint64_t size = 0;
};

Matrix make_matrix(DType dtype, uint64_t bytes, uint64_t cols) {
  Matrix m;
  m.dtype = dtype;
  m.cols = cols;
  const uint64_t row_bytes = *dtype_storage_bytes(dtype, m.cols);
  m.rows = std::max<uint64_t>(1, bytes / row_bytes);
  m.size = m.rows * row_bytes;
  m.bytes.reset(new std::byte[m.size]);
  std::byte* data = m.bytes.get();
  const DTypeInfo& info = dtype_info(dtype);
  tbb::parallel_for(tbb::blocked_range<uint64_t>(0, m.rows), [&](const tbb::blocked_range<uint64_t>& r) {
    for (uint64_t row = r.begin(); row != r.end(); ++row) {
      std::byte* p = data + row * row_bytes;
      for (uint64_t i = 0; i < m.cols && info.block_elems == 1; ++i) {
        const float w = weight(row * m.cols + i);
        if (dtype == DType::kF32) {
          std::memcpy(p + 4 * i, &w, 4);
        } else {
          const uint16_t bits = dtype == DType::kF16 ? half_bits(w) : static_cast<uint16_t>(std::bit_cast<uint32_t>(w) >> 16);
          std::memcpy(p + 2 * i, &bits, 2);
        }
      }
      if (info.block_elems == 1) continue;
      for (uint64_t i = 0; i < row_bytes / 8; ++i) {
        const uint64_t v = mix(row * row_bytes + i);
        std::memcpy(p + 8 * i, &v, 8);
      }
      // Quantized: random quants; Q8_0's d, Q4_K's d and dmin as in bench/make_bench_checkpoints.py
      // (for Q4_K, dmin above d as ggml's quantizer makes them for weights centred on zero; Q8_0's
      // quants in [-127, 127], as ggml writes them).
      for (uint64_t b = 0; b < m.cols / info.block_elems; ++b) {
        std::byte* block = p + b * info.block_bytes;
        if (dtype == DType::kQ8_0) {
          for (uint32_t i = 2; i < 34; ++i) block[i] = block[i] == std::byte{0x80} ? std::byte{0x81} : block[i];
        }
        const uint16_t d = dtype == DType::kQ4_K ? scale_bits(mix(row * 1000003 + b), 5e-5, 2e-4)
                                                 : scale_bits(mix(row * 1000003 + b), 1e-4, 1e-3);
        std::memcpy(block, &d, 2);
        if (dtype == DType::kQ4_K) {
          const uint16_t dmin = scale_bits(mix(row * 1000033 + b), 2e-4, 1.6e-3);
          std::memcpy(block + 2, &dmin, 2);
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
    cached = std::make_unique<Matrix>(make_matrix(dtype, kGiB, 16384));
  }
  return *cached;
}

/// Runs tm.tile_stats@1 over all of `m` with `threads` threads (0: all) for every benchmark
/// iteration on a CPU backend created with `options`; returns the seconds spent inside execute
/// (0 when the backend cannot be created, e.g. an instruction set this CPU lacks).
double run_tile_stats(benchmark::State& state, const Matrix& m, uint32_t tile, uint32_t threads,
                      const std::string& options = "") {
  const TM_PluginApi* api = tm_cpu_backend_get_api(TM_PLUGIN_ABI_MAJOR, TM_PLUGIN_ABI_MINOR);
  TM_BackendCreateArgs args{};
  args.struct_size = sizeof args;
  // The estimate is not used here: a fixed bandwidth skips the calibration.
  const std::string all_options = "bandwidth_gbps=10" + (options.empty() ? "" : ";" + options);
  args.options = all_options.c_str();
  TM_Backend* backend = nullptr;
  if (TM_Error* error = api->backend_create(&args, &backend); error != nullptr) {
    state.SkipWithError(api->error_message(error));
    api->error_destroy(error);
    return 0;
  }
  const uint64_t grid_rows = (m.rows + tile - 1) / tile, grid_cols = (m.cols + tile - 1) / tile;
  std::vector<TM_TileStats> out(grid_rows * grid_cols);
  TM_TensorArg input{};
  input.struct_size = sizeof input;
  input.dtype = to_abi_dtype(m.dtype);
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
  policy.max_threads = threads;
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
  return seconds;
}

/// All cores over a ~1 GiB matrix in DRAM: GB/s of stored bytes, compared with the bandwidth.
void BM_TileStats(benchmark::State& state, DType dtype) {
  const auto tile = static_cast<uint32_t>(state.range(0));
  const Matrix& m = cached_matrix(dtype);
  const double seconds = run_tile_stats(state, m, tile, 0);
  const double bytes = static_cast<double>(m.size) * static_cast<double>(state.iterations());
  state.counters["GB/s"] = benchmark::Counter(bytes / seconds / 1e9);
  results()[std::string(dtype_name(dtype)) + " T=" + std::to_string(tile)] = bytes / seconds / 1e9;
}

/// One thread over all of `m` at T = 256 on a backend created with `options`: sets the "Gelem/s"
/// counter and returns it (0 when the backend could not be created and the run was skipped).
double one_core_gelems(benchmark::State& state, const Matrix& m, const std::string& options = "") {
  const double seconds = run_tile_stats(state, m, 256, 1, options);
  if (seconds <= 0) return 0;
  const double gelems = static_cast<double>(m.rows * m.cols) * static_cast<double>(state.iterations()) / seconds / 1e9;
  state.counters["Gelem/s"] = benchmark::Counter(gelems);
  return gelems;
}

/// One core over a matrix that stays in its L2 cache (T = 256): the kernel's arithmetic ceiling in
/// G elements/s, with memory out of the picture.
void BM_TileStatsOneCoreInCache(benchmark::State& state, DType dtype) {
  const Matrix m = make_matrix(dtype, 512 * 1024, 4096);
  if (const double gelems = one_core_gelems(state, m); gelems > 0) {
    in_cache_results()[std::string(dtype_name(dtype))] = gelems;
  }
}

/// BM_TileStatsOneCoreInCache with the kernels of instruction set `isa` (baseline, avx2, avx512):
/// the closing table sets each against the fastest set of the same dtype, so that a set whose
/// code the compiler lowered badly stands out (limit: AVX2 at least half of AVX-512).
void BM_TileStatsOneCoreInCacheIsa(benchmark::State& state, DType dtype, const char* isa) {
  const Matrix m = make_matrix(dtype, 512 * 1024, 4096);
  if (const double gelems = one_core_gelems(state, m, std::string("isa=") + isa); gelems > 0) {
    isa_results()[std::string(dtype_name(dtype))][isa] = gelems;
  }
}

/// One core over a narrow F32 matrix in cache ([n, W]: the view of a 3x3 convolution is [n, 3], of
/// a 1x1 one [n, 1]), G elements/s: against BM_TileStatsOneCoreInCache, what narrow rows cost.
void BM_TileStatsNarrowOneCoreInCache(benchmark::State& state) {
  const Matrix m = make_matrix(DType::kF32, 512 * 1024, static_cast<uint64_t>(state.range(0)));
  if (const double gelems = one_core_gelems(state, m); gelems > 0) {
    in_cache_results()["F32 [n," + std::to_string(m.cols) + "]"] = gelems;
  }
}

/// One core over the ~1 GiB matrix in DRAM (T = 256): against BM_TileStatsOneCoreInCache, what
/// waiting for memory costs a single core.
void BM_TileStatsOneCoreFromMemory(benchmark::State& state, DType dtype) {
  const Matrix& m = cached_matrix(dtype);
  const double gelems = one_core_gelems(state, m);
  const double bytes_per_element = static_cast<double>(m.size) / static_cast<double>(m.rows * m.cols);
  if (gelems > 0) state.counters["GB/s"] = benchmark::Counter(gelems * bytes_per_element);
}

BENCHMARK_CAPTURE(BM_TileStatsOneCoreInCache, F32, DType::kF32)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_TileStatsOneCoreInCache, BF16, DType::kBF16)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_TileStatsOneCoreInCache, F16, DType::kF16)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_TileStatsOneCoreInCache, Q8_0, DType::kQ8_0)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_TileStatsOneCoreInCache, Q4_K, DType::kQ4_K)->Unit(benchmark::kMicrosecond)->UseRealTime();
// Every dtype with every instruction set, registered in this position of the list.
const bool kIsaBenchmarksRegistered = [] {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16, DType::kQ8_0, DType::kQ4_K}) {
    for (const char* isa : {"baseline", "avx2", "avx512"}) {
      const std::string name = "BM_TileStatsOneCoreInCacheIsa/" + std::string(dtype_name(dtype)) + "/" + isa;
      benchmark::RegisterBenchmark(name.c_str(), BM_TileStatsOneCoreInCacheIsa, dtype, isa)
          ->Unit(benchmark::kMicrosecond)
          ->UseRealTime();
    }
  }
  return true;
}();
BENCHMARK(BM_TileStatsNarrowOneCoreInCache)->Arg(1)->Arg(2)->Arg(3)->Arg(8)->Unit(benchmark::kMicrosecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_TileStatsOneCoreFromMemory, F32, DType::kF32)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_TileStatsOneCoreFromMemory, BF16, DType::kBF16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_TileStatsOneCoreFromMemory, F16, DType::kF16)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_TileStatsOneCoreFromMemory, Q8_0, DType::kQ8_0)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(BM_TileStatsOneCoreFromMemory, Q4_K, DType::kQ4_K)->Unit(benchmark::kMillisecond)->UseRealTime();
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
  const auto& in_cache = tensormorph::in_cache_results();
  const auto wide_f32 = in_cache.find("F32");
  for (const auto& [dtype, gelems] : in_cache) {
    std::printf("one core, in cache, T=256: %-11s %6.2f G elements/s", dtype.c_str(), gelems);
    // Narrow views against the wide F32 matrix of the same run.
    if (dtype.starts_with("F32 [") && wide_f32 != in_cache.end() && wide_f32->second > 0) {
      std::printf("  (%3.0f%% of wide F32)", 100.0 * gelems / wide_f32->second);
    }
    std::printf("\n");
  }
  // Each instruction set against the fastest of its dtype. Limit: AVX2 at least half of AVX-512
  // (512-bit vectors at most double the lanes; Zen 4 runs them as two 256-bit halves).
  for (const auto& [dtype, by_isa] : tensormorph::isa_results()) {
    double best = 0;
    for (const auto& [isa, gelems] : by_isa) best = std::max(best, gelems);
    std::printf("one core, in cache, T=256: %-5s", dtype.c_str());
    for (const auto& [isa, gelems] : by_isa) {
      std::printf("  %s %5.2f (%3.0f%%)", isa.c_str(), gelems, 100.0 * gelems / best);
    }
    const auto avx2 = by_isa.find("avx2"), avx512 = by_isa.find("avx512");
    if (avx2 != by_isa.end() && avx512 != by_isa.end()) {
      const double ratio = avx2->second / avx512->second;
      std::printf("  avx2/avx512 %.2f, limit 0.50: %s", ratio, ratio >= 0.5 ? "met" : "MISSED");
    }
    std::printf("\n");
  }
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
