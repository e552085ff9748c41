#include "backends/cuda/gpu_backend.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <thread>
#include <vector>

#include "backends/cuda/gpu_errors.h"
#include "tensormorph/decode.h"

namespace tensormorph::gpu {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
/// Device memory the bandwidth probe reads: several times the largest L2 cache.
constexpr uint64_t kReadProbeBytes = uint64_t{512} << 20;
/// Declared rates when probes are skipped (GB/s).
constexpr double kDeclaredLinkGbps = 12.0;
constexpr double kDeclaredDeviceGbps = 1000.0;

Result<uint64_t> parse_count(const std::string& key, const std::string& value, uint64_t max) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(value.c_str(), &end, 10);
  if (value.empty() || end == value.c_str() || *end != '\0' || errno != 0 || v > max) {
    return Status::InvalidArgument(std::string(TM_GPU_VENDOR) + " option " + key + "=" + value +
                                   " is not a whole number in [0, " + std::to_string(max) + "]");
  }
  return static_cast<uint64_t>(v);
}

Status apply_option(BackendOptions& o, const std::string& key, const std::string& value) {
  if (key == "probe_mib") {
    TM_ASSIGN_OR_RETURN(const uint64_t v, parse_count(key, value, 4096));
    o.probe_bytes = v * kMiB;
  } else if (key == "staging_mib") {
    TM_ASSIGN_OR_RETURN(const uint64_t v, parse_count(key, value, 4096));
    if (v == 0) return Status::InvalidArgument(std::string(TM_GPU_VENDOR) + " option staging_mib must be at least 1");
    o.staging_bytes = v * kMiB;
  } else if (key == "staging_slots") {
    TM_ASSIGN_OR_RETURN(const uint64_t v, parse_count(key, value, kMaxStagingSlots));
    if (v < 2) return Status::InvalidArgument(std::string(TM_GPU_VENDOR) + " option staging_slots must be at least 2");
    o.staging_slots = static_cast<uint32_t>(v);
  } else if (key == "chunk_mib") {
    TM_ASSIGN_OR_RETURN(const uint64_t v, parse_count(key, value, uint64_t{1} << 20));
    if (v == 0) return Status::InvalidArgument(std::string(TM_GPU_VENDOR) + " option chunk_mib must be at least 1");
    o.chunk_bytes = v * kMiB;
  } else if (key == "copy_threads") {
    TM_ASSIGN_OR_RETURN(const uint64_t v, parse_count(key, value, 64));
    o.copy_threads = static_cast<uint32_t>(v);
  } else if (key == "tile_stats_path") {
    if (value != "auto" && value != "generic") {
      return Status::InvalidArgument(std::string(TM_GPU_VENDOR) + " option tile_stats_path=" + value +
                                     " is not auto or generic");
    }
    o.force_generic = value == "generic";
  } else if (key == "fill") {
    if (value != "memcpy" && value != "stream") {
      return Status::InvalidArgument(std::string(TM_GPU_VENDOR) + " option fill=" + value + " is not memcpy or stream");
    }
    o.fill = value == "stream" ? FillCopy::kStream : FillCopy::kMemcpy;
  } else if (key == "calibration") {
    if (value != "remember" && value != "measure") {
      return Status::InvalidArgument(std::string(TM_GPU_VENDOR) + " option calibration=" + value +
                                     " is not remember or measure");
    }
    o.remember = value == "remember";
  } else {
    return Status::InvalidArgument("unknown " TM_GPU_VENDOR " option '" + key +
                                   "' (known: probe_mib, staging_mib, staging_slots, chunk_mib, copy_threads, "
                                   "fill, tile_stats_path, calibration)");
  }
  return Status::Ok();
}

/// The first upload chunk; each next one doubles up to a staging slot, so the copy engine starts
/// after a small fill instead of a whole slot's. The last ones halve down to it again: the copy
/// of the last chunk is the part of an upload that no fill overlaps.
constexpr uint64_t kFirstChunkBytes = uint64_t{1} << 20;
/// Chunk sizes are whole multiples of this (pieces of a slot stay page-aligned).
constexpr uint64_t kChunkRounding = uint64_t{64} << 10;

