// Uploads of host memory to the CUDA backend against the link, measured in one run:
//   1. the link's ceiling: cudaMemcpyAsync from pinned memory, timed with events, per size; and
//      one pageable cudaMemcpy (what the runtime does alone);
//   2. buffer_write through the module's ABI (libtm_cuda.so, loaded with dlopen) from ordinary,
//      touched memory, per size, as a ratio to (1) against the 0.80 target, back to back and after
//      the module's threads went idle; the bytes are read back and compared, and a write at an
//      odd offset from an odd address is checked too; then more sizes, without a verdict;
//   3. the same from a fresh mapping of a file in the page cache (first touch inside the upload);
//      and tm.tile_stats@1 executed on host data (streamed in bands through the same pipeline)
//      against the same bytes uploaded with buffer_write, bit for bit;
//   4. what limits the staging fill: host copies from ordinary into pinned memory on 1..N threads;
//      how long a sleeping thread takes to wake; cudaHostRegister of the source instead of
//      staging; buffer_write under other settings;
//   5. backend_create: in a fresh process with an empty calibration folder and again with the
//      calibration it left, and in this process with calibration=measure and =remember.
// Without a CUDA device (or without a usable one) it says so and exits 0.
//
// Usage: cuda_upload_bench [--module PATH] [--sizes-mib 64,256,1024] [--more-sizes-mib 16,32,128,512]
//                          [--reps R] [--threads 1,2,4,8,12]
//                          [--sweep "opts|opts|..."]   (--threads: host copy test; --sweep: option sets)
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tensormorph/c/plugin.h"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr double kTarget = 0.80;
constexpr uint64_t kMiB = uint64_t{1} << 20;

#define CUDA_OK(expr)                                                             \
  do {                                                                            \
    cudaError_t e_ = (expr);                                                      \
    if (e_ != cudaSuccess) {                                                      \
      std::fprintf(stderr, "%s failed: %s\n", #expr, cudaGetErrorString(e_));     \
      std::exit(1);                                                               \
    }                                                                             \
  } while (0)

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

std::string arg_value(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  }
  return fallback;
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, sep);) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

/// The first line of a sysfs file, or "?".
std::string sysfs_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  return std::getline(in, line) && !line.empty() ? line : "?";
}

/// The module's function table, loaded once.
struct Module {
  void* handle = nullptr;
  const TM_PluginApi* api = nullptr;
  std::string error;

  explicit Module(const std::string& path) {
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      error = dlerror();
      return;
    }
    auto get = reinterpret_cast<TM_PluginGetApiFn>(dlsym(handle, "tm_plugin_get_api"));
    api = get ? get(TM_PLUGIN_ABI_MAJOR, TM_PLUGIN_ABI_MINOR) : nullptr;
    if (api == nullptr) error = "no tm_plugin_get_api for this ABI";
  }
  /// Turns an error into its message (and frees it); "" for success.
  std::string take(TM_Error* e) const {
    if (e == nullptr) return "";
    std::string m = api->error_message(e);
    api->error_destroy(e);
    return m.empty() ? "error" : m;
  }
};

/// Exits with the message when `message` is not empty.
void require_ok(const std::string& message, const char* what) {
  if (message.empty()) return;
  std::fprintf(stderr, "%s: %s\n", what, message.c_str());
  std::exit(1);
}

TM_Backend* create_backend(const Module& m, const std::string& options, double* seconds) {
  TM_BackendCreateArgs args{};
  args.struct_size = sizeof args;
  args.device_index = 0;
  args.options = options.c_str();
  TM_Backend* backend = nullptr;
  const auto t0 = Clock::now();
  require_ok(m.take(m.api->backend_create(&args, &backend)), ("backend_create(" + options + ")").c_str());
  if (seconds) *seconds = seconds_since(t0);
  return backend;
}

/// Ordinary memory with non-zero contents, every page touched.
std::vector<uint8_t> pageable_bytes(uint64_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  uint64_t x = 0x9e3779b97f4a7c15ull ^ seed;
  for (uint64_t i = 0; i + 8 <= n; i += 8) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::memcpy(v.data() + i, &x, 8);
  }
  return v;
}

