// The spectrum report (`spectrum`, /api/spectra's rows, the Python API's spectrum()): each matrix's
// singular values by the exact SVD when it fits the budgets, by a consented rung otherwise, kept
// beside the index, with the spectral metrics of complete spectra.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/spectral_metrics.h"
#include "engine/spectrum.h"
#include "reports/report.h"

namespace tensormorph::reports {

/// What to compute.
struct SpectrumRequest {
  std::vector<const TensorInfo*> tensors;  ///< in the order rows are wanted
  uint64_t top = 0;         ///< values listed per tensor in JSON (0: all); the randomized rung's k (0: its default)
  std::string consent;      ///< a rung id or "approximate"; "" accepts none
  bool recompute = false;   ///< ignore results kept beside the index
  uint32_t threads = 0;     ///< CPU threads (0: every core)
};

/// One tensor's spectrum, its error, or the ladder it waits on.
struct SpectrumRow {
  const TensorInfo* tensor = nullptr;
  std::string error;                                ///< non-empty when it could not be computed
  engine::Spectrum spectrum;
  std::optional<engine::SpectralMetrics> metrics;   ///< of complete spectra
  bool stored = false;                              ///< read from the results kept beside the index
  std::optional<engine::LadderPlan> needs_consent;  ///< the exact result is out of budget and no rung was consented to
};

/// The rows, and whether the results could be kept.
struct SpectrumReport {
  std::vector<SpectrumRow> rows;
  Status kept;  ///< the save of the exact results beside the index
};

/// The tensors a spectrum covers by default: those of rank 2 or more (vectors have only a norm).
std::vector<const TensorInfo*> spectrum_tensors(const std::vector<const TensorInfo*>& selected, bool named);

/// Computes every requested tensor's row, reporting progress after each (modelled cost drives
/// it); CANCELLED-like INVALID_ARGUMENT ("stopped") when `progress` returns false. Fails only when
/// the kept results cannot be opened; a tensor's failure is its row's error.
Result<SpectrumReport> spectrum_report(compute::Scheduler& scheduler, const Checkpoint& ckpt,
                                       const SpectrumRequest& request, engine::Records& records,
                                       const ProgressFn& progress = {});

/// One row of tensormorph.spectrum/1 (the `top` largest values when top > 0).
nlohmann::ordered_json spectrum_row_json(const SpectrumRow& row, uint64_t top);

/// The whole tensormorph.spectrum/1 document (placements when `records` is given).
nlohmann::ordered_json spectrum_document(const Checkpoint& ckpt, const std::vector<SpectrumRow>& rows, uint64_t top,
                                         const engine::Records* records);

}  // namespace tensormorph::reports
