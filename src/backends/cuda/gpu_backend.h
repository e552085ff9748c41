// One GPU opened for work: streams, pinned staging buffers, scratch memory, the F8 tables, and
// the link and memory bandwidths (measured on a device's first use, then remembered: see
// gpu_calibration.h). Shared by the CUDA and HIP modules.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "core/copy_crew.h"
#include "backends/cuda/gpu_calibration.h"
#include "backends/cuda/gpu_runtime.h"
#include "backends/cuda/kernels.h"
#include "tensormorph/c/plugin.h"
#include "tensormorph/status.h"

namespace tensormorph::gpu {

/// The module's version, reported to the host and part of a remembered calibration's identity.
inline constexpr const char* kModuleVersion = "1.1";

/// Pinned staging slots, at most (the copy crew's pending chunks bound them).
inline constexpr uint32_t kMaxStagingSlots = CopyCrew::kMaxPending;

/// Settings from TM_BackendCreateArgs::options ("key=value;key=value").
struct BackendOptions {
  uint64_t probe_bytes = uint64_t{64} << 20;    ///< probe_mib: link probe size (0: skip all probes)
  uint64_t staging_bytes = uint64_t{8} << 20;   ///< staging_mib: one pinned staging slot
  uint32_t staging_slots = 8;                   ///< staging_slots: pinned slots in flight (2..16)
  uint64_t chunk_bytes = uint64_t{256} << 20;   ///< chunk_mib: device memory one streamed chunk may use
  uint32_t copy_threads = 0;                    ///< copy_threads: host threads filling slots (0: from the CPU count)
  FillCopy fill = FillCopy::kMemcpy;            ///< fill=memcpy|stream: how the threads copy
  bool force_generic = false;                   ///< tile_stats_path=generic: never the fast kernels
  bool remember = true;                         ///< calibration=remember|measure: reuse a device's remembered rates
};

/// Parses the options string (NULL or empty: defaults); unknown keys and bad values are errors.
Result<BackendOptions> parse_backend_options(const char* text);

/// Which devices this module can drive, and why not when none.
struct DeviceCensus {
  std::vector<int> usable;  ///< runtime device ordinals this build runs on
  std::string why_none;     ///< reason when `usable` is empty
};

/// Enumerates devices (never fails: a missing driver is a reason, not an error).
DeviceCensus take_census();

class GpuBackend;

/// A device allocation handed to the host as a TM_Buffer.
struct GpuBuffer {
  GpuBackend* owner = nullptr;  ///< the backend that allocated it
  uint8_t* data = nullptr;      ///< device pointer
  uint64_t bytes = 0;           ///< size
};

/// Device memory reused across executions (grow only).
struct Scratch {
  uint8_t* data = nullptr;  ///< device pointer
  uint64_t bytes = 0;       ///< capacity
};

/// One opened device. Every member function except create() expects `mutex` to be held.
class GpuBackend {
 public:
  /// Opens usable device number `index` (see take_census) and measures its links, or takes the
  /// rates remembered for this device.
  static Result<std::unique_ptr<GpuBackend>> create(uint32_t index, const char* options);
  ~GpuBackend();
  GpuBackend(const GpuBackend&) = delete;
  GpuBackend& operator=(const GpuBackend&) = delete;

  /// Serialises every use of the device from the host's threads.
  std::mutex mutex;

  /// Makes the device current on this thread; DEVICE_LOST once a sticky error was seen.
  Status activate();
  /// Converts a runtime result, remembering sticky errors (all later calls then fail fast).
  Status check(cudaError_t error, std::string_view what);

  /// The traits reported to the host.
  TM_DeviceTraits traits() const;
  /// Options in force.
  const BackendOptions& options() const { return options_; }
  /// Measured, remembered or declared bandwidths.
  const LinkRates& rates() const { return rates_; }
  /// NaN conventions of the host CPU (decode reproduces them).
  const tm_gpu::HostNan& host_nan() const { return host_nan_; }
  /// 256 decoded F8_E4M3 values followed by 256 F8_E5M2 values, in device memory.
  const float* f8_table(tm_gpu::KernelDType dtype) const;
  /// The stream kernels run on.
  cudaStream_t compute_stream() const { return compute_; }
  /// Multiprocessors (SMs / CUs) of the device.
  uint32_t multiprocessors() const { return multiprocessors_; }

  /// Allocates a device buffer (RESOURCE_EXHAUSTED when the device is full).
  Result<std::unique_ptr<GpuBuffer>> allocate(uint64_t bytes);
  /// Frees a buffer of this backend.
  void release(std::unique_ptr<GpuBuffer> buffer);
  /// True when `buffer` is a live allocation of this backend (foreign pointers are refused).
  bool owns(const GpuBuffer* buffer) const { return live_.count(buffer) != 0; }
  /// Copies host bytes to device memory through the pinned staging slots: the copy crew fills
  /// the next slots while the copy engine drains the earlier ones; returns when the copy is complete.
  Status copy_to_device(uint8_t* dst, const void* src, uint64_t bytes);
  /// Like copy_to_device but leaves the last copies running on the copy stream (`src` is no longer
  /// read when it returns); `done` is recorded after them.
  Status copy_to_device_async(uint8_t* dst, const void* src, uint64_t bytes, cudaEvent_t done);
  /// Copies device bytes to host memory (synchronous).
  Status copy_to_host(void* dst, const uint8_t* src, uint64_t bytes);

  /// Device scratch `which` (0 or 1 for kernel outputs and partials, 2 and 3 for streamed input
  /// chunks, 4 and 5 for streamed output chunks) with at least `bytes`.
  Result<uint8_t*> scratch(int which, uint64_t bytes);
  /// An event from a small pool (index 0..7), created at startup.
  cudaEvent_t event(int index) const { return events_[index]; }

 private:
  GpuBackend() = default;
  Status open(int ordinal);
  Status calibrate();
  Status measure();
  Status ensure_staging();
  Status enqueue_staged(uint8_t* dst, const void* src, uint64_t bytes);
  Status staged_copy(uint8_t* dst, const void* src, uint64_t bytes);

  BackendOptions options_;
  int ordinal_ = -1;
  std::string name_;
  DeviceIdentity identity_;
  uint64_t memory_bytes_ = 0;
  uint32_t multiprocessors_ = 0;
  uint32_t cc_major_ = 0, cc_minor_ = 0;
  std::string lost_;
  cudaStream_t compute_ = nullptr;
  cudaStream_t copy_ = nullptr;
  // Allocated on the first upload (or probe): commands that never upload skip pinning them.
  void* staging_[kMaxStagingSlots] = {};
  cudaEvent_t staging_free_[kMaxStagingSlots] = {};
  std::unique_ptr<CopyCrew> crew_;
  cudaEvent_t events_[8] = {};
  Scratch scratch_[6];
  float* f8_tables_ = nullptr;
  tm_gpu::HostNan host_nan_;
  LinkRates rates_;
  bool direct_writes_ = false;  // pageable runtime copies beat the staging pipeline here
  std::unordered_set<const GpuBuffer*> live_;
};

}  // namespace tensormorph::gpu
