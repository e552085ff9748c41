#include "backends/webgpu/webgpu_backend.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string_view>
#include <vector>

#include "backends/webgpu/wgsl_kernels.h"
#include "compute/ops/diff_stats.h"
#include "compute/ops/radix_histogram.h"
#include "compute/ops/reference.h"
#include "tensormorph/dtype.h"

namespace tensormorph::webgpu {
namespace {

/// Most bins this backend counts (its bin edges are found on the host, about 30 steps each).
constexpr uint64_t kMaxDeviceBins = uint64_t{1} << 20;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

HostNan measure_host_nan() {
  HostNan nan;
  volatile float zero = 0.0f;
  volatile float inf = std::numeric_limits<float>::infinity();
  const float invalid = zero * inf;
  std::memcpy(&nan.default_nan, &invalid, sizeof invalid);
  const uint32_t payload_bits = 0x7f800123u;
  float payload;
  std::memcpy(&payload, &payload_bits, sizeof payload);
  volatile float operand = payload;
  volatile float one = 1.0f;
  const float product = operand * one;
  uint32_t product_bits;
  std::memcpy(&product_bits, &product, sizeof product);
  nan.propagate = product_bits == (payload_bits | 0x00400000u);
  return nan;
}

/// Workgroups of 256 invocations covering `n` elements, as a 2-D grid within the 65,535 limit.
std::pair<uint32_t, uint32_t> flat_groups(uint64_t n) {
  const uint64_t groups = (n + 255) / 256;
  const uint64_t x = std::min<uint64_t>(groups, 65535);
  return {static_cast<uint32_t>(x), static_cast<uint32_t>((groups + x - 1) / std::max<uint64_t>(x, 1))};
}

/// The uniforms of the element kernels (decode, histogram): kElementParams in wgsl_kernels.cpp.
struct ElementParams {
  uint32_t base_byte, count, default_nan, propagate_nan, bins, below_key, above_key, edges;
};
/// The uniforms of the tile kernels: kTileParams.
struct TileParams {
  uint32_t base_byte, row_bytes, band_rows, col_begin, col_end, tile, tiles_x, out_tile_row, default_nan,
      propagate_nan, parts;
};

uint32_t order_key(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return (u & 0x80000000u) == 0 ? (u | 0x80000000u) : ~u;
}
float key_value(uint32_t key) {
  const uint32_t u = (key & 0x80000000u) != 0 ? (key ^ 0x80000000u) : ~key;
  float v;
  std::memcpy(&v, &u, sizeof v);
  return v;
}
/// The first order key in [lo_key, hi_key) whose value satisfies the monotone `pred`, else hi_key.
template <typename Pred>
uint32_t first_key(uint32_t lo_key, uint32_t hi_key, Pred&& pred) {
  while (lo_key < hi_key) {
    const uint32_t mid = lo_key + (hi_key - lo_key) / 2;
    const float v = key_value(mid);
    if (!std::isnan(v) && pred(v)) hi_key = mid; else lo_key = mid + 1;
  }
  return lo_key;
}

}  // namespace

Result<BackendOptions> parse_backend_options(const char* text) {
  BackendOptions options;
  if (text == nullptr) return options;
  std::string_view rest(text);
  while (!rest.empty()) {
    const size_t end = rest.find(';');
    const std::string_view item = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) return Status::InvalidArgument("webgpu: option '" + std::string(item) + "' has no value");
    const std::string key(item.substr(0, eq));
    const std::string value(item.substr(eq + 1));
    if (key == "library") {
      options.library = value;
    } else if (key == "chunk_mib") {
      char* stop = nullptr;
      const unsigned long long mib = std::strtoull(value.c_str(), &stop, 10);
      if (value.empty() || *stop != '\0' || mib < 1 || mib > 2048) {
        return Status::InvalidArgument("webgpu: chunk_mib must be 1..2048, not '" + value + "'");
      }
      options.chunk_bytes = static_cast<uint64_t>(mib) << 20;
    } else {
      return Status::InvalidArgument("webgpu: unknown option '" + key + "' (library, chunk_mib)");
    }
  }
  return options;
}

Result<std::unique_ptr<WebGpuBackend>> WebGpuBackend::create(const char* options) {
  auto b = std::unique_ptr<WebGpuBackend>(new WebGpuBackend());
  TM_ASSIGN_OR_RETURN(b->options_, parse_backend_options(options));
  TM_ASSIGN_OR_RETURN(b->device_, WebGpuDevice::open(b->options_.library));
  b->options_.chunk_bytes = std::min(b->options_.chunk_bytes, b->device_->max_binding_bytes());
  b->host_nan_ = measure_host_nan();
  TM_RETURN_IF_ERROR(b->measure());
  return b;
}

WebGpuBackend::~WebGpuBackend() {
  if (!device_) return;
  for (DeviceBuffer& slot : scratch_) device_->release(slot);
  for (const HostVisibleBuffer* buffer : live_) {
    std::unique_ptr<HostVisibleBuffer> owned(const_cast<HostVisibleBuffer*>(buffer));
    device_->release(owned->device);
  }
  live_.clear();
}

