// Opening cost: headers only. Times open_checkpoint on a generated sharded set of 1,000 tensors
// (and 10,000) and prints it next to the time to read every byte of the same files, so the ratio
// shows that opening does not touch tensor data. The counter `of_limit` is the mean open time as a
// fraction of the limit for `tensormorph info` on 1,000 tensors (one second).
//
// Then `stats` over an indexed checkpoint of 1,000, 10,000 and 100,000 tensors, run in-process:
// `per_tensor_us` must stay flat as the count grows (a lookup that searches every tensor makes it
// grow linearly); `vs_1k` is the time per tensor against the 1,000-tensor run of the same process,
// and `of_limit` that ratio against its limit of 2.
//
//   build/release/bench/open_bench
#include <benchmark/benchmark.h>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "formats/safetensors/safetensors.h"
#include "tensormorph/open.h"

namespace {

namespace fs = std::filesystem;

// Writes `tensors` F32 [64, 256] tensors over 4 shards plus the index JSON; returns the index path.
fs::path make_sharded_set(size_t tensors) {
  fs::path dir = fs::temp_directory_path() / ("tm-open-bench-" + std::to_string(tensors));
  fs::path index = dir / "model.safetensors.index.json";
  if (fs::exists(index)) return index;
  fs::create_directories(dir);
  std::vector<std::byte> data(64 * 256 * 4, std::byte{0});
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t shard = 0; shard < 4; ++shard) {
    std::vector<tensormorph::safetensors::TensorToWrite> list;
    const std::string file = "model-0000" + std::to_string(shard + 1) + "-of-00004.safetensors";
    for (size_t i = shard; i < tensors; i += 4) {
      std::string name = "model.layers." + std::to_string(i / 8) + ".w" + std::to_string(i % 8) + ".weight";
      list.push_back({name, tensormorph::DType::kF32, {64, 256}, data});
      weight_map[name] = file;
    }
    if (!tensormorph::safetensors::write_file(dir / file, list, {}).ok()) std::abort();
  }
  std::ofstream(index) << nlohmann::json{{"metadata", nlohmann::json::object()}, {"weight_map", weight_map}}.dump();
  return index;
}

void BM_OpenShardedSet(benchmark::State& state) {
  const fs::path index = make_sharded_set(static_cast<size_t>(state.range(0)));
  uint64_t bytes = 0;
  for (const auto& e : fs::directory_iterator(index.parent_path())) bytes += e.file_size();
  double seconds = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    auto ckpt = tensormorph::open_checkpoint(index);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!ckpt.ok() || (*ckpt)->tensors().size() != static_cast<size_t>(state.range(0))) {
      state.SkipWithError("open failed");
      return;
    }
    benchmark::DoNotOptimize(ckpt);
  }
  state.counters["checkpoint_MB"] = static_cast<double>(bytes) / 1e6;
  constexpr double kLimitSeconds = 1.0;
  state.counters["of_limit"] = seconds / static_cast<double>(state.iterations()) / kLimitSeconds;
}
BENCHMARK(BM_OpenShardedSet)->Arg(1000)->Arg(10000)->Unit(benchmark::kMillisecond);

// The peer in the same run: reading every byte of the same files once.
void BM_ReadAllBytes(benchmark::State& state) {
  const fs::path index = make_sharded_set(static_cast<size_t>(state.range(0)));
  std::vector<char> buffer(1 << 20);
  for (auto _ : state) {
    uint64_t total = 0;
    for (const auto& e : fs::directory_iterator(index.parent_path())) {
      std::ifstream in(e.path(), std::ios::binary);
      while (in.read(buffer.data(), static_cast<std::streamsize>(buffer.size())) || in.gcount() > 0) total += static_cast<uint64_t>(in.gcount());
    }
    benchmark::DoNotOptimize(total);
  }
}
BENCHMARK(BM_ReadAllBytes)->Arg(1000)->Arg(10000)->Unit(benchmark::kMillisecond);

// One safetensors file of `tensors` small F32 tensors, indexed once.
fs::path make_indexed_file(size_t tensors) {
  const fs::path dir = fs::temp_directory_path() / ("tm-stats-bench-" + std::to_string(tensors));
  const fs::path file = dir / "model.safetensors";
  if (fs::exists(file.string() + ".tmindex")) return file;
  fs::create_directories(dir);
  std::vector<float> data(16, 0.5f);
  std::vector<tensormorph::safetensors::TensorToWrite> list;
  for (size_t i = 0; i < tensors; ++i) {
    list.push_back({"model.layers." + std::to_string(i / 8) + ".w" + std::to_string(i % 8), tensormorph::DType::kF32,
                    {4, 4}, std::as_bytes(std::span(data))});
  }
  if (!tensormorph::safetensors::write_file(file, list, {}).ok()) std::abort();
  return file;
}

// Runs `tensormorph stats FILE --json` in this process with stdout sent to /dev/null.
int run_stats(const fs::path& file) {
  CLI::App app{"tensormorph"};
  const tensormorph::cli::Command stats = tensormorph::cli::add_stats_command(app);
  std::vector<std::string> args = {"tensormorph", "stats", file.string(), "--json"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  app.parse(static_cast<int>(argv.size()), argv.data());
  std::fflush(stdout);
  const int saved = ::dup(1), null = ::open("/dev/null", O_WRONLY);
  ::dup2(null, 1);
  const int code = stats.run();
  std::fflush(stdout);
  ::dup2(saved, 1);
  ::close(null);
  ::close(saved);
  return code;
}

double g_per_tensor_1k = 0;

void BM_StatsIndexed(benchmark::State& state) {
  const size_t tensors = static_cast<size_t>(state.range(0));
  const fs::path file = make_indexed_file(tensors);
  if (run_stats(file) != 0) {  // builds the index the timed runs read
    state.SkipWithError("stats failed");
    return;
  }
  double seconds = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    if (run_stats(file) != 0) {
      state.SkipWithError("stats failed");
      return;
    }
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  const double per_tensor = seconds / static_cast<double>(state.iterations()) / static_cast<double>(tensors);
  if (tensors == 1000) g_per_tensor_1k = per_tensor;
  state.counters["per_tensor_us"] = per_tensor * 1e6;
  if (g_per_tensor_1k > 0) {
    state.counters["vs_1k"] = per_tensor / g_per_tensor_1k;
    state.counters["of_limit"] = per_tensor / g_per_tensor_1k / 2.0;
  }
}
BENCHMARK(BM_StatsIndexed)->Arg(1000)->Arg(10000)->Arg(100000)->Unit(benchmark::kMillisecond)->Iterations(2);

}  // namespace

BENCHMARK_MAIN();
