// One WebGPU device opened through Dawn: the library loaded at run time, the adapter Dawn picks,
// the device and its queue, storage buffers, compiled pipelines, and the one way work reaches the
// device (encode, submit, wait by mapping a read-back buffer). Dawn's callbacks run in
// AllowProcessEvents mode, so they fire only inside this class's waits, on the calling thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backends/webgpu/webgpu_api.h"
#include "core/copy_crew.h"
#include "tensormorph/status.h"

namespace tensormorph::webgpu {

/// The Dawn library's entry points, loaded once per process (never unloaded: Dawn keeps threads).
/// `path` empty: the library the build installed, then the system's search path.
Result<const api::Functions*> load_dawn(const std::string& path);

/// Where the build's set-up installed Dawn (empty when the build knows none).
std::string default_dawn_path();

/// A storage buffer on the device. Sizes are rounded up to 4 bytes (WebGPU copies whole words).
struct DeviceBuffer {
  api::Buffer handle = nullptr;  ///< the WGPUBuffer
  uint64_t bytes = 0;            ///< size as allocated
};

/// One binding of a dispatch: a range of a storage (or uniform) buffer.
struct Binding {
  api::Buffer buffer = nullptr;
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

/// Facts about the adapter, for traits and records.
struct AdapterFacts {
  std::string name;          ///< "NVIDIA H200 (Vulkan)", "llvmpipe (LLVM 15.0.6, 256 bits) (Vulkan)"
  uint32_t adapter_type = 0; ///< api::kAdapterType*
  uint32_t backend_type = 0; ///< api::kBackend*
  api::Limits limits{};      ///< the adapter's limits (requested in full for the device)
};

/// An opened WebGPU device. Not thread-safe: the backend serialises calls.
class WebGpuDevice {
 public:
  /// Loads Dawn from `library` (empty: default) and opens the adapter Dawn ranks first.
  static Result<std::unique_ptr<WebGpuDevice>> open(const std::string& library);
  ~WebGpuDevice();
  WebGpuDevice(const WebGpuDevice&) = delete;
  WebGpuDevice& operator=(const WebGpuDevice&) = delete;

  /// The adapter's facts.
  const AdapterFacts& facts() const { return facts_; }
  /// Largest range one storage binding may cover.
  uint64_t max_binding_bytes() const;
  /// Required alignment of a storage binding's offset.
  uint64_t binding_alignment() const { return facts_.limits.min_storage_buffer_offset_alignment; }

  /// A storage buffer of at least `bytes` (copy source and destination too); RESOURCE_EXHAUSTED
  /// when the device is out of memory.
  Result<DeviceBuffer> allocate(uint64_t bytes);
  /// Releases a buffer made by allocate (a null handle is ignored).
  void release(DeviceBuffer& buffer);
  /// Copies host bytes into a buffer (queued; ordered before later submissions). Large writes go
  /// through a ring of mapped staging buffers that a crew of host threads fills.
  Status write(const DeviceBuffer& dst, uint64_t offset, const void* src, uint64_t bytes);
  /// Copies a buffer's bytes to the host; waits for all earlier work.
  Status read(const DeviceBuffer& src, uint64_t offset, void* dst, uint64_t bytes);
  /// Copies between buffers on the device (queued).
  Status copy(const DeviceBuffer& src, uint64_t src_offset, const DeviceBuffer& dst, uint64_t dst_offset,
              uint64_t bytes);

  /// The compute pipeline of WGSL `source` (entry point `main`), compiled once and kept.
  Result<api::ComputePipeline> pipeline(const std::string& name, const std::string& source);
  /// Queues one dispatch of `pipeline` with group-0 bindings 0..n-1 (the last one a uniform
  /// buffer holding `uniforms`) over `groups` workgroups (x, y).
  Status dispatch(api::ComputePipeline pipeline, const std::vector<Binding>& storage, const void* uniforms,
                  uint64_t uniform_bytes, uint32_t groups_x, uint32_t groups_y);
  /// Waits for every queued command; returns the first validation or out-of-memory error seen
  /// since the last wait (a failed kernel is reported here, never ignored).
  Status finish();

  /// The error the device was lost with, or empty.
  const std::string& lost() const { return lost_; }

 private:
  WebGpuDevice() = default;
  struct UploadSlot;
  Status wait_for(const std::atomic<bool>& done, const char* what);
  /// A write through the staging ring: whole words only.
  Status write_staged(const DeviceBuffer& dst, uint64_t offset, const uint8_t* src, uint64_t bytes);
  /// Asks for `slot`'s mapping for writing (granted once the device is done reading it).
  void ask_mapping(UploadSlot& slot);
  /// Waits until `slot` is mapped for writing, asking for the mapping when nobody has.
  Status map_for_writing(UploadSlot& slot);
  Status take_error(const char* what);

  const api::Functions* wgpu_ = nullptr;
  api::Instance instance_ = nullptr;  // the process's, never released (see process_instance)
  api::Adapter adapter_ = nullptr;
  api::Device device_ = nullptr;
  api::Queue queue_ = nullptr;
  AdapterFacts facts_;
  DeviceBuffer readback_;  // MapRead staging, grown on demand
  DeviceBuffer scratch_word_;  // what finish() reads back
  std::vector<std::unique_ptr<UploadSlot>> upload_slots_;  // made by the first large write
  std::unique_ptr<CopyCrew> crew_;                          // fills the upload slots
  std::map<std::string, api::ComputePipeline> pipelines_;
  std::string error_;  // the first uncaptured error since the last finish()
  std::string lost_;
  bool error_out_of_memory_ = false;

  friend struct DeviceCallbacks;
};

}  // namespace tensormorph::webgpu