Status WebGpuBackend::measure() {
  // The link: one 8 MiB upload and read-back. The kernels: tile_stats of a resident 256 KiB F32
  // matrix, after a first run that compiles the pipelines. Small, because every process that
  // places work opens the backend (a software device copies at a few hundred MB/s).
  constexpr uint64_t kLinkBytes = uint64_t{8} << 20;
  std::vector<uint8_t> host(kLinkBytes, 0);
  TM_ASSIGN_OR_RETURN(DeviceBuffer probe, scratch(0, kLinkBytes));
  TM_RETURN_IF_ERROR(device_->finish());
  TM_RETURN_IF_ERROR(device_->write(probe, 0, host.data(), kLinkBytes));  // first touch of the pages
  TM_RETURN_IF_ERROR(device_->finish());
  auto start = std::chrono::steady_clock::now();
  TM_RETURN_IF_ERROR(device_->write(probe, 0, host.data(), kLinkBytes));
  TM_RETURN_IF_ERROR(device_->finish());
  rates_.host_to_device_gbps = static_cast<double>(kLinkBytes) / seconds_since(start) / 1e9;
  start = std::chrono::steady_clock::now();
  TM_RETURN_IF_ERROR(device_->read(probe, 0, host.data(), kLinkBytes));
  rates_.device_to_host_gbps = static_cast<double>(kLinkBytes) / seconds_since(start) / 1e9;

  constexpr uint64_t kSide = 256;
  auto matrix = allocate(kSide * kSide * sizeof(float));
  if (!matrix.ok()) return matrix.status();
  std::unique_ptr<HostVisibleBuffer> resident_matrix = std::move(*matrix);
  std::vector<float> values(kSide * kSide);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>((i * 2654435761u) % 2001) * 1e-3f - 1.0f;
  TM_RETURN_IF_ERROR(device_->write(resident_matrix->device, 0, values.data(), values.size() * sizeof(float)));
  std::vector<TM_TileStats> stats(1);
  ops::TileStatsArgs args;
  args.input.dtype = DType::kF32;
  args.input.elems = kSide * kSide;
  args.input.arg.struct_size = sizeof args.input.arg;
  args.input.arg.dtype = TM_DTYPE_F32;
  args.input.arg.rank = 2;
  args.input.arg.shape[0] = kSide;
  args.input.arg.shape[1] = kSide;
  args.input.arg.buffer = reinterpret_cast<TM_Buffer*>(resident_matrix.get());
  args.input.arg.nbytes = kSide * kSide * sizeof(float);
  args.output.dtype = DType::kU8;
  args.output.elems = stats.size() * sizeof(TM_TileStats);
  args.output.arg.struct_size = sizeof args.output.arg;
  args.output.arg.host_out = stats.data();
  args.output.arg.nbytes = args.output.elems;
  args.rows = args.cols = kSide;
  args.range = ops::ViewRange{0, kSide, 0, kSide};
  args.tile = 256;
  args.grid = ops::tile_grid(args.range, args.tile);
  double best = std::numeric_limits<double>::infinity();
  for (int run = 0; run < 2; ++run) {
    start = std::chrono::steady_clock::now();
    auto report = run_tile_stats(args);
    if (!report.ok()) {
      release(std::move(resident_matrix));
      return report.status();
    }
    if (run > 0) best = std::min(best, seconds_since(start));
  }
  release(std::move(resident_matrix));
  rates_.tile_stats_gbps = static_cast<double>(kSide * kSide * sizeof(float)) / best / 1e9;
  // Scratch sized for the probes is not kept: executions size their own.
  for (DeviceBuffer& slot : scratch_) device_->release(slot);
  return Status::Ok();
}

TM_DeviceTraits WebGpuBackend::traits() const {
  TM_DeviceTraits t{};
  t.struct_size = sizeof t;
  std::snprintf(t.device_name, sizeof t.device_name, "%s", device_->facts().name.c_str());
  t.memory_bytes = device_->facts().limits.max_buffer_size;
  t.memory_space_count = 1;
  t.host_memory_visible = 0;
  t.host_to_device_gbps = rates_.host_to_device_gbps;
  t.device_to_host_gbps = rates_.device_to_host_gbps;
  t.bandwidth_measured = 1;
  t.compute_units = 0;
  t.runs_on_host_cores = device_->facts().adapter_type == api::kAdapterTypeCPU ? 1 : 0;
  return t;
}

Result<std::unique_ptr<HostVisibleBuffer>> WebGpuBackend::allocate(uint64_t bytes) {
  auto buffer = std::make_unique<HostVisibleBuffer>();
  TM_ASSIGN_OR_RETURN(buffer->device, device_->allocate(bytes));
  buffer->bytes = bytes;
  live_.insert(buffer.get());
  return buffer;
}

void WebGpuBackend::release(std::unique_ptr<HostVisibleBuffer> buffer) {
  if (!buffer) return;
  live_.erase(buffer.get());
  device_->release(buffer->device);
}

Result<DeviceBuffer> WebGpuBackend::scratch(int which, uint64_t bytes) {
  DeviceBuffer& slot = scratch_[which];
  if (slot.bytes < bytes) {
    device_->release(slot);
    TM_ASSIGN_OR_RETURN(slot, device_->allocate(std::max<uint64_t>(bytes, uint64_t{1} << 16)));
  }
  return slot;
}

Result<const HostVisibleBuffer*> WebGpuBackend::resident(const TM_TensorArg& arg) {
  const auto* buffer = reinterpret_cast<const HostVisibleBuffer*>(arg.buffer);
  if (!owns(buffer)) return Status::InvalidArgument("webgpu: a tensor argument's buffer was not allocated by this backend");
  if (arg.byte_offset + arg.nbytes > buffer->bytes) {
    return Status::InvalidArgument("webgpu: a tensor argument leaves its buffer");
  }
  return buffer;
}

