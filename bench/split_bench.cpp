// One operation split across the CPU and a device at once, against each backend alone, in one run:
// tile statistics of a BF16 tensor set (bands of 256 MiB, as indexing cuts them) with a fraction
// of the bands resident on the device beforehand. Prints each run's time and rate, the speedup of
// the split run over the best single backend (the target is > 1), and whether all three results
// are bitwise identical.
//
// Usage: split_bench [--gib G] [--resident F] [--band-mib M] [--plugins DIR] [--device NAME]
//                    [--share-host-cores] [--f16]
//   --device picks the backend beside the CPU (default: the first one that does not run on the
//   host's cores); --share-host-cores lets a software device (PoCL, lavapipe) share the work, for a
//   smoke run on a machine without a GPU (the speedup is then meaningless); --f16 for a device
//   without BF16 kernels.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "compute/scheduler.h"
#include "compute/ops/reference.h"
#include "engine/compute_session.h"

using tensormorph::compute::OpRequest;

namespace {

struct Options {
  double gib = 20;
  double resident = 1.0 / 3;
  uint64_t band_mib = 256;
  std::string plugins;
  std::string device;
  bool share_host_cores = false;
  bool f16 = false;  ///< F16 instead of BF16 (for a device without BF16 kernels)
};

constexpr uint64_t kCols = 4096;
constexpr uint32_t kTile = 256;

// BF16 (or F16) weights of plausible magnitude (|x| in [2^-8, 2^-3)), from a fast generator.
void fill(std::vector<uint16_t>& band, uint64_t seed, bool f16) {
  const size_t threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (size_t t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      uint64_t x = seed * 0x9e3779b97f4a7c15ull + t + 1;
      for (size_t i = t; i < band.size(); i += threads) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        const uint16_t sign = static_cast<uint16_t>((x >> 40) & 0x8000);
        const uint64_t octave = (x >> 20) % 5;
        band[i] = f16 ? static_cast<uint16_t>(sign | ((7 + octave) << 10) | (x & 0x3ff))
                      : static_cast<uint16_t>(sign | ((0x77 + octave) << 7) | (x & 0x7f));
      }
    });
  }
  for (auto& th : pool) th.join();
}

struct Run {
  double seconds = 0;
  std::vector<std::vector<TM_TileStats>> stats;
  size_t split_operations = 0;
};