/// Lowercase hex of `bytes`, or "" when they are all zero (no identity reported).
std::string hex_or_empty(const unsigned char* bytes, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  bool any = false;
  for (size_t i = 0; i < n; ++i) {
    any = any || bytes[i] != 0;
    out += kDigits[bytes[i] >> 4];
    out += kDigits[bytes[i] & 15];
  }
  return any ? out : "";
}

/// How this host's CPU forms NaN results, measured rather than assumed (x86 and Arm differ).
tm_gpu::HostNan measure_host_nan() {
  tm_gpu::HostNan nan;
  volatile float zero = 0.0f;
  volatile float inf = std::numeric_limits<float>::infinity();
  const float invalid = zero * inf;
  std::memcpy(&nan.default_nan, &invalid, sizeof invalid);
  const uint32_t payload_bits = 0x7f800123u;  // a signalling NaN with a payload
  float payload;
  std::memcpy(&payload, &payload_bits, sizeof payload);
  volatile float operand = payload;
  volatile float one = 1.0f;
  const float product = operand * one;
  uint32_t product_bits;
  std::memcpy(&product_bits, &product, sizeof product);
  nan.propagate = product_bits == (payload_bits | 0x00400000u);
  return nan;
}

/// Best of `runs` timings of `body` (enqueued on `stream`), in nanoseconds, with events.
template <typename Body>
Result<double> time_on_stream(GpuBackend& b, cudaStream_t stream, int runs, Body&& body) {
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < runs; ++i) {
    TM_RETURN_IF_ERROR(b.check(cudaEventRecord(b.event(0), stream), "recording a probe event"));
    TM_RETURN_IF_ERROR(body());
    TM_RETURN_IF_ERROR(b.check(cudaEventRecord(b.event(1), stream), "recording a probe event"));
    TM_RETURN_IF_ERROR(b.check(cudaEventSynchronize(b.event(1)), "waiting for a probe"));
    float ms = 0;
    TM_RETURN_IF_ERROR(b.check(cudaEventElapsedTime(&ms, b.event(0), b.event(1)), "timing a probe"));
    best = std::min(best, static_cast<double>(ms) * 1e6);
  }
  return best;
}

/// Best of `runs` wall-clock timings of a synchronous `body`, in nanoseconds.
template <typename Body>
Result<double> time_wall(int runs, Body&& body) {
  double best = std::numeric_limits<double>::infinity();
  for (int i = 0; i < runs; ++i) {
    const auto start = std::chrono::steady_clock::now();
    TM_RETURN_IF_ERROR(body());
    best = std::min(best, std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

double gbps(uint64_t bytes, double ns) { return ns > 0 ? static_cast<double>(bytes) / ns : 0.0; }

/// Releases a device allocation when a measurement returns early.
struct DeviceAllocation {
  void* ptr = nullptr;
  ~DeviceAllocation() {
    if (ptr) (void)cudaFree(ptr);
  }
};

/// Releases pinned host memory when a measurement returns early.
struct PinnedAllocation {
  void* ptr = nullptr;
  ~PinnedAllocation() {
    if (ptr) (void)cudaFreeHost(ptr);
  }
};

}  // namespace

Result<BackendOptions> parse_backend_options(const char* text) {
  BackendOptions o;
  if (text == nullptr) return o;
  const std::string all = text;
  size_t start = 0;
  while (start <= all.size()) {
    size_t end = all.find(';', start);
    if (end == std::string::npos) end = all.size();
    const std::string item = all.substr(start, end - start);
    if (!item.empty()) {
      const size_t eq = item.find('=');
      if (eq == std::string::npos) {
        return Status::InvalidArgument(std::string(TM_GPU_VENDOR) + " option '" + item + "' is not key=value");
      }
      TM_RETURN_IF_ERROR(apply_option(o, item.substr(0, eq), item.substr(eq + 1)));
    }
    start = end + 1;
  }
  return o;
}

DeviceCensus take_census() {
  DeviceCensus census;
#if TM_GPU_IS_HIP
  const std::string prefix = "built, not run on these machines: ";
#else
  const std::string prefix;
#endif
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    (void)cudaGetLastError();
    int runtime = 0;
    (void)cudaRuntimeGetVersion(&runtime);
    const std::string version = std::to_string(runtime / 1000) + "." + std::to_string((runtime % 1000) / 10);
    if (error == cudaErrorInsufficientDriver) {
      census.why_none = prefix + "no " + (TM_GPU_IS_HIP ? "ROCm" : "CUDA") + " driver found, or one older than runtime " +
                        version + " (" + runtime_error_text(error) + ")";
    } else if (error == cudaErrorNoDevice) {
      census.why_none = prefix + "the driver reports no GPU (" + runtime_error_text(error) + ")";
    } else {
      census.why_none = prefix + "the runtime could not start (" + runtime_error_text(error) + ")";
    }
    return census;
  }
  std::string skipped;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp props{};
    if (cudaGetDeviceProperties(&props, i) != cudaSuccess) {
      (void)cudaGetLastError();
      skipped += "; GPU " + std::to_string(i) + ": properties unavailable";
      continue;
    }
#if TM_GPU_IS_HIP
    const std::string arch = props.gcnArchName;
    if (arch.rfind("gfx90a", 0) == 0 || arch.rfind("gfx1030", 0) == 0) {
      census.usable.push_back(i);
    } else {
      skipped += "; GPU " + std::to_string(i) + " (" + props.name + ", " + arch +
                 ") is not a target of this build (gfx90a, gfx1030)";
    }
#else
    if (props.major >= 9) {
      census.usable.push_back(i);
    } else {
      skipped += "; GPU " + std::to_string(i) + " (" + props.name + ", compute capability " +
                 std::to_string(props.major) + "." + std::to_string(props.minor) +
                 ") is older than this build's sm_90 code";
    }
#endif
  }
  if (census.usable.empty()) {
    census.why_none = prefix + (count == 0 ? std::string("the driver reports no GPU") : "no usable GPU" + skipped);
  }
  return census;
}

