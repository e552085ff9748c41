// Memory read bandwidth, the yardstick of the indexing benchmark (bench/index_bench.sh).
//
//   read_bandwidth [--threads N] [--mib N] [--repeat N] [FILE...]
//   read_bandwidth --map-only FILE...   (maps and sums each FILE once: a warm-up, prints nothing)
//
// Prints one line per measurement, "name GB/s", best of --repeat runs:
//   anon_4k    sum of a private buffer of --mib MiB (larger than the LLC) on 4 KiB pages
//   anon_thp   the same buffer after madvise(MADV_HUGEPAGE) (2 MiB pages where the kernel gives them)
//   mmap_file  each FILE mapped afresh with MADV_HUGEPAGE (as `tensormorph index` does) and summed;
//              page faults included. Pages the mapping faults in from storage come in 2 MiB folios
//              where the file system allows, which later mappings fault in with far fewer faults.
//   pread_file each FILE read with pread into 1 MiB per-thread buffers and summed
// Every sum is 8-byte words, split into contiguous halves across --threads threads, with four
// independent vector accumulators per thread so that the loop is bound by loads, not by adds.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
typedef uint64_t u64x4 __attribute__((vector_size(32)));

#if defined(__x86_64__)
#define TM_BENCH_TARGET __attribute__((target("avx2")))
#else
#define TM_BENCH_TARGET
#endif

// Sum of the 8-byte words of [p, p + bytes); bytes is a multiple of 128.
TM_BENCH_TARGET uint64_t sum_words(const std::byte* p, size_t bytes) {
  u64x4 a{}, b{}, c{}, d{};
  for (size_t i = 0; i + 128 <= bytes; i += 128) {
    u64x4 x, y, z, w;
    std::memcpy(&x, p + i, 32);
    std::memcpy(&y, p + i + 32, 32);
    std::memcpy(&z, p + i + 64, 32);
    std::memcpy(&w, p + i + 96, 32);
    a += x;
    b += y;
    c += z;
    d += w;
  }
  const u64x4 s = (a + b) + (c + d);
  return s[0] + s[1] + s[2] + s[3];
}

// Runs body(thread, begin, end) on `threads` threads over contiguous parts of [0, bytes), 128-aligned.
template <typename Body>
void split(unsigned threads, size_t bytes, Body body) {
  std::vector<std::thread> pool;
  const size_t part = (bytes / threads) & ~size_t{127};
  for (unsigned t = 0; t < threads; ++t) {
    const size_t begin = t * part;
    const size_t end = t + 1 == threads ? (bytes & ~size_t{127}) : begin + part;
    pool.emplace_back([=] { body(t, begin, end); });
  }
  for (auto& th : pool) th.join();
}

double seconds_of(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

volatile uint64_t g_sink;  // keeps the sums alive

double buffer_gbps(const std::byte* data, size_t bytes, unsigned threads) {
  const auto start = Clock::now();
  std::vector<uint64_t> sums(threads);
  split(threads, bytes, [&](unsigned t, size_t b, size_t e) { sums[t] = sum_words(data + b, e - b); });
  const double s = seconds_of(start);
  for (uint64_t v : sums) g_sink = g_sink + v;
  return static_cast<double>(bytes) / s / 1e9;
}

double anon_gbps(size_t bytes, unsigned threads, int repeat, bool huge) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return 0;
  if (huge) ::madvise(p, bytes, MADV_HUGEPAGE);
  auto* data = static_cast<std::byte*>(p);
  split(threads, bytes, [&](unsigned, size_t b, size_t e) {
    for (size_t i = b; i < e; i += 64) data[i] = static_cast<std::byte>(i >> 6);  // fault in, non-zero pages
  });
  double best = 0;
  for (int r = 0; r < repeat; ++r) best = std::max(best, buffer_gbps(data, bytes, threads));
  ::munmap(p, bytes);
  return best;
}

struct OpenFile {
  int fd = -1;
  size_t size = 0;
};

