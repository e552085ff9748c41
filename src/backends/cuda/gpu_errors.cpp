#include "backends/cuda/gpu_errors.h"

#include <string>

namespace tensormorph::gpu {

bool is_sticky_error(cudaError_t error) {
  return error == cudaErrorIllegalAddress || error == cudaErrorLaunchFailure || error == cudaErrorLaunchTimeout ||
         error == cudaErrorECCUncorrectable || error == cudaErrorAssert || error == cudaErrorHardwareStackError ||
         error == cudaErrorIllegalInstruction || error == cudaErrorMisalignedAddress ||
         error == cudaErrorInvalidAddressSpace || error == cudaErrorInvalidPc || error == cudaErrorUnknown;
}

std::string runtime_error_text(cudaError_t error) {
  const char* name = cudaGetErrorName(error);
  const char* text = cudaGetErrorString(error);
  return std::string(name ? name : "unknown error") + " (" + (text ? text : "no description") + ")";
}

Status runtime_status(cudaError_t error, std::string_view what) {
  if (error == cudaSuccess) return Status::Ok();
  std::string message = std::string(TM_GPU_VENDOR ": ") + std::string(what) + ": " + runtime_error_text(error);
  if (error == cudaErrorMemoryAllocation) {
    return Status::ResourceExhausted(message + "; out of device memory");
  }
  if (is_sticky_error(error)) return Status(StatusCode::kDeviceLost, message + "; the device context is lost");
  return Status::Internal(message);
}

}  // namespace tensormorph::gpu
