// The WebGPU backend instance behind TM_Backend: a WebGpuDevice, the buffers handed to the host,
// the rates its estimates use, and the runners of each operation it implements.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>

#include "backends/webgpu/webgpu_device.h"
#include "compute/ops/op_instance.h"
#include "compute/ops/render_tile.h"
#include "tensormorph/c/plugin.h"
#include "tensormorph/status.h"

namespace tensormorph::webgpu {

/// Settings from TM_BackendCreateArgs::options ("key=value;key=value").
struct BackendOptions {
  std::string library;                       ///< library=PATH: the Dawn library (default: the installed one)
  uint64_t chunk_bytes = uint64_t{64} << 20;  ///< chunk_mib: input bytes one upload and dispatch covers
};

/// Parses the options string (NULL or empty: defaults); unknown keys and bad values are errors.
Result<BackendOptions> parse_backend_options(const char* text);

/// A device buffer handed to the host as a TM_Buffer (memory space 1).
struct HostVisibleBuffer {
  DeviceBuffer device;
  uint64_t bytes = 0;  ///< the size the host asked for
};

/// Measured rates the estimates use.
struct Rates {
  double host_to_device_gbps = 0;  ///< uploads (queue writes) of 32 MiB
  double device_to_host_gbps = 0;  ///< read-backs of 32 MiB
  double tile_stats_gbps = 0;      ///< tile_stats of resident F32, T = 256
};

/// What one execution did.
struct RunReport {
  double device_ns = 0;
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
};

/// NaN results of the host CPU's float multiply (decoded NaNs match them bit for bit).
struct HostNan {
  uint32_t default_nan = 0x7fc00000u;
  bool propagate = true;
};

/// How tm.channel_stats@1 goes through a matrix: bands of rows, the columns' state kept between them.
struct ChannelPlan {
  uint64_t row_bytes = 0;
  uint64_t band_rows = 0;     ///< 0: not even one row fits the memory budget
  uint32_t col_levels = 0;    ///< log2 of bit_ceil(rows)
  uint64_t working_bytes = 0;  ///< state, column records, and per band row its record and staging
};

/// One opened WebGPU device. Every member but create() expects `mutex` held.
class WebGpuBackend {
 public:
  /// Opens the device and measures its rates.
  static Result<std::unique_ptr<WebGpuBackend>> create(const char* options);
  /// Releases the scratch buffers and any buffer the host did not free.
  ~WebGpuBackend();
  WebGpuBackend(const WebGpuBackend&) = delete;
  WebGpuBackend& operator=(const WebGpuBackend&) = delete;

  /// Serialises every use of the device.
  std::mutex mutex;

  /// The traits reported to the host.
  TM_DeviceTraits traits() const;
  const Rates& rates() const { return rates_; }
  /// Input bytes one upload and dispatch covers (the staging an execution of host data needs).
  uint64_t chunk_bytes() const { return options_.chunk_bytes; }
  /// The largest binding a kernel takes.
  uint64_t max_binding_bytes() const { return device_->max_binding_bytes(); }
  WebGpuDevice& device() { return *device_; }

  Result<std::unique_ptr<HostVisibleBuffer>> allocate(uint64_t bytes);
  void release(std::unique_ptr<HostVisibleBuffer> buffer);
  bool owns(const HostVisibleBuffer* buffer) const { return live_.count(buffer) != 0; }

  Result<RunReport> run_decode(const ops::DecodeArgs& args);
  Result<RunReport> run_tile_stats(const ops::TileStatsArgs& args);
  Result<RunReport> run_histogram(const ops::HistogramArgs& args);
  Result<RunReport> run_radix_histogram(const ops::RadixHistogramArgs& args);
  /// The bands tm.channel_stats@1 takes under `memory_budget` (0: none).
  ChannelPlan channel_plan(const ops::ChannelStatsArgs& args, uint64_t memory_budget) const;
  /// tm.channel_stats@1 in bands that fit `memory_budget` (0: none).
  Result<RunReport> run_channel_stats(const ops::ChannelStatsArgs& args, uint64_t memory_budget);
  /// tm.diff_stats@1 (`statistics`) or tm.subtract@1.
  Result<RunReport> run_diff(const ops::DiffArgs& args, bool statistics);
  Result<RunReport> run_render(const ops::RenderArgs& args);

 private:
  WebGpuBackend() = default;
  Status measure();
  /// A scratch buffer `which` (0..3) of at least `bytes`, kept between executions.
  Result<DeviceBuffer> scratch(int which, uint64_t bytes);
  /// Binds `bytes` of an input starting `offset` bytes into the argument: its own buffer when
  /// resident, else a scratch buffer the bytes are uploaded into. Returns the binding and the
  /// byte at which the data starts inside it.
  Result<std::pair<Binding, uint32_t>> bind_input(const ops::TensorArgument& input, uint64_t offset, uint64_t bytes,
                                                  int scratch_slot);
  /// Delivers `bytes` of device results at `src` into the output argument at `offset`.
  Status deliver(const ops::TensorArgument& output, uint64_t offset, const DeviceBuffer& src, uint64_t bytes);
  /// Writes host-side results (`bytes` at `data`) to `output` at `offset`, resident or host.
  Status deliver_host(const ops::TensorArgument& output, uint64_t offset, const void* data, uint64_t bytes);
  /// Dispatches one chunk of a counting kernel: its input binding, the input's first byte within it,
  /// its elements, and the binding of its u32 counters (zeroed).
  using CountChunk = std::function<Status(const Binding& input, uint32_t base_byte, uint64_t elems, const Binding& counts)>;
  /// `slots` counters over all of `input`, added up in 64 bits across chunks of whole blocks under
  /// 2^31 elements (so no u32 counter overflows), each run by `count_chunk`.
  Result<std::vector<uint64_t>> count_in_chunks(const ops::TensorArgument& input, uint64_t slots,
                                                const CountChunk& count_chunk, RunReport& report);
  Result<const HostVisibleBuffer*> resident(const TM_TensorArg& arg);
  /// Puts `bytes` of a side of a comparison, `offset` bytes into it, into `staging` at byte `at`
  /// (a multiple of 4); returns how far into its first word the data starts.
  Result<uint32_t> stage_side(const ops::TensorArgument& side, uint64_t offset, uint64_t bytes,
                              const DeviceBuffer& staging, uint64_t at);

  BackendOptions options_;
  std::unique_ptr<WebGpuDevice> device_;
  HostNan host_nan_;
  Rates rates_;
  DeviceBuffer scratch_[4];
  std::unordered_set<const HostVisibleBuffer*> live_;
};

}  // namespace tensormorph::webgpu
