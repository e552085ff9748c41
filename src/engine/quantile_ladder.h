// The exactness ladder of quantiles: exact radix selection when it fits the budgets, and below it
// two approximate rungs a user must consent to — quantiles read off the index's value histogram
// (no data pass; each value within its bin) and quantiles of a uniform sample (one small gather;
// each value within a confidence band that holds with probability kSampleConfidence).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "compute/scheduler.h"
#include "engine/ladder.h"
#include "engine/pyramid.h"
#include "engine/quantiles.h"
#include "tensormorph/checkpoint.h"

namespace tensormorph::engine {

/// Elements the sample rung draws (uniformly, with replacement, seeded by the tensor's name).
inline constexpr uint64_t kQuantileSampleSize = uint64_t{1} << 18;
/// Probability that every interval of the sample rung holds its true value at once.
inline constexpr double kSampleConfidence = 0.999;

/// The quantile ladder's own rung ids (kRungExact is every ladder's), as `--consent` and the API name them.
inline constexpr const char* kRungHistogram = "histogram";
inline constexpr const char* kRungSample = "sample";

/// One rung of the quantile ladder.
using QuantileRung = LadderRung;
/// Whether exact quantiles fit the budgets, and what is on offer when they do not.
using QuantilePlan = LadderPlan;

/// What the index knows of a tensor, for the approximate rungs (both optional).
struct StoredKnowledge {
  std::span<const uint64_t> value_histogram;  ///< kValueHistogramBins counts, or empty
  std::optional<TensorSummary> summary;       ///< exact counts and extremes from the pyramid
};

/// Compares the estimate of exact quantiles with the memory budget (the scheduler's placement) and
/// the time budget (the scheduler's time_budget_ns), and lists the rungs.
Result<QuantilePlan> plan_quantiles(compute::Scheduler& scheduler, const Checkpoint& checkpoint, const TensorInfo& tensor,
                                    const QuantileOptions& options, const StoredKnowledge& stored,
                                    uint32_t max_threads = 0);

/// Quantiles read off a value histogram: every order statistic lies in its bin (narrowed to the
/// tensor's extremes when `summary` is given). No median absolute deviation.
Result<Quantiles> histogram_quantiles(std::span<const uint64_t> value_histogram, const std::optional<TensorSummary>& summary,
                                      const QuantileOptions& options);

/// Quantiles of kQuantileSampleSize elements drawn uniformly with replacement, their blocks
/// gathered by the host and decoded by tm.decode@1. With `summary`, counts and extremes are the
/// pyramid's exact ones; without, counts are scaled from the sample.
Result<Quantiles> sampled_quantiles(compute::Scheduler& scheduler, const Checkpoint& checkpoint, const TensorInfo& tensor,
                                    const QuantileOptions& options, const std::optional<TensorSummary>& summary,
                                    Records* records = nullptr);

/// Runs `rung` (exact, histogram or sample).
Result<Quantiles> quantiles_by_rung(compute::Scheduler& scheduler, const Checkpoint& checkpoint, const TensorInfo& tensor,
                                    const QuantileOptions& options, const StoredKnowledge& stored, const std::string& rung,
                                    Records* records = nullptr, uint32_t max_threads = 0);

}  // namespace tensormorph::engine
