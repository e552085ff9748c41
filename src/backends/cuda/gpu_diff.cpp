// tm.diff_stats@1 and tm.subtract@1 on the device (kernels in diff.cu). Both inputs are taken in
// bands of whole chunks (65536 pairs, a whole number of blocks of every kernel dtype); resident
// inputs are one band. Host inputs stream band by band, each side through its own pair of device
// chunks (slot 2 for A, slot 3 for B, each split in two), the next band's uploads overlapping the
// kernel of the one before. diff_stats' records stay on the device until the end; subtract's
// differences go to a device output directly or through slot 4 band by band.
#include <algorithm>
#include <string>

#include "backends/cuda/gpu_exec.h"
#include "backends/cuda/gpu_stream.h"

namespace tensormorph::gpu {
namespace {

constexpr uint64_t kChunk = TM_DIFF_CHUNK;

/// Bytes of `elems` elements (a whole number of blocks) of a kernel dtype.
uint64_t side_bytes(tm_gpu::KernelDType dtype, uint64_t elems) {
  const tm_gpu::KernelBlock block = tm_gpu::kernel_block(dtype);
  return elems / block.elems * block.bytes;
}

/// Rounds up to 256 bytes (so the second half of a split slot stays aligned).
uint64_t round_up(uint64_t bytes) { return (bytes + 255) / 256 * 256; }

struct DiffPlan {
  tm_gpu::KernelDType a = tm_gpu::KernelDType::kF32, b = tm_gpu::KernelDType::kF32;
  bool a_host = false, b_host = false, out_host = false;
  uint64_t band_chunks = 0;  ///< chunks per band
  uint64_t band_elems = 0;
  uint64_t working = 0;      ///< device memory beyond inputs and device outputs
};

Result<DiffPlan> plan_of(const GpuBackend& b, const ops::DiffArgs& args, bool stats, uint64_t memory_budget) {
  DiffPlan p;
  const auto ka = kernel_dtype(args.a.dtype), kb = kernel_dtype(args.b.dtype);
  if (!ka || !kb) {
    return Status::Unimplemented(std::string(TM_GPU_VENDOR ": ") + (stats ? "diff_stats" : "subtract") +
                                 " does not implement " + std::string(dtype_name(!ka ? args.a.dtype : args.b.dtype)));
  }
  p.a = *ka;
  p.b = *kb;
  p.a_host = args.a.arg.buffer == nullptr;
  p.b_host = args.b.arg.buffer == nullptr;
  p.out_host = args.output.arg.buffer == nullptr;
  const uint64_t chunks = (args.elems + kChunk - 1) / kChunk;
  // The bytes of one chunk each streamed side (and subtract's host output) needs.
  const uint64_t per_chunk = (p.a_host ? side_bytes(p.a, kChunk) : 0) + (p.b_host ? side_bytes(p.b, kChunk) : 0) +
                             (!stats && p.out_host ? kChunk * sizeof(float) : 0);
  const bool streamed = per_chunk > 0;
  p.band_chunks = streamed ? std::max<uint64_t>(1, chunk_limit(b, memory_budget) / per_chunk) : std::max<uint64_t>(chunks, 1);
  p.band_chunks = std::min(p.band_chunks, std::max<uint64_t>(chunks, 1));
  p.band_elems = std::min(p.band_chunks * kChunk, args.elems);
  const uint64_t records = stats && p.out_host ? chunks * sizeof(TM_DiffStats) : 0;
  const uint64_t inputs = (p.a_host ? 2 * round_up(side_bytes(p.a, p.band_elems)) : 0) +
                          (p.b_host ? 2 * round_up(side_bytes(p.b, p.band_elems)) : 0);
  const uint64_t out_chunk = !stats && p.out_host ? p.band_elems * sizeof(float) : 0;
  p.working = records + inputs + out_chunk;
  return p;
}

tm_gpu::DiffSideJob side_job(const GpuBackend& b, tm_gpu::KernelDType dtype, const ops::DiffOffset& offset) {
  tm_gpu::DiffSideJob s;
  s.dtype = dtype;
  s.offset = offset.active;
  s.offset_value = offset.value;
  s.f8_table = b.f8_table(dtype);
  return s;
}

Result<RunReport> run_diff(GpuBackend& b, const ops::DiffArgs& args, bool stats, uint64_t memory_budget) {
  TM_ASSIGN_OR_RETURN(const DiffPlan p, plan_of(b, args, stats, memory_budget));
  RunReport report;
  report.bytes_read = args.a.arg.nbytes + args.b.arg.nbytes;
  report.bytes_written = args.output.arg.nbytes;
  if (args.elems == 0) return report;
  TM_ASSIGN_OR_RETURN(const InputRef in_a, input_of(b, args.a));
  TM_ASSIGN_OR_RETURN(const InputRef in_b, input_of(b, args.b));
  TM_ASSIGN_OR_RETURN(const OutputRef out, output_of(b, args.output));
  TM_RETURN_IF_ERROR(over_budget(p.working, memory_budget, stats ? "diff_stats" : "subtract"));
  TM_RETURN_IF_ERROR(b.activate());
  const uint64_t chunks = (args.elems + kChunk - 1) / kChunk;
  uint8_t* records = out.device;
  if (stats && !records) {
    TM_ASSIGN_OR_RETURN(records, b.scratch(0, chunks * sizeof(TM_DiffStats)));
  }
  uint8_t* out_chunk = nullptr;
  if (!stats && !out.device) {
    TM_ASSIGN_OR_RETURN(out_chunk, b.scratch(4, p.band_elems * sizeof(float)));
  }
  // Each streamed side's two device chunks, halves of its slot.
  const uint64_t a_band = round_up(side_bytes(p.a, p.band_elems)), b_band = round_up(side_bytes(p.b, p.band_elems));
  uint8_t* a_chunks[2] = {nullptr, nullptr};
  uint8_t* b_chunks[2] = {nullptr, nullptr};
  if (!in_a.device) {
    TM_ASSIGN_OR_RETURN(a_chunks[0], b.scratch(2, 2 * a_band));
    a_chunks[1] = a_chunks[0] + a_band;
  }
  if (!in_b.device) {
    TM_ASSIGN_OR_RETURN(b_chunks[0], b.scratch(3, 2 * b_band));
    b_chunks[1] = b_chunks[0] + b_band;
  }
  const bool streamed = !in_a.device || !in_b.device;

  tm_gpu::DiffJob job;
  job.a = side_job(b, p.a, args.a_offset);
  job.b = side_job(b, p.b, args.b_offset);
  job.nan = b.host_nan();
  cudaStream_t stream = b.compute_stream();
  TM_RETURN_IF_ERROR(b.check(cudaEventRecord(b.event(0), stream), "recording the start event"));
  double device_ns = 0;
  for (uint64_t first = 0, band = 0; first < args.elems; first += p.band_elems, ++band) {
    const uint64_t n = std::min(p.band_elems, args.elems - first);
    const int slot = static_cast<int>(band & 1u);
    // The chunks of this slot must be free (their previous band done) before they are overwritten.
    if (streamed) TM_RETURN_IF_ERROR(b.check(cudaEventSynchronize(b.event(4 + slot)), "waiting for a chunk"));
    const struct {
      const InputRef* in;
      tm_gpu::KernelDType dtype;
      uint8_t* const* chunks;
      tm_gpu::DiffSideJob* side;
      int event;
    } sides[2] = {{&in_a, p.a, a_chunks, &job.a, 2 + slot}, {&in_b, p.b, b_chunks, &job.b, 6 + slot}};
    for (const auto& s : sides) {
      const uint64_t offset = side_bytes(s.dtype, first);
      if (s.in->device) {
        s.side->data = s.in->device + offset;
      } else {
        TM_RETURN_IF_ERROR(b.copy_to_device_async(s.chunks[slot], s.in->host + offset, side_bytes(s.dtype, n), b.event(s.event)));
        TM_RETURN_IF_ERROR(b.check(cudaStreamWaitEvent(stream, b.event(s.event), 0), "ordering a chunk"));
        s.side->data = s.chunks[slot];
      }
      s.side->aligned = reinterpret_cast<uintptr_t>(s.side->data) % 16 == 0;
    }
    job.elems = n;
    job.first_index = args.element_offset + first;
    if (stats) {
      job.stats = reinterpret_cast<TM_DiffStats*>(records) + first / kChunk;
      TM_RETURN_IF_ERROR(b.check(tm_gpu::launch_diff_stats(job, stream), "launching diff_stats"));
    } else {
      job.difference = reinterpret_cast<float*>(out.device ? out.device + first * sizeof(float) : out_chunk);
      job.difference_aligned = reinterpret_cast<uintptr_t>(job.difference) % 16 == 0;
      TM_RETURN_IF_ERROR(b.check(tm_gpu::launch_subtract(job, stream), "launching subtract"));
    }
    if (streamed) TM_RETURN_IF_ERROR(b.check(cudaEventRecord(b.event(4 + slot), stream), "recording a chunk event"));
    if (!stats && out.host) {
      // The differences of this band back to the host before slot 4 is reused.
      TM_RETURN_IF_ERROR(b.check(cudaEventRecord(b.event(1), stream), "recording the stop event"));
      TM_ASSIGN_OR_RETURN(const double ns, elapsed_ns(b, b.event(0), b.event(1)));
      device_ns += ns;
      TM_RETURN_IF_ERROR(b.copy_to_host(out.host + first * sizeof(float), out_chunk, n * sizeof(float)));
      TM_RETURN_IF_ERROR(b.check(cudaEventRecord(b.event(0), stream), "recording the start event"));
    }
  }
  TM_RETURN_IF_ERROR(b.check(cudaEventRecord(b.event(1), stream), "recording the stop event"));
  TM_ASSIGN_OR_RETURN(const double ns, elapsed_ns(b, b.event(0), b.event(1)));
  report.device_ns = device_ns + ns;
  if (stats && out.host) TM_RETURN_IF_ERROR(b.copy_to_host(out.host, records, chunks * sizeof(TM_DiffStats)));
  return report;
}

}  // namespace

uint64_t diff_working_bytes(const GpuBackend& b, const ops::DiffArgs& args, bool stats, uint64_t memory_budget) {
  auto p = plan_of(b, args, stats, memory_budget);
  return p.ok() ? p->working : 0;
}

Result<RunReport> run_diff_stats(GpuBackend& b, const ops::DiffArgs& args, uint64_t memory_budget) {
  return run_diff(b, args, true, memory_budget);
}

Result<RunReport> run_subtract(GpuBackend& b, const ops::DiffArgs& args, uint64_t memory_budget) {
  return run_diff(b, args, false, memory_budget);
}

}  // namespace tensormorph::gpu
