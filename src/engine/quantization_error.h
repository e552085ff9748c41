// What quantization cost: the error e = quantized - reference of a tensor, measured against its
// reference (a GGUF quantized tensor and the safetensors or F32 original it came from) or what a
// ggml type would cause (what-if: the reference encoded by ggml's own quantizer, never written).
// Per tensor the figures llama.cpp's quantize-stats prints (RMSE, max, the 95th/99th percentile of
// |e|, exact here) and an error histogram; per row and per quantization block, statistics of e.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/checkpoint_diff.h"

namespace tensormorph::engine {

/// What a measurement computes beyond the per-tensor figures.
struct QuantizationErrorOptions {
  uint32_t histogram_bins = 64;  ///< bins of the error histogram over [-max|e|, max|e|]
  bool rows = false;             ///< statistics of e per row of the matrix view
  bool blocks = false;           ///< statistics of e per block of the quantized type
};

/// The error of one quantized tensor against its reference.
struct QuantizationError {
  DType quantized = DType::kF32;   ///< the quantized side's type
  DType reference = DType::kF32;   ///< the reference side's type
  TM_DiffStats stats{};            ///< of (a = reference, b = quantized): max |e|, sums, counts
  ops::DiffMetrics metrics;        ///< RMSE, error relative to the reference, SNR; mean_diff is -mean(e)
  /// Exact order statistics of |e| over finite pairs (numpy's inverted_cdf): the median, p95, p99.
  double p50_abs = 0, p95_abs = 0, p99_abs = 0;
  double histogram_lo = 0, histogram_hi = 0;  ///< the histogram's range
  std::vector<uint64_t> histogram;            ///< tm.histogram@1's output: bins, below, above, NaN
  std::vector<TM_TileStats> rows;             ///< per row of e (options.rows)
  std::vector<TM_TileStats> blocks;           ///< per block of the quantized type (options.blocks)
  uint64_t block_elements = 0;                ///< elements per block (the type's block, along rows)
};

/// True when `dtype` is a ggml block-quantized type (Q*, IQ*, TQ*, MXFP4).
bool is_ggml_quantized(DType dtype);

/// The error of a matched pair one side of which is ggml-quantized: e = quantized - reference,
/// whichever side that is. INVALID_ARGUMENT when neither or both sides are quantized.
Result<QuantizationError> measured_quantization_error(compute::Scheduler& scheduler, const Checkpoint& a,
                                                      const Checkpoint& b, const MatchedTensors& match,
                                                      const QuantizationErrorOptions& options,
                                                      Records* records = nullptr, uint32_t max_threads = 0);

/// Why `tensor` cannot be quantized to `type` for a what-if ("" when it can): the type must have an
/// encoder, the tensor be decodable and its rows a whole number of the type's blocks.
std::string what_if_obstacle(const TensorInfo& tensor, DType type);

/// The error quantizing `tensor` to `type` with ggml's reference quantizer would cause (the encoded
/// bytes are kept in memory only). UNSUPPORTED with what_if_obstacle when it cannot.
Result<QuantizationError> what_if_quantization_error(compute::Scheduler& scheduler, const Checkpoint& checkpoint,
                                                     const TensorInfo& tensor, DType type,
                                                     const QuantizationErrorOptions& options,
                                                     Records* records = nullptr, uint32_t max_threads = 0);

/// A measurement as JSON: types, the per-tensor figures, the histogram, and rows/blocks when held.
nlohmann::ordered_json quantization_error_json(const QuantizationError& error);

}  // namespace tensormorph::engine
