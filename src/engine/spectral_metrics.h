// Spectral metrics of a weight matrix from its singular values, as WeightWatcher popularised them:
// norms and ranks, the Marchenko-Pastur bulk edge and the spikes above it, and the power-law
// exponent alpha of the tail of the empirical spectral density (ESD).
//
// Conventions, for W of shape rows x cols with N = max(rows, cols), M = min(rows, cols), Q = N / M:
// - The ESD is the spectrum of X = W^T W / N: lambda_i = sigma_i^2 / N (the random-matrix scaling,
//   under which an i.i.d. matrix of element variance s^2 has its bulk on [s^2 (1 - 1/sqrt Q)^2,
//   s^2 (1 + 1/sqrt Q)^2]). WeightWatcher itself fits sigma_i^2 unscaled; alpha, the KS distance
//   and the tail size do not depend on the scale, xmin does (multiply by N to compare).
// - The power-law fit is WeightWatcher's own (weightwatcher/WW_powerlaw.py, WWFit, its default
//   since it stopped calling the `powerlaw` package): for each candidate xmin, the continuous
//   maximum-likelihood alpha = 1 + n / sum(ln(lambda_i / xmin)) over the n eigenvalues >= xmin,
//   and the Kolmogorov-Smirnov distance D = max_j |1 - (x_j / xmin)^(1 - alpha) - j / n| over the
//   tail sorted ascending (j = 0..n-1, the empirical CDF WWFit uses); the xmin of least D wins,
//   the earliest on ties. xmax is the largest eigenvalue (WeightWatcher's default xmax=None: no
//   truncation), and the candidates are the eigenvalues below the largest, so a tail holds at
//   least two distinct values.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

#include "tensormorph/status.h"

namespace tensormorph::engine {

/// Fewest eigenvalues fit_power_law fits (WeightWatcher skips layers below its min_evals = 10).
inline constexpr uint64_t kMinPowerLawEigenvalues = 10;

/// Most xmin candidates fit_power_law evaluates in full before it searches a rank grid instead.
inline constexpr uint64_t kDefaultMaxXminCandidates = 1024;

/// WeightWatcher's EVALS_THRESH: it fits only eigenvalues sigma^2 > 1e-5 of the unscaled W^T W.
inline constexpr double kWeightWatcherSquaredSingularValueFloor = 1e-5;

/// A power law p(x) ~ x^-alpha fitted to the tail x >= xmin of a sample.
struct PowerLawFit {
  bool fitted = false;       ///< false: too few values or no spread; `reason` says which
  std::string reason;        ///< why no fit was made (empty when fitted)
  double alpha = 0;          ///< the maximum-likelihood exponent (0 when not fitted)
  double xmin = 0;           ///< where the tail starts: the chosen candidate (0 when not fitted)
  double ks_distance = 0;    ///< D of the chosen xmin (0 when not fitted)
  uint64_t tail_size = 0;    ///< values >= xmin (WeightWatcher's num_pl_spikes)
};

/// Fits a power law to the tail of `eigenvalues` (any order), choosing xmin by least KS distance.
/// Every candidate xmin (each distinct value below the largest) is tried when there are at most
/// `max_xmin_candidates`: O(n log n + n c) for c candidates, each candidate's distance computation
/// stopping once it exceeds the best so far. Above that, candidates on a grid of every s-th rank
/// (s = ceil(c / max_xmin_candidates)) and then every candidate within s ranks of the grid's best:
/// O(n (max_xmin_candidates + 2 s)), which can miss a minimum narrower than the grid's spacing.
/// Not fitted (OK, with a reason) below kMinPowerLawEigenvalues values or when all are equal;
/// INVALID_ARGUMENT for a value that is NaN, infinite, zero or negative.
Result<PowerLawFit> fit_power_law(std::span<const double> eigenvalues,
                                  uint64_t max_xmin_candidates = kDefaultMaxXminCandidates);

/// Spectral metrics of a rows x cols matrix W (see the file comment for N, M, Q and the ESD).
struct SpectralMetrics {
  double spectral_norm = 0;      ///< sigma_1, the largest singular value
  double frobenius_norm = 0;     ///< sqrt(sum sigma_i^2)
  double stable_rank = 0;        ///< sum sigma_i^2 / sigma_1^2 (0 for W = 0)
  /// Roy & Vetterli (2007): exp(-sum p_i ln p_i) with p_i = sigma_i / sum_j sigma_j (0 for W = 0).
  double effective_rank = 0;
  uint64_t rank = 0;             ///< singular values above max(rows, cols) * DBL_EPSILON * sigma_1 (numpy's)
  double aspect_ratio = 0;       ///< Q = N / M (0 for an empty matrix)
  /// s^2 = ||W||_F^2 / (N M), the element variance were W pure noise; spikes inflate it slightly
  /// (WeightWatcher instead fits s to the ESD's density).
  double mp_noise_variance = 0;
  double mp_bulk_edge = 0;       ///< lambda_+ = s^2 (1 + 1/sqrt Q)^2, in ESD units (sigma^2 / N)
  uint64_t mp_spikes = 0;        ///< ESD eigenvalues strictly above mp_bulk_edge
  /// The fit of the ESD's eigenvalues that WeightWatcher fits: sigma above the rank tolerance and
  /// sigma^2 above kWeightWatcherSquaredSingularValueFloor. xmin is in ESD units.
  PowerLawFit power_law;
  /// alpha * log10(sigma_1^2): WeightWatcher's alpha_weighted, whose log is of the largest
  /// eigenvalue of the unscaled W^T W (not of the ESD); 0 when not fitted.
  double weighted_alpha = 0;
};

/// The metrics of W from its min(rows, cols) singular values (any order, zeros allowed; none for
/// an empty matrix). INVALID_ARGUMENT when the count is not min(rows, cols) or a value is NaN,
/// infinite, negative, or so large that its square overflows.
Result<SpectralMetrics> spectral_metrics(std::span<const double> singular_values, uint64_t rows, uint64_t cols);

/// `m` as JSON with snake_case keys; the fit's numbers are null when it was not fitted.
nlohmann::ordered_json spectral_metrics_json(const SpectralMetrics& m);

}  // namespace tensormorph::engine
