// Runtime error codes as Status values: every runtime call of the backend goes through here.
#pragma once

#include <string_view>

#include "backends/cuda/gpu_runtime.h"
#include "tensormorph/status.h"

namespace tensormorph::gpu {

/// True for errors after which the context is unusable (the device must be treated as lost).
bool is_sticky_error(cudaError_t error);

/// OK for cudaSuccess; RESOURCE_EXHAUSTED for out-of-memory; DEVICE_LOST for sticky errors;
/// INTERNAL otherwise. The message reads "cuda: <what>: cudaErrorName (description)".
Status runtime_status(cudaError_t error, std::string_view what);

/// "cudaErrorName (description)" of an error code.
std::string runtime_error_text(cudaError_t error);

}  // namespace tensormorph::gpu
