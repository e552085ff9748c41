#include "backends/webgpu/webgpu_device.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <string_view>
#include <thread>

namespace tensormorph::webgpu {
namespace {

std::string text_of(api::StringView view) {
  if (view.data == nullptr) return {};
  if (view.length == api::kStrlen) return std::string(view.data);
  return std::string(view.data, view.length);
}

template <typename Fn>
bool resolve(void* library, const char* name, Fn& out) {
  out = reinterpret_cast<Fn>(dlsym(library, name));
  return out != nullptr;
}

Result<api::Functions> resolve_all(void* lib) {
  api::Functions f{};
  const char* missing = nullptr;
#define TM_WGPU_RESOLVE(member) \
  if (missing == nullptr && !resolve(lib, "wgpu" #member, f.member)) missing = "wgpu" #member;
  TM_WGPU_RESOLVE(CreateInstance) TM_WGPU_RESOLVE(InstanceProcessEvents)
  TM_WGPU_RESOLVE(InstanceRequestAdapter) TM_WGPU_RESOLVE(AdapterGetInfo) TM_WGPU_RESOLVE(AdapterInfoFreeMembers)
  TM_WGPU_RESOLVE(AdapterGetLimits) TM_WGPU_RESOLVE(AdapterRequestDevice) TM_WGPU_RESOLVE(AdapterRelease)
  TM_WGPU_RESOLVE(DeviceGetQueue) TM_WGPU_RESOLVE(DeviceCreateBuffer) TM_WGPU_RESOLVE(DeviceCreateShaderModule)
  TM_WGPU_RESOLVE(DeviceCreateComputePipeline) TM_WGPU_RESOLVE(DeviceCreateBindGroup)
  TM_WGPU_RESOLVE(DeviceCreateCommandEncoder) TM_WGPU_RESOLVE(DevicePushErrorScope)
  TM_WGPU_RESOLVE(DevicePopErrorScope) TM_WGPU_RESOLVE(DeviceDestroy) TM_WGPU_RESOLVE(DeviceRelease)
  TM_WGPU_RESOLVE(QueueWriteBuffer) TM_WGPU_RESOLVE(QueueSubmit) TM_WGPU_RESOLVE(QueueRelease)
  TM_WGPU_RESOLVE(BufferMapAsync) TM_WGPU_RESOLVE(BufferGetConstMappedRange) TM_WGPU_RESOLVE(BufferGetMappedRange)
  TM_WGPU_RESOLVE(BufferUnmap)
  TM_WGPU_RESOLVE(BufferDestroy) TM_WGPU_RESOLVE(BufferRelease) TM_WGPU_RESOLVE(ShaderModuleRelease)
  TM_WGPU_RESOLVE(ComputePipelineGetBindGroupLayout) TM_WGPU_RESOLVE(ComputePipelineRelease)
  TM_WGPU_RESOLVE(BindGroupLayoutRelease) TM_WGPU_RESOLVE(BindGroupRelease)
  TM_WGPU_RESOLVE(CommandEncoderBeginComputePass) TM_WGPU_RESOLVE(CommandEncoderCopyBufferToBuffer)
  TM_WGPU_RESOLVE(CommandEncoderFinish) TM_WGPU_RESOLVE(CommandEncoderRelease)
  TM_WGPU_RESOLVE(ComputePassEncoderSetPipeline) TM_WGPU_RESOLVE(ComputePassEncoderSetBindGroup)
  TM_WGPU_RESOLVE(ComputePassEncoderDispatchWorkgroups) TM_WGPU_RESOLVE(ComputePassEncoderEnd)
  TM_WGPU_RESOLVE(ComputePassEncoderRelease) TM_WGPU_RESOLVE(CommandBufferRelease)
#undef TM_WGPU_RESOLVE
  if (missing != nullptr) return Status::Unsupported(std::string("the Dawn library lacks ") + missing);
  return f;
}

uint64_t round_up4(uint64_t bytes) { return (bytes + 3) & ~uint64_t{3}; }

}  // namespace

std::string default_dawn_path() {
#ifdef TM_WEBGPU_DAWN_LIBRARY
  return TM_WEBGPU_DAWN_LIBRARY;
#else
  return {};
#endif
}

Result<const api::Functions*> load_dawn(const std::string& path) {
  // One library per process: the first path that loads wins, later calls get the same table.
  static std::mutex mutex;
  static std::string loaded_from;
  static std::unique_ptr<api::Functions> functions;
  std::lock_guard lock(mutex);
  if (functions) return functions.get();
  std::vector<std::string> candidates;
  if (!path.empty()) {
    candidates.push_back(path);
  } else {
    if (std::string built = default_dawn_path(); !built.empty()) candidates.push_back(built);
    candidates.push_back("libwebgpu_wrapper.so");
  }
  std::string why;
  for (const std::string& candidate : candidates) {
    void* lib = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* error = dlerror();
      why += (why.empty() ? "" : "; ") + std::string(error ? error : candidate + ": cannot be loaded");
      continue;
    }
    TM_ASSIGN_OR_RETURN(api::Functions table, resolve_all(lib));
    functions = std::make_unique<api::Functions>(table);
    loaded_from = candidate;
    return functions.get();
  }
  return Status::Unsupported("no Dawn WebGPU library (" + why + ")");
}

/// The process's one Dawn instance: creating one loads and initialises the drivers, which every
/// session opening the backend would otherwise pay again. It lives as long as the process; every
/// device (one per backend) is requested from it and polls it.
Result<api::Instance> process_instance(const api::Functions& wgpu) {
  static std::mutex mutex;
  static api::Instance instance = nullptr;
  std::lock_guard lock(mutex);
  if (instance == nullptr) instance = wgpu.CreateInstance(nullptr);
  if (instance == nullptr) return Status::Unsupported("webgpu: Dawn could not create an instance");
  return instance;
}

/// The C callbacks; each writes into the struct its userdata1 points at. Any thread polling the
/// shared instance may run them, hence the atomic flags.
struct DeviceCallbacks {
  struct AdapterReply {
    std::atomic<bool> done = false;
    uint32_t status = 0;
    api::Adapter adapter = nullptr;
    std::string message;
  };
  struct DeviceReply {
    std::atomic<bool> done = false;
    uint32_t status = 0;
    api::Device device = nullptr;
    std::string message;
  };
  struct MapReply {
    std::atomic<bool> done = false;
    uint32_t status = 0;
    std::string message;
  };
  static void on_adapter(uint32_t status, api::Adapter adapter, api::StringView message, void* reply, void*) {
    auto* r = static_cast<AdapterReply*>(reply);
    r->status = status;
    r->adapter = adapter;
    r->message = text_of(message);
    r->done = true;
  }
  static void on_device(uint32_t status, api::Device device, api::StringView message, void* reply, void*) {
    auto* r = static_cast<DeviceReply*>(reply);
    r->status = status;
    r->device = device;
    r->message = text_of(message);
    r->done = true;
  }
  static void on_map(uint32_t status, api::StringView message, void* reply, void*) {
    auto* r = static_cast<MapReply*>(reply);
    r->status = status;
    r->message = text_of(message);
    r->done = true;
  }
  static void on_error(const api::Device*, uint32_t type, api::StringView message, void* self, void*) {
    auto* d = static_cast<WebGpuDevice*>(self);
    if (d->error_.empty()) d->error_ = text_of(message);
    if (type == api::kErrorTypeOutOfMemory) d->error_out_of_memory_ = true;
  }
  static void on_lost(const api::Device*, uint32_t reason, api::StringView message, void* self, void*) {
    // Reason 2 is "destroyed": the backend closing its own device is not a loss.
    if (reason == 2) return;
    static_cast<WebGpuDevice*>(self)->lost_ = text_of(message);
  }
};

/// One staging buffer of the upload ring (MapWrite | CopySrc), mapped while the host fills it.
struct WebGpuDevice::UploadSlot {
  DeviceBuffer buffer;
  DeviceCallbacks::MapReply reply;  // of the last mapping asked for
  bool mapping = false;             // a mapping was asked for and has not been waited for
  bool mapped = false;
};

Status WebGpuDevice::wait_for(const std::atomic<bool>& done, const char* what) {
  // Dawn runs callbacks of AllowProcessEvents mode inside ProcessEvents: poll, backing off from
  // spinning to short sleeps so a software device keeps the cores it computes on.
  auto sleep = std::chrono::microseconds(0);
  const auto start = std::chrono::steady_clock::now();
  while (!done) {
    wgpu_->InstanceProcessEvents(instance_);
    if (done) break;
    if (!lost_.empty()) return Status::Internal(std::string("webgpu: device lost while waiting for ") + what + ": " + lost_);
    if (std::chrono::steady_clock::now() - start > std::chrono::minutes(10)) {
      return Status::Internal(std::string("webgpu: no answer from the device after 10 minutes: ") + what);
    }
    if (sleep.count() > 0) std::this_thread::sleep_for(sleep);
    sleep = std::min(std::chrono::microseconds(200), sleep + std::chrono::microseconds(10));
  }
  return Status::Ok();
}

Result<std::unique_ptr<WebGpuDevice>> WebGpuDevice::open(const std::string& library) {
  TM_ASSIGN_OR_RETURN(const api::Functions* wgpu, load_dawn(library));
  auto d = std::unique_ptr<WebGpuDevice>(new WebGpuDevice());
  d->wgpu_ = wgpu;
  TM_ASSIGN_OR_RETURN(d->instance_, process_instance(*wgpu));

  api::RequestAdapterOptions options{};
  options.feature_level = api::kFeatureLevelCompatibility;
  options.power_preference = api::kPowerHighPerformance;
  options.backend_type = api::kBackendVulkan;
  DeviceCallbacks::AdapterReply adapter_reply;
  wgpu->InstanceRequestAdapter(
      d->instance_, &options,
      {nullptr, api::kCallbackModeAllowProcessEvents, &DeviceCallbacks::on_adapter, &adapter_reply, nullptr});
  TM_RETURN_IF_ERROR(d->wait_for(adapter_reply.done, "an adapter"));
  if (adapter_reply.status != api::kStatusSuccess || adapter_reply.adapter == nullptr) {
    return Status::Unsupported("webgpu: no adapter" +
                               (adapter_reply.message.empty() ? std::string() : ": " + adapter_reply.message));
  }
  d->adapter_ = adapter_reply.adapter;

  api::AdapterInfo info{};
  if (wgpu->AdapterGetInfo(d->adapter_, &info) == api::kStatusSuccess) {
    std::string device = text_of(info.device);
    if (device.empty()) device = text_of(info.description);
    const char* via = info.backend_type == api::kBackendVulkan ? "Vulkan"
                      : info.backend_type == api::kBackendMetal ? "Metal"
                      : info.backend_type == api::kBackendD3D12 ? "D3D12"
                                                                : "other";
    d->facts_.name = (device.empty() ? std::string("unnamed adapter") : device) + " (" + via + ")";
    d->facts_.adapter_type = info.adapter_type;
    d->facts_.backend_type = info.backend_type;
    wgpu->AdapterInfoFreeMembers(info);
  }
  if (wgpu->AdapterGetLimits(d->adapter_, &d->facts_.limits) != api::kStatusSuccess) {
    return Status::Unsupported("webgpu: the adapter reports no limits");
  }

  // Ask for the adapter's own limits: the defaults cap storage bindings at 128 MiB.
  api::Limits required = d->facts_.limits;
  required.next_in_chain = nullptr;
  api::DeviceDescriptor descriptor{};
  descriptor.label = api::view_of("tensormorph");
  descriptor.required_limits = &required;
  descriptor.default_queue.label = api::view_of("tensormorph");
  descriptor.device_lost_callback_info = {nullptr, api::kCallbackModeAllowProcessEvents, &DeviceCallbacks::on_lost,
                                          d.get(), nullptr};
  descriptor.uncaptured_error_callback_info = {nullptr, &DeviceCallbacks::on_error, d.get(), nullptr};
  DeviceCallbacks::DeviceReply device_reply;
  wgpu->AdapterRequestDevice(
      d->adapter_, &descriptor,
      {nullptr, api::kCallbackModeAllowProcessEvents, &DeviceCallbacks::on_device, &device_reply, nullptr});
  TM_RETURN_IF_ERROR(d->wait_for(device_reply.done, "a device"));
  if (device_reply.status != api::kStatusSuccess || device_reply.device == nullptr) {
    return Status::Unsupported("webgpu: " + d->facts_.name + " refused a device: " + device_reply.message);
  }
  d->device_ = device_reply.device;
  d->queue_ = wgpu->DeviceGetQueue(d->device_);
  return d;
}

WebGpuDevice::~WebGpuDevice() {
  if (wgpu_ == nullptr) return;
  crew_.reset();
  for (auto& slot : upload_slots_) {
    // The mapping's callback writes into the slot: let it fire before the slot goes.
    if (slot->mapping) (void)wait_for(slot->reply.done, "a staging buffer");
    release(slot->buffer);
  }
  release(readback_);
  release(scratch_word_);
  for (auto& [name, pipeline] : pipelines_) wgpu_->ComputePipelineRelease(pipeline);
  if (queue_ != nullptr) wgpu_->QueueRelease(queue_);
  if (device_ != nullptr) {
    wgpu_->DeviceDestroy(device_);
    wgpu_->DeviceRelease(device_);
  }
  if (adapter_ != nullptr) wgpu_->AdapterRelease(adapter_);
  if (instance_ != nullptr) wgpu_->InstanceProcessEvents(instance_);
}

uint64_t WebGpuDevice::max_binding_bytes() const {
  // Bindings index u32 words with 32-bit arithmetic: keep them below 4 GiB.
  const uint64_t limit = std::min(facts_.limits.max_storage_buffer_binding_size, facts_.limits.max_buffer_size);
  return std::min<uint64_t>(limit, uint64_t{1} << 31) & ~uint64_t{255};
}

Status WebGpuDevice::take_error(const char* what) {
  if (!lost_.empty()) return Status::Internal(std::string("webgpu: device lost during ") + what + ": " + lost_);
  if (error_.empty()) return Status::Ok();
  std::string message = std::string("webgpu: ") + what + ": " + error_;
  const bool oom = error_out_of_memory_;
  error_.clear();
  error_out_of_memory_ = false;
  return oom ? Status::ResourceExhausted(std::move(message)) : Status::Internal(std::move(message));
}

Result<DeviceBuffer> WebGpuDevice::allocate(uint64_t bytes) {
  const uint64_t size = std::max<uint64_t>(4, round_up4(bytes));
  if (size > facts_.limits.max_buffer_size) {
    return Status::ResourceExhausted("webgpu: a buffer of " + std::to_string(size) + " bytes exceeds the device's " +
                                     std::to_string(facts_.limits.max_buffer_size) + "-byte limit");
  }
  api::BufferDescriptor descriptor{};
  descriptor.usage = api::kBufferUsageStorage | api::kBufferUsageCopySrc | api::kBufferUsageCopyDst;
  descriptor.size = size;
  wgpu_->DevicePushErrorScope(device_, api::kErrorFilterOutOfMemory);
  api::Buffer handle = wgpu_->DeviceCreateBuffer(device_, &descriptor);
  struct ScopeReply {
    std::atomic<bool> done = false;
    uint32_t type = 0;
    std::string message;
  } reply;
  wgpu_->DevicePopErrorScope(
      device_, {nullptr, api::kCallbackModeAllowProcessEvents,
                [](uint32_t, uint32_t type, api::StringView message, void* r, void*) {
                  auto* s = static_cast<ScopeReply*>(r);
                  s->type = type;
                  s->message = text_of(message);
                  s->done = true;
                },
                &reply, nullptr});
  TM_RETURN_IF_ERROR(wait_for(reply.done, "a buffer allocation"));
  if (handle == nullptr || (reply.type != api::kErrorTypeNoError && reply.type != 0)) {
    if (handle != nullptr) wgpu_->BufferRelease(handle);
    return Status::ResourceExhausted("webgpu: out of device memory for " + std::to_string(size) + " bytes" +
                                     (reply.message.empty() ? std::string() : ": " + reply.message));
  }
  return DeviceBuffer{handle, size};
}

void WebGpuDevice::release(DeviceBuffer& buffer) {
  if (buffer.handle == nullptr) return;
  wgpu_->BufferDestroy(buffer.handle);
  wgpu_->BufferRelease(buffer.handle);
  buffer = DeviceBuffer{};
}

namespace {
/// Writes below this go through Dawn's queue writes (its own small upload ring).
constexpr uint64_t kStagedWriteMin = uint64_t{1} << 20;
/// The upload ring: enough slots that the host fills one while the device copies the others.
constexpr uint64_t kUploadSlotBytes = uint64_t{16} << 20;
constexpr size_t kUploadSlots = 4;
}  // namespace

Status WebGpuDevice::write(const DeviceBuffer& dst, uint64_t offset, const void* src, uint64_t bytes) {
  if (offset % 4 != 0 || offset + bytes > dst.bytes) {
    return Status::InvalidArgument("webgpu: a write of " + std::to_string(bytes) + " bytes at " +
                                   std::to_string(offset) + " does not fit a " + std::to_string(dst.bytes) +
                                   "-byte buffer at a word boundary");
  }
  const auto* from = static_cast<const uint8_t*>(src);
  const uint64_t whole = bytes & ~uint64_t{3};
  if (whole >= kStagedWriteMin) {
    TM_RETURN_IF_ERROR(write_staged(dst, offset, from, whole));
  } else if (whole > 0) {
    wgpu_->QueueWriteBuffer(queue_, dst.handle, offset, from, whole);
  }
  if (whole < bytes) {  // the last partial word, padded with zeros
    uint8_t tail[4] = {};
    std::memcpy(tail, from + whole, bytes - whole);
    wgpu_->QueueWriteBuffer(queue_, dst.handle, offset + whole, tail, 4);
  }
  return take_error("a write");
}

void WebGpuDevice::ask_mapping(UploadSlot& slot) {
  slot.reply.done = false;
  wgpu_->BufferMapAsync(slot.buffer.handle, api::kMapModeWrite, 0, slot.buffer.bytes,
                        {nullptr, api::kCallbackModeAllowProcessEvents, &DeviceCallbacks::on_map, &slot.reply, nullptr});
  slot.mapping = true;
}

Status WebGpuDevice::map_for_writing(UploadSlot& slot) {
  if (slot.mapped) return Status::Ok();
  if (!slot.mapping) ask_mapping(slot);
  TM_RETURN_IF_ERROR(wait_for(slot.reply.done, "a staging buffer"));
  slot.mapping = false;
  if (slot.reply.status != api::kStatusSuccess) {
    return Status::Internal("webgpu: a staging buffer did not map: " + slot.reply.message);
  }
  slot.mapped = true;
  return Status::Ok();
}

Status WebGpuDevice::write_staged(const DeviceBuffer& dst, uint64_t offset, const uint8_t* src, uint64_t bytes) {
  // Dawn's queue writes stage through memory of its choosing with one thread's copy; here the
  // crew fills mapped buffers at the host's memory bandwidth while the device copies the others.
  if (upload_slots_.empty()) {
    for (size_t i = 0; i < kUploadSlots; ++i) {
      api::BufferDescriptor descriptor{};
      descriptor.usage = api::kBufferUsageMapWrite | api::kBufferUsageCopySrc;
      descriptor.size = kUploadSlotBytes;
      descriptor.mapped_at_creation = 1;
      auto slot = std::make_unique<UploadSlot>();
      slot->buffer.handle = wgpu_->DeviceCreateBuffer(device_, &descriptor);
      if (slot->buffer.handle == nullptr) return Status::ResourceExhausted("webgpu: no staging buffer for uploads");
      slot->buffer.bytes = kUploadSlotBytes;
      slot->mapped = true;
      upload_slots_.push_back(std::move(slot));
    }
    crew_ = std::make_unique<CopyCrew>(CopyCrew::default_copiers() - 1);
  }
  // Whatever happens below, no crew thread reads `src` or writes a slot after this returns.
  struct CrewReset {
    CopyCrew& crew;
    ~CrewReset() { crew.reset(); }
  } crew_reset{*crew_};
  for (uint64_t done = 0, k = 0; done < bytes; ++k) {
    UploadSlot& slot = *upload_slots_[k % upload_slots_.size()];
    const uint64_t n = std::min(kUploadSlotBytes, bytes - done);
    TM_RETURN_IF_ERROR(map_for_writing(slot));
    void* mapped = wgpu_->BufferGetMappedRange(slot.buffer.handle, 0, slot.buffer.bytes);
    if (mapped == nullptr) return Status::Internal("webgpu: a staging buffer's mapping is not accessible");
    TM_RETURN_IF_ERROR(crew_->post(src + done, static_cast<uint8_t*>(mapped), n));
    TM_RETURN_IF_ERROR(crew_->wait_oldest());
    wgpu_->BufferUnmap(slot.buffer.handle);
    slot.mapped = false;
    api::CommandEncoder encoder = wgpu_->DeviceCreateCommandEncoder(device_, nullptr);
    wgpu_->CommandEncoderCopyBufferToBuffer(encoder, slot.buffer.handle, 0, dst.handle, offset + done, n);
    api::CommandBuffer commands = wgpu_->CommandEncoderFinish(encoder, nullptr);
    wgpu_->QueueSubmit(queue_, 1, &commands);
    wgpu_->CommandBufferRelease(commands);
    wgpu_->CommandEncoderRelease(encoder);
    ask_mapping(slot);  // granted once the copy has read the slot
    done += n;
  }
  return Status::Ok();
}

Status WebGpuDevice::copy(const DeviceBuffer& src, uint64_t src_offset, const DeviceBuffer& dst, uint64_t dst_offset,
                          uint64_t bytes) {
  const uint64_t size = round_up4(bytes);
  if (src_offset % 4 != 0 || dst_offset % 4 != 0 || src_offset + size > src.bytes || dst_offset + size > dst.bytes) {
    return Status::InvalidArgument("webgpu: a device copy of " + std::to_string(bytes) +
                                   " bytes is not word-aligned or leaves its buffers");
  }
  api::CommandEncoder encoder = wgpu_->DeviceCreateCommandEncoder(device_, nullptr);
  wgpu_->CommandEncoderCopyBufferToBuffer(encoder, src.handle, src_offset, dst.handle, dst_offset, size);
  api::CommandBuffer commands = wgpu_->CommandEncoderFinish(encoder, nullptr);
  wgpu_->QueueSubmit(queue_, 1, &commands);
  wgpu_->CommandBufferRelease(commands);
  wgpu_->CommandEncoderRelease(encoder);
  return take_error("a device copy");
}

Status WebGpuDevice::read(const DeviceBuffer& src, uint64_t offset, void* dst, uint64_t bytes) {
  if (bytes == 0) return finish();
  const uint64_t begin = offset & ~uint64_t{3};
  const uint64_t size = round_up4(offset + bytes) - begin;
  if (begin + size > src.bytes) return Status::InvalidArgument("webgpu: a read leaves its buffer");
  if (readback_.bytes < size) {
    release(readback_);
    api::BufferDescriptor descriptor{};
    descriptor.usage = api::kBufferUsageMapRead | api::kBufferUsageCopyDst;
    descriptor.size = std::max<uint64_t>(size, uint64_t{1} << 20);
    readback_.handle = wgpu_->DeviceCreateBuffer(device_, &descriptor);
    if (readback_.handle == nullptr) return Status::ResourceExhausted("webgpu: no read-back buffer");
    readback_.bytes = descriptor.size;
  }
  api::CommandEncoder encoder = wgpu_->DeviceCreateCommandEncoder(device_, nullptr);
  wgpu_->CommandEncoderCopyBufferToBuffer(encoder, src.handle, begin, readback_.handle, 0, size);
  api::CommandBuffer commands = wgpu_->CommandEncoderFinish(encoder, nullptr);
  wgpu_->QueueSubmit(queue_, 1, &commands);
  wgpu_->CommandBufferRelease(commands);
  wgpu_->CommandEncoderRelease(encoder);
  DeviceCallbacks::MapReply reply;
  wgpu_->BufferMapAsync(readback_.handle, api::kMapModeRead, 0, size,
                        {nullptr, api::kCallbackModeAllowProcessEvents, &DeviceCallbacks::on_map, &reply, nullptr});
  TM_RETURN_IF_ERROR(wait_for(reply.done, "a read-back"));
  TM_RETURN_IF_ERROR(take_error("a read-back"));
  if (reply.status != api::kStatusSuccess) return Status::Internal("webgpu: read-back failed: " + reply.message);
  const void* mapped = wgpu_->BufferGetConstMappedRange(readback_.handle, 0, size);
  if (mapped == nullptr) {
    wgpu_->BufferUnmap(readback_.handle);
    return Status::Internal("webgpu: the read-back buffer did not map");
  }
  std::memcpy(dst, static_cast<const uint8_t*>(mapped) + (offset - begin), bytes);
  wgpu_->BufferUnmap(readback_.handle);
  return Status::Ok();
}

Status WebGpuDevice::finish() {
  // Reading one word back orders after every queued command and surfaces their errors.
  if (scratch_word_.handle == nullptr) {
    TM_ASSIGN_OR_RETURN(scratch_word_, allocate(4));
  }
  uint32_t word = 0;
  return read(scratch_word_, 0, &word, sizeof word);
}

Result<api::ComputePipeline> WebGpuDevice::pipeline(const std::string& name, const std::string& source) {
  if (auto it = pipelines_.find(name); it != pipelines_.end()) return it->second;
  api::ShaderSourceWGSL wgsl{};
  wgsl.chain.s_type = api::kSTypeShaderSourceWGSL;
  wgsl.code = api::StringView{source.data(), source.size()};
  api::ShaderModuleDescriptor module_descriptor{};
  module_descriptor.next_in_chain = &wgsl.chain;
  module_descriptor.label = api::view_of(name.c_str());
  api::ShaderModule module = wgpu_->DeviceCreateShaderModule(device_, &module_descriptor);
  api::ComputePipelineDescriptor descriptor{};
  descriptor.label = api::view_of(name.c_str());
  descriptor.compute.module = module;
  descriptor.compute.entry_point = api::view_of("main");
  api::ComputePipeline pipeline = wgpu_->DeviceCreateComputePipeline(device_, &descriptor);
  if (module != nullptr) wgpu_->ShaderModuleRelease(module);
  TM_RETURN_IF_ERROR(take_error(("compiling kernel " + name).c_str()));
  if (pipeline == nullptr) return Status::Internal("webgpu: kernel " + name + " did not compile");
  pipelines_.emplace(name, pipeline);
  return pipeline;
}

Status WebGpuDevice::dispatch(api::ComputePipeline pipeline, const std::vector<Binding>& storage, const void* uniforms,
                              uint64_t uniform_bytes, uint32_t groups_x, uint32_t groups_y) {
  if (groups_x == 0 || groups_y == 0) return Status::Ok();
  api::BufferDescriptor uniform_descriptor{};
  uniform_descriptor.usage = api::kBufferUsageUniform | api::kBufferUsageCopyDst;
  uniform_descriptor.size = std::max<uint64_t>(16, (uniform_bytes + 15) & ~uint64_t{15});
  api::Buffer uniform = wgpu_->DeviceCreateBuffer(device_, &uniform_descriptor);
  if (uniform == nullptr) return Status::ResourceExhausted("webgpu: no uniform buffer");
  std::vector<uint8_t> padded(uniform_descriptor.size, 0);
  std::memcpy(padded.data(), uniforms, uniform_bytes);
  wgpu_->QueueWriteBuffer(queue_, uniform, 0, padded.data(), padded.size());

  std::vector<api::BindGroupEntry> entries;
  for (size_t i = 0; i < storage.size(); ++i) {
    api::BindGroupEntry entry{};
    entry.binding = static_cast<uint32_t>(i);
    entry.buffer = storage[i].buffer;
    entry.offset = storage[i].offset;
    entry.size = std::max<uint64_t>(4, round_up4(storage[i].bytes));
    entries.push_back(entry);
  }
  api::BindGroupEntry uniform_entry{};
  uniform_entry.binding = static_cast<uint32_t>(storage.size());
  uniform_entry.buffer = uniform;
  uniform_entry.size = uniform_descriptor.size;
  entries.push_back(uniform_entry);

  api::BindGroupLayout layout = wgpu_->ComputePipelineGetBindGroupLayout(pipeline, 0);
  api::BindGroupDescriptor group_descriptor{};
  group_descriptor.layout = layout;
  group_descriptor.entry_count = entries.size();
  group_descriptor.entries = entries.data();
  api::BindGroup group = wgpu_->DeviceCreateBindGroup(device_, &group_descriptor);

  api::CommandEncoder encoder = wgpu_->DeviceCreateCommandEncoder(device_, nullptr);
  api::ComputePassEncoder pass = wgpu_->CommandEncoderBeginComputePass(encoder, nullptr);
  wgpu_->ComputePassEncoderSetPipeline(pass, pipeline);
  wgpu_->ComputePassEncoderSetBindGroup(pass, 0, group, 0, nullptr);
  wgpu_->ComputePassEncoderDispatchWorkgroups(pass, groups_x, groups_y, 1);
  wgpu_->ComputePassEncoderEnd(pass);
  api::CommandBuffer commands = wgpu_->CommandEncoderFinish(encoder, nullptr);
  wgpu_->QueueSubmit(queue_, 1, &commands);
  wgpu_->CommandBufferRelease(commands);
  wgpu_->ComputePassEncoderRelease(pass);
  wgpu_->CommandEncoderRelease(encoder);
  if (group != nullptr) wgpu_->BindGroupRelease(group);
  if (layout != nullptr) wgpu_->BindGroupLayoutRelease(layout);
  wgpu_->BufferRelease(uniform);
  return take_error("a kernel launch");
}

}  // namespace tensormorph::webgpu
