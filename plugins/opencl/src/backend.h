// The backend instance behind the ABI's opaque TM_Backend, and the buffers it owns.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>

#include "cl_handles.h"
#include "devices.h"
#include "errors.h"
#include "tensormorph/c/plugin.h"

namespace tm_opencl {

/// How tile_stats kernels split the halving sums (both follow the canonical order).
enum class Reduction {
  kAuto,        ///< work-group reduction on GPUs, one work item per row/tile elsewhere
  kSequential,  ///< one work item per row/tile
  kWorkGroup    ///< one work-group per row/tile, halving steps in local memory
};

/// Settings from TM_BackendCreateArgs::options ("key=value;key=value").
struct BackendOptions {
  uint64_t bandwidth_probe_bytes = uint64_t{64} << 20;  ///< bandwidth_probe_mib: copy size timed at create (0: skip)
  uint64_t staging_bytes = uint64_t{64} << 20;          ///< staging_mib: device memory one execute chunk may use
  Reduction reduction = Reduction::kAuto;               ///< reduction=auto|seq|group
  bool assume_no_denormals = false;  ///< assume_no_denormals=1: act as if CL_FP_DENORM were missing (tests)
  bool assume_no_fp64 = false;       ///< assume_no_fp64=1: act as if cl_khr_fp64 were missing (tests)
};

/// Parses the options string (NULL or empty: defaults); unknown keys and bad values are errors.
Result<BackendOptions> parse_backend_options(const char* text);

/// How the host CPU forms NaN results of a float multiply; the decode kernel reproduces it.
struct HostNanBehaviour {
  uint32_t default_nan_bits = 0x7fc00000u;  ///< bits of 0.0f * Inf on this host
  bool propagates_nan_operand = true;       ///< x * NaN returns the NaN operand, quieted
};

/// The kernels of one tile_stats program (one per input dtype).
struct TileStatsKernels {
  ClProgram program;     ///< built from kCommonKernelSource + kTileStatsKernelSource
  ClKernel row_seq;      ///< row_stats_seq
  ClKernel row_group;    ///< row_stats_group
  ClKernel tile_seq;     ///< tile_stats_seq
  ClKernel tile_group;   ///< tile_stats_group
};

}  // namespace tm_opencl

/// One OpenCL device opened for work: context, in-order profiling queue, compiled kernels.
struct TM_Backend {
  tm_opencl::DeviceHandle device;        ///< which device
  tm_opencl::DeviceCaps caps;            ///< its facts
  tm_opencl::BackendOptions options;     ///< the user's settings
  tm_opencl::ClContext context;          ///< one context for the device
  tm_opencl::ClQueue queue;              ///< in-order, profiling enabled
  bool tile_stats_available = false;     ///< programs built (needs float64)
  bool decode_bitwise = false;           ///< the float multiply is IEEE round-to-nearest with denormals
  tm_opencl::TileStatsKernels tile_stats_f32;  ///< F32 input
  tm_opencl::TileStatsKernels tile_stats_f16;  ///< F16 input
  tm_opencl::ClProgram decode_program;   ///< Q8_0 decoding
  tm_opencl::ClKernel decode_q8_0;       ///< its kernel
  size_t group_lanes = 1;                ///< lanes of a *_group work-group (power of two)
  bool use_group_reduction = false;      ///< run the *_group kernels
  tm_opencl::HostNanBehaviour host_nan;  ///< NaN conventions to reproduce
  double host_to_device_gbps = 0.0;      ///< measured at create (0 when not measured)
  double device_to_host_gbps = 0.0;      ///< measured at create (0 when not measured)
  bool bandwidth_measured = false;       ///< the two above were measured
  std::mutex mutex;                      ///< serialises queue use and kernel arguments
};

/// A cl_mem in memory space 1 (device global memory) of the backend that made it.
struct TM_Buffer {
  TM_Backend* owner = nullptr;  ///< the backend that allocated it
  tm_opencl::ClMem mem;         ///< the OpenCL buffer
  uint64_t bytes = 0;           ///< its size
};

namespace tm_opencl {

/// The one memory space this plugin owns: the device's global memory.
constexpr uint32_t kDeviceMemorySpace = 1;

/// Opens device `args.device_index`, compiles the kernels and measures the link bandwidth.
Result<std::unique_ptr<TM_Backend>> create_backend(const TM_BackendCreateArgs& args);

/// The device facts in the ABI's form.
TM_DeviceTraits device_traits_of(const TM_Backend& backend);

/// Allocates `bytes` of device memory in `memory_space` (must be kDeviceMemorySpace).
Result<std::unique_ptr<TM_Buffer>> allocate_buffer(TM_Backend& backend, uint32_t memory_space, uint64_t bytes);
/// Copies host bytes into the buffer at `offset`.
Status write_buffer(TM_Backend& backend, TM_Buffer& buffer, uint64_t offset, const void* src, uint64_t bytes);
/// Copies buffer bytes at `offset` to host memory.
Status read_buffer(TM_Backend& backend, TM_Buffer& buffer, uint64_t offset, void* dst, uint64_t bytes);
/// Checks that [offset, offset + bytes) lies inside `buffer`, which `backend` must own.
Status check_buffer_range(const TM_Backend& backend, const TM_Buffer& buffer, uint64_t offset, uint64_t bytes,
                          const char* what);

}  // namespace tm_opencl