/// Pinned host-to-device cudaMemcpyAsync of `bytes`, median GB/s over `reps` (event-timed).
double pinned_h2d_gbps(void* device, uint64_t bytes, int reps) {
  void* pinned = nullptr;
  CUDA_OK(cudaHostAlloc(&pinned, bytes, cudaHostAllocDefault));
  std::memset(pinned, 0x5a, bytes);
  cudaEvent_t a, b;
  CUDA_OK(cudaEventCreate(&a));
  CUDA_OK(cudaEventCreate(&b));
  std::vector<double> gbps;
  for (int i = 0; i < reps + 1; ++i) {
    CUDA_OK(cudaEventRecord(a));
    CUDA_OK(cudaMemcpyAsync(device, pinned, bytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaEventRecord(b));
    CUDA_OK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_OK(cudaEventElapsedTime(&ms, a, b));
    if (i > 0) gbps.push_back(static_cast<double>(bytes) / (ms * 1e6));
  }
  CUDA_OK(cudaEventDestroy(a));
  CUDA_OK(cudaEventDestroy(b));
  CUDA_OK(cudaFreeHost(pinned));
  return median(gbps);
}

/// Median GB/s of the synchronous `body` moving `bytes`, after one warm-up.
template <typename Body>
double wall_gbps(uint64_t bytes, int reps, Body&& body) {
  std::vector<double> gbps;
  for (int i = 0; i < reps + 1; ++i) {
    const auto t0 = Clock::now();
    body();
    if (i > 0) gbps.push_back(static_cast<double>(bytes) / (seconds_since(t0) * 1e9));
  }
  return median(gbps);
}

/// Idle time before each "after idle" upload: far longer than the module's threads poll.
constexpr auto kIdle = std::chrono::milliseconds(20);

/// buffer_write of `src` into a fresh buffer, median GB/s back to back (and, when `idle_gbps` is
/// set, after kIdle of nothing each); checked byte for byte once when `correct` is set.
double abi_write_gbps(const Module& m, TM_Backend* b, const std::vector<uint8_t>& src, int reps, bool* correct,
                      double* idle_gbps = nullptr) {
  TM_Buffer* buffer = nullptr;
  require_ok(m.take(m.api->buffer_alloc(b, 1, src.size(), &buffer)), "buffer_alloc");
  const double gbps = wall_gbps(src.size(), reps, [&] {
    require_ok(m.take(m.api->buffer_write(b, buffer, 0, src.data(), src.size())), "buffer_write");
  });
  if (idle_gbps) {
    std::vector<double> rates;
    for (int i = 0; i < reps; ++i) {
      std::this_thread::sleep_for(kIdle);
      const auto t0 = Clock::now();
      require_ok(m.take(m.api->buffer_write(b, buffer, 0, src.data(), src.size())), "buffer_write");
      rates.push_back(static_cast<double>(src.size()) / (seconds_since(t0) * 1e9));
    }
    *idle_gbps = median(rates);
  }
  if (correct) {
    std::vector<uint8_t> back(src.size());
    require_ok(m.take(m.api->buffer_read(b, buffer, 0, back.data(), back.size())), "buffer_read");
    bool ok = back == src;
    // An odd offset from an odd address, leaving both ends of the buffer as they were.
    const uint64_t offset = 4097, n = src.size() > 16384 ? src.size() - 12289 : 0;
    if (n > 0) {
      require_ok(m.take(m.api->buffer_write(b, buffer, offset, src.data() + 3, n)), "buffer_write at an offset");
      require_ok(m.take(m.api->buffer_read(b, buffer, 0, back.data(), back.size())), "buffer_read");
      ok = ok && std::memcmp(back.data(), src.data(), offset) == 0 &&
           std::memcmp(back.data() + offset, src.data() + 3, n) == 0 &&
           std::memcmp(back.data() + offset + n, src.data() + offset + n, src.size() - offset - n) == 0;
    }
    // A range past the end is refused, as a value.
    ok = ok && !m.take(m.api->buffer_write(b, buffer, 1, src.data(), src.size())).empty();
    *correct = ok;
  }
  m.api->buffer_free(b, buffer);
  return gbps;
}

/// buffer_write from a fresh read-only mapping of `file` (in the page cache), median GB/s.
double mapped_write_gbps(const Module& m, TM_Backend* b, const std::string& file, uint64_t bytes, int reps) {
  TM_Buffer* buffer = nullptr;
  require_ok(m.take(m.api->buffer_alloc(b, 1, bytes, &buffer)), "buffer_alloc");
  const int fd = ::open(file.c_str(), O_RDONLY);
  if (fd < 0) {
    std::perror("open");
    std::exit(1);
  }
  std::vector<double> gbps;
  for (int i = 0; i < reps + 1; ++i) {
    void* map = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      std::perror("mmap");
      std::exit(1);
    }
    const auto t0 = Clock::now();
    require_ok(m.take(m.api->buffer_write(b, buffer, 0, map, bytes)), "buffer_write from a mapping");
    if (i > 0) gbps.push_back(static_cast<double>(bytes) / (seconds_since(t0) * 1e9));
    ::munmap(map, bytes);
  }
  ::close(fd);
  m.api->buffer_free(b, buffer);
  return median(gbps);
}

