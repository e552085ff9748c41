// The spectrum operations (tm.spectrum@1 and its rungs) on the CPU: LAPACK on OpenBLAS's threads,
// the same computation as the reference; modelled by floating-point operations, not bytes.
#pragma once

#include <cstdint>

#include "tensormorph/c/plugin.h"
#include "tensormorph/status.h"

namespace tensormorph::cpu {

/// Fills `out` with the CPU's support of a spectrum operation: bounded (SVD, Gram) or approximate
/// (randomized) for every decodable dtype of a matrix.
void spectrum_support(const TM_OpQuery& query, TM_OpSupport& out);

/// The cost of a spectrum instance on `threads` cores: its floating-point operations at the rate
/// of its algorithm, its copy of the matrix in float64 as working memory.
Result<TM_CostEstimate> spectrum_estimate(const TM_OpInstance& op, uint32_t threads);

/// Executes a spectrum instance with at most `max_threads` threads (0: all); fills `report` with
/// the exactness reached and the largest bound relative to the largest value.
Status spectrum_execute(const TM_OpInstance& op, const TM_ExecutionPolicy& policy, TM_ExecutionReport& report);

}  // namespace tensormorph::cpu
