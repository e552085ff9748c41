// The host side of the core operations: where the input is (a resident buffer, or host
// memory streamed in chunks while earlier chunks compute), launches, and results back to the host.
#pragma once

#include <cstdint>
#include <optional>

#include "backends/cuda/gpu_backend.h"
#include "backends/cuda/kernels.h"
#include "compute/ops/op_instance.h"
#include "tensormorph/dtype.h"

namespace tensormorph::gpu {

/// What one execution did.
struct RunReport {
  double device_ns = 0;        ///< kernel time measured with device events
  uint64_t bytes_read = 0;     ///< input bytes the kernels read
  uint64_t bytes_written = 0;  ///< output bytes produced
};

/// Where an output goes: a buffer of this backend, or host memory.
struct OutputRef {
  uint8_t* device = nullptr;  ///< in a buffer of this backend (byte_offset applied)
  uint8_t* host = nullptr;    ///< host memory (byte_offset applied)
};

/// Where output argument `t` goes; INVALID_ARGUMENT when it names a buffer that is not this
/// backend's or too small.
Result<OutputRef> output_of(GpuBackend& backend, const ops::TensorArgument& t);

/// The kernel dtype of `dtype`, or nullopt when this backend does not implement it.
std::optional<tm_gpu::KernelDType> kernel_dtype(DType dtype);

/// Bytes of the rows of a tile_stats view (what the kernels read).
uint64_t tile_stats_bytes_read(const ops::TileStatsArgs& args);

/// tm.tile_stats@1 on validated arguments. `memory_budget` (0: none) caps working memory.
Result<RunReport> run_tile_stats(GpuBackend& backend, const ops::TileStatsArgs& args, uint64_t memory_budget);
/// tm.decode@1 on validated arguments.
Result<RunReport> run_decode(GpuBackend& backend, const ops::DecodeArgs& args, uint64_t memory_budget);
/// tm.histogram@1 on validated arguments.
Result<RunReport> run_histogram(GpuBackend& backend, const ops::HistogramArgs& args, uint64_t memory_budget);
/// tm.radix_histogram@1 on validated arguments.
Result<RunReport> run_radix_histogram(GpuBackend& backend, const ops::RadixHistogramArgs& args,
                                      uint64_t memory_budget);

/// Device memory tm.top_k@1 needs beyond its outputs (counters, candidates, streamed chunks).
uint64_t top_k_working_bytes(const GpuBackend& backend, const ops::TopKArgs& args, uint64_t memory_budget);
/// tm.top_k@1 on validated arguments (gpu_top_k.cpp); `*written` = entries before the padding.
Result<RunReport> run_top_k(GpuBackend& backend, const ops::TopKArgs& args, uint64_t memory_budget, uint64_t* written);

/// Device memory tm.channel_stats@1 needs beyond resident outputs (partials, counts, host outputs' copies, chunks).
uint64_t channel_stats_working_bytes(const GpuBackend& backend, const ops::ChannelStatsArgs& args, uint64_t memory_budget);
/// tm.channel_stats@1 on validated arguments (gpu_channel_stats.cpp).
Result<RunReport> run_channel_stats(GpuBackend& backend, const ops::ChannelStatsArgs& args, uint64_t memory_budget);

/// Device memory tm.diff_stats@1 (`stats`) or tm.subtract@1 needs beyond its inputs and device outputs.
uint64_t diff_working_bytes(const GpuBackend& backend, const ops::DiffArgs& args, bool stats, uint64_t memory_budget);
/// tm.diff_stats@1 on validated arguments (gpu_diff.cpp).
Result<RunReport> run_diff_stats(GpuBackend& backend, const ops::DiffArgs& args, uint64_t memory_budget);
/// tm.subtract@1 on validated arguments (gpu_diff.cpp).
Result<RunReport> run_subtract(GpuBackend& backend, const ops::DiffArgs& args, uint64_t memory_budget);

}  // namespace tensormorph::gpu