/// Ordinary -> pinned host copies on `threads` threads, each copying its share with memcpy calls
/// of `call` bytes (0: one call), median GB/s (bytes copied).
double host_copy_gbps(const std::vector<uint8_t>& src, void* pinned, unsigned threads, uint64_t call, int reps) {
  const uint64_t n = src.size(), part = (n + threads - 1) / threads;
  return wall_gbps(n, reps, [&] {
    std::vector<std::thread> pool;
    for (unsigned t = 0; t < threads; ++t) {
      const uint64_t begin = std::min(n, t * part), end = std::min(n, begin + part);
      pool.emplace_back([&, begin, end] {
        const uint64_t step = call == 0 ? end - begin : call;
        for (uint64_t at = begin; at < end; at += step) {
          std::memcpy(static_cast<uint8_t*>(pinned) + at, src.data() + at, std::min(step, end - at));
        }
      });
    }
    for (auto& th : pool) th.join();
  });
}

/// tm.tile_stats@1 over a row-major F32 matrix of `rows` x `cols`, read from host memory or from a
/// device buffer, into `stats`; returns the wall seconds of execute, or -1 after printing why it
/// was refused.
double tile_stats(const Module& m, TM_Backend* b, const void* host, TM_Buffer* buffer, uint64_t rows, uint64_t cols,
                  uint64_t budget, std::vector<TM_TileStats>& stats) {
  constexpr int64_t kTile = 256;
  stats.assign(((rows + kTile - 1) / kTile) * ((cols + kTile - 1) / kTile), TM_TileStats{});
  TM_TensorArg in{};
  in.struct_size = sizeof in;
  in.dtype = TM_DTYPE_F32;
  in.rank = 2;
  in.shape[0] = rows;
  in.shape[1] = cols;
  in.host_data = host;
  in.buffer = buffer;
  in.nbytes = rows * cols * 4;
  TM_TensorArg out{};
  out.struct_size = sizeof out;
  out.dtype = TM_DTYPE_U8;
  out.rank = 1;
  out.shape[0] = stats.size() * sizeof(TM_TileStats);
  out.host_out = stats.data();
  out.nbytes = out.shape[0];
  const char* names[5] = {TM_ATTR_ROW_BEGIN, TM_ATTR_ROW_END, TM_ATTR_COL_BEGIN, TM_ATTR_COL_END, TM_ATTR_TILE};
  const int64_t values[5] = {0, static_cast<int64_t>(rows), 0, static_cast<int64_t>(cols), kTile};
  TM_Attribute attrs[5];
  for (int i = 0; i < 5; ++i) attrs[i] = {sizeof(TM_Attribute), names[i], values[i], 0.0};
  const TM_OpInstance op = {sizeof op, TM_OP_TILE_STATS, &in, 1, &out, 1, attrs, 5};
  TM_ExecutionPolicy policy{};
  policy.struct_size = sizeof policy;
  policy.exactness_floor = TM_EXACT_BITWISE;
  policy.memory_budget_bytes = budget;
  TM_ExecutionReport report{};
  report.struct_size = sizeof report;
  const auto t0 = Clock::now();
  const std::string error = m.take(m.api->execute(b, &op, &policy, &report));
  const double seconds = seconds_since(t0);
  if (!error.empty()) {
    std::printf("execute tm.tile_stats@1 (budget %llu bytes): %s\n", static_cast<unsigned long long>(budget),
                error.c_str());
    return -1;
  }
  return seconds;
}