Result<std::pair<Binding, uint32_t>> WebGpuBackend::bind_input(const ops::TensorArgument& input, uint64_t offset,
                                                                uint64_t bytes, int scratch_slot) {
  if (input.arg.buffer != nullptr) {
    TM_ASSIGN_OR_RETURN(const HostVisibleBuffer* buffer, resident(input.arg));
    const uint64_t begin = input.arg.byte_offset + offset;
    const uint64_t aligned = begin - begin % std::max<uint64_t>(4, device_->binding_alignment());
    const uint64_t span = std::min<uint64_t>(buffer->device.bytes - aligned, ((begin - aligned + bytes + 3) & ~uint64_t{3}) + 4);
    return std::pair{Binding{buffer->device.handle, aligned, span}, static_cast<uint32_t>(begin - aligned)};
  }
  TM_ASSIGN_OR_RETURN(DeviceBuffer staging, scratch(scratch_slot, bytes + 8));
  const auto* host = static_cast<const uint8_t*>(input.arg.host_data) + input.arg.byte_offset + offset;
  TM_RETURN_IF_ERROR(device_->write(staging, 0, host, bytes));
  return std::pair{Binding{staging.handle, 0, bytes + 4}, 0u};
}

Status WebGpuBackend::deliver(const ops::TensorArgument& output, uint64_t offset, const DeviceBuffer& src,
                              uint64_t bytes) {
  if (output.arg.buffer != nullptr) {
    TM_ASSIGN_OR_RETURN(const HostVisibleBuffer* buffer, resident(output.arg));
    const uint64_t at = output.arg.byte_offset + offset;
    if (at % 4 != 0 || bytes % 4 != 0) {
      return Status::Unimplemented("webgpu: device outputs at offsets or of sizes that are not whole words");
    }
    return device_->copy(src, 0, buffer->device, at, bytes);
  }
  return device_->read(src, 0, static_cast<uint8_t*>(output.arg.host_out) + output.arg.byte_offset + offset, bytes);
}

Status WebGpuBackend::deliver_host(const ops::TensorArgument& output, uint64_t offset, const void* data, uint64_t bytes) {
  if (output.arg.buffer != nullptr) {
    TM_ASSIGN_OR_RETURN(const HostVisibleBuffer* buffer, resident(output.arg));
    return device_->write(buffer->device, output.arg.byte_offset + offset, data, bytes);
  }
  std::memcpy(static_cast<uint8_t*>(output.arg.host_out) + output.arg.byte_offset + offset, data, bytes);
  return Status::Ok();
}

Result<std::vector<uint64_t>> WebGpuBackend::count_in_chunks(const ops::TensorArgument& input, uint64_t slots,
                                                             const CountChunk& count_chunk, RunReport& report) {
  const DTypeInfo& info = dtype_info(input.dtype);
  TM_ASSIGN_OR_RETURN(DeviceBuffer counts_buffer, scratch(1, slots * 4));
  std::vector<uint32_t> counts(slots, 0);
  std::vector<uint64_t> totals(slots, 0);
  const uint64_t blocks_per_chunk = std::max<uint64_t>(
      1, std::min<uint64_t>(options_.chunk_bytes / info.block_bytes, (uint64_t{1} << 31) / info.block_elems));
  const uint64_t total_blocks = input.elems / info.block_elems;
  for (uint64_t block = 0; block < total_blocks; block += blocks_per_chunk) {
    const uint64_t blocks = std::min(blocks_per_chunk, total_blocks - block);
    std::fill(counts.begin(), counts.end(), 0u);
    TM_RETURN_IF_ERROR(device_->write(counts_buffer, 0, counts.data(), slots * 4));
    TM_ASSIGN_OR_RETURN(auto bound, bind_input(input, block * info.block_bytes, blocks * info.block_bytes, 0));
    TM_RETURN_IF_ERROR(count_chunk(bound.first, bound.second, blocks * info.block_elems, Binding{counts_buffer.handle, 0, slots * 4}));
    TM_RETURN_IF_ERROR(device_->read(counts_buffer, 0, counts.data(), slots * 4));
    for (uint64_t s = 0; s < slots; ++s) totals[s] += counts[s];
    report.bytes_read += blocks * info.block_bytes;
  }
  return totals;
}

Result<RunReport> WebGpuBackend::run_decode(const ops::DecodeArgs& args) {
  const auto start = std::chrono::steady_clock::now();
  const DTypeInfo& info = dtype_info(args.input.dtype);
  TM_ASSIGN_OR_RETURN(api::ComputePipeline pipeline,
                      device_->pipeline("decode_" + std::string(info.name), decode_kernel(args.input.dtype)));
  // Chunks of whole blocks whose input and output each fit one binding.
  const uint64_t per_block_out = uint64_t{info.block_elems} * 4;
  const uint64_t blocks_per_chunk =
      std::max<uint64_t>(1, std::min(options_.chunk_bytes / info.block_bytes, device_->max_binding_bytes() / per_block_out));
  const uint64_t total_blocks = args.input.elems / info.block_elems;
  RunReport report;
  for (uint64_t block = 0; block < total_blocks; block += blocks_per_chunk) {
    const uint64_t blocks = std::min(blocks_per_chunk, total_blocks - block);
    const uint64_t elems = blocks * info.block_elems;
    TM_ASSIGN_OR_RETURN(auto input, bind_input(args.input, block * info.block_bytes, blocks * info.block_bytes, 0));
    TM_ASSIGN_OR_RETURN(DeviceBuffer out, scratch(1, elems * 4));
    ElementParams p{input.second, static_cast<uint32_t>(elems), host_nan_.default_nan, host_nan_.propagate ? 1u : 0u,
                    0, 0, 0, 0};
    const auto [gx, gy] = flat_groups(elems);
    TM_RETURN_IF_ERROR(device_->dispatch(pipeline, {input.first, Binding{out.handle, 0, elems * 4}}, &p, sizeof p, gx, gy));
    TM_RETURN_IF_ERROR(deliver(args.output, block * per_block_out, out, elems * 4));
    report.bytes_read += blocks * info.block_bytes;
    report.bytes_written += elems * 4;
  }
  TM_RETURN_IF_ERROR(device_->finish());
  report.device_ns = seconds_since(start) * 1e9;
  return report;
}

