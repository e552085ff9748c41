#include "ops/op_definitions.h"

#include <utility>

namespace tensormorph::ops {
namespace {

using compute::OpDefinition;
using compute::ParameterSpec;

OpDefinition decode_definition() {
  OpDefinition d;
  d.id = TM_OP_DECODE;
  d.summary = "Decode a tensor of any decodable dtype to float32";
  d.inputs = {{"input", "tensor<any decodable>", "contiguous elements, a whole number of blocks"}};
  d.outputs = {{"output", "tensor<F32>", "the same element count as the input, any shape"}};
  d.exactness_definition =
      "bitwise equal to the CPU reference decoder (which equals ggml's to_float for ggml types)";
  return d;
}

OpDefinition tile_stats_definition() {
  OpDefinition d;
  d.id = TM_OP_TILE_STATS;
  d.summary = "Statistics of every T x T tile of a 2-D view";
  d.inputs = {{"input", "tensor<any decodable>[rows, cols]", "contiguous row-major; blocks never cross rows"}};
  d.attributes = {
      {"row_begin", "i64", "first row of the view"},
      {"row_end", "i64", "one past the last row of the view (<= rows)"},
      {"col_begin", "i64", "first column of the view"},
      {"col_end", "i64", "one past the last column of the view (<= cols)"},
      {"tile", "i64", "tile size T, a power of two in [8, 4096]"},
  };
  d.outputs = {{"stats", "U8[tiles * sizeof(TM_TileStats)]",
                "TM_TileStats per tile of the view, row-major over tiles (edge tiles are ragged)"}};
  d.exactness_definition =
      "counts, min, max, absmax exact (min orders -0.0 below +0.0, max +0.0 above -0.0); sum, sum_sq "
      "bitwise equal to the canonical order: per row halving_sum over T float64 slots (+0.0 padded), "
      "per tile halving_sum over T row slots (docs/COMPUTE.md)";
  return d;
}

OpDefinition histogram_definition() {
  OpDefinition d;
  d.id = TM_OP_HISTOGRAM;
  d.summary = "Equal-width histogram of the decoded values";
  d.inputs = {{"input", "tensor<any decodable>", "contiguous elements, a whole number of blocks"}};
  d.attributes = {
      {"lo", "f64", "lower edge of the first bin (finite, < hi)"},
      {"hi", "f64", "upper edge of the last bin (finite)"},
      {"bins", "i64", "number of bins, >= 1"},
  };
  d.outputs = {{"counts", "U64[bins + 3]", "the bins, then below-lo, above-hi and NaN counts"}};
  d.exactness_definition =
      "exact counts; bin = floor((v - lo) * (bins / (hi - lo))) in float64, clamped to bins - 1 for v <= hi";
  return d;
}

OpDefinition exact_summary_definition() {
  OpDefinition d;
  d.id = TM_OP_EXACT_SUMMARY;
  d.summary = "Statistics of a whole F64 or 32/64-bit integer tensor in its own domain";
  d.inputs = {{"input", "tensor<F64|I32|U32|I64|U64>", "contiguous elements"}};
  d.outputs = {{"summary", "U8[sizeof(TM_ExactSummary)]", "one TM_ExactSummary"}};
  d.exactness_definition =
      "integers: counts, extremes and the 128-bit sum exact; mean = double(sum) / n; std = sqrt(double(n * "
      "sum(x^2) - sum(x)^2)) / n with the numerator exact in 256 bits. F64: counts and extremes exact (-0.0 below "
      "+0.0); with e = ilogb(absmax), mean and std from Neumaier-compensated sums, in element order, of x * 2^-e "
      "and of (x * 2^-e - mean * 2^-e)^2 (docs/COMPUTE.md)";
  return d;
}

}  // namespace

Status register_core_ops(compute::OpRegistry& registry) {
  TM_RETURN_IF_ERROR(registry.add(decode_definition()));
  TM_RETURN_IF_ERROR(registry.add(tile_stats_definition()));
  TM_RETURN_IF_ERROR(registry.add(histogram_definition()));
  TM_RETURN_IF_ERROR(registry.add(exact_summary_definition()));
  return Status::Ok();
}

}  // namespace tensormorph::ops