/// Microseconds from notify_all until each of `threads` sleeping threads runs, after `idle` of
/// sleep; median and largest over `trials`.
std::pair<double, double> wake_us(unsigned threads, std::chrono::milliseconds idle, int trials) {
  std::mutex mutex;
  std::condition_variable cv;
  uint64_t generation = 0;
  bool stop = false;
  Clock::time_point sent;
  std::vector<double> delays;
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      uint64_t seen = 0;
      std::unique_lock lock(mutex);
      for (;;) {
        cv.wait(lock, [&] { return stop || generation != seen; });
        if (stop) return;
        seen = generation;
        delays.push_back(std::chrono::duration<double, std::micro>(Clock::now() - sent).count());
      }
    });
  }
  for (int i = 0; i < trials; ++i) {
    std::this_thread::sleep_for(idle);
    {
      std::lock_guard lock(mutex);
      sent = Clock::now();
      ++generation;
    }
    cv.notify_all();
  }
  std::this_thread::sleep_for(idle);
  {
    std::lock_guard lock(mutex);
    stop = true;
  }
  cv.notify_all();
  for (auto& t : pool) t.join();
  return {median(delays), delays.empty() ? 0.0 : *std::max_element(delays.begin(), delays.end())};
}

/// The child: load the module, create and destroy one backend; prints seconds of each step.
int child_create(const std::string& module_path, const std::string& options) {
  const auto t0 = Clock::now();
  Module m(module_path);
  require_ok(m.error, "loading the module");
  const double load_s = seconds_since(t0);
  double create_s = 0;
  TM_Backend* b = create_backend(m, options, &create_s);
  TM_DeviceTraits t{};
  t.struct_size = sizeof t;
  require_ok(m.take(m.api->device_traits(b, &t)), "device_traits");
  const auto d0 = Clock::now();
  m.api->backend_destroy(b);
  std::printf("child load %.4f create %.4f destroy %.4f link %.2f GB/s | %s\n", load_s, create_s,
              seconds_since(d0), t.host_to_device_gbps, t.device_name);
  return 0;
}