Result<RunReport> WebGpuBackend::run_tile_stats(const ops::TileStatsArgs& args) {
  const auto start = std::chrono::steady_clock::now();
  const DTypeInfo& info = dtype_info(args.input.dtype);
  const uint64_t T = args.tile;
  // F32 with tiles of 128 to 1024: 32 values per invocation. Other tiles of 32 and more: 8 lanes
  // per row, one kernel per dtype for T = 32 and one for larger T. Smaller ones: a lane per slot.
  const bool words = words_kernel_takes(args.input.dtype, T);
  const bool lanes = !words && T >= kLanesTileMin;
  // The words kernel's pipeline depends on the band's alignment (whole-word loads when it allows).
  auto first_pipeline_for = [&](uint64_t base_byte, uint64_t row_bytes) -> Result<api::ComputePipeline> {
    const std::string name(info.name);
    if (words) {
      const bool aligned = words_aligned(base_byte, row_bytes, args.range.col_begin, info.block_bytes);
      return device_->pipeline("tile_words_" + name + (aligned ? "" : "_unaligned"),
                               tile_words_kernel(args.input.dtype, aligned));
    }
    if (!lanes) return device_->pipeline("tile_rows_" + name, tile_rows_kernel(args.input.dtype));
    return device_->pipeline(T == kLanesTileMin ? "tile_lanes_" + name + "_32" : "tile_lanes_" + name,
                             tile_lanes_kernel(args.input.dtype, static_cast<uint32_t>(T)));
  };
  TM_ASSIGN_OR_RETURN(api::ComputePipeline reduce_pipeline, device_->pipeline("tile_reduce", tile_reduce_kernel()));
  TM_ASSIGN_OR_RETURN(const uint64_t row_bytes, ops::matrix_row_bytes(args.input.dtype, args.cols));
  const uint64_t tiles_x = args.grid.cols;
  const uint64_t grid_bytes = args.grid.count() * sizeof(TM_TileStats);
  const uint64_t view_rows = args.range.row_end - args.range.row_begin;
  if (args.grid.count() == 0) return RunReport{};  // an empty view has no tiles to write
  if (tiles_x > 65535 || grid_bytes > device_->max_binding_bytes()) {
    return Status::Unimplemented("webgpu: a tile_stats grid of " + std::to_string(args.grid.rows) + " x " +
                                 std::to_string(tiles_x) + " tiles exceeds what one dispatch covers");
  }
  if (T * row_bytes > device_->max_binding_bytes()) {
    return Status::Unimplemented("webgpu: one row of " + std::to_string(T) + "-row tiles (" +
                                 std::to_string(T * row_bytes) + " bytes) exceeds a binding");
  }
  // S partial records per tile go from the first kernel to the reduce kernel.
  const uint64_t parts = tile_stats_parts(args.input.dtype, T);
  const uint64_t part_bytes_per_tile_row = parts * tiles_x * kRowRecordWords * 4;
  // Bands of whole tile rows: the input rows fit a chunk, the records one binding, the grid 65,535.
  const uint64_t rows_groups_per_tile_row = words || lanes ? parts : std::max<uint64_t>(1, T * T / 256);
  uint64_t band_tile_rows = std::min({options_.chunk_bytes / std::max<uint64_t>(1, T * row_bytes),
                                      device_->max_binding_bytes() / part_bytes_per_tile_row,
                                      uint64_t{65535} / rows_groups_per_tile_row});
  band_tile_rows = std::max<uint64_t>(1, band_tile_rows);
  TM_ASSIGN_OR_RETURN(DeviceBuffer tiles, scratch(3, grid_bytes));
  RunReport report;
  const uint64_t G = 256 / std::min<uint64_t>(T, 256);
  for (uint64_t tile_row = 0; tile_row < args.grid.rows; tile_row += band_tile_rows) {
    const uint64_t band_tiles = std::min(band_tile_rows, args.grid.rows - tile_row);
    const uint64_t first_row = args.range.row_begin + tile_row * T;
    const uint64_t band_rows = std::min(band_tiles * T, view_rows - tile_row * T);
    TM_ASSIGN_OR_RETURN(auto input, bind_input(args.input, first_row * row_bytes, band_rows * row_bytes, 0));
    TM_ASSIGN_OR_RETURN(DeviceBuffer records, scratch(2, band_tiles * part_bytes_per_tile_row));
    TM_ASSIGN_OR_RETURN(api::ComputePipeline first_pipeline, first_pipeline_for(input.second, row_bytes));
    TileParams p{input.second,
                 static_cast<uint32_t>(row_bytes),
                 static_cast<uint32_t>(band_rows),
                 static_cast<uint32_t>(args.range.col_begin),
                 static_cast<uint32_t>(args.range.col_end),
                 static_cast<uint32_t>(T),
                 static_cast<uint32_t>(tiles_x),
                 static_cast<uint32_t>(tile_row),
                 host_nan_.default_nan,
                 host_nan_.propagate ? 1u : 0u,
                 static_cast<uint32_t>(parts)};
    const Binding record_binding{records.handle, 0, band_tiles * part_bytes_per_tile_row};
    const uint64_t first_groups_y = words || lanes ? band_tiles * parts : (band_tiles * T + G - 1) / G;
    TM_RETURN_IF_ERROR(device_->dispatch(first_pipeline, {input.first, record_binding}, &p, sizeof p,
                                         static_cast<uint32_t>(tiles_x), static_cast<uint32_t>(first_groups_y)));
    TM_RETURN_IF_ERROR(device_->dispatch(reduce_pipeline, {record_binding, Binding{tiles.handle, 0, grid_bytes}}, &p,
                                         sizeof p, static_cast<uint32_t>(tiles_x), static_cast<uint32_t>(band_tiles)));
    report.bytes_read += band_rows * row_bytes;
  }
  TM_RETURN_IF_ERROR(deliver(args.output, 0, tiles, grid_bytes));
  report.bytes_written = grid_bytes;
  report.device_ns = seconds_since(start) * 1e9;
  return report;
}

