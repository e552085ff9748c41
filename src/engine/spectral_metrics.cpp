#include "engine/spectral_metrics.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

namespace tensormorph::engine {
namespace {

/// `v` as printf's %.17g writes it (nan, inf, -0.5, 1e+300): exact, for error messages.
std::string exact_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

/// A tail's exponent and KS distance, or the partial distance at which the search gave up on it.
struct TailFit {
  double alpha = 0;
  double ks_distance = 0;
  bool pruned = false;  ///< ks_distance is only a lower bound, already no better than `bound`
};

/// The sorted sample with what every candidate's fit reuses: the logs and their suffix sums.
class SortedSample {
 public:
  explicit SortedSample(std::span<const double> values) : x_(values.begin(), values.end()) {
    std::sort(x_.begin(), x_.end());
    log_x_.resize(x_.size());
    suffix_log_sum_.assign(x_.size() + 1, 0.0);
    for (size_t i = 0; i < x_.size(); ++i) log_x_[i] = std::log(x_[i]);
    for (size_t i = x_.size(); i-- > 0;) suffix_log_sum_[i] = suffix_log_sum_[i + 1] + log_x_[i];
  }

  const std::vector<double>& values() const { return x_; }

  /// The first index of each distinct value below the largest: WWFit's xmins (data[:-1]) with
  /// ties merged, so that a tail is every value >= xmin, as the MLE's definition has it.
  std::vector<size_t> xmin_candidates() const {
    std::vector<size_t> out;
    for (size_t i = 0; i < x_.size() && x_[i] < x_.back(); ++i) {
      if (i == 0 || x_[i] != x_[i - 1]) out.push_back(i);
    }
    return out;
  }

  /// The fit of the tail from index `first`; gives up (pruned) once its distance reaches `bound`,
  /// since the search only wants candidates that beat the best so far.
  TailFit fit_tail(size_t first, double bound) const {
    const size_t n = x_.size() - first;
    const double tail = static_cast<double>(n);
    const double log_xmin = log_x_[first];
    const double sum_log_ratio = suffix_log_sum_[first] - tail * log_xmin;
    TailFit fit;
    // Values a few ulps apart can share a logarithm: no spread left to fit, never the best.
    if (!(sum_log_ratio > 0)) {
      fit.ks_distance = std::numeric_limits<double>::infinity();
      fit.pruned = true;
      return fit;
    }
    fit.alpha = 1.0 + tail / sum_log_ratio;
    for (size_t j = 0; j < n; ++j) {
      // The fitted CDF 1 - (x / xmin)^(1 - alpha), with expm1 keeping its small values exact.
      const double model_cdf = -std::expm1((1.0 - fit.alpha) * (log_x_[first + j] - log_xmin));
      const double empirical_cdf = static_cast<double>(j) / tail;
      fit.ks_distance = std::max(fit.ks_distance, std::abs(model_cdf - empirical_cdf));
      if (fit.ks_distance >= bound) {
        fit.pruned = true;
        break;
      }
    }
    return fit;
  }

