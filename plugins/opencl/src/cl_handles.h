// Owning wrappers for OpenCL objects, and kernel-argument plumbing.
#pragma once

#include <CL/cl.h>

#include <cstddef>
#include <string>
#include <utility>

#include "errors.h"

namespace tm_opencl {

/// Owns one reference to an OpenCL object and releases it with `Release`.
template <typename Handle, cl_int (*Release)(Handle)>
class ClObject {
 public:
  ClObject() = default;
  /// Takes ownership of `handle` (may be null).
  explicit ClObject(Handle handle) : handle_(handle) {}
  ClObject(const ClObject&) = delete;
  ClObject& operator=(const ClObject&) = delete;
  ClObject(ClObject&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  ClObject& operator=(ClObject&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  ~ClObject() { reset(); }

  /// The raw handle (still owned).
  Handle get() const { return handle_; }
  /// Where an OpenCL call can store a new handle; releases the current one first.
  Handle* receive() {
    reset();
    return &handle_;
  }
  /// Releases the handle now.
  void reset() {
    if (handle_ != nullptr) Release(handle_);
    handle_ = nullptr;
  }

 private:
  Handle handle_ = nullptr;
};

using ClContext = ClObject<cl_context, clReleaseContext>;
using ClQueue = ClObject<cl_command_queue, clReleaseCommandQueue>;
using ClProgram = ClObject<cl_program, clReleaseProgram>;
using ClKernel = ClObject<cl_kernel, clReleaseKernel>;
using ClMem = ClObject<cl_mem, clReleaseMemObject>;
using ClEvent = ClObject<cl_event, clReleaseEvent>;

/// A `__local` kernel argument of `bytes` bytes.
struct LocalBytes {
  size_t bytes;  ///< size of the work-group-local array
};

namespace detail {
inline cl_int set_one_arg(cl_kernel kernel, cl_uint index, const LocalBytes& local) {
  return clSetKernelArg(kernel, index, local.bytes, nullptr);
}
inline cl_int set_one_arg(cl_kernel kernel, cl_uint index, const ClMem& mem) {
  cl_mem raw = mem.get();
  return clSetKernelArg(kernel, index, sizeof raw, &raw);
}
template <typename T>
cl_int set_one_arg(cl_kernel kernel, cl_uint index, const T& value) {
  return clSetKernelArg(kernel, index, sizeof value, &value);
}
}  // namespace detail

/// Sets all arguments of `kernel` in order; the failure names the kernel and argument index.
template <typename... Args>
Status set_kernel_args(cl_kernel kernel, const char* kernel_name, const Args&... args) {
  cl_uint index = 0;
  cl_int error = CL_SUCCESS;
  const auto set_next = [&](const auto& arg) {
    if (error != CL_SUCCESS) return;
    error = detail::set_one_arg(kernel, index, arg);
    ++index;
  };
  (set_next(args), ...);
  if (error != CL_SUCCESS) {
    return cl_failure(error, std::string("clSetKernelArg(") + kernel_name + ", argument " +
                                 std::to_string(index - 1) + ")");
  }
  return {};
}

}  // namespace tm_opencl
