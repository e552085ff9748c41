// Spectra of weight matrices and their exactness ladder: the singular values of a tensor seen as a
// matrix (as_matrix) by a backward-stable SVD when it fits the memory and time budgets, and below it
// three cheaper rungs a user must consent to — the Gram matrix's eigenvalues (bounded, weaker for
// small values), a randomized top-k (approximate, with an a-posteriori bound) and the SVD of a
// uniform sample of rows (approximate, no deterministic bound).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "compute/scheduler.h"
#include "engine/ladder.h"
#include "engine/tensor_ops.h"
#include "tensormorph/checkpoint.h"

namespace tensormorph::engine {

/// Rung ids, as `--consent` and the API name them (kConsentApproximate: the cheapest below exact).
inline constexpr const char* kSpectrumRungExact = kRungExact;
inline constexpr const char* kSpectrumRungGram = "gram";
inline constexpr const char* kSpectrumRungRandomized = "randomized";
inline constexpr const char* kSpectrumRungSample = "sample";
/// Singular values the randomized rung computes when the caller names no count.
inline constexpr uint64_t kDefaultSpectrumTopK = 64;
/// The sample rung keeps this many rows per column of the matrix (at least kMinSampleRows).
inline constexpr uint64_t kSampleRowsPerColumn = 4;
/// Fewest rows the sample rung keeps.
inline constexpr uint64_t kMinSampleRows = 1024;

/// What a spectrum computes.
struct SpectrumOptions {
  uint64_t top_k = kDefaultSpectrumTopK;  ///< the randomized rung's count
  uint32_t max_threads = 0;               ///< 0: every core
};

/// One rung of the spectrum ladder.
using SpectrumRung = LadderRung;
/// Whether the exact spectrum fits the budgets, and what is on offer when it does not.
using SpectrumPlan = LadderPlan;

/// The singular values of one matrix, as a rung computed them.
struct Spectrum {
  std::string rung = kSpectrumRungExact;
  uint64_t rows = 0, cols = 0;   ///< the matrix (as_matrix of the tensor)
  std::vector<double> values;    ///< descending
  std::vector<double> bounds;    ///< each value's absolute error bound (approximate rungs: see error_bound)
  bool complete = true;          ///< all min(rows, cols) values (false: the randomized top-k)
  uint64_t sampled_rows = 0;     ///< the sample rung: rows kept (values scaled by sqrt(rows / sampled_rows))
  std::string error_bound;       ///< the rung's guarantee, in words
};

/// Compares the exact rung's estimate with the budgets and lists the rungs. FAILED_PRECONDITION
/// for a tensor that is not a matrix (rank below 2), UNSUPPORTED for a dtype that cannot be decoded.
Result<SpectrumPlan> plan_spectrum(compute::Scheduler& scheduler, const Checkpoint& checkpoint, const TensorInfo& tensor,
                                   const SpectrumOptions& options);

/// Runs `rung` on `tensor` through the scheduler (the consent is the caller's: nothing checks it here).
Result<Spectrum> spectrum_by_rung(compute::Scheduler& scheduler, const Checkpoint& checkpoint, const TensorInfo& tensor,
                                  const SpectrumOptions& options, const std::string& rung, Records* records = nullptr);

/// `spectrum` as JSON: {rung, rows, cols, complete, sampled_rows (sample rung), error_bound, values, bounds}.
nlohmann::ordered_json spectrum_json(const Spectrum& spectrum);
/// A spectrum back from spectrum_json (the analysis cache).
Result<Spectrum> spectrum_from_json(const nlohmann::json& j);
/// The analysis cache's key of an exact spectrum.
std::string spectrum_cache_key();

}  // namespace tensormorph::engine
