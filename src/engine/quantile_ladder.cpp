#include "engine/quantile_ladder.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include <xxhash.h>

#include "core/dtype_abi.h"
#include "core/printable.h"
#include "engine/matrix_shape.h"
#include "engine/tensor_ops.h"
#include "engine/value_histogram.h"
#include "tensormorph/decode.h"

namespace tensormorph::engine {
namespace {

/// Modelled host time to gather one sampled block from memory-resident data.
constexpr double kGatherNsPerSample = 200;
/// Modelled host time to read quantiles off a stored histogram.
constexpr double kHistogramReadNs = 20e3;
/// Decoded floats per tm.decode@1 of the sample rung (64 MiB), so block types stay small.
constexpr uint64_t kSampleDecodeFloats = uint64_t{1} << 24;

std::string size_text(uint64_t bytes) {
  char text[48];
  std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

std::string passes_text(uint32_t passes) { return std::to_string(passes) + (passes == 1 ? " pass" : " passes"); }

/// Half-width of the DKW band that holds with kSampleConfidence for `draws` finite draws.
double dkw_epsilon(uint64_t draws) {
  return std::sqrt(std::log(2.0 / (1.0 - kSampleConfidence)) / (2.0 * static_cast<double>(draws)));
}

std::string sample_bound_text(double epsilon) {
  char text[200];
  std::snprintf(text, sizeof text,
                "with probability %.1f%%, every value lies between the sample's quantiles at q - %.4f and q + %.4f "
                "(the Dvoretzky-Kiefer-Wolfowitz-Massart inequality over the finite draws)",
                kSampleConfidence * 100, epsilon, epsilon);
  return text;
}

constexpr const char* kHistogramBound =
    "each value lies in its bin of the index's value histogram: bins 1/8 of a power of two wide, so the "
    "estimate (the bin's middle) is within 6.25% of |value|";

/// Requests decoding the blocks in `gathered` (`blocks` of `dtype`) into `values`.
compute::OpRequest decode_request(const std::string& subject, DType dtype, std::span<const std::byte> gathered,
                                  uint64_t blocks, std::span<float> values) {
  compute::OpRequest req;
  req.op = TM_OP_DECODE;
  req.subject = subject;
  req.inputs.push_back({to_abi_dtype(dtype), {blocks * dtype_info(dtype).block_elems}, gathered, 0});
  req.outputs.push_back({TM_DTYPE_F32, {values.size()}, std::as_writable_bytes(values)});
  return req;
}

uint64_t samples_per_decode(DType dtype) {
  return std::max<uint64_t>(1, kSampleDecodeFloats / dtype_info(dtype).block_elems);
}

}  // namespace

Result<QuantilePlan> plan_quantiles(compute::Scheduler& scheduler, const Checkpoint& checkpoint, const TensorInfo& tensor,
                                    const QuantileOptions& options, const StoredKnowledge& stored, uint32_t max_threads) {
  TM_ASSIGN_OR_RETURN(const compute::PlacementEstimate exact,
                      estimate_exact_quantiles(scheduler, checkpoint, tensor, options, max_threads));
  const double budget = scheduler.time_budget_ns();
  QuantilePlan plan;
  plan.exact_within_budget = exact.placeable && (budget <= 0 || exact.estimated_ns <= budget);
  if (plan.exact_within_budget) return plan;
  const uint32_t passes = exact_quantile_passes(tensor.dtype, options);
  if (!exact.placeable) {
    plan.reason = "exact quantiles of " + tensor_location(checkpoint, tensor) + " cannot run: " + exact.reason;
  } else {
    plan.reason = "exact quantiles of " + tensor_location(checkpoint, tensor) + " would take about " +
                  duration_text(exact.estimated_ns) + " (" + passes_text(passes) + " over " +
                  size_text(tensor.nbytes) + " on " + exact.backend + "), over the time budget of " +
                  duration_text(budget) + " (compute.time_budget)";
    plan.ladder.push_back({kRungExact,
                           "the exact quantiles by radix selection (" + passes_text(passes) + " over the data)",
                           "none: the true order statistics, numpy's results bit for bit", exact.estimated_ns,
                           exact.backend});
  }
  const std::string no_mad = options.median_absolute_deviation ? " (no median absolute deviation)" : "";
  if (stored.value_histogram.size() == kValueHistogramBins) {
    plan.ladder.push_back({kRungHistogram, "quantiles read off the value histogram the index keeps, without reading the data" + no_mad,
                           kHistogramBound, kHistogramReadNs, "host"});
  }
  // The sample's decode, modelled as the scheduler would place it, plus the host's gather.
  const DTypeInfo& info = dtype_info(tensor.dtype);
  const uint64_t draws = std::min<uint64_t>(kQuantileSampleSize, std::max<uint64_t>(tensor.elements(), 1));
  const uint64_t chunk = std::min(draws, samples_per_decode(tensor.dtype));
  std::vector<std::byte> gathered(chunk * info.block_bytes);
  std::vector<float> values(chunk * info.block_elems);
  TM_ASSIGN_OR_RETURN(const compute::PlacementEstimate decode,
                      scheduler.estimate(decode_request(tensor.name, tensor.dtype, gathered, chunk, values)));
  if (decode.placeable) {
    const double chunks = std::ceil(static_cast<double>(draws) / static_cast<double>(chunk));
    plan.ladder.push_back({kRungSample,
                           "quantiles of " + std::to_string(draws) + " elements drawn uniformly at random" + no_mad,
                           sample_bound_text(dkw_epsilon(draws)),
                           chunks * decode.estimated_ns + static_cast<double>(draws) * kGatherNsPerSample, decode.backend});
  }
  // Nothing runs and nothing is on offer: the scheduler's refusal, which says what to change.
  if (plan.ladder.empty() && !exact.refusal.ok()) return exact.refusal.with_context("exact quantiles of " + tensor_location(checkpoint, tensor));
  return plan;
}

Result<Quantiles> histogram_quantiles(std::span<const uint64_t> value_histogram, const std::optional<TensorSummary>& summary,
                                      const QuantileOptions& options) {
  if (value_histogram.size() != kValueHistogramBins) {
    return Status::NotFound("no value histogram is stored for this tensor (run `tensormorph index` to count one)");
  }
  std::vector<uint64_t> below(kValueHistogramBins + 1, 0);  // values in bins before each bin
  for (size_t b = 0; b < kValueHistogramBins; ++b) below[b + 1] = below[b] + value_histogram[b];
  const uint64_t finite = below.back();
  const auto at_rank = [&](uint64_t rank) {
    const size_t bin = static_cast<size_t>(std::upper_bound(below.begin(), below.end(), rank) - below.begin()) - 1;
    auto [lower, upper] = value_histogram_bin(static_cast<uint32_t>(bin));
    if (summary && summary->finite > 0) {
      lower = std::clamp(lower, summary->min, summary->max);
      upper = std::clamp(upper, summary->min, summary->max);
    }
    return RankEstimate{lower + (upper - lower) / 2, lower, upper};
  };
  Quantiles q = quantiles_from_estimates(finite, at_rank, options);
  if (summary) {
    q.nan = summary->nan;
    q.pos_inf = summary->pos_inf;
    q.neg_inf = summary->neg_inf;
  }
  q.rung = kRungHistogram;
  q.error_bound = kHistogramBound;
  return q;
}

Result<Quantiles> sampled_quantiles(compute::Scheduler& scheduler, const Checkpoint& checkpoint, const TensorInfo& tensor,
                                    const QuantileOptions& options, const std::optional<TensorSummary>& summary,
                                    Records* records) {
  const std::string where = tensor_location(checkpoint, tensor);
  if (!dtype_decodable(tensor.dtype)) return Status::Unsupported(where + ": " + std::string(dtype_not_decodable_reason(tensor.dtype)));
  const uint64_t n = tensor.elements();
  Quantiles out;
  out.rung = kRungSample;
  if (n == 0) return out;
  const MatrixShape m = as_matrix(tensor);
  const DTypeInfo& info = dtype_info(tensor.dtype);
  TM_ASSIGN_OR_RETURN(const auto data, matrix_rows(checkpoint, tensor, 0, m.rows));
  TM_ASSIGN_OR_RETURN(const uint64_t row_bytes, dtype_storage_bytes(tensor.dtype, m.cols));
  // Draws seeded by the name, so asking twice gives the same answer; sorted, so the gather reads
  // the file forwards.
  std::mt19937_64 rng(XXH64(tensor.name.data(), tensor.name.size(), 0));
  std::vector<uint64_t> draws(std::min(kQuantileSampleSize, std::max<uint64_t>(n, 1)));
  for (auto& e : draws) e = std::uniform_int_distribution<uint64_t>(0, n - 1)(rng);
  std::sort(draws.begin(), draws.end());

  std::vector<float> finite;
  finite.reserve(draws.size());
  uint64_t nan = 0, pos_inf = 0, neg_inf = 0;
  const uint64_t chunk = samples_per_decode(tensor.dtype);
  std::vector<std::byte> gathered;
  std::vector<float> values;
  for (uint64_t first = 0; first < draws.size(); first += chunk) {
    const uint64_t count = std::min<uint64_t>(chunk, draws.size() - first);
    gathered.resize(count * info.block_bytes);
    values.resize(count * info.block_elems);
    for (uint64_t i = 0; i < count; ++i) {
      const uint64_t e = draws[first + i];
      const uint64_t offset = (e / m.cols) * row_bytes + (e % m.cols) / info.block_elems * info.block_bytes;
      std::memcpy(gathered.data() + i * info.block_bytes, data.bytes.data() + offset, info.block_bytes);
    }
    TM_RETURN_IF_ERROR(run_exact(scheduler, decode_request(tensor.name, tensor.dtype, gathered, count, values), records)
                           .with_context(where + ": the sample"));
    for (uint64_t i = 0; i < count; ++i) {
      const float v = values[i * info.block_elems + (draws[first + i] % m.cols) % info.block_elems];
      if (std::isnan(v)) {
        ++nan;
      } else if (std::isinf(v)) {
        ++(v > 0 ? pos_inf : neg_inf);
      } else {
        finite.push_back(v);
      }
    }
  }
  std::sort(finite.begin(), finite.end(),
            [](float a, float b) { return ops::value_order_key(a) < ops::value_order_key(b); });
  const double scale = static_cast<double>(n) / static_cast<double>(draws.size());
  if (summary) {
    out.finite = summary->finite;
    out.nan = summary->nan;
    out.pos_inf = summary->pos_inf;
    out.neg_inf = summary->neg_inf;
  } else {
    out.nan = static_cast<uint64_t>(std::llround(static_cast<double>(nan) * scale));
    out.pos_inf = static_cast<uint64_t>(std::llround(static_cast<double>(pos_inf) * scale));
    out.neg_inf = static_cast<uint64_t>(std::llround(static_cast<double>(neg_inf) * scale));
    out.finite = n - std::min(n, out.nan + out.pos_inf + out.neg_inf);
  }
  if (finite.empty() || out.finite == 0) {
    out.error_bound = "the sample drew no finite value";
    return out;
  }
  const double epsilon = dkw_epsilon(finite.size());
  const double population = static_cast<double>(out.finite);
  const double lowest = summary && summary->finite > 0 ? summary->min : -static_cast<double>(FLT_MAX);
  const double highest = summary && summary->finite > 0 ? summary->max : static_cast<double>(FLT_MAX);
  const auto sample_at = [&](double p) {
    const double rank = std::ceil(p * static_cast<double>(finite.size())) - 1;
    return static_cast<double>(finite[static_cast<size_t>(std::clamp(rank, 0.0, static_cast<double>(finite.size() - 1)))]);
  };
  const auto at_rank = [&](uint64_t rank) {
    const double q = (static_cast<double>(rank) + 1) / population;
    const double lower = q - epsilon <= 0 ? lowest : sample_at(q - epsilon);
    const double upper = q + epsilon > 1 ? highest : sample_at(q + epsilon);
    return RankEstimate{std::clamp(sample_at(q), lower, upper), lower, upper};
  };
  Quantiles q = quantiles_from_estimates(out.finite, at_rank, options);
  q.nan = out.nan;
  q.pos_inf = out.pos_inf;
  q.neg_inf = out.neg_inf;
  q.rung = kRungSample;
  q.error_bound = sample_bound_text(epsilon) + (summary ? "" : "; counts scaled from the sample");
  return q;
}

Result<Quantiles> quantiles_by_rung(compute::Scheduler& scheduler, const Checkpoint& checkpoint, const TensorInfo& tensor,
                                    const QuantileOptions& options, const StoredKnowledge& stored, const std::string& rung,
                                    Records* records, uint32_t max_threads) {
  if (rung == kRungExact) return tensor_quantiles(scheduler, checkpoint, tensor, options, records, max_threads);
  if (rung == kRungHistogram) {
    auto q = histogram_quantiles(stored.value_histogram, stored.summary, options);
    if (!q.ok()) return q.status().with_context(tensor_location(checkpoint, tensor));
    return q;
  }
  if (rung == kRungSample) return sampled_quantiles(scheduler, checkpoint, tensor, options, stored.summary, records);
  return Status::InvalidArgument("unknown rung '" + rung + "' (exact, histogram, sample)");
}

}  // namespace tensormorph::engine
