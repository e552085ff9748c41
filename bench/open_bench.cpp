// Opening cost: headers only. Times open_checkpoint on a generated sharded set of 1,000 tensors
// (and 10,000) and prints it next to the time to read every byte of the same files, so the ratio
// shows that opening does not touch tensor data. The counter `of_limit` is the mean open time as a
// fraction of issue 2's limit for `tensormorph info` on 1,000 tensors (one second).
//
//   build/release/bench/open_bench
#include <benchmark/benchmark.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <vector>

#include <nlohmann/json.hpp>

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

}  // namespace

BENCHMARK_MAIN();
