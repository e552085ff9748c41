// The subset of the WebGPU C API (webgpu-headers, as Dawn ships it) that this backend calls,
// declared here because no registry packages webgpu.h. Names, values and layouts follow the
// specification's header; the static assertions pin every layout the backend passes to Dawn.
// Functions are resolved at run time from the Dawn library (dlopen), never linked.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tensormorph::webgpu::api {

using Bool = uint32_t;  ///< WGPUBool
using Flags = uint64_t;  ///< WGPUFlags

/// Opaque handles.
using Instance = struct InstanceImpl*;
using Adapter = struct AdapterImpl*;
using Device = struct DeviceImpl*;
using Queue = struct QueueImpl*;
using Buffer = struct BufferImpl*;
using ShaderModule = struct ShaderModuleImpl*;
using ComputePipeline = struct ComputePipelineImpl*;
using BindGroupLayout = struct BindGroupLayoutImpl*;
using BindGroup = struct BindGroupImpl*;
using CommandEncoder = struct CommandEncoderImpl*;
using ComputePassEncoder = struct ComputePassEncoderImpl*;
using CommandBuffer = struct CommandBufferImpl*;
using PipelineLayout = struct PipelineLayoutImpl*;

inline constexpr uint64_t kStrlen = UINT64_MAX;  ///< WGPU_STRLEN: a NUL-terminated string

// Enumerations (values of webgpu.h).
inline constexpr uint32_t kCallbackModeAllowProcessEvents = 0x2;
inline constexpr uint32_t kStatusSuccess = 0x1;                 ///< WGPUStatus, and every *Status_Success
inline constexpr uint32_t kSTypeShaderSourceWGSL = 0x2;
inline constexpr uint32_t kBackendVulkan = 0x6;
inline constexpr uint32_t kBackendMetal = 0x5;
inline constexpr uint32_t kBackendD3D12 = 0x4;
inline constexpr uint32_t kFeatureLevelCompatibility = 0x1;
inline constexpr uint32_t kFeatureLevelCore = 0x2;
inline constexpr uint32_t kBackendNull = 0x1;
inline constexpr uint32_t kPowerHighPerformance = 0x2;
inline constexpr uint32_t kAdapterTypeDiscreteGPU = 0x1;
inline constexpr uint32_t kAdapterTypeIntegratedGPU = 0x2;
inline constexpr uint32_t kAdapterTypeCPU = 0x3;
inline constexpr uint32_t kErrorFilterValidation = 0x1;
inline constexpr uint32_t kErrorFilterOutOfMemory = 0x2;
inline constexpr uint32_t kErrorTypeNoError = 0x1;
inline constexpr uint32_t kErrorTypeOutOfMemory = 0x3;
inline constexpr Flags kBufferUsageMapRead = 0x1;
inline constexpr Flags kBufferUsageMapWrite = 0x2;
inline constexpr Flags kBufferUsageCopySrc = 0x4;
inline constexpr Flags kBufferUsageCopyDst = 0x8;
inline constexpr Flags kBufferUsageUniform = 0x40;
inline constexpr Flags kBufferUsageStorage = 0x80;
inline constexpr Flags kMapModeRead = 0x1;
inline constexpr Flags kMapModeWrite = 0x2;

/// WGPUStringView: a pointer and a length (kStrlen: NUL-terminated).
struct StringView {
  const char* data;
  size_t length;
};

/// WGPUChainedStruct.
struct ChainedStruct {
  const ChainedStruct* next;
  uint32_t s_type;
};

/// WGPUFuture.
struct Future {
  uint64_t id;
};

using RequestAdapterCallback = void (*)(uint32_t status, Adapter adapter, StringView message, void* userdata1,
                                        void* userdata2);
using RequestDeviceCallback = void (*)(uint32_t status, Device device, StringView message, void* userdata1,
                                       void* userdata2);
using BufferMapCallback = void (*)(uint32_t status, StringView message, void* userdata1, void* userdata2);
using PopErrorScopeCallback = void (*)(uint32_t status, uint32_t error_type, StringView message, void* userdata1,
                                       void* userdata2);
using DeviceLostCallback = void (*)(const Device* device, uint32_t reason, StringView message, void* userdata1,
                                    void* userdata2);
using UncapturedErrorCallback = void (*)(const Device* device, uint32_t error_type, StringView message,
                                         void* userdata1, void* userdata2);

/// The shape shared by every WGPU*CallbackInfo with a mode.
template <typename Callback>
struct CallbackInfo {
  const ChainedStruct* next_in_chain;
  uint32_t mode;
  Callback callback;
  void* userdata1;
  void* userdata2;
};

/// WGPUUncapturedErrorCallbackInfo (no mode: it may fire at any time).
struct UncapturedErrorCallbackInfo {
  const ChainedStruct* next_in_chain;
  UncapturedErrorCallback callback;
  void* userdata1;
  void* userdata2;
};