Result<std::unique_ptr<GpuBackend>> GpuBackend::create(uint32_t index, const char* options) {
  TM_ASSIGN_OR_RETURN(BackendOptions parsed, parse_backend_options(options));
  const DeviceCensus census = take_census();
  if (index >= census.usable.size()) {
    return Status::NotFound(std::string(TM_GPU_VENDOR) + ": device " + std::to_string(index) + " does not exist" +
                            (census.why_none.empty() ? "" : " (" + census.why_none + ")"));
  }
  std::unique_ptr<GpuBackend> backend(new GpuBackend());
  if (parsed.copy_threads == 0) parsed.copy_threads = CopyCrew::default_copiers();
  backend->options_ = parsed;
  backend->host_nan_ = measure_host_nan();
  TM_RETURN_IF_ERROR(backend->open(census.usable[index]));
  TM_RETURN_IF_ERROR(backend->calibrate());
  return backend;
}

Status GpuBackend::open(int ordinal) {
  ordinal_ = ordinal;
  TM_RETURN_IF_ERROR(activate());
  cudaDeviceProp props{};
  TM_RETURN_IF_ERROR(check(cudaGetDeviceProperties(&props, ordinal), "reading device properties"));
  name_ = props.name;
  memory_bytes_ = props.totalGlobalMem;
  multiprocessors_ = static_cast<uint32_t>(props.multiProcessorCount);
  cc_major_ = static_cast<uint32_t>(props.major);
  cc_minor_ = static_cast<uint32_t>(props.minor);
  identity_.name = props.name;
  identity_.memory_bytes = props.totalGlobalMem;
  char pci[64];
  std::snprintf(pci, sizeof pci, "%04x:%02x:%02x", static_cast<unsigned>(props.pciDomainID),
                static_cast<unsigned>(props.pciBusID), static_cast<unsigned>(props.pciDeviceID));
  identity_.pci = pci;
#if TM_GPU_IS_HIP
  hipDevice_t device = 0;
  hipUUID uuid{};
  if (hipDeviceGet(&device, ordinal) == hipSuccess && hipDeviceGetUuid(&uuid, device) == hipSuccess) {
    identity_.uuid = hex_or_empty(reinterpret_cast<const unsigned char*>(uuid.bytes), sizeof uuid.bytes);
  }
  (void)hipGetLastError();
#else
  identity_.uuid = hex_or_empty(reinterpret_cast<const unsigned char*>(props.uuid.bytes), sizeof props.uuid.bytes);
#endif
  (void)cudaDriverGetVersion(&identity_.driver_version);
  (void)cudaRuntimeGetVersion(&identity_.runtime_version);
  (void)cudaGetLastError();
  identity_.module_version = kModuleVersion;
  identity_.settings = "probe_mib=" + std::to_string(options_.probe_bytes / kMiB) +
                       ";staging_mib=" + std::to_string(options_.staging_bytes / kMiB) +
                       ";staging_slots=" + std::to_string(options_.staging_slots) +
                       ";copy_threads=" + std::to_string(options_.copy_threads) +
                       ";fill=" + (options_.fill == FillCopy::kStream ? "stream" : "memcpy");
  TM_RETURN_IF_ERROR(check(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking), "creating a stream"));
  TM_RETURN_IF_ERROR(check(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking), "creating a stream"));
  for (auto& e : events_) TM_RETURN_IF_ERROR(check(cudaEventCreateWithFlags(&e, cudaEventDefault), "creating an event"));
  // F8 values come from the CPU decoder itself, so both backends agree on every bit (NaNs too).
  std::vector<float> tables(512);
  std::vector<std::byte> codes(256);
  for (size_t i = 0; i < 256; ++i) codes[i] = static_cast<std::byte>(i);
  TM_RETURN_IF_ERROR(decode_to_f32(DType::kF8E4M3, codes, 256, tables.data()));
  TM_RETURN_IF_ERROR(decode_to_f32(DType::kF8E5M2, codes, 256, tables.data() + 256));
  void* device_tables = nullptr;
  TM_RETURN_IF_ERROR(check(cudaMalloc(&device_tables, tables.size() * sizeof(float)), "allocating the F8 tables"));
  f8_tables_ = static_cast<float*>(device_tables);
  TM_RETURN_IF_ERROR(check(cudaMemcpy(f8_tables_, tables.data(), tables.size() * sizeof(float), cudaMemcpyHostToDevice),
                           "uploading the F8 tables"));
  return Status::Ok();
}

