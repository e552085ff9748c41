// The quantization-error report (`quantize-error`, the Python API's quantize_error()): a
// checkpoint's quantized tensors measured against the reference they came from, or what ggml
// types would cost each floating-point matrix (quantized in memory by ggml's reference quantizers).
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/quantization_error.h"
#include "reports/report.h"

namespace tensormorph::reports {

/// What to measure: against `reference` when it is given, else what each of `types` would cost.
struct QuantizeErrorRequest {
  const Checkpoint* reference = nullptr;  ///< the original (measured mode), or nullptr (what-if mode)
  std::vector<DType> types;               ///< what-if mode: ggml types with an encoder
  std::vector<std::string> globs;         ///< only tensors whose names match (every tensor when empty)
  std::string map_file;                   ///< measured mode: "NAME REFERENCE_NAME" lines ("" = none)
  bool rows = false;                      ///< also every row's error
  bool all_ranks = false;                 ///< what-if mode: vectors too, not only matrices
  uint32_t threads = 0;                   ///< CPU threads (0: every core)
};

/// One measured (tensor, type), or why it was not measured.
struct QuantizeErrorEntry {
  std::string tensor;
  std::string reference_tensor;  ///< measured mode
  DType type = DType::kF32;
  std::string skipped;           ///< why it was not measured
  std::string error;
  engine::QuantizationError result;
};

/// The error of all the measured elements of one type together.
struct QuantizeErrorTotal {
  uint64_t tensors = 0, pairs = 0;
  double sum_sq = 0, ref_sq = 0, max_abs = 0;
  double rmse() const;     ///< over every finite pair
  double rel_rms() const;  ///< ‖e‖ / ‖reference‖
};

/// Every entry and the totals per type.
struct QuantizeErrorReport {
  std::vector<QuantizeErrorEntry> entries;
  std::map<DType, QuantizeErrorTotal> totals;
};

/// Parses "Q4_K,q8_0": INVALID_ARGUMENT naming the types with a ggml encoder when one has none.
Result<std::vector<DType>> parse_quantized_types(const std::string& list);

/// Measures every selected tensor, reporting progress (stored bytes) after each. NOT_FOUND when
/// nothing was selected; a measurement's failure is its entry's error.
Result<QuantizeErrorReport> quantize_error_report(compute::Scheduler& scheduler, const Checkpoint& ckpt,
                                                  const QuantizeErrorRequest& request, engine::Records& records,
                                                  const ProgressFn& progress = {});

/// The tensormorph.quantize_error/1 document: path, reference, tensors, totals (no gate; placements
/// when `records` is given).
nlohmann::ordered_json quantize_error_document(const Checkpoint& ckpt, const QuantizeErrorRequest& request,
                                               const QuantizeErrorReport& report, const engine::Records* records);

}  // namespace tensormorph::reports
