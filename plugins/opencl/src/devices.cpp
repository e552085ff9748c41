#include "devices.h"

#include <CL/cl_ext.h>

#include <string_view>

namespace tm_opencl {
namespace {

constexpr cl_device_type kUsableDeviceTypes = CL_DEVICE_TYPE_GPU | CL_DEVICE_TYPE_CPU | CL_DEVICE_TYPE_ACCELERATOR;

Result<std::string> platform_string(cl_platform_id platform, cl_platform_info param) {
  size_t size = 0;
  TMCL_CL_CHECK(clGetPlatformInfo(platform, param, 0, nullptr, &size), "clGetPlatformInfo");
  std::string text(size, '\0');
  TMCL_CL_CHECK(clGetPlatformInfo(platform, param, size, text.data(), nullptr), "clGetPlatformInfo");
  while (!text.empty() && text.back() == '\0') text.pop_back();
  return text;
}

Result<std::string> device_string(cl_device_id device, cl_device_info param) {
  size_t size = 0;
  TMCL_CL_CHECK(clGetDeviceInfo(device, param, 0, nullptr, &size), "clGetDeviceInfo");
  std::string text(size, '\0');
  TMCL_CL_CHECK(clGetDeviceInfo(device, param, size, text.data(), nullptr), "clGetDeviceInfo");
  while (!text.empty() && text.back() == '\0') text.pop_back();
  return text;
}

template <typename T>
Result<T> device_scalar(cl_device_id device, cl_device_info param) {
  T value{};
  TMCL_CL_CHECK(clGetDeviceInfo(device, param, sizeof value, &value, nullptr), "clGetDeviceInfo");
  return value;
}

bool has_extension(const std::string& extensions, std::string_view name) {
  size_t at = 0;
  while ((at = extensions.find(name, at)) != std::string::npos) {
    const size_t end = at + name.size();
    const bool starts_word = at == 0 || extensions[at - 1] == ' ';
    const bool ends_word = end == extensions.size() || extensions[end] == ' ';
    if (starts_word && ends_word) return true;
    at = end;
  }
  return false;
}

}  // namespace

DeviceList list_devices() {
  DeviceList list;
  cl_uint platform_count = 0;
  const cl_int status = clGetPlatformIDs(0, nullptr, &platform_count);
  if (status == CL_PLATFORM_NOT_FOUND_KHR || (status == CL_SUCCESS && platform_count == 0)) {
    list.why_none = "no OpenCL platform found (is an ICD installed?)";
    return list;
  }
  if (status != CL_SUCCESS) {
    list.why_none = std::string("cannot list OpenCL platforms: clGetPlatformIDs failed with ") + cl_error_name(status);
    return list;
  }
  std::vector<cl_platform_id> platforms(platform_count);
  if (const cl_int error = clGetPlatformIDs(platform_count, platforms.data(), nullptr); error != CL_SUCCESS) {
    list.why_none = std::string("cannot list OpenCL platforms: clGetPlatformIDs failed with ") + cl_error_name(error);
    return list;
  }
  for (cl_platform_id platform : platforms) {
    cl_uint device_count = 0;
    // A platform without usable devices answers CL_DEVICE_NOT_FOUND: skip it, keep looking.
    if (clGetDeviceIDs(platform, kUsableDeviceTypes, 0, nullptr, &device_count) != CL_SUCCESS) continue;
    std::vector<cl_device_id> devices(device_count);
    if (clGetDeviceIDs(platform, kUsableDeviceTypes, device_count, devices.data(), nullptr) != CL_SUCCESS) continue;
    for (cl_device_id device : devices) list.devices.push_back({platform, device});
  }
  if (list.devices.empty()) {
    list.why_none = std::to_string(platform_count) +
                    " OpenCL platform(s) found, but none has a GPU, CPU or accelerator device";
  }
  return list;
}

Result<DeviceCaps> read_device_caps(const DeviceHandle& handle) {
  DeviceCaps caps;
  cl_device_id device = handle.device;
  TMCL_ASSIGN_OR_RETURN(std::string device_name, device_string(device, CL_DEVICE_NAME));
  TMCL_ASSIGN_OR_RETURN(std::string platform_name, platform_string(handle.platform, CL_PLATFORM_NAME));
  caps.name = device_name + " (" + platform_name + ")";
  TMCL_ASSIGN_OR_RETURN(caps.type, device_scalar<cl_device_type>(device, CL_DEVICE_TYPE));
  TMCL_ASSIGN_OR_RETURN(caps.global_memory_bytes, device_scalar<cl_ulong>(device, CL_DEVICE_GLOBAL_MEM_SIZE));
  TMCL_ASSIGN_OR_RETURN(caps.max_allocation_bytes, device_scalar<cl_ulong>(device, CL_DEVICE_MAX_MEM_ALLOC_SIZE));
  TMCL_ASSIGN_OR_RETURN(caps.local_memory_bytes, device_scalar<cl_ulong>(device, CL_DEVICE_LOCAL_MEM_SIZE));
  TMCL_ASSIGN_OR_RETURN(caps.compute_units, device_scalar<cl_uint>(device, CL_DEVICE_MAX_COMPUTE_UNITS));
  TMCL_ASSIGN_OR_RETURN(caps.clock_mhz, device_scalar<cl_uint>(device, CL_DEVICE_MAX_CLOCK_FREQUENCY));
  TMCL_ASSIGN_OR_RETURN(caps.max_work_group_size, device_scalar<size_t>(device, CL_DEVICE_MAX_WORK_GROUP_SIZE));
  // Deprecated since OpenCL 2.0 but still answered by every ICD we know; absent means "not unified".
  Result<cl_bool> unified = device_scalar<cl_bool>(device, CL_DEVICE_HOST_UNIFIED_MEMORY);
  caps.host_unified_memory = unified.ok() && unified.value() == CL_TRUE;

  TMCL_ASSIGN_OR_RETURN(cl_device_fp_config single_config,
                        device_scalar<cl_device_fp_config>(device, CL_DEVICE_SINGLE_FP_CONFIG));
  caps.fp32_denormals = (single_config & CL_FP_DENORM) != 0;
  caps.fp32_round_to_nearest = (single_config & CL_FP_ROUND_TO_NEAREST) != 0;

  // cl_khr_fp64 mandates round-to-nearest, denormals and inf/NaN; check the bits anyway, since
  // the bitwise claim rests on them.
  TMCL_ASSIGN_OR_RETURN(std::string extensions, device_string(device, CL_DEVICE_EXTENSIONS));
  Result<cl_device_fp_config> double_config = device_scalar<cl_device_fp_config>(device, CL_DEVICE_DOUBLE_FP_CONFIG);
  constexpr cl_device_fp_config kNeededDouble = CL_FP_ROUND_TO_NEAREST | CL_FP_DENORM | CL_FP_INF_NAN;
  caps.fp64 = has_extension(extensions, "cl_khr_fp64") && double_config.ok() &&
              (double_config.value() & kNeededDouble) == kNeededDouble;
  return caps;
}

}  // namespace tm_opencl