/// WGPURequestAdapterOptions.
struct RequestAdapterOptions {
  const ChainedStruct* next_in_chain;
  uint32_t feature_level;
  uint32_t power_preference;
  Bool force_fallback_adapter;
  uint32_t backend_type;
  void* compatible_surface;
};

/// WGPULimits. Dawn writes it: `reserved` leaves room for limits appended by a newer library.
struct Limits {
  ChainedStruct* next_in_chain;
  uint32_t max_texture_dimension_1d, max_texture_dimension_2d, max_texture_dimension_3d, max_texture_array_layers;
  uint32_t max_bind_groups, max_bind_groups_plus_vertex_buffers, max_bindings_per_bind_group;
  uint32_t max_dynamic_uniform_buffers_per_pipeline_layout, max_dynamic_storage_buffers_per_pipeline_layout;
  uint32_t max_sampled_textures_per_shader_stage, max_samplers_per_shader_stage;
  uint32_t max_storage_buffers_per_shader_stage, max_storage_textures_per_shader_stage;
  uint32_t max_uniform_buffers_per_shader_stage;
  uint64_t max_uniform_buffer_binding_size;
  uint64_t max_storage_buffer_binding_size;
  uint32_t min_uniform_buffer_offset_alignment, min_storage_buffer_offset_alignment;
  uint32_t max_vertex_buffers;
  uint64_t max_buffer_size;
  uint32_t max_vertex_attributes, max_vertex_buffer_array_stride, max_inter_stage_shader_variables;
  uint32_t max_color_attachments, max_color_attachment_bytes_per_sample;
  uint32_t max_compute_workgroup_storage_size, max_compute_invocations_per_workgroup;
  uint32_t max_compute_workgroup_size_x, max_compute_workgroup_size_y, max_compute_workgroup_size_z;
  uint32_t max_compute_workgroups_per_dimension;
  uint32_t max_immediate_size;
  uint32_t max_storage_buffers_in_vertex_stage, max_storage_textures_in_vertex_stage;
  uint32_t max_storage_buffers_in_fragment_stage, max_storage_textures_in_fragment_stage;
  uint8_t reserved[256];
};

/// WGPUAdapterInfo. Dawn writes it; `reserved` as for Limits.
struct AdapterInfo {
  ChainedStruct* next_in_chain;
  StringView vendor, architecture, device, description;
  uint32_t backend_type, adapter_type, vendor_id, device_id, subgroup_min_size, subgroup_max_size;
  uint8_t reserved[128];
};

/// WGPUQueueDescriptor.
struct QueueDescriptor {
  const ChainedStruct* next_in_chain;
  StringView label;
};

/// WGPUDeviceDescriptor.
struct DeviceDescriptor {
  const ChainedStruct* next_in_chain;
  StringView label;
  size_t required_feature_count;
  const uint32_t* required_features;
  const Limits* required_limits;
  QueueDescriptor default_queue;
  CallbackInfo<DeviceLostCallback> device_lost_callback_info;
  UncapturedErrorCallbackInfo uncaptured_error_callback_info;
};

/// WGPUBufferDescriptor.
struct BufferDescriptor {
  const ChainedStruct* next_in_chain;
  StringView label;
  Flags usage;
  uint64_t size;
  Bool mapped_at_creation;
};

/// WGPUShaderModuleDescriptor and its WGSL source.
struct ShaderModuleDescriptor {
  const ChainedStruct* next_in_chain;
  StringView label;
};
struct ShaderSourceWGSL {
  ChainedStruct chain;
  StringView code;
};

/// WGPUConstantEntry (unused, pointed to by ComputeState).
struct ConstantEntry;

/// WGPUComputeState.
struct ComputeState {
  const ChainedStruct* next_in_chain;
  ShaderModule module;
  StringView entry_point;
  size_t constant_count;
  const ConstantEntry* constants;
};

/// WGPUComputePipelineDescriptor.
struct ComputePipelineDescriptor {
  const ChainedStruct* next_in_chain;
  StringView label;
  PipelineLayout layout;
  ComputeState compute;
};

/// WGPUBindGroupEntry.
struct BindGroupEntry {
  const ChainedStruct* next_in_chain;
  uint32_t binding;
  Buffer buffer;
  uint64_t offset;
  uint64_t size;
  void* sampler;
  void* texture_view;
};

/// WGPUBindGroupDescriptor.
struct BindGroupDescriptor {
  const ChainedStruct* next_in_chain;
  StringView label;
  BindGroupLayout layout;
  size_t entry_count;
  const BindGroupEntry* entries;
};