 private:
  std::vector<double> x_;
  std::vector<double> log_x_;
  std::vector<double> suffix_log_sum_;
};

PowerLawFit not_fitted(std::string reason) {
  PowerLawFit fit;
  fit.reason = std::move(reason);
  return fit;
}

}  // namespace

Result<PowerLawFit> fit_power_law(std::span<const double> eigenvalues, uint64_t max_xmin_candidates) {
  for (size_t i = 0; i < eigenvalues.size(); ++i) {
    const double v = eigenvalues[i];
    if (!std::isfinite(v) || v <= 0) {
      return Status::InvalidArgument("power-law fit: eigenvalue " + std::to_string(i) + " is " + exact_text(v) +
                                     "; a power law needs finite positive values (drop zeros first)");
    }
  }
  if (eigenvalues.size() < kMinPowerLawEigenvalues) {
    return not_fitted(std::to_string(eigenvalues.size()) + " eigenvalues, fewer than the " +
                      std::to_string(kMinPowerLawEigenvalues) + " a power-law fit needs");
  }
  const SortedSample sample(eigenvalues);
  const std::vector<size_t> candidates = sample.xmin_candidates();
  if (candidates.empty()) {
    return not_fitted("all " + std::to_string(eigenvalues.size()) + " eigenvalues are equal: no tail to fit");
  }

  size_t best = 0;  // index into candidates
  TailFit best_fit;
  best_fit.ks_distance = std::numeric_limits<double>::infinity();
  const auto try_candidate = [&](size_t k) {
    const TailFit fit = sample.fit_tail(candidates[k], best_fit.ks_distance);
    if (!fit.pruned && fit.ks_distance < best_fit.ks_distance) {
      best = k;
      best_fit = fit;
    }
  };
  const size_t count = candidates.size();
  const size_t cap = static_cast<size_t>(std::max<uint64_t>(1, max_xmin_candidates));
  if (count <= cap) {
    for (size_t k = 0; k < count; ++k) try_candidate(k);
  } else {
    // The KS distance varies slowly with xmin's rank away from the bulk's edge, so a grid finds
    // the right neighbourhood and a full search of it the candidate.
    const size_t stride = (count + cap - 1) / cap;
    for (size_t k = 0; k < count; k += stride) try_candidate(k);
    const size_t grid_best = best;
    const size_t lo = grid_best >= stride ? grid_best - stride + 1 : 0;
    const size_t hi = std::min(count - 1, grid_best + stride - 1);
    for (size_t k = lo; k <= hi; ++k) try_candidate(k);
  }

  if (!std::isfinite(best_fit.ks_distance)) {
    return not_fitted("the eigenvalues' logarithms are all equal: no spread to fit");
  }
  PowerLawFit out;
  out.fitted = true;
  out.alpha = best_fit.alpha;
  out.xmin = sample.values()[candidates[best]];
  out.ks_distance = best_fit.ks_distance;
  out.tail_size = sample.values().size() - candidates[best];
  return out;
}

Result<SpectralMetrics> spectral_metrics(std::span<const double> singular_values, uint64_t rows, uint64_t cols) {
  const uint64_t big = std::max(rows, cols);
  const uint64_t small = std::min(rows, cols);
  const std::string shape = std::to_string(rows) + " x " + std::to_string(cols);
  if (singular_values.size() != small) {
    return Status::InvalidArgument("spectral metrics: " + std::to_string(singular_values.size()) +
                                   " singular values for a " + shape + " matrix, which has " +
                                   std::to_string(small));
  }
  // Squares of larger values overflow; below it the norms are computed relative to sigma_1.
  const double largest_squarable = std::sqrt(DBL_MAX);
  for (size_t i = 0; i < singular_values.size(); ++i) {
    const double s = singular_values[i];
    if (!std::isfinite(s) || s < 0 || s > largest_squarable) {
      return Status::InvalidArgument("spectral metrics: singular value " + std::to_string(i) + " of the " + shape +
                                     " matrix is " + exact_text(s) +
                                     "; singular values are finite, non-negative, and their squares must fit a double");
    }
  }

  SpectralMetrics m;
  if (small == 0) {
    m.power_law = not_fitted("the " + shape + " matrix is empty");
    return m;
  }
  const double n = static_cast<double>(big);
  m.aspect_ratio = n / static_cast<double>(small);
  const double sigma_1 = *std::max_element(singular_values.begin(), singular_values.end());
  if (sigma_1 == 0) {
    m.power_law = not_fitted("all singular values are zero");
    return m;
  }

  double sum_ratio = 0, sum_squared_ratio = 0;
  for (const double s : singular_values) {
    sum_ratio += s / sigma_1;
    sum_squared_ratio += (s / sigma_1) * (s / sigma_1);
  }
  m.spectral_norm = sigma_1;
  m.frobenius_norm = sigma_1 * std::sqrt(sum_squared_ratio);
  m.stable_rank = sum_squared_ratio;
  double entropy = 0;
  for (const double s : singular_values) {
    const double p = (s / sigma_1) / sum_ratio;
    if (p > 0) entropy -= p * std::log(p);
  }
  m.effective_rank = std::exp(entropy);

  const double rank_tolerance = n * DBL_EPSILON * sigma_1;
  m.mp_noise_variance = (sigma_1 * sigma_1 / n) * (sum_squared_ratio / static_cast<double>(small));
  const double edge_factor = 1.0 + 1.0 / std::sqrt(m.aspect_ratio);
  m.mp_bulk_edge = m.mp_noise_variance * edge_factor * edge_factor;
  std::vector<double> fitted_eigenvalues;
  fitted_eigenvalues.reserve(singular_values.size());
  for (const double s : singular_values) {
    const double lambda = s * s / n;
    if (s > rank_tolerance) ++m.rank;
    if (lambda > m.mp_bulk_edge) ++m.mp_spikes;
    if (s > rank_tolerance && s * s > kWeightWatcherSquaredSingularValueFloor) fitted_eigenvalues.push_back(lambda);
  }

  TM_ASSIGN_OR_RETURN(m.power_law, fit_power_law(fitted_eigenvalues));
  if (!m.power_law.fitted && fitted_eigenvalues.size() < singular_values.size()) {
    m.power_law.reason = std::to_string(fitted_eigenvalues.size()) + " of " + std::to_string(singular_values.size()) +
                         " singular values are above the rank tolerance and WeightWatcher's sigma^2 > 1e-5: " +
                         m.power_law.reason;
  }
  if (m.power_law.fitted) m.weighted_alpha = m.power_law.alpha * std::log10(sigma_1 * sigma_1);
  return m;
}

nlohmann::ordered_json spectral_metrics_json(const SpectralMetrics& m) {
  const PowerLawFit& fit = m.power_law;
  nlohmann::ordered_json power_law = {{"fitted", fit.fitted}};
  if (fit.fitted) {
    power_law["alpha"] = fit.alpha;
    power_law["xmin"] = fit.xmin;
    power_law["ks_distance"] = fit.ks_distance;
    power_law["tail_size"] = fit.tail_size;
  } else {
    power_law["reason"] = fit.reason;
    for (const char* key : {"alpha", "xmin", "ks_distance", "tail_size"}) power_law[key] = nullptr;
  }
  nlohmann::ordered_json j;
  j["spectral_norm"] = m.spectral_norm;
  j["frobenius_norm"] = m.frobenius_norm;
  j["stable_rank"] = m.stable_rank;
  j["effective_rank"] = m.effective_rank;
  j["rank"] = m.rank;
  j["aspect_ratio"] = m.aspect_ratio;
  j["mp_noise_variance"] = m.mp_noise_variance;
  j["mp_bulk_edge"] = m.mp_bulk_edge;
  j["mp_spikes"] = m.mp_spikes;
  j["power_law"] = std::move(power_law);
  j["weighted_alpha"] = fit.fitted ? nlohmann::ordered_json(m.weighted_alpha) : nlohmann::ordered_json(nullptr);
  return j;
}

}  // namespace tensormorph::engine