// Tile statistics of every band under `constraints`; the bands below `resident_bands` carry their
// residency key (so a resident copy is used), the others none (nothing new is cached).
tensormorph::Result<Run> run_all(tensormorph::compute::Scheduler& s, std::span<const std::vector<uint16_t>> bands, size_t resident_bands,
                        const std::string& constraints, TM_DType dtype) {
  TM_ASSIGN_OR_RETURN(auto c, tensormorph::compute::parse_constraints(constraints));
  s.set_constraints(c);
  Run run;
  run.stats.resize(bands.size());
  const auto start = std::chrono::steady_clock::now();
  for (size_t b = 0; b < bands.size(); ++b) {
    const uint64_t rows = bands[b].size() / kCols;
    run.stats[b].assign(tensormorph::ops::tile_grid({0, rows, 0, kCols}, kTile).count(), tensormorph::ops::empty_tile_stats());
    OpRequest req;
    req.op = TM_OP_TILE_STATS;
    req.subject = "band " + std::to_string(b);
    req.inputs.push_back({dtype, {rows, kCols}, std::as_bytes(std::span(bands[b])), b < resident_bands ? b + 1 : 0});
    req.outputs.push_back({TM_DTYPE_U8, {run.stats[b].size() * sizeof(TM_TileStats)}, std::as_writable_bytes(std::span(run.stats[b]))});
    req.attributes = {{TM_ATTR_ROW_BEGIN, 0, 0}, {TM_ATTR_ROW_END, static_cast<int64_t>(rows), 0}, {TM_ATTR_COL_BEGIN, 0, 0},
                      {TM_ATTR_COL_END, static_cast<int64_t>(kCols), 0}, {TM_ATTR_TILE, kTile, 0}};
    TM_ASSIGN_OR_RETURN(auto placed, s.run(req));
    if (!placed.executed) return placed.refusal;
    if (!placed.parts.empty()) ++run.split_operations;
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return run;
}

bool same(const Run& a, const Run& b) {
  for (size_t i = 0; i < a.stats.size(); ++i) {
    if (std::memcmp(a.stats[i].data(), b.stats[i].data(), a.stats[i].size() * sizeof(TM_TileStats)) != 0) return false;
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "--gib") o.gib = std::stod(next());
    else if (a == "--resident") o.resident = std::stod(next());
    else if (a == "--band-mib") o.band_mib = std::stoull(next());
    else if (a == "--plugins") o.plugins = next();
    else if (a == "--device") o.device = next();
    else if (a == "--share-host-cores") o.share_host_cores = true;
    else if (a == "--f16") o.f16 = true;
    else {
      std::fprintf(stderr, "usage: split_bench [--gib G] [--resident F] [--band-mib M] [--plugins DIR] [--device NAME] [--share-host-cores] [--f16]\n");
      return 2;
    }
  }
  tensormorph::engine::SessionOptions session_options;
  if (!o.plugins.empty()) session_options.extra_plugin_dirs = {o.plugins};
  session_options.settings.device_cache_bytes = static_cast<uint64_t>(o.gib * o.resident * 1.1 * (1ull << 30)) + (1ull << 30);
  auto session = tensormorph::engine::ComputeSession::open(session_options);
  if (!session.ok()) {
    std::fprintf(stderr, "%s\n", session.status().to_string().c_str());
    return 1;
  }
  tensormorph::compute::Scheduler& s = (*session)->scheduler();
  std::string device = o.device;
  for (const auto& b : (*session)->backends()) {
    if (device.empty() && b->name() != "cpu" && b->unavailable_reason().empty() && b->traits().runs_on_host_cores == 0) {
      device = b->name();
    }
  }
  if (device.empty()) {
    std::printf("no backend with compute of its own beside the CPU (pass --device NAME --share-host-cores for a smoke run)\n");
    return 0;
  }
  tensormorph::compute::SplitPolicy policy;
  policy.share_host_cores = o.share_host_cores;
  s.set_split_policy(policy);

  const uint64_t band_elems = (o.band_mib << 20) / 2 / kCols * kCols;
  const auto count = static_cast<size_t>(o.gib * (1ull << 30) / (static_cast<double>(band_elems) * 2.0));
  std::vector<std::vector<uint16_t>> bands(std::max<size_t>(count, 1), std::vector<uint16_t>(band_elems));
  for (size_t b = 0; b < bands.size(); ++b) fill(bands[b], b + 1, o.f16);
  const TM_DType dtype = o.f16 ? TM_DTYPE_F16 : TM_DTYPE_BF16;
  const auto resident = static_cast<size_t>(static_cast<double>(bands.size()) * o.resident);
  const double gb = static_cast<double>(bands.size() * band_elems * 2) / 1e9;
  std::printf("tensor set: %zu bands of %llu MiB %s (%.2f GB), %zu resident on %s\n", bands.size(),
              static_cast<unsigned long long>(o.band_mib), o.f16 ? "F16" : "BF16", gb, resident, device.c_str());

  // The resident fraction: each of those bands run on the device once (cached there).
  if (auto warm = run_all(s, std::span(bands).first(resident), resident, "only=" + device, dtype); !warm.ok()) {
    std::fprintf(stderr, "%s\n", warm.status().to_string().c_str());
    return 1;
  }
  // Each mode twice: the first run calibrates the cost model, the second is measured.
  const std::pair<const char*, std::string> modes[] = {{"cpu alone", "only=cpu"}, {"device alone", "only=" + device},
                                                       {"split", "only=cpu+" + device}};
  std::vector<Run> runs;
  for (const auto& [label, constraints] : modes) {
    tensormorph::Result<Run> r = Run{};
    for (int rep = 0; rep < 2; ++rep) r = run_all(s, bands, resident, constraints, dtype);
    if (!r.ok()) {
      std::fprintf(stderr, "%s: %s\n", label, r.status().to_string().c_str());
      return 1;
    }
    std::printf("%-13s %8.3f s  %7.2f GB/s  (%zu of %zu bands split)\n", label, r->seconds, gb / r->seconds,
                r->split_operations, bands.size());
    runs.push_back(std::move(r).value());
  }
  const double best_single = std::min(runs[0].seconds, runs[1].seconds);
  const bool identical = same(runs[0], runs[1]) && same(runs[0], runs[2]);
  std::printf("split speedup over the best single backend: %.2fx (target > 1)\n", best_single / runs[2].seconds);
  std::printf("results bitwise identical: %s\n", identical ? "yes" : "NO");
  return identical ? 0 : 1;
}