Status GpuBackend::calibrate() {
  if (options_.probe_bytes == 0) {
    rates_.h2d_pinned = rates_.h2d_pageable = rates_.h2d_staged = kDeclaredLinkGbps;
    rates_.d2h_pinned = rates_.d2h_pageable = kDeclaredLinkGbps;
    rates_.device_read = kDeclaredDeviceGbps;
    rates_.measured = false;
    return Status::Ok();
  }
  const std::filesystem::path path = link_calibration_path(link_calibration_dir(TM_GPU_VENDOR), identity_);
  if (options_.remember) {
    if (std::optional<LinkRates> remembered = remembered_link_rates(path, identity_, unix_now_seconds())) {
      rates_ = *remembered;
      direct_writes_ = rates_.h2d_pageable > rates_.h2d_staged;
      return Status::Ok();
    }
  }
  TM_RETURN_IF_ERROR(measure());
  // Best effort: a cache that cannot be written only costs the next start a measurement.
  (void)remember_link_rates(path, identity_, rates_, unix_now_seconds());
  return Status::Ok();
}

Status GpuBackend::measure() {
  // Device memory: a read-only kernel over a buffer several times the L2 cache.
  DeviceAllocation probe;
  TM_RETURN_IF_ERROR(check(cudaMalloc(&probe.ptr, kReadProbeBytes + 64), "allocating the bandwidth probe"));
  TM_RETURN_IF_ERROR(check(cudaMemsetAsync(probe.ptr, 0x5a, kReadProbeBytes + 64, compute_), "filling the probe"));
  auto* sink = reinterpret_cast<unsigned long long*>(static_cast<uint8_t*>(probe.ptr) + kReadProbeBytes);
  TM_ASSIGN_OR_RETURN(const double read_ns, time_on_stream(*this, compute_, 4, [&] {
                        return check(tm_gpu::launch_read_probe(probe.ptr, kReadProbeBytes, sink, compute_),
                                     "running the read probe");
                      }));
  rates_.device_read = gbps(kReadProbeBytes, read_ns);

  // Link, pinned: one probe-sized pinned buffer each way.
  const uint64_t probe_bytes = std::min(options_.probe_bytes, kReadProbeBytes);
  PinnedAllocation pinned;
  TM_RETURN_IF_ERROR(check(cudaHostAlloc(&pinned.ptr, probe_bytes, cudaHostAllocDefault),
                           "allocating pinned probe memory"));
  auto* device = static_cast<uint8_t*>(probe.ptr);
  TM_ASSIGN_OR_RETURN(const double h2d_pinned_ns, time_on_stream(*this, copy_, 3, [&] {
                        return check(cudaMemcpyAsync(device, pinned.ptr, probe_bytes, cudaMemcpyHostToDevice, copy_),
                                     "probing pinned host-to-device copies");
                      }));
  TM_ASSIGN_OR_RETURN(const double d2h_pinned_ns, time_on_stream(*this, copy_, 3, [&] {
                        return check(cudaMemcpyAsync(pinned.ptr, device, probe_bytes, cudaMemcpyDeviceToHost, copy_),
                                     "probing pinned device-to-host copies");
                      }));
  rates_.h2d_pinned = gbps(probe_bytes, h2d_pinned_ns);
  rates_.d2h_pinned = gbps(probe_bytes, d2h_pinned_ns);

  // Link, pageable: ordinary host memory, as the host's mapped checkpoints are.
  std::vector<uint8_t> host(probe_bytes);
  for (uint64_t i = 0; i < probe_bytes; i += 4096) host[i] = static_cast<uint8_t>(i >> 12);
  TM_ASSIGN_OR_RETURN(const double h2d_pageable_ns, time_wall(2, [&] {
                        return check(cudaMemcpy(device, host.data(), probe_bytes, cudaMemcpyHostToDevice),
                                     "probing pageable host-to-device copies");
                      }));
  TM_ASSIGN_OR_RETURN(const double d2h_pageable_ns, time_wall(2, [&] {
                        return check(cudaMemcpy(host.data(), device, probe_bytes, cudaMemcpyDeviceToHost),
                                     "probing pageable device-to-host copies");
                      }));
  TM_ASSIGN_OR_RETURN(const double staged_ns,
                      time_wall(2, [&] { return staged_copy(device, host.data(), probe_bytes); }));
  rates_.h2d_pageable = gbps(probe_bytes, h2d_pageable_ns);
  rates_.d2h_pageable = gbps(probe_bytes, d2h_pageable_ns);
  rates_.h2d_staged = gbps(probe_bytes, staged_ns);
  rates_.measured = true;
  direct_writes_ = rates_.h2d_pageable > rates_.h2d_staged;
  return check(cudaStreamSynchronize(compute_), "finishing the probes");
}