/// The uniforms of radix_histogram_kernel.
struct RadixKernelParams {
  uint32_t base_byte, count, default_nan, propagate_nan, key, shift, bits, prefix_count, center_lo, center_hi,
      counters, pad;
  uint32_t prefixes[2 * TM_RADIX_MAX_PREFIXES];
};
static_assert(sizeof(RadixKernelParams) == 176, "the WGSL struct's layout");

Result<RunReport> WebGpuBackend::run_radix_histogram(const ops::RadixHistogramArgs& args) {
  const auto start = std::chrono::steady_clock::now();
  const DTypeInfo& info = dtype_info(args.input.dtype);
  TM_ASSIGN_OR_RETURN(api::ComputePipeline pipeline, device_->pipeline("radix_" + std::string(info.name),
                                                                       radix_histogram_kernel(args.input.dtype)));
  const uint64_t prefix_count = args.prefixes.elems;
  std::vector<uint64_t> prefixes(prefix_count);
  if (prefix_count != 0) {
    if (args.prefixes.arg.buffer != nullptr) {
      TM_ASSIGN_OR_RETURN(const HostVisibleBuffer* buffer, resident(args.prefixes.arg));
      TM_RETURN_IF_ERROR(device_->read(buffer->device, args.prefixes.arg.byte_offset, prefixes.data(), prefix_count * 8));
    } else {
      std::memcpy(prefixes.data(), static_cast<const uint8_t*>(args.prefixes.arg.host_data) + args.prefixes.arg.byte_offset,
                  prefix_count * 8);
    }
  }
  const uint64_t counters = std::max<uint64_t>(prefix_count, 1) << args.params.bits;
  const uint64_t slots = counters + ops::kRadixClasses;
  RadixKernelParams p{};
  p.default_nan = host_nan_.default_nan;
  p.propagate_nan = host_nan_.propagate ? 1u : 0u;
  p.key = static_cast<uint32_t>(args.params.key);
  p.shift = args.params.shift;
  p.bits = args.params.bits;
  p.prefix_count = static_cast<uint32_t>(prefix_count);
  const uint64_t center = std::bit_cast<uint64_t>(args.params.center);
  p.center_lo = static_cast<uint32_t>(center);
  p.center_hi = static_cast<uint32_t>(center >> 32);
  p.counters = static_cast<uint32_t>(counters);
  for (uint64_t r = 0; r < prefix_count; ++r) {
    p.prefixes[2 * r] = static_cast<uint32_t>(prefixes[r]);
    p.prefixes[2 * r + 1] = static_cast<uint32_t>(prefixes[r] >> 32);
  }
  RunReport report;
  TM_ASSIGN_OR_RETURN(const std::vector<uint64_t> totals,
                      count_in_chunks(args.input, slots, [&](const Binding& input, uint32_t base, uint64_t elems, const Binding& counts) {
                        p.base_byte = base;
                        p.count = static_cast<uint32_t>(elems);
                        const auto [gx, gy] = flat_groups(elems);
                        return device_->dispatch(pipeline, {input, counts}, &p, sizeof p, gx, gy);
                      }, report));
  const std::pair<const ops::TensorArgument*, uint64_t> outputs[] = {{&args.counts, 0}, {&args.classes, counters}};
  for (const auto& [output, first] : outputs) {
    TM_RETURN_IF_ERROR(deliver_host(*output, 0, totals.data() + first, output->arg.nbytes));
    report.bytes_written += output->arg.nbytes;
  }
  report.device_ns = seconds_since(start) * 1e9;
  return report;
}

/// The uniforms of the diff kernels.
struct DiffKernelParams {
  uint32_t base_a, base_b, count, default_nan, propagate_nan, a_offset, b_offset, offsets;
};

Result<uint32_t> WebGpuBackend::stage_side(const ops::TensorArgument& side, uint64_t offset, uint64_t bytes,
                                           const DeviceBuffer& staging, uint64_t at) {
  if (side.arg.buffer == nullptr) {
    const auto* host = static_cast<const uint8_t*>(side.arg.host_data) + side.arg.byte_offset + offset;
    TM_RETURN_IF_ERROR(device_->write(staging, at, host, bytes));
    return uint32_t{0};
  }
  TM_ASSIGN_OR_RETURN(const HostVisibleBuffer* buffer, resident(side.arg));
  const uint64_t begin = side.arg.byte_offset + offset;
  const uint64_t aligned = begin & ~uint64_t{3};
  TM_RETURN_IF_ERROR(device_->copy(buffer->device, aligned, staging, at, begin - aligned + bytes));
  return static_cast<uint32_t>(begin - aligned);
}

