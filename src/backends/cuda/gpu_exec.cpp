#include "backends/cuda/gpu_exec.h"
#include "backends/cuda/gpu_stream.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "compute/ops/reference.h"

namespace tensormorph::gpu {
namespace {

using tm_gpu::KernelDType;

Result<GpuBuffer*> owned_buffer(GpuBackend& b, TM_Buffer* handle, const ops::TensorArgument& t, const char* role) {
  auto* buffer = reinterpret_cast<GpuBuffer*>(handle);
  if (!b.owns(buffer)) {
    return Status::InvalidArgument(std::string(TM_GPU_VENDOR ": the ") + role + " buffer was not allocated by this backend");
  }
  uint64_t end = 0;
  if (__builtin_add_overflow(t.arg.byte_offset, t.arg.nbytes, &end) || end > buffer->bytes) {
    return Status::InvalidArgument(std::string(TM_GPU_VENDOR ": ") + role + " bytes [" +
                                   std::to_string(t.arg.byte_offset) + ", +" + std::to_string(t.arg.nbytes) +
                                   ") exceed the buffer's " + std::to_string(buffer->bytes));
  }
  return buffer;
}

}  // namespace

Result<InputRef> input_of(GpuBackend& b, const ops::TensorArgument& t) {
  InputRef ref;
  if (t.arg.buffer != nullptr) {
    TM_ASSIGN_OR_RETURN(GpuBuffer * buffer, owned_buffer(b, t.arg.buffer, t, "input"));
    ref.device = buffer->data + t.arg.byte_offset;
  } else {
    ref.host = static_cast<const uint8_t*>(t.arg.host_data) + t.arg.byte_offset;
  }
  return ref;
}

namespace {

/// Alignment the fast kernels need of every row start (their word loads).
uint64_t word_alignment(KernelDType dtype) {
  switch (dtype) {
    case KernelDType::kF32: return 16;
    case KernelDType::kF16:
    case KernelDType::kBF16: return 8;
    case KernelDType::kF8E4M3:
    case KernelDType::kF8E5M2: return 4;
    case KernelDType::kQ4_K: return 16;  // tile_stats_q4_k.cu loads 16-byte quant runs
    default: return 2;
  }
}

}  // namespace

Status over_budget(uint64_t need, uint64_t budget, const char* what) {
  if (budget == 0 || need <= budget) return Status::Ok();
  return Status::ResourceExhausted(std::string(TM_GPU_VENDOR ": ") + what + " needs " + std::to_string(need) +
                                   " bytes of device memory, over the budget of " + std::to_string(budget));
}

/// Times the compute stream between two events (both recorded by the caller).
Result<double> elapsed_ns(GpuBackend& b, cudaEvent_t start, cudaEvent_t stop) {
  TM_RETURN_IF_ERROR(b.check(cudaEventSynchronize(stop), "waiting for the kernels"));
  float ms = 0;
  TM_RETURN_IF_ERROR(b.check(cudaEventElapsedTime(&ms, start, stop), "timing the kernels"));
  return static_cast<double>(ms) * 1e6;
}

/// Bytes one streamed chunk may take: the chunk option, a quarter of the budget when one is set.
uint64_t chunk_limit(const GpuBackend& b, uint64_t budget) {
  uint64_t limit = b.options().chunk_bytes;
  if (budget > 0) limit = std::min(limit, std::max<uint64_t>(budget / 4, 1));
  return limit;
}


Result<OutputRef> output_of(GpuBackend& b, const ops::TensorArgument& t) {
  OutputRef ref;
  if (t.arg.buffer != nullptr) {
    TM_ASSIGN_OR_RETURN(GpuBuffer * buffer, owned_buffer(b, t.arg.buffer, t, "output"));
    ref.device = buffer->data + t.arg.byte_offset;
  } else {
    ref.host = static_cast<uint8_t*>(t.arg.host_out) + t.arg.byte_offset;
  }
  return ref;
}

std::optional<KernelDType> kernel_dtype(DType dtype) {
  switch (dtype) {
    case DType::kF32: return KernelDType::kF32;
    case DType::kF16: return KernelDType::kF16;
    case DType::kBF16: return KernelDType::kBF16;
    case DType::kF8E4M3: return KernelDType::kF8E4M3;
    case DType::kF8E5M2: return KernelDType::kF8E5M2;
    case DType::kQ8_0: return KernelDType::kQ8_0;
    case DType::kQ4_0: return KernelDType::kQ4_0;
    case DType::kQ4_K: return KernelDType::kQ4_K;
    case DType::kQ6_K: return KernelDType::kQ6_K;
    default: return std::nullopt;
  }
}

uint64_t tile_stats_bytes_read(const ops::TileStatsArgs& args) {
  auto row_bytes = ops::matrix_row_bytes(args.input.dtype, args.cols);
  return row_bytes.ok() ? (args.range.row_end - args.range.row_begin) * *row_bytes : 0;
}

Result<RunReport> run_tile_stats(GpuBackend& b, const ops::TileStatsArgs& args, uint64_t memory_budget) {
  const auto kdt = kernel_dtype(args.input.dtype);
  if (!kdt) return Status::Unimplemented(std::string(TM_GPU_VENDOR ": tile_stats does not implement ") +
                                         std::string(dtype_name(args.input.dtype)));
  RunReport report;
  report.bytes_read = tile_stats_bytes_read(args);
  report.bytes_written = args.output.arg.nbytes;
  const uint64_t tiles = args.grid.count();
  if (tiles == 0) return report;
  TM_ASSIGN_OR_RETURN(const uint64_t row_bytes, ops::matrix_row_bytes(args.input.dtype, args.cols));
  TM_ASSIGN_OR_RETURN(const InputRef in, input_of(b, args.input));
  TM_ASSIGN_OR_RETURN(const OutputRef out, output_of(b, args.output));
  const uint32_t tile = args.tile;
  const uint64_t view_rows = args.range.row_end - args.range.row_begin;
  const uint64_t align = word_alignment(*kdt);
  const auto aligned_at = [&](const uint8_t* data) {
    return reinterpret_cast<uintptr_t>(data) % align == 0 && row_bytes % align == 0 && args.range.col_begin % 4 == 0;
  };

  // Streamed bands of whole tile rows; resident data is one band.
  const uint64_t tile_row_bytes = static_cast<uint64_t>(tile) * row_bytes;
  const uint64_t band_tile_rows =
      in.device ? args.grid.rows : std::max<uint64_t>(1, chunk_limit(b, memory_budget) / std::max<uint64_t>(tile_row_bytes, 1));
  const uint64_t band_bytes = std::min(band_tile_rows * tile, view_rows) * row_bytes;
  const tm_gpu::TilePlan probe_plan = tm_gpu::plan_tile_stats(*kdt, tile, args.range.col_begin, true, b.options().force_generic);
  const uint64_t partials_per_tile = tile / probe_plan.rows_per_block;
  const uint64_t generic_partials = tile / tm_gpu::plan_tile_stats(*kdt, tile, args.range.col_begin, false, true).rows_per_block;
  const uint64_t partial_bytes = tiles * std::max(partials_per_tile, generic_partials) * sizeof(tm_gpu::TilePartial);
  const uint64_t out_bytes = out.device ? 0 : tiles * sizeof(TM_TileStats);
  TM_RETURN_IF_ERROR(over_budget(partial_bytes + out_bytes + (in.device ? 0 : 2 * band_bytes), memory_budget,
                                 "tile_stats"));
  TM_RETURN_IF_ERROR(b.activate());
  TM_ASSIGN_OR_RETURN(uint8_t* partials, b.scratch(0, partial_bytes));
  uint8_t* stats = out.device;
  if (!stats) {
    TM_ASSIGN_OR_RETURN(stats, b.scratch(1, out_bytes));
  }
  uint8_t* chunks[2] = {nullptr, nullptr};
  if (!in.device) {
    TM_ASSIGN_OR_RETURN(chunks[0], b.scratch(2, band_bytes));
    TM_ASSIGN_OR_RETURN(chunks[1], b.scratch(3, band_bytes));
  }

  cudaStream_t stream = b.compute_stream();
  TM_RETURN_IF_ERROR(b.check(cudaEventRecord(b.event(0), stream), "recording the start event"));
  const uint64_t bands = (args.grid.rows + band_tile_rows - 1) / band_tile_rows;
  for (uint64_t band = 0; band < bands; ++band) {
    const uint64_t first_tile_row = band * band_tile_rows;
    const uint64_t tile_rows = std::min(band_tile_rows, args.grid.rows - first_tile_row);
    const uint64_t first_row = first_tile_row * tile;
    const uint64_t rows = std::min(tile_rows * tile, view_rows - first_row);
    const uint8_t* data = nullptr;
    if (in.device) {
      data = in.device + (args.range.row_begin + first_row) * row_bytes;
    } else {
      const int slot = static_cast<int>(band & 1u);
      // The chunk's previous band must be done before it is overwritten.
      TM_RETURN_IF_ERROR(b.check(cudaEventSynchronize(b.event(4 + slot)), "waiting for a chunk"));
      TM_RETURN_IF_ERROR(b.copy_to_device_async(chunks[slot], in.host + (args.range.row_begin + first_row) * row_bytes,
                                                rows * row_bytes, b.event(2 + slot)));
      TM_RETURN_IF_ERROR(b.check(cudaStreamWaitEvent(stream, b.event(2 + slot), 0), "ordering a chunk"));
      data = chunks[slot];
    }
    const uint64_t band_tiles = tile_rows * args.grid.cols;
    tm_gpu::TilePlan plan = tm_gpu::plan_tile_stats(*kdt, tile, args.range.col_begin, aligned_at(data), b.options().force_generic);
    if (plan.fast && (band_tiles * (tile / plan.rows_per_block)) >> 32) {
      plan = tm_gpu::plan_tile_stats(*kdt, tile, args.range.col_begin, false, true);  // the fast kernel counts units in 32 bits
    }
    plan.max_blocks = 2 * b.multiprocessors();  // the fast kernel's persistent blocks: one wave
    tm_gpu::TileJob job;
    job.data = data;
    job.row_bytes = row_bytes;
    job.view_rows = rows;
    job.col_begin = args.range.col_begin;
    job.col_end = args.range.col_end;
    job.tiles_across = args.grid.cols;
    job.block_base = 0;
    job.tile = tile;
    job.partials_per_tile = tile / plan.rows_per_block;
    job.partials = reinterpret_cast<tm_gpu::TilePartial*>(partials) + first_tile_row * args.grid.cols * job.partials_per_tile;
    job.f8_table = b.f8_table(*kdt);
    TM_RETURN_IF_ERROR(b.check(tm_gpu::launch_tile_rows(*kdt, plan, job, band_tiles * job.partials_per_tile, stream),
                               "launching tile_stats"));
    TM_RETURN_IF_ERROR(b.check(tm_gpu::launch_tile_finalize(
                                   job, band_tiles,
                                   reinterpret_cast<TM_TileStats*>(stats) + first_tile_row * args.grid.cols, stream),
                               "launching the tile_stats merge"));
    if (!in.device) {
      TM_RETURN_IF_ERROR(b.check(cudaEventRecord(b.event(4 + static_cast<int>(band & 1u)), stream), "recording a chunk event"));
    }
  }
  TM_RETURN_IF_ERROR(b.check(cudaEventRecord(b.event(1), stream), "recording the stop event"));
  TM_ASSIGN_OR_RETURN(report.device_ns, elapsed_ns(b, b.event(0), b.event(1)));
  if (out.host) TM_RETURN_IF_ERROR(b.copy_to_host(out.host, stats, tiles * sizeof(TM_TileStats)));
  return report;
}

Result<RunReport> run_decode(GpuBackend& b, const ops::DecodeArgs& args, uint64_t memory_budget) {
  const auto kdt = kernel_dtype(args.input.dtype);
  if (!kdt) return Status::Unimplemented(std::string(TM_GPU_VENDOR ": decode does not implement ") +
                                         std::string(dtype_name(args.input.dtype)));
  RunReport report;
  report.bytes_read = args.input.arg.nbytes;
  report.bytes_written = args.output.arg.nbytes;
  const uint64_t elems = args.input.elems;
  if (elems == 0) return report;
  TM_ASSIGN_OR_RETURN(const InputRef in, input_of(b, args.input));
  TM_ASSIGN_OR_RETURN(const OutputRef out, output_of(b, args.output));
  const tm_gpu::KernelBlock block = tm_gpu::kernel_block(*kdt);
  // Chunks of whole blocks whose float32 output fits the chunk limit.
  const uint64_t chunk_blocks = std::max<uint64_t>(1, chunk_limit(b, memory_budget) / (4ull * block.elems));
  const uint64_t total_blocks = elems / block.elems;
  const uint64_t chunk_elems = std::min(total_blocks, chunk_blocks) * block.elems;
  const uint64_t need = (out.device ? 0 : chunk_elems * 4) + (in.device ? 0 : chunk_elems / block.elems * block.bytes);
  TM_RETURN_IF_ERROR(over_budget(need, memory_budget, "decode"));
  TM_RETURN_IF_ERROR(b.activate());
  uint8_t* out_chunk = nullptr;
  uint8_t* in_chunk = nullptr;
  if (!out.device) {
    TM_ASSIGN_OR_RETURN(out_chunk, b.scratch(4, chunk_elems * 4));
  }
  if (!in.device) {
    TM_ASSIGN_OR_RETURN(in_chunk, b.scratch(2, chunk_elems / block.elems * block.bytes));
  }

  cudaStream_t stream = b.compute_stream();
  double device_ns = 0;
  for (uint64_t first = 0; first < total_blocks; first += chunk_blocks) {
    const uint64_t n_blocks = std::min(chunk_blocks, total_blocks - first);
    const uint64_t offset = first * block.bytes;
    const uint8_t* src = nullptr;
    if (in.device) {
      src = in.device + offset;
    } else {
      TM_RETURN_IF_ERROR(b.copy_to_device_async(in_chunk, in.host + offset, n_blocks * block.bytes, b.event(2)));
      TM_RETURN_IF_ERROR(b.check(cudaStreamWaitEvent(stream, b.event(2), 0), "ordering a chunk"));
      src = in_chunk;
    }
    float* dst = reinterpret_cast<float*>(out.device ? out.device + first * block.elems * 4 : out_chunk);
    tm_gpu::DecodeJob job;
    job.in = src;
    job.out = dst;
    job.elems = n_blocks * block.elems;
    job.aligned = reinterpret_cast<uintptr_t>(src) % 16 == 0 && reinterpret_cast<uintptr_t>(dst) % 16 == 0;
    job.nan = b.host_nan();
    job.f8_table = b.f8_table(*kdt);
    TM_RETURN_IF_ERROR(b.check(cudaEventRecord(b.event(0), stream), "recording the start event"));
    TM_RETURN_IF_ERROR(b.check(tm_gpu::launch_decode(*kdt, job, stream), "launching decode"));
    TM_RETURN_IF_ERROR(b.check(cudaEventRecord(b.event(1), stream), "recording the stop event"));
    TM_ASSIGN_OR_RETURN(const double ns, elapsed_ns(b, b.event(0), b.event(1)));
    device_ns += ns;
    if (out.host) TM_RETURN_IF_ERROR(b.copy_to_host(out.host + first * block.elems * 4, out_chunk, job.elems * 4));
  }
  if (out.device) TM_RETURN_IF_ERROR(b.check(cudaStreamSynchronize(stream), "finishing decode"));
  report.device_ns = device_ns;
  return report;
}


Result<RunReport> run_histogram(GpuBackend& b, const ops::HistogramArgs& args, uint64_t memory_budget) {
  const auto kdt = kernel_dtype(args.input.dtype);
  if (!kdt) return Status::Unimplemented(std::string(TM_GPU_VENDOR ": histogram does not implement ") +
                                         std::string(dtype_name(args.input.dtype)));
  RunReport report;
  report.bytes_read = args.input.arg.nbytes;
  report.bytes_written = args.output.arg.nbytes;
  TM_ASSIGN_OR_RETURN(const InputRef in, input_of(b, args.input));
  TM_ASSIGN_OR_RETURN(const OutputRef out, output_of(b, args.output));
  const tm_gpu::KernelBlock block = tm_gpu::kernel_block(*kdt);
  const uint64_t counts_bytes = (args.bins + 3) * sizeof(unsigned long long);
  const uint64_t total_blocks = args.input.elems / block.elems;
  const uint64_t chunk_blocks = std::max<uint64_t>(1, chunk_limit(b, memory_budget) / block.bytes);
  const uint64_t chunk_bytes = std::min(total_blocks, chunk_blocks) * block.bytes;
  TM_RETURN_IF_ERROR(over_budget(counts_bytes + (in.device ? 0 : 2 * chunk_bytes), memory_budget, "histogram"));
  TM_RETURN_IF_ERROR(b.activate());
  uint8_t* counts = out.device;
  if (!counts) {
    TM_ASSIGN_OR_RETURN(counts, b.scratch(0, counts_bytes));
  }
  cudaStream_t stream = b.compute_stream();
  TM_RETURN_IF_ERROR(b.check(cudaEventRecord(b.event(0), stream), "recording the start event"));
  TM_RETURN_IF_ERROR(b.check(cudaMemsetAsync(counts, 0, counts_bytes, stream), "clearing the counts"));
  tm_gpu::HistogramJob job;
  job.lo = args.lo;
  job.hi = args.hi;
  job.scale = static_cast<double>(args.bins) / (args.hi - args.lo);
  job.bins = args.bins;
  job.counts = reinterpret_cast<unsigned long long*>(counts);
  job.f8_table = b.f8_table(*kdt);
  TM_RETURN_IF_ERROR(over_input_chunks(b, in, block, total_blocks, std::min(total_blocks, chunk_blocks),
                                       [&](const uint8_t* data, uint64_t elems) {
                                         job.in = data;
                                         job.elems = elems;
                                         job.aligned = reinterpret_cast<uintptr_t>(data) % 16 == 0;
                                         return b.check(tm_gpu::launch_histogram(*kdt, job, stream), "launching histogram");
                                       }));
  TM_RETURN_IF_ERROR(b.check(cudaEventRecord(b.event(1), stream), "recording the stop event"));
  TM_ASSIGN_OR_RETURN(report.device_ns, elapsed_ns(b, b.event(0), b.event(1)));
  if (out.host) TM_RETURN_IF_ERROR(b.copy_to_host(out.host, counts, counts_bytes));
  return report;
}

Result<RunReport> run_radix_histogram(GpuBackend& b, const ops::RadixHistogramArgs& args, uint64_t memory_budget) {
  const auto kdt = kernel_dtype(args.input.dtype);
  if (!kdt) return Status::Unimplemented(std::string(TM_GPU_VENDOR ": radix_histogram does not implement ") +
                                         std::string(dtype_name(args.input.dtype)));
  RunReport report;
  report.bytes_read = args.input.arg.nbytes + args.prefixes.arg.nbytes;
  report.bytes_written = args.counts.arg.nbytes + args.classes.arg.nbytes;
  TM_ASSIGN_OR_RETURN(const InputRef in, input_of(b, args.input));
  TM_ASSIGN_OR_RETURN(const InputRef prefixes, input_of(b, args.prefixes));
  TM_ASSIGN_OR_RETURN(const OutputRef counts_out, output_of(b, args.counts));
  TM_ASSIGN_OR_RETURN(const OutputRef classes_out, output_of(b, args.classes));
  tm_gpu::RadixJob job;
  job.key = static_cast<uint32_t>(args.params.key);
  job.shift = args.params.shift;
  job.bits = args.params.bits;
  job.center = args.params.center;
  job.prefix_count = static_cast<uint32_t>(args.prefixes.elems);
  TM_RETURN_IF_ERROR(b.activate());
  // The prefixes travel in the launch's parameters: read them to the host first when resident.
  const uint64_t prefix_bytes = args.prefixes.elems * sizeof(uint64_t);
  if (prefix_bytes > 0 && prefixes.device) {
    TM_RETURN_IF_ERROR(b.copy_to_host(reinterpret_cast<uint8_t*>(job.prefixes), prefixes.device, prefix_bytes));
  } else if (prefix_bytes > 0) {
    std::memcpy(job.prefixes, prefixes.host, prefix_bytes);
  }
  const tm_gpu::KernelBlock block = tm_gpu::kernel_block(*kdt);
  const uint64_t counts_bytes = args.counts.arg.nbytes;
  const uint64_t classes_bytes = ops::kRadixClasses * sizeof(unsigned long long);
  const uint64_t total_blocks = args.input.elems / block.elems;
  const uint64_t chunk_blocks = std::min(total_blocks, std::max<uint64_t>(1, chunk_limit(b, memory_budget) / block.bytes));
  TM_RETURN_IF_ERROR(over_budget(counts_bytes + classes_bytes + (in.device ? 0 : 2 * chunk_blocks * block.bytes),
                                 memory_budget, "radix_histogram"));
  uint8_t* counts = counts_out.device;
  if (!counts) {
    TM_ASSIGN_OR_RETURN(counts, b.scratch(0, counts_bytes));
  }
  uint8_t* classes = classes_out.device;
  if (!classes) {
    TM_ASSIGN_OR_RETURN(classes, b.scratch(1, classes_bytes));
  }
  cudaStream_t stream = b.compute_stream();
  TM_RETURN_IF_ERROR(b.check(cudaEventRecord(b.event(0), stream), "recording the start event"));
  TM_RETURN_IF_ERROR(b.check(cudaMemsetAsync(counts, 0, counts_bytes, stream), "clearing the counts"));
  TM_RETURN_IF_ERROR(b.check(cudaMemsetAsync(classes, 0, classes_bytes, stream), "clearing the classes"));
  job.counts = reinterpret_cast<unsigned long long*>(counts);
  job.classes = reinterpret_cast<unsigned long long*>(classes);
  job.f8_table = b.f8_table(*kdt);
  // A top digit without prefixes: its hot bins would serialise one set of atomics.
  const uint64_t counters = counts_bytes / sizeof(unsigned long long);
  if (args.prefixes.elems <= 1 && counters > tm_gpu::kRadixSharedCounters) {
    const uint64_t copies_bytes = uint64_t{tm_gpu::kRadixCopies} * counters * sizeof(unsigned int);
    TM_RETURN_IF_ERROR(over_budget(counts_bytes + classes_bytes + copies_bytes, memory_budget, "radix_histogram"));
    uint8_t* copies = nullptr;
    TM_ASSIGN_OR_RETURN(copies, b.scratch(4, copies_bytes));
    TM_RETURN_IF_ERROR(b.check(cudaMemsetAsync(copies, 0, copies_bytes, stream), "clearing the counter copies"));
    job.private_counts = reinterpret_cast<unsigned int*>(copies);
  }
  TM_RETURN_IF_ERROR(over_input_chunks(b, in, block, total_blocks, chunk_blocks, [&](const uint8_t* data, uint64_t elems) {
    job.in = data;
    job.elems = elems;
    job.aligned = reinterpret_cast<uintptr_t>(data) % 16 == 0;
    return b.check(tm_gpu::launch_radix_histogram(*kdt, job, stream), "launching radix_histogram");
  }));
  TM_RETURN_IF_ERROR(b.check(tm_gpu::launch_radix_merge_copies(job, stream), "adding the counter copies"));
  TM_RETURN_IF_ERROR(b.check(cudaEventRecord(b.event(1), stream), "recording the stop event"));
  TM_ASSIGN_OR_RETURN(report.device_ns, elapsed_ns(b, b.event(0), b.event(1)));
  if (counts_out.host) TM_RETURN_IF_ERROR(b.copy_to_host(counts_out.host, counts, counts_bytes));
  if (classes_out.host) TM_RETURN_IF_ERROR(b.copy_to_host(classes_out.host, classes, classes_bytes));
  return report;
}

}  // namespace tensormorph::gpu
