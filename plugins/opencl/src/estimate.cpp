#include "estimate.h"

#include <algorithm>

namespace tm_opencl {
namespace {

// The cost model. The host models transfers itself, so this is the device's work only:
//
//   compute_ns = launches * kLaunchOverheadNs + max(memory_ns, arithmetic_ns) [+ staging_ns]
//
//   memory_ns     = bytes the kernels read and write (inputs, partials, outputs) / throughput, where
//                   throughput is the smaller of the host<->device copy bandwidths measured at create
//                   (GB/s == bytes/ns), or kDeclaredGbps when nothing was measured. The copy
//                   bandwidth stands in for device memory bandwidth: about right on CPU devices, and
//                   on discrete GPUs an underestimate of their speed, so the estimate errs slow.
//   arithmetic_ns = elements * cycles per element / (compute units * clock GHz): tile_stats ~4
//                   cycles (classify, widen, two float64 additions, counter merges), decode ~1.
//   staging_ns    = on host_memory_visible devices, the copy of host inputs into device buffers,
//                   which execute performs but for which the host charges no transfer.
//
// Renders add the colouring, which runs on the host (kColourNsPerPixel per pixel, a few float64
// operations and a log10), to the statistics of their blocks: tile_stats over the covered view
// (values) or a copy of the shown grid cells out of a device buffer (statistics).
constexpr double kLaunchOverheadNs = 20'000.0;
constexpr double kDeclaredGbps = 1.0;
constexpr double kTileStatsCyclesPerElement = 4.0;
constexpr double kDecodeCyclesPerElement = 1.0;
constexpr double kColourNsPerPixel = 20.0;
constexpr uint64_t kTileStatsPartialBytes = 2 * sizeof(double) + 7 * sizeof(uint32_t);

double throughput_gbps(const TM_Backend& backend) {
  if (!backend.bandwidth_measured) return kDeclaredGbps;
  return std::max(1e-3, std::min(backend.host_to_device_gbps, backend.device_to_host_gbps));
}

double arithmetic_ns(const TM_Backend& backend, double elements, double cycles_per_element) {
  const double units = std::max(1.0, static_cast<double>(backend.caps.compute_units));
  const double ghz = std::max(0.1, static_cast<double>(backend.caps.clock_mhz) / 1000.0);
  return elements * cycles_per_element / (units * ghz);
}

double chunks_for(const TM_Backend& backend, uint64_t device_bytes) {
  const double staging = static_cast<double>(std::max<uint64_t>(1, backend.options.staging_bytes));
  return std::max(1.0, static_cast<double>(device_bytes) / staging);
}

// The device work of tile statistics over a view (with the staging cost on unified memory).
TM_CostEstimate tile_stats_cost(const TM_Backend& backend, const TileStatsJob& job) {
  TM_CostEstimate estimate{};
  estimate.struct_size = sizeof estimate;
  const uint64_t view_elements = (job.row_end - job.row_begin) * (job.col_end - job.col_begin);
  const uint64_t partials = (job.row_end - job.row_begin) * job.tiles_across;
  estimate.bytes_read = view_elements * job.element_bytes;
  estimate.bytes_written = job.tiles_down * job.tiles_across * sizeof(TM_TileStats);
  if (view_elements == 0) return estimate;
  const uint64_t intermediate_bytes = 2 * partials * kTileStatsPartialBytes;  // written by one kernel, read by the next
  const bool host_input = job.input.host != nullptr;
  const double gbps = throughput_gbps(backend);
  const uint64_t device_bytes = estimate.bytes_read + estimate.bytes_written + intermediate_bytes;
  const double memory_ns = static_cast<double>(device_bytes) / gbps;
  double ns = 2.0 * chunks_for(backend, device_bytes) * kLaunchOverheadNs +
              std::max(memory_ns, arithmetic_ns(backend, static_cast<double>(view_elements), kTileStatsCyclesPerElement));
  if (host_input && backend.caps.host_unified_memory) ns += static_cast<double>(estimate.bytes_read) / gbps;
  estimate.compute_ns = ns;
  return estimate;
}

// The device work of decoding Q8_0 blocks.
TM_CostEstimate decode_cost(const TM_Backend& backend, const DecodeJob& job) {
  TM_CostEstimate estimate{};
  estimate.struct_size = sizeof estimate;
  estimate.bytes_read = job.elements / 32 * 34;
  estimate.bytes_written = job.elements * sizeof(float);
  if (job.elements == 0) return estimate;
  const double gbps = throughput_gbps(backend);
  const uint64_t device_bytes = estimate.bytes_read + estimate.bytes_written;
  double ns = chunks_for(backend, device_bytes) * kLaunchOverheadNs +
              std::max(static_cast<double>(device_bytes) / gbps,
                       arithmetic_ns(backend, static_cast<double>(job.elements), kDecodeCyclesPerElement));
  if (job.input.host != nullptr && backend.caps.host_unified_memory) ns += static_cast<double>(estimate.bytes_read) / gbps;
  estimate.compute_ns = ns;
  return estimate;
}

// Grid cells a statistics render reads: those its 256 x 256 pixels show.
uint64_t shown_cells(const RenderJob& job) {
  const uint64_t cells = TM_RENDER_TILE_PIXELS / job.magnify;
  return std::min(cells, job.rows - job.row_begin) * std::min(cells, job.cols - job.col_begin);
}

}  // namespace

TM_CostEstimate estimate_cost(const TM_Backend& backend, const ParsedOp& op) {
  constexpr double kPixels = double{TM_RENDER_TILE_PIXELS} * TM_RENDER_TILE_PIXELS;
  switch (op.kind) {
    case OpKind::kTileStats:
      return tile_stats_cost(backend, op.tile_stats);
    case OpKind::kDecode:
      return decode_cost(backend, op.decode);
    case OpKind::kRenderValues: {
      TM_CostEstimate estimate = tile_stats_cost(backend, op.render.blocks);
      estimate.compute_ns += kPixels * kColourNsPerPixel;
      estimate.bytes_written = op.output_nbytes;
      return estimate;
    }
    case OpKind::kRenderStats: {
      TM_CostEstimate estimate{};
      estimate.struct_size = sizeof estimate;
      estimate.bytes_read = shown_cells(op.render) * sizeof(TM_TileStats);
      estimate.bytes_written = op.output_nbytes;
      estimate.compute_ns = kPixels * kColourNsPerPixel;
      if (op.render.input.buffer != nullptr) {
        estimate.compute_ns += kLaunchOverheadNs + static_cast<double>(estimate.bytes_read) / throughput_gbps(backend);
      }
      return estimate;
    }
  }
  return TM_CostEstimate{sizeof(TM_CostEstimate), 0.0, 0, 0, 0};
}

}  // namespace tm_opencl
