// What the host sides of the operations share (gpu_exec.cpp, gpu_top_k.cpp,
// gpu_channel_stats.cpp): where an input is, the memory budget check, event timing, the chunk
// size of a streamed input, and the loop that streams whole blocks through two device chunks.
#pragma once

#include <algorithm>
#include <cstdint>

#include "backends/cuda/gpu_backend.h"
#include "backends/cuda/kernels.h"
#include "compute/ops/op_instance.h"

namespace tensormorph::gpu {

/// Where an input argument's bytes are: in a buffer of this backend, or in host memory.
struct InputRef {
  const uint8_t* device = nullptr;  ///< resident bytes (byte_offset applied)
  const uint8_t* host = nullptr;    ///< host bytes to stream (byte_offset applied)
};

/// Where input argument `t` is; INVALID_ARGUMENT when it names a buffer that is not this backend's.
Result<InputRef> input_of(GpuBackend& b, const ops::TensorArgument& t);

/// RESOURCE_EXHAUSTED when `need` bytes exceed `budget` (0: none).
Status over_budget(uint64_t need, uint64_t budget, const char* what);

/// Times the compute stream between two events (both recorded by the caller).
Result<double> elapsed_ns(GpuBackend& b, cudaEvent_t start, cudaEvent_t stop);

/// Bytes one streamed chunk may take: the chunk option, a quarter of the budget when one is set.
uint64_t chunk_limit(const GpuBackend& b, uint64_t budget);

/// Calls `launch(data, elems)` on the compute stream over the input's `total_blocks` whole
/// blocks: once over resident bytes, or chunk by chunk through scratch slots 2 and 3 (of
/// `chunk_bytes`), each chunk's upload overlapping the kernels of the one before.
template <typename Launch>
Status over_input_chunks(GpuBackend& b, const InputRef& in, tm_gpu::KernelBlock block, uint64_t total_blocks,
                         uint64_t chunk_blocks, Launch&& launch) {
  uint8_t* chunks[2] = {nullptr, nullptr};
  if (!in.device && total_blocks > 0) {
    TM_ASSIGN_OR_RETURN(chunks[0], b.scratch(2, chunk_blocks * block.bytes));
    TM_ASSIGN_OR_RETURN(chunks[1], b.scratch(3, chunk_blocks * block.bytes));
  }
  cudaStream_t stream = b.compute_stream();
  const uint64_t step = in.device ? std::max<uint64_t>(total_blocks, 1) : chunk_blocks;
  for (uint64_t first = 0, k = 0; first < total_blocks; first += step, ++k) {
    const uint64_t n_blocks = std::min(step, total_blocks - first);
    const uint64_t offset = first * block.bytes;
    const uint8_t* data = nullptr;
    const int slot = static_cast<int>(k & 1u);
    if (in.device) {
      data = in.device + offset;
    } else {
      TM_RETURN_IF_ERROR(b.check(cudaEventSynchronize(b.event(4 + slot)), "waiting for a chunk"));
      TM_RETURN_IF_ERROR(b.copy_to_device_async(chunks[slot], in.host + offset, n_blocks * block.bytes, b.event(2 + slot)));
      TM_RETURN_IF_ERROR(b.check(cudaStreamWaitEvent(stream, b.event(2 + slot), 0), "ordering a chunk"));
      data = chunks[slot];
    }
    TM_RETURN_IF_ERROR(launch(data, n_blocks * block.elems));
    if (!in.device) TM_RETURN_IF_ERROR(b.check(cudaEventRecord(b.event(4 + slot), stream), "recording a chunk event"));
  }
  return Status::Ok();
}

}  // namespace tensormorph::gpu
