// Running validated jobs on the device.
#pragma once

#include <CL/cl.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend.h"
#include "cl_handles.h"
#include "errors.h"
#include "op_parse.h"

namespace tm_opencl {

/// What one execution did.
struct RunStats {
  double device_ns = 0.0;      ///< summed profiling time of its commands (0 when unavailable)
  uint64_t bytes_read = 0;     ///< input bytes the kernels read
  uint64_t bytes_written = 0;  ///< output bytes delivered
};

/// Runs tile statistics; `memory_budget` (0: none) caps the device memory it uses.
/// The caller holds backend.mutex.
Result<RunStats> run_tile_stats(TM_Backend& backend, const TileStatsJob& job, uint64_t memory_budget);

/// Runs Q8_0 decoding; `memory_budget` (0: none) caps the device memory it uses.
/// The caller holds backend.mutex.
Result<RunStats> run_decode(TM_Backend& backend, const DecodeJob& job, uint64_t memory_budget);

/// Renders a tile from values: block statistics on the device, colours on the host.
/// The caller holds backend.mutex.
Result<RunStats> run_render_values(TM_Backend& backend, const RenderJob& job, uint64_t memory_budget);

/// Renders a tile from a grid of tile statistics (host memory or a buffer of this backend).
/// The caller holds backend.mutex.
Result<RunStats> run_render_stats(TM_Backend& backend, const RenderJob& job);

/// Events of one execution's commands, to add up their device time.
class CommandTimes {
 public:
  /// A slot for the event of the next enqueued command.
  cl_event* next() {
    events_.emplace_back();
    return events_.back().receive();
  }
  /// Total START..END time of the recorded commands; 0 when profiling information is missing.
  double total_ns() const;

 private:
  std::vector<ClEvent> events_;
};

/// Device memory one chunk of work may use: the backend's staging size, capped by the policy's
/// budget (0: none) and the largest allocation.
uint64_t chunk_memory_limit(const TM_Backend& backend, uint64_t memory_budget);

/// Allocates a device buffer of `bytes` (at least 1) for internal use.
Result<ClMem> make_device_buffer(const TM_Backend& backend, uint64_t bytes, cl_mem_flags flags);

/// Enqueues a 1-D NDRange of at least `global` work items (rounded up to a whole number of groups)
/// in groups of `local` (0: the implementation chooses).
Status enqueue_kernel(const TM_Backend& backend, const ClKernel& kernel, const char* name, size_t global, size_t local,
                      CommandTimes& times);

}  // namespace tm_opencl
