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
constexpr double kLaunchOverheadNs = 20'000.0;
constexpr double kDeclaredGbps = 1.0;
constexpr double kTileStatsCyclesPerElement = 4.0;
constexpr double kDecodeCyclesPerElement = 1.0;
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

}  // namespace

TM_CostEstimate estimate_cost(const TM_Backend& backend, const ParsedOp& op) {
  TM_CostEstimate estimate{};
  estimate.struct_size = sizeof estimate;
  const double gbps = throughput_gbps(backend);
  double elements = 0.0;
  double cycles = 0.0;
  double launches_per_chunk = 1.0;
  uint64_t intermediate_bytes = 0;
  bool host_input = false;
  if (op.kind == OpKind::kTileStats) {
    const TileStatsJob& job = op.tile_stats;
    const uint64_t view_elements = (job.row_end - job.row_begin) * (job.col_end - job.col_begin);
    const uint64_t partials = (job.row_end - job.row_begin) * job.tiles_across;
    elements = static_cast<double>(view_elements);
    cycles = kTileStatsCyclesPerElement;
    launches_per_chunk = 2.0;
    estimate.bytes_read = view_elements * job.element_bytes;
    estimate.bytes_written = job.tiles_down * job.tiles_across * sizeof(TM_TileStats);
    intermediate_bytes = 2 * partials * kTileStatsPartialBytes;  // written by one kernel, read by the next
    host_input = job.input.host != nullptr;
    if (elements == 0.0) return estimate;
  } else {
    const DecodeJob& job = op.decode;
    elements = static_cast<double>(job.elements);
    cycles = kDecodeCyclesPerElement;
    estimate.bytes_read = job.elements / 32 * 34;
    estimate.bytes_written = job.elements * sizeof(float);
    host_input = job.input.host != nullptr;
    if (elements == 0.0) return estimate;
  }
  const uint64_t device_bytes = estimate.bytes_read + estimate.bytes_written + intermediate_bytes;
  const double memory_ns = static_cast<double>(device_bytes) / gbps;
  double ns = launches_per_chunk * chunks_for(backend, device_bytes) * kLaunchOverheadNs +
              std::max(memory_ns, arithmetic_ns(backend, elements, cycles));
  if (host_input && backend.caps.host_unified_memory) ns += static_cast<double>(estimate.bytes_read) / gbps;
  estimate.compute_ns = ns;
  return estimate;
}

}  // namespace tm_opencl