// The layouts of webgpu.h on LP64 platforms.
static_assert(sizeof(StringView) == 16);
static_assert(sizeof(ChainedStruct) == 16);
static_assert(sizeof(CallbackInfo<BufferMapCallback>) == 40);
static_assert(sizeof(UncapturedErrorCallbackInfo) == 32);
static_assert(sizeof(RequestAdapterOptions) == 32);
static_assert(offsetof(Limits, max_uniform_buffer_binding_size) == 64);
static_assert(offsetof(Limits, max_buffer_size) == 96);
static_assert(offsetof(Limits, max_compute_workgroup_storage_size) == 124);
static_assert(offsetof(Limits, max_compute_workgroups_per_dimension) == 144);
static_assert(offsetof(Limits, reserved) == 168);
static_assert(offsetof(AdapterInfo, backend_type) == 72);
static_assert(offsetof(DeviceDescriptor, required_limits) == 40);
static_assert(offsetof(DeviceDescriptor, default_queue) == 48);
static_assert(offsetof(DeviceDescriptor, device_lost_callback_info) == 72);
static_assert(offsetof(DeviceDescriptor, uncaptured_error_callback_info) == 112);
static_assert(sizeof(DeviceDescriptor) == 144);
static_assert(sizeof(BufferDescriptor) == 48);
static_assert(sizeof(ShaderSourceWGSL) == 32);
static_assert(sizeof(ComputeState) == 48);
static_assert(sizeof(ComputePipelineDescriptor) == 80);
static_assert(sizeof(BindGroupEntry) == 56);
static_assert(sizeof(BindGroupDescriptor) == 48);

/// The entry points this backend calls, resolved from the library by name.
struct Functions {
  Instance (*CreateInstance)(const void* descriptor);
  void (*InstanceProcessEvents)(Instance);
  Future (*InstanceRequestAdapter)(Instance, const RequestAdapterOptions*, CallbackInfo<RequestAdapterCallback>);
  uint32_t (*AdapterGetInfo)(Adapter, AdapterInfo*);
  void (*AdapterInfoFreeMembers)(AdapterInfo);
  uint32_t (*AdapterGetLimits)(Adapter, Limits*);
  Future (*AdapterRequestDevice)(Adapter, const DeviceDescriptor*, CallbackInfo<RequestDeviceCallback>);
  void (*AdapterRelease)(Adapter);
  Queue (*DeviceGetQueue)(Device);
  Buffer (*DeviceCreateBuffer)(Device, const BufferDescriptor*);
  ShaderModule (*DeviceCreateShaderModule)(Device, const ShaderModuleDescriptor*);
  ComputePipeline (*DeviceCreateComputePipeline)(Device, const ComputePipelineDescriptor*);
  BindGroup (*DeviceCreateBindGroup)(Device, const BindGroupDescriptor*);
  CommandEncoder (*DeviceCreateCommandEncoder)(Device, const void* descriptor);
  void (*DevicePushErrorScope)(Device, uint32_t filter);
  Future (*DevicePopErrorScope)(Device, CallbackInfo<PopErrorScopeCallback>);
  void (*DeviceDestroy)(Device);
  void (*DeviceRelease)(Device);
  void (*QueueWriteBuffer)(Queue, Buffer, uint64_t offset, const void* data, size_t size);
  void (*QueueSubmit)(Queue, size_t count, const CommandBuffer* commands);
  void (*QueueRelease)(Queue);
  Future (*BufferMapAsync)(Buffer, Flags mode, size_t offset, size_t size, CallbackInfo<BufferMapCallback>);
  const void* (*BufferGetConstMappedRange)(Buffer, size_t offset, size_t size);
  void* (*BufferGetMappedRange)(Buffer, size_t offset, size_t size);
  void (*BufferUnmap)(Buffer);
  void (*BufferDestroy)(Buffer);
  void (*BufferRelease)(Buffer);
  void (*ShaderModuleRelease)(ShaderModule);
  BindGroupLayout (*ComputePipelineGetBindGroupLayout)(ComputePipeline, uint32_t group);
  void (*ComputePipelineRelease)(ComputePipeline);
  void (*BindGroupLayoutRelease)(BindGroupLayout);
  void (*BindGroupRelease)(BindGroup);
  ComputePassEncoder (*CommandEncoderBeginComputePass)(CommandEncoder, const void* descriptor);
  void (*CommandEncoderCopyBufferToBuffer)(CommandEncoder, Buffer src, uint64_t src_offset, Buffer dst,
                                           uint64_t dst_offset, uint64_t size);
  CommandBuffer (*CommandEncoderFinish)(CommandEncoder, const void* descriptor);
  void (*CommandEncoderRelease)(CommandEncoder);
  void (*ComputePassEncoderSetPipeline)(ComputePassEncoder, ComputePipeline);
  void (*ComputePassEncoderSetBindGroup)(ComputePassEncoder, uint32_t group, BindGroup, size_t dynamic_offset_count,
                                         const uint32_t* dynamic_offsets);
  void (*ComputePassEncoderDispatchWorkgroups)(ComputePassEncoder, uint32_t x, uint32_t y, uint32_t z);
  void (*ComputePassEncoderEnd)(ComputePassEncoder);
  void (*ComputePassEncoderRelease)(ComputePassEncoder);
  void (*CommandBufferRelease)(CommandBuffer);
};

/// A string view of a NUL-terminated string.
inline StringView view_of(const char* text) { return StringView{text, kStrlen}; }

}  // namespace tensormorph::webgpu::api