std::vector<OpenFile> open_files(const std::vector<std::string>& paths) {
  std::vector<OpenFile> files;
  for (const auto& path : paths) {
    OpenFile f;
    f.fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    struct stat st {};
    if (f.fd < 0 || ::fstat(f.fd, &st) != 0) {
      std::fprintf(stderr, "read_bandwidth: cannot open %s\n", path.c_str());
      std::exit(2);
    }
    f.size = static_cast<size_t>(st.st_size);
    files.push_back(f);
  }
  return files;
}

double mmap_gbps(const std::vector<OpenFile>& files, unsigned threads) {
  size_t total = 0;
  const auto start = Clock::now();
  for (const OpenFile& f : files) {
    void* p = ::mmap(nullptr, f.size, PROT_READ, MAP_SHARED, f.fd, 0);
    if (p == MAP_FAILED) return 0;
    (void)::madvise(p, f.size, MADV_HUGEPAGE);
    std::vector<uint64_t> sums(threads);
    split(threads, f.size, [&](unsigned t, size_t b, size_t e) {
      sums[t] = sum_words(static_cast<const std::byte*>(p) + b, e - b);
    });
    for (uint64_t v : sums) g_sink = g_sink + v;
    ::munmap(p, f.size);
    total += f.size;
  }
  return static_cast<double>(total) / seconds_of(start) / 1e9;
}

double pread_gbps(const std::vector<OpenFile>& files, unsigned threads) {
  constexpr size_t kBuffer = size_t{1} << 20;
  size_t total = 0;
  const auto start = Clock::now();
  for (const OpenFile& f : files) {
    std::vector<uint64_t> sums(threads);
    split(threads, f.size, [&](unsigned t, size_t b, size_t e) {
      std::vector<std::byte> buffer(kBuffer);
      for (size_t at = b; at < e; at += kBuffer) {
        const size_t want = std::min(kBuffer, e - at);
        const ssize_t n = ::pread(f.fd, buffer.data(), want, static_cast<off_t>(at));
        if (n <= 0) break;
        sums[t] += sum_words(buffer.data(), static_cast<size_t>(n));
      }
    });
    for (uint64_t v : sums) g_sink = g_sink + v;
    total += f.size;
  }
  return static_cast<double>(total) / seconds_of(start) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  unsigned threads = 2;
  size_t mib = 1024;
  int repeat = 5;
  bool map_only = false;
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--map-only") {
      map_only = true;
    } else if (a == "--threads" && i + 1 < argc) {
      threads = static_cast<unsigned>(std::max(1, std::atoi(argv[++i])));
    } else if (a == "--mib" && i + 1 < argc) {
      mib = static_cast<size_t>(std::max(64, std::atoi(argv[++i])));
    } else if (a == "--repeat" && i + 1 < argc) {
      repeat = std::max(1, std::atoi(argv[++i]));
    } else if (a == "-h" || a == "--help") {
      std::puts("usage: read_bandwidth [--threads N] [--mib N] [--repeat N] [FILE...]\n"
                "       read_bandwidth --map-only FILE...");
      return 0;
    } else {
      paths.push_back(a);
    }
  }
  if (map_only) {
    const auto files = open_files(paths);
    const bool ok = !files.empty() && mmap_gbps(files, threads) > 0;
    for (const OpenFile& f : files) ::close(f.fd);
    return ok ? 0 : 1;
  }
  const size_t bytes = mib << 20;
  std::printf("threads %u\n", threads);
  std::printf("anon_4k %.2f\n", anon_gbps(bytes, threads, repeat, false));
  std::printf("anon_thp %.2f\n", anon_gbps(bytes, threads, repeat, true));
  if (!paths.empty()) {
    const auto files = open_files(paths);
    double best = 0;
    for (int r = 0; r < repeat; ++r) best = std::max(best, mmap_gbps(files, threads));
    std::printf("mmap_file %.2f\n", best);
    best = 0;
    for (int r = 0; r < repeat; ++r) best = std::max(best, pread_gbps(files, threads));
    std::printf("pread_file %.2f\n", best);
    for (const OpenFile& f : files) ::close(f.fd);
  }
  return 0;
}
