// What an operation is, as data: its inputs, attributes, outputs, exactness definition, CPU
// reference and the cases its conformance test runs. Backends, the scheduler and the faces read
// these; nothing here knows the scheduler.
#pragma once

#include <cstdint>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "compute/ops/op_split.h"
#include "tensormorph/c/plugin.h"
#include "tensormorph/dtype.h"
#include "tensormorph/status.h"

namespace tensormorph::ops {

/// Kind of an attribute value (TM_Attribute.i or TM_Attribute.f).
enum class AttributeKind { kInt, kFloat };

/// One tensor an operation reads.
struct InputSpec {
  std::string name;             ///< e.g. "input"
  std::vector<DType> dtypes;    ///< the element types accepted
  std::string dtypes_text;      ///< the same in words ("any decodable", "F64|I32|U32|I64|U64")
  uint32_t min_rank = 0;        ///< smallest rank accepted
  uint32_t max_rank = 8;        ///< largest rank accepted
  std::string shape_rule;       ///< e.g. "[rows, cols], contiguous row-major; blocks never cross rows"
};

/// One named scalar attribute. Every attribute is required unless it has a default.
struct AttributeSpec {
  std::string name;             ///< a TM_ATTR_* constant of plugin.h
  AttributeKind kind = AttributeKind::kInt;
  bool has_default = false;     ///< false: the attribute must be given
  double default_value = 0;     ///< when has_default
  double min = 0;               ///< smallest valid value (the operation's parser checks further rules)
  double max = 0;               ///< largest valid value
  std::string description;      ///< one line, including rules the range cannot state
  /// When the range grew in a minor ABI version: that minor (0: never grew). A plugin built for an
  /// older minor takes values up to `max_before` only, so the scheduler sends it no larger one.
  uint32_t widened_in_minor = 0;
  double max_before = 0;        ///< the largest value before `widened_in_minor`
};

/// How an output's size is known.
enum class OutputSize {
  kDetermined,     ///< from the inputs' shapes and the attributes alone
  kDataDependent,  ///< from the data: the host passes a capacity, the backend reports what it wrote
};

/// One tensor an operation writes.
struct OutputSpec {
  std::string name;             ///< e.g. "stats"
  DType dtype = DType::kU8;     ///< its element type
  std::string shape_rule;       ///< e.g. "U8[tiles * sizeof(TM_TileStats)]"
  OutputSize size = OutputSize::kDetermined;
  std::string description;      ///< one line
};

/// A cheaper rung of the exactness ladder offered when the exact operation is out of reach.
struct LadderRung {
  std::string op;           ///< the approximate operation that computes this rung
  std::string computes;     ///< what it computes, in words
  std::string error_bound;  ///< its error bound, in words (with the formula)
};

/// One tensor of a conformance case: its dtype and shape (inputs are filled by the test).
struct CaseTensor {
  std::optional<DType> dtype;  ///< an input without one is run for every dtype the input accepts
  std::vector<uint64_t> shape;
  std::vector<uint64_t> values;  ///< a U64 input's fixed values (its element count of them); else none
};

/// One attribute value of a conformance case.
struct CaseAttribute {
  std::string name;
  int64_t i = 0;
  double f = 0;
};

/// An instance the conformance test runs on every backend that supports it, against the reference.
struct ConformanceCase {
  std::string label;                    ///< e.g. "BF16 matrix, ragged edge tiles"
  std::vector<CaseTensor> inputs;
  std::vector<CaseAttribute> attributes;
  std::vector<CaseTensor> outputs;      ///< for data-dependent outputs: the capacity
  /// Values the test writes into the first input: random finite values, or random values with NaN
  /// and +-Inf mixed in; tile-statistics grids are always written as real statistics of random
  /// matrices. Later inputs hold their fixed values.
  bool with_non_finite = false;
  /// The operation refuses non-finite values (a spectrum): input 0 holds the random weights without
  /// the NaN and infinities they otherwise plant.
  bool finite_only = false;
  /// How a later input that accepts decodable dtypes and has no fixed values is filled: its own
  /// data of its dtype (the case's, or input 0's when it names none), a byte copy of input 0 (the
  /// same dtype: identical inputs), or input 0's decoded values encoded into its dtype (a
  /// quantization error; dtypes without an encoder get their own data).
  enum class LaterInput { kOwnData, kCopyOfFirst, kFirstReencoded };
  LaterInput later_inputs = LaterInput::kOwnData;
};

/// The CPU reference of an operation on an ABI instance: validates it as every backend must and
/// writes the outputs (host memory only). The ground truth every backend is tested against.
using ReferenceFn = Status (*)(const TM_OpInstance& instance);

/// For an operation whose results are bounded rather than bitwise: OK when a backend's outputs
/// (`got`) agree with the reference's (`want`) within the bounds the operation states.
using WithinBoundsFn = Status (*)(std::span<const std::vector<std::byte>> got, std::span<const std::vector<std::byte>> want);

/// The definition of one operation.
struct OpDefinition {
  std::string id;                        ///< a TM_OP_* constant of plugin.h, e.g. "tm.tile_stats@1"
  std::string summary;                   ///< one line
  std::vector<InputSpec> inputs;         ///< tensors read, in order
  std::vector<AttributeSpec> attributes; ///< scalars, any order
  std::vector<OutputSpec> outputs;       ///< tensors written, in order
  std::string exactness_definition;      ///< what "exact" means for this operation
  std::vector<LadderRung> ladder;        ///< approximate rungs, strongest first (empty: always exact)
  ReferenceFn reference = nullptr;       ///< the CPU reference
  WithinBoundsFn within_bounds = nullptr;  ///< bounded operations: how results are compared (else bitwise)
  std::vector<ConformanceCase> cases;    ///< what the conformance test runs
  SplitRule split;                       ///< how one instance cuts into parts on several backends (or why not)
};

}  // namespace tensormorph::ops
