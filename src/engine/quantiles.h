// Exact order statistics of a tensor's finite decoded values by radix selection over
// tm.radix_histogram@1 passes: quantiles under numpy's "inverted_cdf" and default "linear"
// definitions, the median absolute deviation and the robust range the viewer colours with.
// Every pass returns integer counts, so the selected elements are the same on every backend.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compute/ops/radix_histogram.h"
#include "compute/scheduler.h"
#include "engine/tensor_ops.h"
#include "tensormorph/checkpoint.h"

namespace tensormorph::engine {

/// Runs one tm.radix_histogram@1 over every element of a tensor: `counts` and `classes` are the
/// operation's two outputs (sized by the caller).
using RadixPass = std::function<Status(const ops::RadixParams& params, std::span<const uint64_t> prefixes,
                                       std::span<uint64_t> counts, std::span<uint64_t, ops::kRadixClasses> classes)>;

/// The ranks wanted once the finite count is known (0-based, each below it).
using RanksOf = std::function<std::vector<uint64_t>(uint64_t finite)>;

/// Keys of the elements of given ranks under one order key, with the counts they came from.
struct KeySelection {
  std::vector<uint64_t> ranks;                        ///< what ranks_of asked for
  std::vector<uint64_t> keys;                         ///< the key of each rank's element
  std::array<uint64_t, ops::kRadixClasses> classes{};  ///< finite, NaN, +Inf, -Inf elements
  uint32_t passes = 0;                                 ///< tm.radix_histogram@1 runs it took
};

/// Radix selection of the ranks `ranks_of` asks for, under `key` (with `center` for the deviation
/// key), 16 key bits per pass from the top. `known_low_bits` low key bits are known without a pass
/// (a dtype whose decoded floats end in that many zero bits; value and magnitude keys only). An
/// INTERNAL error when the counts of two passes disagree (the data changed between them).
Result<KeySelection> select_keys(const RadixPass& pass, ops::RadixKey key, double center, uint32_t known_low_bits,
                                 const RanksOf& ranks_of);

/// numpy's "inverted_cdf" index of probability `q` among `n` sorted values: ceil(n q) - 1 computed
/// as numpy does, clamped to [0, n - 1].
uint64_t inverted_cdf_rank(uint64_t n, double q);

/// Low bits of the float32 decoding of every value of `dtype` that are always zero (16 for BF16,
/// the 8-bit floats and integers: their order keys are known after one 16-bit digit).
uint32_t decoded_zero_low_bits(DType dtype);

/// One requested probability and its quantiles.
struct QuantileValue {
  double probability = 0;
  double inverted_cdf = 0;  ///< the element of rank ceil(q n) (numpy's "inverted_cdf"), as float64
  double linear = 0;        ///< numpy.quantile(float64 values, q), bit for bit (its default "linear")
  /// Approximate results only: where the true values of both definitions lie, [lower, upper].
  std::optional<std::array<double, 2>> interval;
};

/// What tensor_quantiles computes.
struct QuantileOptions {
  std::vector<double> probabilities;  ///< each in [0, 1]
  bool median_absolute_deviation = false;  ///< four more passes (64-bit deviation keys)
};

/// Order statistics of a tensor's finite values (NaN and +-Inf counted apart).
struct Quantiles {
  uint64_t finite = 0, nan = 0, pos_inf = 0, neg_inf = 0;
  std::vector<QuantileValue> values;  ///< one per requested probability, in order (none without finite values)
  double median = 0;                  ///< linear quantile at 0.5 (when finite > 0)
  /// The linear quantiles at 0.001 and 0.999: the range the viewer colours with (when finite > 0).
  std::array<double, 2> robust_range{};
  /// Median of |x - median| in float64 (numpy.quantile(abs(x - median), 0.5)), when asked for.
  std::optional<double> median_absolute_deviation;
  uint32_t passes = 0;  ///< tm.radix_histogram@1 runs over the data
  std::string rung = "exact";  ///< the ladder rung that computed it: exact, histogram or sample
  std::string error_bound;     ///< approximate rungs: what the intervals guarantee, in words
};

/// An order statistic known only within an interval (approximate rungs).
struct RankEstimate {
  double estimate = 0;
  double lower = 0, upper = 0;  ///< the true value lies in [lower, upper]
};

/// Approximate quantiles of `finite` values whose order statistic of each rank `at_rank` bounds:
/// both definitions, the median and the robust range interpolate the estimates as the exact ones
/// interpolate values, and each interval interpolates the bounds (interpolation is monotone).
Quantiles quantiles_from_estimates(uint64_t finite, const std::function<RankEstimate(uint64_t rank)>& at_rank,
                                   const QuantileOptions& options);

/// The quantiles of the elements a RadixPass sees, whose dtype is `dtype`. INVALID_ARGUMENT for a
/// probability outside [0, 1] or not a number.
Result<Quantiles> quantiles_of(const RadixPass& pass, DType dtype, const QuantileOptions& options);

/// `q` as the JSON the CLI and the viewer's API print (counts, per-probability both methods, the
/// median, the robust range, the MAD when computed, the passes); `dtype` marks types ranked after
/// rounding to float32.
nlohmann::ordered_json quantiles_json(const Quantiles& q, DType dtype);

/// The inverse of quantiles_json; INVALID_ARGUMENT when `j` is not such a document.
Result<Quantiles> quantiles_from_json(const nlohmann::json& j);

/// The key a quantile result of `options` is kept under beside the index.
std::string quantiles_cache_key(const QuantileOptions& options);

/// The probabilities of the robust range.
inline constexpr std::array<double, 2> kRobustRangeProbabilities = {0.001, 0.999};

/// Passes over the data exact quantiles of `options` take for `dtype` (at most).
uint32_t exact_quantile_passes(DType dtype, const QuantileOptions& options);

/// The modelled time of tensor_quantiles (every pass, every band), and where it would run; not
/// placeable when some band of a pass cannot be placed exactly (its reason says why).
Result<compute::PlacementEstimate> estimate_exact_quantiles(compute::Scheduler& scheduler, const Checkpoint& checkpoint,
                                                            const TensorInfo& tensor, const QuantileOptions& options,
                                                            uint32_t max_threads = 0);

/// The quantiles of a checkpoint tensor's decoded values, each pass one scheduled
/// tm.radix_histogram@1 per band of rows (the decode bands, whose residency keys they share).
Result<Quantiles> tensor_quantiles(compute::Scheduler& scheduler, const Checkpoint& checkpoint, const TensorInfo& tensor,
                                   const QuantileOptions& options, Records* records = nullptr,
                                   uint32_t max_threads = 0);

}  // namespace tensormorph::engine