GpuBackend::~GpuBackend() {
  crew_.reset();  // idle between uploads: joining its threads waits for nothing
  if (ordinal_ < 0) return;
  // Errors are ignored here: the context may already be gone (device lost, process exit).
  (void)cudaSetDevice(ordinal_);
  if (compute_) (void)cudaStreamSynchronize(compute_);
  if (copy_) (void)cudaStreamSynchronize(copy_);
  for (auto& s : scratch_) {
    if (s.data) (void)cudaFree(s.data);
  }
  if (f8_tables_) (void)cudaFree(f8_tables_);
  for (uint32_t s = 0; s < kMaxStagingSlots; ++s) {
    if (staging_[s]) (void)cudaFreeHost(staging_[s]);
    if (staging_free_[s]) (void)cudaEventDestroy(staging_free_[s]);
  }
  for (auto& e : events_) {
    if (e) (void)cudaEventDestroy(e);
  }
  if (copy_) (void)cudaStreamDestroy(copy_);
  if (compute_) (void)cudaStreamDestroy(compute_);
  (void)cudaGetLastError();
}

Status GpuBackend::activate() {
  if (!lost_.empty()) return Status(StatusCode::kDeviceLost, lost_);
  return check(cudaSetDevice(ordinal_), "selecting the device");
}

Status GpuBackend::check(cudaError_t error, std::string_view what) {
  if (error == cudaSuccess) return Status::Ok();
  Status status = runtime_status(error, what);
  if (status.code() == StatusCode::kDeviceLost) {
    lost_ = status.message();
  } else {
    (void)cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  }
  return status;
}

