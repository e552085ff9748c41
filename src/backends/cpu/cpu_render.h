// tm.render_tile@1 (and its sampled rung) on the CPU: tile_stats kernels for cells of 8 and more,
// the reference pixel rows spread over oneTBB otherwise.
#pragma once

#include <cstdint>

#include "backends/cpu/cpu_dispatch.h"
#include "backends/cpu/tile_stats/tile_stats.h"
#include "tensormorph/c/plugin.h"
#include "tensormorph/status.h"

namespace tensormorph::cpu {

/// Fills `out` with the CPU's support of a render operation (bitwise, or approximate for the rung).
void render_support(const TM_OpQuery& query, TM_OpSupport& out);

/// The cost of a render instance: bytes of the blocks read, working memory as bytes written.
Result<TM_CostEstimate> render_estimate(const TM_OpInstance& op, double bandwidth_gbps);

/// Executes a render instance with at most `max_threads` threads (0: all) and the tile_stats
/// kernels of `isa` with scratch from `scratch`; fills `report`.
Status render_execute(const TM_OpInstance& op, uint32_t max_threads, Isa isa, ScratchPool& scratch,
                      TM_ExecutionReport& report);

}  // namespace tensormorph::cpu
