// Finding OpenCL devices and reading the facts about them that placement and exactness depend on.
#pragma once

#include <CL/cl.h>

#include <cstdint>
#include <string>
#include <vector>

#include "errors.h"

namespace tm_opencl {

/// One usable device and the platform it belongs to.
struct DeviceHandle {
  cl_platform_id platform = nullptr;  ///< its platform
  cl_device_id device = nullptr;      ///< the device (GPU, CPU or accelerator)
};

/// The devices this plugin can drive, or why there are none.
struct DeviceList {
  std::vector<DeviceHandle> devices;  ///< GPU, CPU and accelerator devices, platform by platform
  std::string why_none;               ///< set when `devices` is empty
};

/// Enumerates every GPU, CPU and accelerator device of every platform. Never fails: a missing
/// ICD or a broken platform yields an empty list with the reason.
DeviceList list_devices();

/// Device facts read once at backend creation.
struct DeviceCaps {
  std::string name;                    ///< "<device> (<platform>)"
  cl_device_type type = 0;             ///< CL_DEVICE_TYPE_*
  uint64_t global_memory_bytes = 0;    ///< CL_DEVICE_GLOBAL_MEM_SIZE
  uint64_t max_allocation_bytes = 0;   ///< CL_DEVICE_MAX_MEM_ALLOC_SIZE
  uint64_t local_memory_bytes = 0;     ///< CL_DEVICE_LOCAL_MEM_SIZE
  uint32_t compute_units = 0;          ///< CL_DEVICE_MAX_COMPUTE_UNITS
  uint32_t clock_mhz = 0;              ///< CL_DEVICE_MAX_CLOCK_FREQUENCY
  size_t max_work_group_size = 0;      ///< CL_DEVICE_MAX_WORK_GROUP_SIZE
  bool host_unified_memory = false;    ///< CL_DEVICE_HOST_UNIFIED_MEMORY
  bool fp64 = false;                   ///< double with round-to-nearest, denormals, inf/NaN (cl_khr_fp64)
  bool fp32_denormals = false;         ///< CL_DEVICE_SINGLE_FP_CONFIG has CL_FP_DENORM
  bool fp32_round_to_nearest = false;  ///< CL_DEVICE_SINGLE_FP_CONFIG has CL_FP_ROUND_TO_NEAREST
};

/// Reads the facts of `device`.
Result<DeviceCaps> read_device_caps(const DeviceHandle& device);

}  // namespace tm_opencl
