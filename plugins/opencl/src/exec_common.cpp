#include "exec.h"

#include <algorithm>
#include <string>

namespace tm_opencl {

double CommandTimes::total_ns() const {
  double total = 0.0;
  for (const ClEvent& event : events_) {
    cl_ulong start = 0;
    cl_ulong end = 0;
    if (clGetEventProfilingInfo(event.get(), CL_PROFILING_COMMAND_START, sizeof start, &start, nullptr) != CL_SUCCESS ||
        clGetEventProfilingInfo(event.get(), CL_PROFILING_COMMAND_END, sizeof end, &end, nullptr) != CL_SUCCESS) {
      return 0.0;
    }
    if (end > start) total += static_cast<double>(end - start);
  }
  return total;
}

uint64_t chunk_memory_limit(const TM_Backend& backend, uint64_t memory_budget) {
  uint64_t limit = backend.options.staging_bytes;
  if (memory_budget != 0) limit = std::min(limit, memory_budget);
  return std::min(limit, backend.caps.max_allocation_bytes);
}

Result<ClMem> make_device_buffer(const TM_Backend& backend, uint64_t bytes, cl_mem_flags flags) {
  cl_int error = CL_SUCCESS;
  ClMem mem(clCreateBuffer(backend.context.get(), flags, static_cast<size_t>(std::max<uint64_t>(bytes, 1)), nullptr,
                           &error));
  if (error != CL_SUCCESS) return cl_failure(error, "clCreateBuffer(" + std::to_string(bytes) + " bytes)");
  return mem;
}

Status enqueue_kernel(const TM_Backend& backend, const ClKernel& kernel, const char* name, size_t global, size_t local,
                      CommandTimes& times) {
  // Kernels ignore work items past their range; whole multiples let implementations pick good groups.
  const size_t multiple = local != 0 ? local : 64;
  global = (global + multiple - 1) / multiple * multiple;
  const cl_int error = clEnqueueNDRangeKernel(backend.queue.get(), kernel.get(), 1, nullptr, &global,
                                              local != 0 ? &local : nullptr, 0, nullptr, times.next());
  if (error != CL_SUCCESS) return cl_failure(error, std::string("clEnqueueNDRangeKernel(") + name + ")");
  return {};
}

}  // namespace tm_opencl
