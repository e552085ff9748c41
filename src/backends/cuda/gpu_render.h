// tm.render_tile@1 on the GPU: values tiles of cells >= 8 through the tile_stats kernels.
#pragma once

#include <cstdint>

#include "backends/cuda/gpu_backend.h"
#include "backends/cuda/gpu_exec.h"
#include "compute/ops/render_tile.h"

namespace tensormorph::gpu {

/// OK when this backend renders `args` (values, not sampled, cell >= 8, a kernel dtype); else
/// UNIMPLEMENTED saying why, so the scheduler places the instance elsewhere.
Status render_instance_supported(const ops::RenderArgs& args);

/// Bytes of the rows a values tile reads.
uint64_t render_bytes_read(const ops::RenderArgs& args);

/// Renders a supported instance; `memory_budget` (0: none) caps working memory.
Result<RunReport> run_render(GpuBackend& backend, const ops::RenderArgs& args, uint64_t memory_budget);

}  // namespace tensormorph::gpu
