#include "backends/cpu/cpu_device.h"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_reduce.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <new>
#include <thread>

namespace tensormorph::cpu {

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const size_t start = line.find_first_not_of(" \t", colon + 1);
    if (start != std::string::npos) return line.substr(start);
  }
  return "host CPU";
}

uint64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_size = sysconf(_SC_PAGE_SIZE);
  if (pages <= 0 || page_size <= 0) return 0;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page_size);
}

uint32_t hardware_threads() {
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : n;
}

double measure_read_bandwidth_gbps() {
  // 64 MiB: larger than the last-level cache of most machines, small enough to stay ~20 ms.
  constexpr size_t kWords = (size_t{64} << 20) / sizeof(uint64_t);
  std::unique_ptr<uint64_t[]> buffer(new (std::nothrow) uint64_t[kWords]);
  if (!buffer) return 0;
  for (size_t i = 0; i < kWords; ++i) buffer[i] = i;  // faults the pages in
  const uint64_t* data = buffer.get();
  const auto start = std::chrono::steady_clock::now();
  const uint64_t total = tbb::parallel_reduce(
      tbb::blocked_range<size_t>(0, kWords, size_t{1} << 16), uint64_t{0},
      [data](const tbb::blocked_range<size_t>& r, uint64_t acc) {
        for (size_t i = r.begin(); i != r.end(); ++i) acc += data[i];
        return acc;
      },
      [](uint64_t a, uint64_t b) { return a + b; });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  // The sum of 0..n-1 is known: checking it keeps the compiler from dropping the loop.
  if (total != kWords * (kWords - 1) / 2 || seconds <= 0) return 0;
  return static_cast<double>(kWords * sizeof(uint64_t)) / seconds / 1e9;
}

}  // namespace tensormorph::cpu