/// Runs this program as a child with XDG_CACHE_HOME=`cache`; returns its wall seconds and output.
double spawn_child(const std::string& self, const std::string& module_path, const std::string& options,
                   const std::string& cache, std::string* output) {
  const std::string log = cache + "/child.log";
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    if (std::strncmp(*e, "XDG_CACHE_HOME=", 15) != 0) env_strings.emplace_back(*e);
  }
  env_strings.push_back("XDG_CACHE_HOME=" + cache);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  std::vector<std::string> arg_strings = {self, "--child-create", options, "--module", module_path};
  std::vector<char*> argv;
  for (auto& s : arg_strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  pid_t pid = 0;
  const auto t0 = Clock::now();
  if (posix_spawn(&pid, self.c_str(), &actions, nullptr, argv.data(), envp.data()) != 0) {
    std::perror("posix_spawn");
    std::exit(1);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  const double wall = seconds_since(t0);
  posix_spawn_file_actions_destroy(&actions);
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  *output = text.str();
  while (!output->empty() && output->back() == '\n') output->pop_back();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "child failed: %s\n", output->c_str());
    std::exit(1);
  }
  return wall;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string module_path = arg_value(argc, argv, "--module", TM_PLUGIN_BUILD_DIR "/libtm_cuda.so");
  const std::string child_options = arg_value(argc, argv, "--child-create", "\x01");
  if (child_options != "\x01") return child_create(module_path, child_options);
  const int reps = std::max(1, std::atoi(arg_value(argc, argv, "--reps", "5").c_str()));
  std::vector<uint64_t> sizes;
  for (const auto& s : split(arg_value(argc, argv, "--sizes-mib", "64,256,1024"), ',')) {
    sizes.push_back(std::strtoull(s.c_str(), nullptr, 10) * kMiB);
  }
  std::vector<uint64_t> more_sizes;
  for (const auto& s : split(arg_value(argc, argv, "--more-sizes-mib", "16,32,128,512"), ',')) {
    more_sizes.push_back(std::strtoull(s.c_str(), nullptr, 10) * kMiB);
  }
  std::vector<unsigned> thread_counts;
  for (const auto& s : split(arg_value(argc, argv, "--threads", "1,2,4,8,12"), ',')) {
    thread_counts.push_back(static_cast<unsigned>(std::max(1, std::atoi(s.c_str()))));
  }
  const std::vector<std::string> sweep = split(
      arg_value(argc, argv, "--sweep",
                "copy_threads=8|copy_threads=16|staging_mib=16;staging_slots=4|staging_mib=4;staging_slots=16|"
                "staging_mib=8;staging_slots=4|staging_mib=4;staging_slots=8|staging_mib=4;staging_slots=4|"
                "fill=stream|fill=stream;staging_mib=4;staging_slots=4"),
      '|');
  uint64_t largest = *std::max_element(sizes.begin(), sizes.end());
  for (const uint64_t b : more_sizes) largest = std::max(largest, b);

  int count = 0;
  const cudaError_t census = cudaGetDeviceCount(&count);
  if (census != cudaSuccess || count == 0) {
    std::printf("no CUDA device (%s): skipped\n", census != cudaSuccess ? cudaGetErrorString(census) : "none");
    return 0;
  }
  Module m(module_path);
  require_ok(m.error, ("loading " + module_path).c_str());
  uint32_t usable = 0;
  char why[512] = {};
  require_ok(m.take(m.api->device_count(&usable, why, sizeof why)), "device_count");
  if (usable == 0) {
    std::printf("the module has no usable device (%s): skipped\n", why);
    return 0;
  }
  cudaDeviceProp props{};
  CUDA_OK(cudaGetDeviceProperties(&props, 0));
  int driver = 0, runtime = 0;
  CUDA_OK(cudaDriverGetVersion(&driver));
  CUDA_OK(cudaRuntimeGetVersion(&runtime));
  char pci[64];
  std::snprintf(pci, sizeof pci, "%04x:%02x:%02x.0", static_cast<unsigned>(props.pciDomainID),
                static_cast<unsigned>(props.pciBusID), static_cast<unsigned>(props.pciDeviceID));
  std::printf("device: %s at %s (link %s x%s as the OS sees it), %u host CPUs, driver API %d, runtime %d, module %s %s\n",
              props.name, pci, sysfs_line(std::string("/sys/bus/pci/devices/") + pci + "/current_link_speed").c_str(),
              sysfs_line(std::string("/sys/bus/pci/devices/") + pci + "/current_link_width").c_str(),
              std::thread::hardware_concurrency(), driver, runtime, m.api->name, m.api->version);

  // 5 first, in fresh processes, before this process has touched the module's device state.
  char cache_template[] = "/tmp/tm-upload-bench-XXXXXX";
  if (::mkdtemp(cache_template) == nullptr) {
    std::perror("mkdtemp");
    return 1;
  }
  const std::string cache = cache_template;
  const std::string self = fs::canonical("/proc/self/exe").string();
  std::printf("\n== backend_create in a fresh process (XDG_CACHE_HOME=%s)\n", cache.c_str());
  for (const char* label : {"no calibration", "remembered", "remembered"}) {
    std::string out;
    const double wall = spawn_child(self, module_path, "", cache, &out);
    std::printf("%-15s process %.3f s; %s\n", label, wall, out.c_str());
  }
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(cache + "/tensormorph/cuda-calibration", ec)) {
    std::ifstream in(entry.path());
    std::printf("calibration file %s:\n", entry.path().filename().c_str());
    for (std::string line; std::getline(in, line);) std::printf("  %s\n", line.c_str());
  }
  ::setenv("XDG_CACHE_HOME", cache.c_str(), 1);

  std::printf("\n== backend_create in this process\n");
  double measure_s = 0, remember_s = 0, first_s = 0;
  m.api->backend_destroy(create_backend(m, "calibration=measure", &first_s));  // the module's runtime starts here
  m.api->backend_destroy(create_backend(m, "calibration=measure", &measure_s));
  TM_Backend* backend = create_backend(m, "", &remember_s);
  std::printf("first (runtime start + measure) %.1f ms, calibration=measure %.1f ms, remembered %.3f ms\n",
              first_s * 1e3, measure_s * 1e3, remember_s * 1e3);
  TM_DeviceTraits traits{};
  traits.struct_size = sizeof traits;
  require_ok(m.take(m.api->device_traits(backend, &traits)), "device_traits");
  std::printf("traits: %s; host_to_device %.2f GB/s, device_to_host %.2f GB/s, measured %u\n", traits.device_name,
              traits.host_to_device_gbps, traits.device_to_host_gbps, traits.bandwidth_measured);

  void* device = nullptr;
  CUDA_OK(cudaMalloc(&device, largest));
  std::vector<uint8_t> host = pageable_bytes(largest, 1);

  std::printf("\n== uploads (median of %d after a warm-up; GB/s = 1e9 bytes/s)\n", reps);
  std::printf("%9s %12s %14s %14s %8s %8s %12s %8s %8s\n", "MiB", "pinned DMA", "pageable copy", "buffer_write",
              "ratio", "target", "after idle", "ratio", "checked");
  double worst_ratio = 1e9;
  for (const uint64_t bytes : sizes) {
    const double pinned = pinned_h2d_gbps(device, bytes, reps);
    const double pageable = wall_gbps(bytes, reps, [&] {
      CUDA_OK(cudaMemcpy(device, host.data(), bytes, cudaMemcpyHostToDevice));
    });
    const std::vector<uint8_t> src(host.begin(), host.begin() + static_cast<std::ptrdiff_t>(bytes));
    bool correct = false;
    double idle = 0;
    const double written = abi_write_gbps(m, backend, src, reps, &correct, &idle);
    const double ratio = written / pinned;
    worst_ratio = std::min(worst_ratio, ratio);
    std::printf("%9llu %12.2f %14.2f %14.2f %8.3f %8s %12.2f %8.3f %8s\n", static_cast<unsigned long long>(bytes / kMiB),
                pinned, pageable, written, ratio, ratio >= kTarget ? "met" : "MISSED", idle, idle / pinned,
                correct ? "yes" : "NO");
    if (!correct) return 1;
  }
  std::printf("more sizes (no verdict):\n");
  for (const uint64_t bytes : more_sizes) {
    const double pinned = pinned_h2d_gbps(device, bytes, reps);
    const std::vector<uint8_t> src(host.begin(), host.begin() + static_cast<std::ptrdiff_t>(bytes));
    bool correct = false;
    double idle = 0;
    const double written = abi_write_gbps(m, backend, src, reps, &correct, &idle);
    std::printf("%9llu %12.2f %14s %14.2f %8.3f %8s %12.2f %8.3f %8s\n", static_cast<unsigned long long>(bytes / kMiB),
                pinned, "", written, written / pinned, "", idle, idle / pinned, correct ? "yes" : "NO");
    if (!correct) return 1;
  }

  std::printf("\n== buffer_write from a fresh mapping of a file in the page cache (first touch in the upload)\n");
  const std::string file = cache + "/mapped.bin";
  {
    std::ofstream out(file, std::ios::binary);
    out.write(reinterpret_cast<const char*>(host.data()), static_cast<std::streamsize>(largest));
  }
  for (const uint64_t bytes : sizes) {
    std::printf("%9llu MiB %10.2f GB/s\n", static_cast<unsigned long long>(bytes / kMiB),
                mapped_write_gbps(m, backend, file, bytes, reps));
  }
  fs::remove(file);

  std::printf("\n== tm.tile_stats@1 on host data (streamed through the staging pipeline) against the same bytes "
              "uploaded with buffer_write\n");
  {
    const uint64_t rows = 8192, cols = 8192, bytes = rows * cols * 4;
    std::vector<uint8_t> matrix = pageable_bytes(bytes, 3);
    TM_Buffer* buffer = nullptr;
    require_ok(m.take(m.api->buffer_alloc(backend, 1, bytes, &buffer)), "buffer_alloc");
    require_ok(m.take(m.api->buffer_write(backend, buffer, 0, matrix.data(), bytes)), "buffer_write");
    std::vector<TM_TileStats> resident, streamed;
    const double resident_s = tile_stats(m, backend, nullptr, buffer, rows, cols, 0, resident);
    if (resident_s < 0) return 1;
    for (const uint64_t budget_mib : {0ull, 128ull, 64ull}) {
      const double streamed_s = tile_stats(m, backend, matrix.data(), nullptr, rows, cols, budget_mib * kMiB, streamed);
      if (streamed_s < 0) return 1;
      const bool same = streamed.size() == resident.size() &&
                        std::memcmp(streamed.data(), resident.data(), resident.size() * sizeof(TM_TileStats)) == 0;
      std::printf("F32 %llux%llu, memory budget %llu MiB: host data %.2f ms (%.2f GB/s), resident %.2f ms; "
                  "bitwise equal: %s\n",
                  static_cast<unsigned long long>(rows), static_cast<unsigned long long>(cols),
                  static_cast<unsigned long long>(budget_mib),
                  streamed_s * 1e3, static_cast<double>(bytes) / (streamed_s * 1e9), resident_s * 1e3,
                  same ? "yes" : "NO");
      if (!same) return 1;
    }
    m.api->buffer_free(backend, buffer);
  }

  std::printf("\n== what limits the fill: ordinary -> pinned host copies, %llu MiB\n",
              static_cast<unsigned long long>(largest / kMiB));
  {
    void* pinned = nullptr;
    CUDA_OK(cudaHostAlloc(&pinned, largest, cudaHostAllocDefault));
    std::memset(pinned, 0, largest);
    for (const unsigned t : thread_counts) {
      std::printf("%3u threads %10.2f GB/s in one memcpy each, %10.2f GB/s in 1 MiB memcpy calls\n", t,
                  host_copy_gbps(host, pinned, t, 0, reps), host_copy_gbps(host, pinned, t, kMiB, reps));
    }
    CUDA_OK(cudaFreeHost(pinned));
  }

  std::printf("\n== waking sleeping threads (condition variable, notify_all; median / largest of 20)\n");
  for (const unsigned t : {1u, 7u}) {
    for (const auto idle : {std::chrono::milliseconds(1), std::chrono::milliseconds(20)}) {
      const auto [med, worst] = wake_us(t, idle, 20);
      std::printf("%2u threads after %2lld ms asleep: %8.1f us median, %8.1f us largest\n", t,
                  static_cast<long long>(idle.count()), med, worst);
    }
  }

  std::printf("\n== cudaHostRegister of the source instead of staging (register + copy + unregister)\n");
  for (const uint64_t bytes : sizes) {
    std::vector<uint8_t> src = pageable_bytes(bytes, 2);
    double reg_s = 0, copy_s = 0, unreg_s = 0;
    auto t0 = Clock::now();
    const cudaError_t reg = cudaHostRegister(src.data(), bytes, cudaHostRegisterDefault);
    reg_s = seconds_since(t0);
    if (reg != cudaSuccess) {
      std::printf("%9llu MiB: cudaHostRegister failed: %s\n", static_cast<unsigned long long>(bytes / kMiB),
                  cudaGetErrorString(reg));
      (void)cudaGetLastError();
      continue;
    }
    t0 = Clock::now();
    CUDA_OK(cudaMemcpy(device, src.data(), bytes, cudaMemcpyHostToDevice));
    copy_s = seconds_since(t0);
    t0 = Clock::now();
    CUDA_OK(cudaHostUnregister(src.data()));
    unreg_s = seconds_since(t0);
    const double b = static_cast<double>(bytes);
    std::printf("%9llu MiB: register %.2f ms, copy %.2f ms (%.2f GB/s), unregister %.2f ms: %.2f GB/s overall\n",
                static_cast<unsigned long long>(bytes / kMiB), reg_s * 1e3, copy_s * 1e3, b / (copy_s * 1e9),
                unreg_s * 1e3, b / ((reg_s + copy_s + unreg_s) * 1e9));
  }

  std::printf("\n== buffer_write under other settings (probe_mib=0: the staging pipeline always)\n");
  std::vector<std::string> settings = {""};
  settings.insert(settings.end(), sweep.begin(), sweep.end());
  for (const std::string& options : settings) {
    TM_Backend* other = create_backend(m, "probe_mib=0;" + options, nullptr);
    std::printf("%-44s", options.empty() ? "(defaults)" : options.c_str());
    for (const uint64_t bytes : sizes) {
      const std::vector<uint8_t> src(host.begin(), host.begin() + static_cast<std::ptrdiff_t>(bytes));
      std::printf(" %6llu MiB %7.2f GB/s", static_cast<unsigned long long>(bytes / kMiB),
                  abi_write_gbps(m, other, src, reps, nullptr));
    }
    std::printf("\n");
    m.api->backend_destroy(other);
  }

  m.api->backend_destroy(backend);
  CUDA_OK(cudaFree(device));
  fs::remove_all(cache);
  std::printf("\nworst buffer_write / pinned ratio %.3f against the %.2f target: %s\n", worst_ratio, kTarget,
              worst_ratio >= kTarget ? "met" : "MISSED");
  return 0;
}
