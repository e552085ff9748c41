// tm.decode@1 for Q8_0: chunks of whole blocks that fit the staging budget, decoded on the device
// and read back into the caller's output.
#include <algorithm>

#include "exec.h"

namespace tm_opencl {
namespace {

constexpr uint64_t kBlockElements = 32;
constexpr uint64_t kBlockBytes = 34;
constexpr uint64_t kOutputBytesPerBlock = kBlockElements * sizeof(float);

Status run_chunk(TM_Backend& backend, const DecodeJob& job, uint64_t block0, uint64_t blocks, const ClMem& staging,
                 const ClMem& output, CommandTimes& times) {
  cl_command_queue queue = backend.queue.get();
  const ClMem* source = &staging;
  cl_ulong source_byte = 0;
  if (job.input.host != nullptr) {
    TMCL_CL_CHECK(clEnqueueWriteBuffer(queue, staging.get(), CL_FALSE, 0, static_cast<size_t>(blocks * kBlockBytes),
                                       job.input.host + block0 * kBlockBytes, 0, nullptr, times.next()),
                  "clEnqueueWriteBuffer(Q8_0 blocks)");
  } else {
    source = &job.input.buffer->mem;
    source_byte = job.input.byte_offset + block0 * kBlockBytes;
  }
  const cl_ulong elements = blocks * kBlockElements;
  const cl_uint propagate = backend.host_nan.propagates_nan_operand ? 1u : 0u;
  TMCL_RETURN_IF_ERROR(set_kernel_args(backend.decode_q8_0.get(), "decode_q8_0", *source, source_byte, elements, output,
                                       cl_uint{backend.host_nan.default_nan_bits}, propagate));
  TMCL_RETURN_IF_ERROR(enqueue_kernel(backend, backend.decode_q8_0, "decode_q8_0", static_cast<size_t>(elements), 0, times));
  TMCL_CL_CHECK(clEnqueueReadBuffer(queue, output.get(), CL_TRUE, 0, static_cast<size_t>(blocks * kOutputBytesPerBlock),
                                    job.out + block0 * kOutputBytesPerBlock, 0, nullptr, times.next()),
                "clEnqueueReadBuffer(decoded values)");
  return {};
}

}  // namespace

Result<RunStats> run_decode(TM_Backend& backend, const DecodeJob& job, uint64_t memory_budget) {
  RunStats stats;
  const uint64_t blocks = job.elements / kBlockElements;
  if (blocks == 0) return stats;
  const uint64_t per_block = (job.input.host != nullptr ? kBlockBytes : 0) + kOutputBytesPerBlock;
  if (memory_budget != 0 && per_block > memory_budget) {
    return resource_exhausted("opencl: tm.decode@1: one Q8_0 block needs " + std::to_string(per_block) +
                              " bytes of device memory, over the policy's memory budget of " +
                              std::to_string(memory_budget));
  }
  const uint64_t chunk_blocks =
      std::min(blocks, std::max<uint64_t>(1, chunk_memory_limit(backend, memory_budget) / per_block));
  ClMem staging;
  if (job.input.host != nullptr) {
    TMCL_ASSIGN_OR_RETURN(staging, make_device_buffer(backend, chunk_blocks * kBlockBytes, CL_MEM_READ_ONLY));
  }
  TMCL_ASSIGN_OR_RETURN(ClMem output, make_device_buffer(backend, chunk_blocks * kOutputBytesPerBlock, CL_MEM_WRITE_ONLY));
  CommandTimes times;
  for (uint64_t block0 = 0; block0 < blocks; block0 += chunk_blocks) {
    Status status = run_chunk(backend, job, block0, std::min(chunk_blocks, blocks - block0), staging, output, times);
    if (!status.ok()) {
      clFinish(backend.queue.get());  // queued commands may still touch the caller's memory
      return status.take_failure();
    }
  }
  stats.device_ns = times.total_ns();
  stats.bytes_read = blocks * kBlockBytes;
  stats.bytes_written = job.elements * sizeof(float);
  return stats;
}

}  // namespace tm_opencl