Result<RunReport> WebGpuBackend::run_diff(const ops::DiffArgs& args, bool statistics) {
  const auto start = std::chrono::steady_clock::now();
  const DTypeInfo& ia = dtype_info(args.a.dtype);
  const DTypeInfo& ib = dtype_info(args.b.dtype);
  const std::string name = std::string(statistics ? "diff_stats_" : "subtract_") + std::string(ia.name) + "_" + std::string(ib.name);
  TM_ASSIGN_OR_RETURN(api::ComputePipeline pipeline,
                      device_->pipeline(name, statistics ? diff_stats_kernel(args.a.dtype, args.b.dtype)
                                                         : subtract_kernel(args.a.dtype, args.b.dtype)));
  // Batches of whole chunk records (65,536 pairs, whole blocks of either dtype) whose two sides
  // fit one staging chunk.
  const uint64_t chunk_bytes = ops::kDiffChunk / ia.block_elems * ia.block_bytes + ops::kDiffChunk / ib.block_elems * ib.block_bytes;
  const uint64_t chunks_per_batch = std::clamp<uint64_t>(options_.chunk_bytes / chunk_bytes, 1, 65535);
  const uint64_t total_chunks = (args.elems + ops::kDiffChunk - 1) / ops::kDiffChunk;
  DiffKernelParams p{0, 0, 0, host_nan_.default_nan, host_nan_.propagate ? 1u : 0u,
                     std::bit_cast<uint32_t>(args.a_offset.value), std::bit_cast<uint32_t>(args.b_offset.value),
                     (args.a_offset.active ? 1u : 0u) | (args.b_offset.active ? 2u : 0u)};
  std::vector<uint32_t> words;
  RunReport report;
  for (uint64_t chunk = 0; chunk < total_chunks; chunk += chunks_per_batch) {
    const uint64_t chunks = std::min(chunks_per_batch, total_chunks - chunk);
    const uint64_t first = chunk * ops::kDiffChunk;
    const uint64_t elems = std::min(chunks * ops::kDiffChunk, args.elems - first);
    const uint64_t bytes_a = elems / ia.block_elems * ia.block_bytes;
    const uint64_t bytes_b = elems / ib.block_elems * ib.block_bytes;
    const uint64_t at_b = (bytes_a + 4 + 3) & ~uint64_t{3};
    TM_ASSIGN_OR_RETURN(DeviceBuffer staging, scratch(0, at_b + bytes_b + 8));
    TM_ASSIGN_OR_RETURN(p.base_a, stage_side(args.a, first / ia.block_elems * ia.block_bytes, bytes_a, staging, 0));
    TM_ASSIGN_OR_RETURN(const uint32_t b_in_word, stage_side(args.b, first / ib.block_elems * ib.block_bytes, bytes_b, staging, at_b));
    p.base_b = static_cast<uint32_t>(at_b) + b_in_word;
    p.count = static_cast<uint32_t>(elems);
    const uint64_t out_bytes = statistics ? chunks * kDiffRecordWords * 4 : elems * 4;
    TM_ASSIGN_OR_RETURN(DeviceBuffer out, scratch(1, out_bytes));
    const Binding input{staging.handle, 0, at_b + bytes_b + 8};
    const Binding output{out.handle, 0, out_bytes};
    if (statistics) {
      TM_RETURN_IF_ERROR(device_->dispatch(pipeline, {input, output}, &p, sizeof p, static_cast<uint32_t>(chunks), 1));
      words.resize(out_bytes / 4);
      TM_RETURN_IF_ERROR(device_->read(out, 0, words.data(), out_bytes));
      std::vector<TM_DiffStats> records(chunks);
      for (uint64_t c = 0; c < chunks; ++c) {
        const uint32_t* w = words.data() + c * kDiffRecordWords;
        auto f64 = [&](int at) { return std::bit_cast<double>(uint64_t{w[at]} | (uint64_t{w[at + 1]} << 32)); };
        TM_DiffStats& r = records[c];
        r = ops::empty_diff_stats();
        r.pairs = std::min(ops::kDiffChunk, elems - c * ops::kDiffChunk);
        r.finite_pairs = w[0];
        r.differing = w[1];
        r.bits_differing = w[2];
        r.class_mismatch = w[3];
        r.nan_a = w[4];
        r.nan_b = w[5];
        r.inf_a = w[6];
        r.inf_b = w[7];
        if (w[8] != 0xffffffffu) {
          r.max_abs_index = args.element_offset + first + c * ops::kDiffChunk + w[8];
          r.a_at_max = std::bit_cast<float>(w[9]);
          r.b_at_max = std::bit_cast<float>(w[10]);
          r.max_abs_diff = f64(12);
        }
        r.sum_diff = f64(14);
        r.sum_sq_diff = f64(16);
        r.sum_sq_a = f64(18);
        r.sum_sq_b = f64(20);
        r.sum_ab = f64(22);
      }
      const uint64_t record_bytes = chunks * sizeof(TM_DiffStats);
      const uint64_t at = chunk * sizeof(TM_DiffStats);
      TM_RETURN_IF_ERROR(deliver_host(args.output, at, records.data(), record_bytes));
      report.bytes_written += record_bytes;
    } else {
      const auto [gx, gy] = flat_groups(elems);
      TM_RETURN_IF_ERROR(device_->dispatch(pipeline, {input, output}, &p, sizeof p, gx, gy));
      TM_RETURN_IF_ERROR(deliver(args.output, first * 4, out, out_bytes));
      report.bytes_written += out_bytes;
    }
    report.bytes_read += bytes_a + bytes_b;
  }
  TM_RETURN_IF_ERROR(device_->finish());
  report.device_ns = seconds_since(start) * 1e9;
  return report;
}

/// The uniforms of the channel kernels.
struct ChannelKernelParams {
  uint32_t base_byte, row_bytes, rows, cols, levels, slots, default_nan, propagate_nan, row0, band_rows, last_band, pad;
};