TM_DeviceTraits GpuBackend::traits() const {
  TM_DeviceTraits t{};
  t.struct_size = sizeof t;
#if TM_GPU_IS_HIP
  std::snprintf(t.device_name, sizeof t.device_name, "%s (%u CUs; pinned H2D %.1f / D2H %.1f GB/s, memory read %.0f GB/s)",
                name_.c_str(), multiprocessors_, rates_.h2d_pinned, rates_.d2h_pinned, rates_.device_read);
#else
  std::snprintf(t.device_name, sizeof t.device_name,
                "%s (sm_%u%u, %u SMs; pinned H2D %.1f / D2H %.1f GB/s, memory read %.0f GB/s)", name_.c_str(),
                cc_major_, cc_minor_, multiprocessors_, rates_.h2d_pinned, rates_.d2h_pinned, rates_.device_read);
#endif
  t.memory_bytes = memory_bytes_;
  t.memory_space_count = 1;
  t.host_memory_visible = 0;
  // What the host's transfers really get: buffer_write from ordinary (pageable) memory, and
  // results copied back into ordinary memory.
  t.host_to_device_gbps = direct_writes_ ? rates_.h2d_pageable : rates_.h2d_staged;
  t.device_to_host_gbps = rates_.d2h_pageable;
  t.bandwidth_measured = rates_.measured ? 1 : 0;
  t.compute_units = multiprocessors_;
  return t;
}

const float* GpuBackend::f8_table(tm_gpu::KernelDType dtype) const {
  return dtype == tm_gpu::KernelDType::kF8E5M2 ? f8_tables_ + 256 : f8_tables_;
}

Result<std::unique_ptr<GpuBuffer>> GpuBackend::allocate(uint64_t bytes) {
  TM_RETURN_IF_ERROR(activate());
  void* ptr = nullptr;
  TM_RETURN_IF_ERROR(check(cudaMalloc(&ptr, std::max<uint64_t>(bytes, 1)),
                           "allocating a " + std::to_string(bytes) + "-byte buffer"));
  auto buffer = std::make_unique<GpuBuffer>();
  buffer->owner = this;
  buffer->data = static_cast<uint8_t*>(ptr);
  buffer->bytes = bytes;
  live_.insert(buffer.get());
  return buffer;
}

void GpuBackend::release(std::unique_ptr<GpuBuffer> buffer) {
  if (!buffer) return;
  live_.erase(buffer.get());
  if (!buffer->data) return;
  if (lost_.empty() && cudaSetDevice(ordinal_) == cudaSuccess) {
    // Work that reads the buffer may be queued; freeing waits for it.
    (void)cudaStreamSynchronize(compute_);
    (void)cudaStreamSynchronize(copy_);
  }
  (void)cudaFree(buffer->data);
  (void)cudaGetLastError();
}

Status GpuBackend::ensure_staging() {
  if (crew_) return Status::Ok();
  for (uint32_t s = 0; s < options_.staging_slots; ++s) {
    if (!staging_[s]) {
      TM_RETURN_IF_ERROR(check(cudaHostAlloc(&staging_[s], options_.staging_bytes, cudaHostAllocDefault),
                               "allocating pinned staging memory"));
    }
    if (!staging_free_[s]) {
      TM_RETURN_IF_ERROR(
          check(cudaEventCreateWithFlags(&staging_free_[s], cudaEventDisableTiming), "creating an event"));
    }
  }
  // The caller copies too: copy_threads counts it.
  crew_ = std::make_unique<CopyCrew>(options_.copy_threads - 1, options_.fill);
  return Status::Ok();
}

