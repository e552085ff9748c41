// tm.channel_stats@1 on the device (kernels in channel_stats.cu). The matrix is taken in bands of a
// power of two rows: each band's row kernel writes its rows' records and its column kernel the
// column partials of its aligned row blocks, then one merge builds every column's record. A band
// is small enough (16 MiB) that the column kernel finds it in L2 right after the row kernel read it,
// so resident data is read from device memory about once. Host data streams band by band through
// two device chunks, the next band's upload overlapping the kernels of the one before.
#include <algorithm>
#include <bit>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cuda/gpu_exec.h"
#include "backends/cuda/gpu_stream.h"
#include "compute/ops/reference.h"

namespace tensormorph::gpu {
namespace {

using tm_gpu::KernelDType;

/// The alignment of the element loads of channel_stats.cu's aligned kernels.
uint64_t natural_alignment(KernelDType dtype) {
  switch (dtype) {
    case KernelDType::kF32:
    case KernelDType::kQ4_K: return 4;
    case KernelDType::kF8E4M3:
    case KernelDType::kF8E5M2: return 1;
    default: return 2;
  }
}

constexpr uint64_t kResidentBandBytes = uint64_t{16} << 20;

struct ChannelPlan {
  uint64_t row_bytes = 0;
  uint64_t band_rows = 0;   ///< a power of two
  uint32_t block_rows = 0;  ///< a power of two dividing band_rows
  uint64_t blocks = 0;      ///< column partials per column
};

ChannelPlan plan_of(const GpuBackend& b, const ops::ChannelStatsArgs& args, uint64_t memory_budget) {
  ChannelPlan p;
  p.row_bytes = *ops::matrix_row_bytes(args.input.dtype, args.cols);
  const uint64_t row_slots = std::bit_ceil(std::max<uint64_t>(args.rows, 1));
  // Blocks long enough that a column's partial (16 bytes) is at most 1/16 of the bytes it sums.
  const double elem_bytes = args.cols ? static_cast<double>(p.row_bytes) / static_cast<double>(args.cols) : 4.0;
  uint64_t block_rows = std::bit_ceil(static_cast<uint64_t>(256.0 / elem_bytes + 0.5));
  block_rows = std::clamp<uint64_t>(block_rows, 32, tm_gpu::kChannelMaxBlockRows);
  const uint64_t band_bytes = args.input.arg.buffer ? kResidentBandBytes : chunk_limit(b, memory_budget);
  uint64_t band_rows = std::bit_floor(std::max<uint64_t>(1, band_bytes / std::max<uint64_t>(p.row_bytes, 1)));
  if (args.input.arg.buffer) band_rows = std::max(band_rows, block_rows);  // resident: no chunk to fit
  band_rows = std::min(band_rows, row_slots);
  p.band_rows = band_rows;
  p.block_rows = static_cast<uint32_t>(std::min(block_rows, band_rows));
  p.blocks = (args.rows + p.block_rows - 1) / p.block_rows;
  return p;
}

}  // namespace

uint64_t channel_stats_working_bytes(const GpuBackend& b, const ops::ChannelStatsArgs& args, uint64_t memory_budget) {
  if (args.rows == 0 || args.cols == 0) return 0;
  const ChannelPlan p = plan_of(b, args, memory_budget);
  const uint64_t partials = p.blocks * args.cols * 2 * sizeof(double);
  const uint64_t counts = args.cols * sizeof(tm_gpu::ColumnCounts);
  const uint64_t outputs = (args.rows_out.arg.buffer ? 0 : args.rows * sizeof(TM_TileStats)) +
                           (args.cols_out.arg.buffer ? 0 : args.cols * sizeof(TM_TileStats));
  const uint64_t chunks = args.input.arg.buffer ? 0 : 2 * std::min(p.band_rows, args.rows) * p.row_bytes;
  return partials + counts + outputs + chunks;
}

Result<RunReport> run_channel_stats(GpuBackend& b, const ops::ChannelStatsArgs& args, uint64_t memory_budget) {
  const auto kdt = kernel_dtype(args.input.dtype);
  if (!kdt) return Status::Unimplemented(std::string(TM_GPU_VENDOR ": channel_stats does not implement ") +
                                         std::string(dtype_name(args.input.dtype)));
  RunReport report;
  report.bytes_read = args.input.arg.nbytes;
  report.bytes_written = args.rows_out.arg.nbytes + args.cols_out.arg.nbytes;
  TM_ASSIGN_OR_RETURN(const InputRef in, input_of(b, args.input));
  TM_ASSIGN_OR_RETURN(const OutputRef rows_out, output_of(b, args.rows_out));
  TM_ASSIGN_OR_RETURN(const OutputRef cols_out, output_of(b, args.cols_out));
  TM_RETURN_IF_ERROR(b.activate());
  if (args.rows == 0 || args.cols == 0) {
    // Nothing to read: every record is the empty one (a sum over one +0.0 slot).
    const std::vector<TM_TileStats> empty(std::max(args.rows, args.cols), ops::empty_tile_stats());
    for (const auto& [out, n] : {std::pair{rows_out, args.rows}, std::pair{cols_out, args.cols}}) {
      if (n == 0) continue;
      if (out.host) {
        std::memcpy(out.host, empty.data(), n * sizeof(TM_TileStats));
      } else {
        TM_RETURN_IF_ERROR(b.copy_to_device(out.device, empty.data(), n * sizeof(TM_TileStats)));
      }
    }
    return report;
  }
  TM_RETURN_IF_ERROR(over_budget(channel_stats_working_bytes(b, args, memory_budget), memory_budget, "channel_stats"));
  const ChannelPlan p = plan_of(b, args, memory_budget);
  const uint64_t row_stats_bytes = args.rows * sizeof(TM_TileStats), col_stats_bytes = args.cols * sizeof(TM_TileStats);
  uint8_t* row_stats = rows_out.device;
  if (!row_stats) {
    TM_ASSIGN_OR_RETURN(row_stats, b.scratch(0, row_stats_bytes));
  }
  uint8_t* col_stats = cols_out.device;
  if (!col_stats) {
    TM_ASSIGN_OR_RETURN(col_stats, b.scratch(1, col_stats_bytes));
  }
  const uint64_t partial_doubles = p.blocks * args.cols;
  TM_ASSIGN_OR_RETURN(uint8_t* partials, b.scratch(4, partial_doubles * 2 * sizeof(double)));
  TM_ASSIGN_OR_RETURN(uint8_t* counts, b.scratch(5, args.cols * sizeof(tm_gpu::ColumnCounts)));
  const uint64_t band_bytes = std::min(p.band_rows, args.rows) * p.row_bytes;
  uint8_t* chunks[2] = {nullptr, nullptr};
  if (!in.device) {
    TM_ASSIGN_OR_RETURN(chunks[0], b.scratch(2, band_bytes));
    TM_ASSIGN_OR_RETURN(chunks[1], b.scratch(3, band_bytes));
  }

  tm_gpu::ChannelJob job;
  job.row_bytes = p.row_bytes;
  job.cols = args.cols;
  job.row_slots = std::bit_ceil(args.cols);
  job.block_rows = p.block_rows;
  job.partial_sum = reinterpret_cast<double*>(partials);
  job.partial_sq = job.partial_sum + partial_doubles;
  job.counts = reinterpret_cast<tm_gpu::ColumnCounts*>(counts);
  job.f8_table = b.f8_table(*kdt);
  const uint64_t align = natural_alignment(*kdt);
  cudaStream_t stream = b.compute_stream();
  TM_RETURN_IF_ERROR(b.check(cudaEventRecord(b.event(0), stream), "recording the start event"));
  TM_RETURN_IF_ERROR(b.check(tm_gpu::launch_channel_init(job.counts, args.cols, stream), "clearing the column counts"));
  for (uint64_t first = 0, band = 0; first < args.rows; first += p.band_rows, ++band) {
    const uint64_t rows = std::min(p.band_rows, args.rows - first);
    const int slot = static_cast<int>(band & 1u);
    if (in.device) {
      job.data = in.device + first * p.row_bytes;
    } else {
      // The chunk's previous band must be done before it is overwritten.
      TM_RETURN_IF_ERROR(b.check(cudaEventSynchronize(b.event(4 + slot)), "waiting for a chunk"));
      TM_RETURN_IF_ERROR(b.copy_to_device_async(chunks[slot], in.host + first * p.row_bytes, rows * p.row_bytes,
                                                b.event(2 + slot)));
      TM_RETURN_IF_ERROR(b.check(cudaStreamWaitEvent(stream, b.event(2 + slot), 0), "ordering a chunk"));
      job.data = chunks[slot];
    }
    job.rows = rows;
    job.first_row = first;
    job.aligned = reinterpret_cast<uintptr_t>(job.data) % align == 0 && p.row_bytes % align == 0;
    job.row_stats = reinterpret_cast<TM_TileStats*>(row_stats) + first;
    TM_RETURN_IF_ERROR(b.check(tm_gpu::launch_channel_rows(*kdt, job, stream), "launching channel_stats rows"));
    TM_RETURN_IF_ERROR(b.check(tm_gpu::launch_channel_columns(*kdt, job, stream), "launching channel_stats columns"));
    if (!in.device) TM_RETURN_IF_ERROR(b.check(cudaEventRecord(b.event(4 + slot), stream), "recording a chunk event"));
  }
  TM_RETURN_IF_ERROR(b.check(tm_gpu::launch_channel_merge(job, args.rows, p.blocks,
                                                          reinterpret_cast<TM_TileStats*>(col_stats), stream),
                             "launching the channel_stats merge"));
  TM_RETURN_IF_ERROR(b.check(cudaEventRecord(b.event(1), stream), "recording the stop event"));
  TM_ASSIGN_OR_RETURN(report.device_ns, elapsed_ns(b, b.event(0), b.event(1)));
  if (rows_out.host) TM_RETURN_IF_ERROR(b.copy_to_host(rows_out.host, row_stats, row_stats_bytes));
  if (cols_out.host) TM_RETURN_IF_ERROR(b.copy_to_host(cols_out.host, col_stats, col_stats_bytes));
  return report;
}

}  // namespace tensormorph::gpu