ChannelPlan WebGpuBackend::channel_plan(const ops::ChannelStatsArgs& args, uint64_t memory_budget) const {
  ChannelPlan p;
  p.row_bytes = *ops::matrix_row_bytes(args.input.dtype, args.cols);
  const uint64_t col_slots = std::bit_ceil(std::max<uint64_t>(args.rows, 1));
  p.col_levels = static_cast<uint32_t>(std::countr_zero(col_slots));
  // Per column between bands: 8 words of counts and extremes, then each level's two float64 partials.
  const uint64_t state = args.cols * (8 + 4 * (p.col_levels + 1)) * 4;
  const uint64_t records = args.cols * sizeof(TM_TileStats);
  const bool host = args.input.arg.buffer == nullptr;
  const uint64_t per_row = sizeof(TM_TileStats) + (host ? p.row_bytes : 0);
  const uint64_t binding_rows = (device_->max_binding_bytes() - 8) / std::max<uint64_t>(p.row_bytes, 1);
  uint64_t band = host ? options_.chunk_bytes / std::max<uint64_t>(p.row_bytes, 1) : binding_rows;
  if (memory_budget != 0) {
    const uint64_t fixed = state + records;
    band = fixed + per_row > memory_budget ? 0 : std::min(band, (memory_budget - fixed) / per_row);
  }
  if (memory_budget == 0) band = std::max<uint64_t>(band, 1);
  p.band_rows = std::min({band, binding_rows, std::max<uint64_t>(args.rows, 1)});
  p.working_bytes = state + records + std::max<uint64_t>(p.band_rows, 1) * per_row;
  return p;
}

Result<RunReport> WebGpuBackend::run_channel_stats(const ops::ChannelStatsArgs& args, uint64_t memory_budget) {
  const auto start = std::chrono::steady_clock::now();
  const DTypeInfo& info = dtype_info(args.input.dtype);
  if (*ops::matrix_row_bytes(args.input.dtype, args.cols) + 8 > device_->max_binding_bytes() || args.rows > 0xffffffffu ||
      args.cols > 0xffffffffu) {
    return Status::Unimplemented("webgpu: channel statistics of rows longer than one binding (" +
                                 std::to_string(device_->max_binding_bytes()) + " bytes)");
  }
  const ChannelPlan plan = channel_plan(args, memory_budget);
  if (plan.band_rows == 0) {
    return Status::ResourceExhausted("webgpu: channel statistics of " + std::to_string(args.cols) +
                                     " columns need more working memory than the budget of " +
                                     std::to_string(memory_budget) + " bytes");
  }
  TM_ASSIGN_OR_RETURN(api::ComputePipeline rows_pipeline, device_->pipeline("channel_rows_" + std::string(info.name),
                                                                            channel_rows_kernel(args.input.dtype)));
  TM_ASSIGN_OR_RETURN(api::ComputePipeline cols_pipeline, device_->pipeline("channel_cols_" + std::string(info.name),
                                                                            channel_cols_kernel(args.input.dtype)));
  const uint64_t row_slots = std::bit_ceil(std::max<uint64_t>(args.cols, 1));
  constexpr uint64_t kRecord = sizeof(TM_TileStats);
  const uint64_t state_bytes = std::max<uint64_t>(args.cols * (8 + 4 * (plan.col_levels + 1)) * 4, 4);
  TM_ASSIGN_OR_RETURN(DeviceBuffer state, scratch(3, state_bytes));
  TM_ASSIGN_OR_RETURN(DeviceBuffer col_records, scratch(2, std::max<uint64_t>(args.cols * kRecord, 4)));
  ChannelKernelParams p{};
  p.row_bytes = static_cast<uint32_t>(plan.row_bytes);
  p.rows = static_cast<uint32_t>(args.rows);
  p.cols = static_cast<uint32_t>(args.cols);
  p.default_nan = host_nan_.default_nan;
  p.propagate_nan = host_nan_.propagate ? 1u : 0u;
  p.levels = plan.col_levels;  // the column kernel's tree (the row kernel's below)
  p.slots = static_cast<uint32_t>(uint64_t{1} << plan.col_levels);
  // The row kernel's tree: levels above the workgroup's 256 slots, and the slots of a row.
  const auto row_levels = static_cast<uint32_t>(std::countr_zero(std::max<uint64_t>(1, row_slots / 256)));
  const auto row_slot_count = static_cast<uint32_t>(std::min<uint64_t>(row_slots, 1u << 31));
  RunReport report;
  // An empty matrix still has its columns' records (and no rows): one band of no rows.
  for (uint64_t row0 = 0; row0 < args.rows || (row0 == 0 && args.rows == 0); row0 += plan.band_rows) {
    const uint64_t band = std::min(plan.band_rows, args.rows - row0);
    TM_ASSIGN_OR_RETURN(auto input, bind_input(args.input, row0 * plan.row_bytes, band * plan.row_bytes, 0));
    p.base_byte = input.second;
    p.row0 = static_cast<uint32_t>(row0);
    p.band_rows = static_cast<uint32_t>(band);
    p.last_band = row0 + band >= args.rows ? 1u : 0u;
    if (band > 0) {
      TM_ASSIGN_OR_RETURN(DeviceBuffer row_records, scratch(1, band * kRecord));
      const uint64_t gx = std::min<uint64_t>(band, 65535);
      ChannelKernelParams rows_params = p;
      rows_params.levels = row_levels;
      rows_params.slots = row_slot_count;
      rows_params.rows = static_cast<uint32_t>(band);
      TM_RETURN_IF_ERROR(device_->dispatch(rows_pipeline, {input.first, Binding{row_records.handle, 0, band * kRecord}},
                                           &rows_params, sizeof rows_params, static_cast<uint32_t>(gx),
                                           static_cast<uint32_t>((band + gx - 1) / gx)));
      TM_RETURN_IF_ERROR(deliver(args.rows_out, row0 * kRecord, row_records, band * kRecord));
    }
    if (args.cols > 0) {
      const auto [gx, gy] = flat_groups(args.cols);
      TM_RETURN_IF_ERROR(device_->dispatch(cols_pipeline,
                                           {input.first, Binding{col_records.handle, 0, args.cols * kRecord},
                                            Binding{state.handle, 0, state_bytes}},
                                           &p, sizeof p, gx, gy));
    }
    report.bytes_read += band * plan.row_bytes;
    if (args.rows == 0) break;
  }
  if (args.cols > 0) TM_RETURN_IF_ERROR(deliver(args.cols_out, 0, col_records, args.cols * kRecord));
  TM_RETURN_IF_ERROR(device_->finish());
  report.bytes_written = (args.rows + args.cols) * kRecord;
  report.device_ns = seconds_since(start) * 1e9;
  return report;
}