Status GpuBackend::enqueue_staged(uint8_t* dst, const void* src, uint64_t bytes) {
  TM_RETURN_IF_ERROR(ensure_staging());
  // Whatever happens below, no crew thread reads `src` or writes a slot after this returns.
  struct CrewReset {
    CopyCrew& crew;
    ~CrewReset() { crew.reset(); }
  } crew_reset{*crew_};
  const auto* from = static_cast<const uint8_t*>(src);
  const uint32_t slots = options_.staging_slots;
  struct Span {
    uint64_t offset = 0, bytes = 0;
  };
  Span spans[kMaxStagingSlots];  // the chunk in each slot
  uint64_t posted = 0, next = 0;
  // Chunk `posted` goes to slot posted % slots once that slot's previous copy has finished.
  auto post_next = [&]() -> Status {
    const uint32_t slot = static_cast<uint32_t>(posted % slots);
    const uint64_t remaining = bytes - next;
    const uint64_t ramp_up = posted < 40 ? kFirstChunkBytes << posted : options_.staging_bytes;
    const uint64_t half = (remaining / 2 + kChunkRounding - 1) / kChunkRounding * kChunkRounding;
    const uint64_t ramp_down = std::max(kFirstChunkBytes, half);
    const uint64_t n = std::min({options_.staging_bytes, ramp_up, ramp_down, remaining});
    TM_RETURN_IF_ERROR(check(cudaEventSynchronize(staging_free_[slot]), "waiting for a staging slot"));
    TM_RETURN_IF_ERROR(crew_->post(from + next, static_cast<uint8_t*>(staging_[slot]), n));
    spans[slot] = {next, n};
    next += n;
    ++posted;
    return Status::Ok();
  };
  while (posted < slots && next < bytes) TM_RETURN_IF_ERROR(post_next());
  for (uint64_t k = 0; k < posted; ++k) {
    const uint32_t slot = static_cast<uint32_t>(k % slots);
    TM_RETURN_IF_ERROR(crew_->wait_oldest());
    TM_RETURN_IF_ERROR(check(cudaMemcpyAsync(dst + spans[slot].offset, staging_[slot], spans[slot].bytes,
                                             cudaMemcpyHostToDevice, copy_),
                             "copying to the device"));
    TM_RETURN_IF_ERROR(check(cudaEventRecord(staging_free_[slot], copy_), "recording a staging event"));
    // The slot after the copy in flight frees when the previous copy ends: waiting for that one
    // (not this one) keeps a copy queued behind the engine while the crew fills the freed slot.
    if (k >= 1 && next < bytes) TM_RETURN_IF_ERROR(post_next());
  }
  return Status::Ok();
}

Status GpuBackend::staged_copy(uint8_t* dst, const void* src, uint64_t bytes) {
  TM_RETURN_IF_ERROR(enqueue_staged(dst, src, bytes));
  return check(cudaStreamSynchronize(copy_), "finishing a copy to the device");
}

Status GpuBackend::copy_to_device_async(uint8_t* dst, const void* src, uint64_t bytes, cudaEvent_t done) {
  if (direct_writes_) {
    TM_RETURN_IF_ERROR(check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, copy_), "copying to the device"));
  } else {
    TM_RETURN_IF_ERROR(enqueue_staged(dst, src, bytes));
  }
  return check(cudaEventRecord(done, copy_), "recording a copy event");
}

Status GpuBackend::copy_to_device(uint8_t* dst, const void* src, uint64_t bytes) {
  if (!direct_writes_) return staged_copy(dst, src, bytes);
  TM_RETURN_IF_ERROR(check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, copy_), "copying to the device"));
  return check(cudaStreamSynchronize(copy_), "finishing a copy to the device");
}

Status GpuBackend::copy_to_host(void* dst, const uint8_t* src, uint64_t bytes) {
  TM_RETURN_IF_ERROR(check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, compute_), "copying to the host"));
  return check(cudaStreamSynchronize(compute_), "finishing a copy to the host");
}

Result<uint8_t*> GpuBackend::scratch(int which, uint64_t bytes) {
  Scratch& s = scratch_[which];
  if (s.bytes >= bytes && s.data != nullptr) return s.data;
  TM_RETURN_IF_ERROR(check(cudaStreamSynchronize(compute_), "finishing work before growing scratch memory"));
  TM_RETURN_IF_ERROR(check(cudaStreamSynchronize(copy_), "finishing copies before growing scratch memory"));
  if (s.data) {
    (void)cudaFree(s.data);
    s = {};
  }
  const uint64_t rounded = (std::max<uint64_t>(bytes, 1) + kMiB - 1) / kMiB * kMiB;
  void* ptr = nullptr;
  TM_RETURN_IF_ERROR(check(cudaMalloc(&ptr, rounded), "allocating " + std::to_string(rounded) + " bytes of scratch memory"));
  s.data = static_cast<uint8_t*>(ptr);
  s.bytes = rounded;
  return s.data;
}

}  // namespace tensormorph::gpu