Result<RunReport> WebGpuBackend::run_histogram(const ops::HistogramArgs& args) {
  const auto start = std::chrono::steady_clock::now();
  if (args.bins > kMaxDeviceBins) {
    return Status::Unimplemented("webgpu: histograms of more than " + std::to_string(kMaxDeviceBins) + " bins");
  }
  const DTypeInfo& info = dtype_info(args.input.dtype);
  TM_ASSIGN_OR_RETURN(api::ComputePipeline pipeline,
                      device_->pipeline("histogram_" + std::string(info.name), histogram_kernel(args.input.dtype)));
  // The bins as float32 order keys: the CPU reference's float64 slot is a monotone function of the
  // value, so each bin starts at the first float32 the reference puts in it (found by bisection
  // with the reference's own slot function). Counting by key is then exact by construction.
  const double scale = static_cast<double>(args.bins) / (args.hi - args.lo);
  auto slot_of = [&](float v) { return ops::histogram_slot(v, args.lo, args.hi, scale, args.bins); };
  const uint32_t lowest = order_key(-std::numeric_limits<float>::infinity());
  const uint32_t past_highest = order_key(std::numeric_limits<float>::infinity()) + 1;
  const uint32_t below_key = first_key(lowest, past_highest, [&](float v) { return slot_of(v) != args.bins; });
  const uint32_t above_key = first_key(below_key, past_highest, [&](float v) { return slot_of(v) == args.bins + 1; });
  std::vector<uint32_t> edges;
  edges.reserve(args.bins);
  for (uint64_t b = 1; b < args.bins; ++b) {
    edges.push_back(first_key(edges.empty() ? below_key : edges.back(), above_key, [&](float v) {
      const uint64_t s = slot_of(v);
      return s >= b && s < args.bins;
    }));
  }
  if (edges.empty()) edges.push_back(above_key);  // a binding is never empty
  TM_ASSIGN_OR_RETURN(DeviceBuffer edge_buffer, scratch(2, edges.size() * 4));
  TM_RETURN_IF_ERROR(device_->write(edge_buffer, 0, edges.data(), edges.size() * 4));
  const uint64_t slots = args.bins + 3;
  RunReport report;
  TM_ASSIGN_OR_RETURN(const std::vector<uint64_t> totals,
                      count_in_chunks(args.input, slots, [&](const Binding& input, uint32_t base, uint64_t elems, const Binding& counts) {
                        ElementParams p{base,
                                        static_cast<uint32_t>(elems),
                                        host_nan_.default_nan,
                                        host_nan_.propagate ? 1u : 0u,
                                        static_cast<uint32_t>(args.bins),
                                        below_key,
                                        above_key,
                                        static_cast<uint32_t>(args.bins - 1)};
                        const auto [gx, gy] = flat_groups(elems);
                        return device_->dispatch(pipeline, {input, Binding{edge_buffer.handle, 0, edges.size() * 4}, counts}, &p,
                                                 sizeof p, gx, gy);
                      }, report));
  TM_RETURN_IF_ERROR(deliver_host(args.output, 0, totals.data(), slots * 8));
  report.bytes_written = slots * 8;
  report.device_ns = seconds_since(start) * 1e9;
  return report;
}

Result<RunReport> WebGpuBackend::run_render(const ops::RenderArgs& args) {
  // Values tiles whose cells are tile_stats tiles: the blocks' statistics here (bitwise the CPU's),
  // the colours on the host by the shared code, so the pixels are the CPU's bit for bit.
  const ops::ViewRange view = ops::render_cell_view(args.params, args.rows, args.cols);
  ops::TileStatsArgs blocks;
  blocks.input = args.input;
  blocks.rows = args.rows;
  blocks.cols = args.cols;
  blocks.range = view;
  blocks.tile = static_cast<uint32_t>(args.params.cell);
  blocks.grid = ops::tile_grid(view, blocks.tile);
  std::vector<TM_TileStats> stats(blocks.grid.count());
  blocks.output.dtype = DType::kU8;
  blocks.output.elems = stats.size() * sizeof(TM_TileStats);
  blocks.output.arg.struct_size = sizeof blocks.output.arg;
  blocks.output.arg.rank = 1;
  blocks.output.arg.shape[0] = blocks.output.elems;
  blocks.output.arg.nbytes = blocks.output.elems;
  blocks.output.arg.host_out = stats.data();
  TM_ASSIGN_OR_RETURN(RunReport run, run_tile_stats(blocks));
  std::vector<uint8_t> rgba(ops::kRenderTileBytes);
  TM_RETURN_IF_ERROR(ops::render_cell_grid(stats, blocks.grid, args.params, rgba));
  TM_RETURN_IF_ERROR(deliver_host(args.output, 0, rgba.data(), rgba.size()));
  run.bytes_written = ops::kRenderTileBytes;
  return run;
}

}  // namespace tensormorph::webgpu
