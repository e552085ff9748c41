#include "compute/ops/op_instance.h"

#include <cmath>
#include <map>
#include <tuple>
#include <string>
#include <vector>

#include "core/dtype_abi.h"
#include "compute/ops/definitions.h"
#include "compute/ops/radix_histogram.h"

namespace tensormorph::ops {
namespace {

std::string shape_text(const TM_TensorArg& arg) {
  std::string s = "[";
  for (uint32_t i = 0; i < arg.rank && i < 8; ++i) s += (i ? ", " : "") + std::to_string(arg.shape[i]);
  return s + "]";
}

Status invalid(const std::string& op, const std::string& what) { return Status::InvalidArgument(op + ": " + what); }

/// Reads element `index` of a caller's TM_TensorArg array, whose stride is the caller's struct size.
Result<TM_TensorArg> tensor_arg_at(const std::string& op, const char* role, const TM_TensorArg* array,
                                   uint32_t index) {
  if (array == nullptr) return invalid(op, std::string(role) + " array is null");
  const size_t stride = array->struct_size;
  if (stride < sizeof(size_t)) return invalid(op, std::string(role) + " struct_size " + std::to_string(stride) + " is too small");
  const auto* element = reinterpret_cast<const TM_TensorArg*>(reinterpret_cast<const std::byte*>(array) + index * stride);
  return read_abi_struct(element);
}

/// Validates one tensor argument: known dtype, rank <= 8, element count, nbytes and data pointer.
Result<TensorArgument> check_tensor(const std::string& op, const char* role, const TM_TensorArg& arg, bool is_output) {
  TensorArgument t;
  t.arg = arg;
  const std::string name = std::string(role);
  auto dtype = from_abi_dtype(arg.dtype);
  if (!dtype) return invalid(op, name + " has unknown dtype id " + std::to_string(static_cast<int>(arg.dtype)));
  t.dtype = *dtype;
  if (arg.rank > 8) return invalid(op, name + " has rank " + std::to_string(arg.rank) + " (at most 8)");
  auto elems = checked_element_count(std::span<const uint64_t>(arg.shape, arg.rank));
  if (!elems.ok()) return invalid(op, name + ": " + elems.status().message());
  t.elems = *elems;
  auto bytes = dtype_storage_bytes(t.dtype, t.elems);
  if (!bytes.ok()) return invalid(op, name + " " + shape_text(arg) + ": " + bytes.status().message());
  if (arg.nbytes != *bytes) {
    return invalid(op, name + " " + std::string(dtype_name(t.dtype)) + shape_text(arg) + " takes " +
                           std::to_string(*bytes) + " bytes, but nbytes is " + std::to_string(arg.nbytes));
  }
  const bool host = is_output ? arg.host_out != nullptr : arg.host_data != nullptr;
  const bool buffer = arg.buffer != nullptr;
  if (host && buffer) return invalid(op, name + " sets both host memory and a buffer");
  if (!host && !buffer && arg.nbytes != 0) return invalid(op, name + " has neither host memory nor a buffer");
  uint64_t end = 0;
  if (__builtin_add_overflow(arg.byte_offset, arg.nbytes, &end)) return invalid(op, name + " byte_offset overflows");
  return t;
}

/// Reads the instance's single input and single output.
Status read_io(const std::string& op, const TM_OpInstance& instance, TensorArgument& input, TensorArgument& output) {
  if (instance.input_count != 1 || instance.output_count != 1) {
    return invalid(op, "takes 1 input and 1 output, got " + std::to_string(instance.input_count) + " and " +
                           std::to_string(instance.output_count));
  }
  TM_ASSIGN_OR_RETURN(TM_TensorArg in, tensor_arg_at(op, "input", instance.inputs, 0));
  TM_ASSIGN_OR_RETURN(TM_TensorArg out, tensor_arg_at(op, "output", instance.outputs, 0));
  TM_ASSIGN_OR_RETURN(input, check_tensor(op, "input", in, false));
  TM_ASSIGN_OR_RETURN(output, check_tensor(op, "output", out, true));
  return Status::Ok();
}

/// The instance's attributes by name; unknown names, duplicates and missing ones are errors
/// (the `optional` ones may be missing).
Result<std::map<std::string, TM_Attribute>> read_attributes(const std::string& op, const TM_OpInstance& instance,
                                                            const std::vector<std::string>& expected,
                                                            const std::vector<std::string>& optional = {}) {
  std::map<std::string, TM_Attribute> found;
  if (instance.attribute_count > 0 && instance.attributes == nullptr) return invalid(op, "attribute array is null");
  const size_t stride = instance.attribute_count > 0 ? instance.attributes->struct_size : 0;
  if (instance.attribute_count > 0 && stride < sizeof(size_t)) return invalid(op, "attribute struct_size is too small");
  for (uint32_t i = 0; i < instance.attribute_count; ++i) {
    const auto* element =
        reinterpret_cast<const TM_Attribute*>(reinterpret_cast<const std::byte*>(instance.attributes) + i * stride);
    const TM_Attribute attr = read_abi_struct(element);
    if (attr.name == nullptr) return invalid(op, "attribute " + std::to_string(i) + " has no name");
    const std::string name = attr.name;
    if (std::find(expected.begin(), expected.end(), name) == expected.end() &&
        std::find(optional.begin(), optional.end(), name) == optional.end()) {
      return invalid(op, "unknown attribute '" + name + "'");
    }
    if (!found.emplace(name, attr).second) return invalid(op, "attribute '" + name + "' given twice");
  }
  for (const auto& name : expected) {
    if (found.find(name) == found.end()) return invalid(op, "missing attribute '" + name + "'");
  }
  return found;
}

Result<uint64_t> non_negative(const std::string& op, const std::map<std::string, TM_Attribute>& attrs, const char* name) {
  const int64_t v = attrs.at(name).i;
  if (v < 0) return invalid(op, std::string("attribute '") + name + "' is negative (" + std::to_string(v) + ")");
  return static_cast<uint64_t>(v);
}

Result<TM_OpInstance> read_instance(const TM_OpInstance& op, const char* expected_id) {
  const TM_OpInstance instance = read_abi_struct(&op);
  if (instance.op == nullptr || std::string_view(instance.op) != expected_id) {
    return invalid(expected_id, std::string("instance names operation '") + (instance.op ? instance.op : "(null)") + "'");
  }
  return instance;
}

}  // namespace

std::optional<CoreOp> core_op_from_id(std::string_view id) {
  if (id == TM_OP_DECODE) return CoreOp::kDecode;
  if (id == TM_OP_TILE_STATS) return CoreOp::kTileStats;
  if (id == TM_OP_HISTOGRAM) return CoreOp::kHistogram;
  if (id == TM_OP_EXACT_SUMMARY) return CoreOp::kExactSummary;
  if (id == TM_OP_RADIX_HISTOGRAM) return CoreOp::kRadixHistogram;
  if (id == TM_OP_TOP_K) return CoreOp::kTopK;
  if (id == TM_OP_CHANNEL_STATS) return CoreOp::kChannelStats;
  if (id == TM_OP_DIFF_STATS) return CoreOp::kDiffStats;
  if (id == TM_OP_SUBTRACT) return CoreOp::kSubtract;
  return std::nullopt;
}

std::optional<SpectrumMethod> spectrum_method_of(std::string_view op_id) {
  if (op_id == TM_OP_SPECTRUM) return SpectrumMethod::kSvd;
  if (op_id == TM_OP_SPECTRUM_GRAM) return SpectrumMethod::kGram;
  if (op_id == TM_OP_SPECTRUM_RANDOMIZED) return SpectrumMethod::kRandomized;
  return std::nullopt;
}

const char* spectrum_op_id(SpectrumMethod method) {
  switch (method) {
    case SpectrumMethod::kSvd: return TM_OP_SPECTRUM;
    case SpectrumMethod::kGram: return TM_OP_SPECTRUM_GRAM;
    case SpectrumMethod::kRandomized: return TM_OP_SPECTRUM_RANDOMIZED;
  }
  return TM_OP_SPECTRUM;
}

Result<SpectrumArgs> parse_spectrum(const TM_OpInstance& op) {
  const TM_OpInstance head = read_abi_struct(&op);
  const auto method = head.op ? spectrum_method_of(head.op) : std::nullopt;
  if (!method) return invalid(TM_OP_SPECTRUM, std::string("instance names operation '") + (head.op ? head.op : "(null)") + "'");
  const std::string id = spectrum_op_id(*method);
  TM_ASSIGN_OR_RETURN(const TM_OpInstance instance, read_instance(op, id.c_str()));
  if (instance.input_count != 1 || instance.output_count != 2) {
    return invalid(id, "takes 1 input and 2 outputs (values, bounds), got " + std::to_string(instance.input_count) +
                           " and " + std::to_string(instance.output_count));
  }
  SpectrumArgs args;
  args.method = *method;
  TM_ASSIGN_OR_RETURN(TM_TensorArg in, tensor_arg_at(id, "input", instance.inputs, 0));
  TM_ASSIGN_OR_RETURN(args.input, check_tensor(id, "input", in, false));
  TM_ASSIGN_OR_RETURN(TM_TensorArg values, tensor_arg_at(id, "values", instance.outputs, 0));
  TM_ASSIGN_OR_RETURN(args.values, check_tensor(id, "values", values, true));
  TM_ASSIGN_OR_RETURN(TM_TensorArg bounds, tensor_arg_at(id, "bounds", instance.outputs, 1));
  TM_ASSIGN_OR_RETURN(args.bounds, check_tensor(id, "bounds", bounds, true));
  if (args.input.arg.rank != 2) return invalid(id, "input has rank " + std::to_string(args.input.arg.rank) + ", not 2");
  args.rows = args.input.arg.shape[0];
  args.cols = args.input.arg.shape[1];
  if (args.rows == 0 || args.cols == 0) return invalid(id, "input" + shape_text(args.input.arg) + " has an empty side");
  constexpr uint64_t kMaxSide = (uint64_t{1} << 31) - 1;  // LAPACK's 32-bit dimensions
  if (args.rows > kMaxSide || args.cols > kMaxSide) return invalid(id, "input" + shape_text(args.input.arg) + " has a side over 2^31 - 1");
  TM_RETURN_IF_ERROR(matrix_row_bytes(args.input.dtype, args.cols).status());
  args.count = std::min(args.rows, args.cols);
  if (*method == SpectrumMethod::kRandomized) {
    TM_ASSIGN_OR_RETURN(auto attrs, read_attributes(id, instance, {kAttrK}));
    TM_ASSIGN_OR_RETURN(const uint64_t k, non_negative(id, attrs, kAttrK));
    const uint64_t most = std::min(args.count, kSpectrumMaxK);
    if (k < 1 || k > most) return invalid(id, "k " + std::to_string(k) + " is outside [1, " + std::to_string(most) + "]");
    args.count = k;
  } else {
    TM_RETURN_IF_ERROR(read_attributes(id, instance, {}).status());
  }
  for (const auto* out : {&args.values, &args.bounds}) {
    if (out->dtype != DType::kF64 || out->arg.rank != 1 || out->elems != args.count) {
      return invalid(id, std::string(out == &args.values ? "values" : "bounds") + " must be F64[" +
                             std::to_string(args.count) + "], got " + std::string(dtype_name(out->dtype)) + shape_text(out->arg));
    }
  }
  return args;
}

Result<DecodeArgs> parse_decode(const TM_OpInstance& op) {
  const std::string id = TM_OP_DECODE;
  TM_ASSIGN_OR_RETURN(const TM_OpInstance instance, read_instance(op, TM_OP_DECODE));
  DecodeArgs args;
  TM_RETURN_IF_ERROR(read_io(id, instance, args.input, args.output));
  TM_RETURN_IF_ERROR(read_attributes(id, instance, {}).status());
  if (args.output.dtype != DType::kF32) {
    return invalid(id, "output dtype is " + std::string(dtype_name(args.output.dtype)) + ", not F32");
  }
  if (args.output.elems != args.input.elems) {
    return invalid(id, "output holds " + std::to_string(args.output.elems) + " elements, the input " +
                           std::to_string(args.input.elems));
  }
  return args;
}

Result<TileStatsArgs> parse_tile_stats(const TM_OpInstance& op) {
  const std::string id = TM_OP_TILE_STATS;
  TM_ASSIGN_OR_RETURN(const TM_OpInstance instance, read_instance(op, TM_OP_TILE_STATS));
  TileStatsArgs args;
  TM_RETURN_IF_ERROR(read_io(id, instance, args.input, args.output));
  TM_ASSIGN_OR_RETURN(auto attrs, read_attributes(id, instance, {kAttrRowBegin, kAttrRowEnd, kAttrColBegin,
                                                                 kAttrColEnd, kAttrTile}));
  if (args.input.arg.rank != 2) {
    return invalid(id, "input has rank " + std::to_string(args.input.arg.rank) + ", not 2");
  }
  args.rows = args.input.arg.shape[0];
  args.cols = args.input.arg.shape[1];
  TM_ASSIGN_OR_RETURN(args.range.row_begin, non_negative(id, attrs, kAttrRowBegin));
  TM_ASSIGN_OR_RETURN(args.range.row_end, non_negative(id, attrs, kAttrRowEnd));
  TM_ASSIGN_OR_RETURN(args.range.col_begin, non_negative(id, attrs, kAttrColBegin));
  TM_ASSIGN_OR_RETURN(args.range.col_end, non_negative(id, attrs, kAttrColEnd));
  TM_ASSIGN_OR_RETURN(const uint64_t tile, non_negative(id, attrs, kAttrTile));
  args.tile = tile > kMaxTile ? 0 : static_cast<uint32_t>(tile);
  if (tile > kMaxTile) return invalid(id, "tile " + std::to_string(tile) + " is larger than " + std::to_string(kMaxTile));
  TM_RETURN_IF_ERROR(check_tile_stats_view(args.input.dtype, args.rows, args.cols, args.range, args.tile));
  const TileGrid grid = tile_grid(args.range, args.tile);
  args.grid = grid;
  if (args.output.dtype != DType::kU8 || args.output.arg.rank != 1) {
    return invalid(id, "output must be U8 of rank 1 (raw TM_TileStats records), got " +
                           std::string(dtype_name(args.output.dtype)) + shape_text(args.output.arg));
  }
  uint64_t expected = 0;
  if (__builtin_mul_overflow(grid.count(), uint64_t{sizeof(TM_TileStats)}, &expected) ||
      args.output.elems != expected) {
    return invalid(id, "the view's " + std::to_string(grid.rows) + " x " + std::to_string(grid.cols) +
                           " tiles need an output of " + std::to_string(grid.count()) + " * " +
                           std::to_string(sizeof(TM_TileStats)) + " bytes, got " + std::to_string(args.output.elems));
  }
  return args;
}

Result<HistogramArgs> parse_histogram(const TM_OpInstance& op) {
  const std::string id = TM_OP_HISTOGRAM;
  TM_ASSIGN_OR_RETURN(const TM_OpInstance instance, read_instance(op, TM_OP_HISTOGRAM));
  HistogramArgs args;
  TM_RETURN_IF_ERROR(read_io(id, instance, args.input, args.output));
  TM_ASSIGN_OR_RETURN(auto attrs, read_attributes(id, instance, {kAttrLo, kAttrHi, kAttrBins}));
  args.lo = attrs.at(kAttrLo).f;
  args.hi = attrs.at(kAttrHi).f;
  TM_ASSIGN_OR_RETURN(args.bins, non_negative(id, attrs, kAttrBins));
  if (args.output.dtype != DType::kU64 || args.output.arg.rank != 1) {
    return invalid(id, "output must be U64 of rank 1, got " + std::string(dtype_name(args.output.dtype)) +
                           shape_text(args.output.arg));
  }
  TM_RETURN_IF_ERROR(check_histogram_params(args.lo, args.hi, args.bins, args.output.elems));
  return args;
}

Result<ExactSummaryArgs> parse_exact_summary(const TM_OpInstance& op) {
  const std::string id = TM_OP_EXACT_SUMMARY;
  TM_ASSIGN_OR_RETURN(const TM_OpInstance instance, read_instance(op, TM_OP_EXACT_SUMMARY));
  ExactSummaryArgs args;
  TM_RETURN_IF_ERROR(read_io(id, instance, args.input, args.output));
  TM_RETURN_IF_ERROR(read_attributes(id, instance, {}).status());
  if (!exact_summary_supported(args.input.dtype)) {
    return invalid(id, "input dtype " + std::string(dtype_name(args.input.dtype)) + " is not F64, I32, U32, I64 or U64");
  }
  if (args.output.dtype != DType::kU8 || args.output.elems != sizeof(TM_ExactSummary)) {
    return invalid(id, "output must be U8[" + std::to_string(sizeof(TM_ExactSummary)) + "], got " +
                           std::string(dtype_name(args.output.dtype)) + shape_text(args.output.arg));
  }
  return args;
}

Result<RadixHistogramArgs> parse_radix_histogram(const TM_OpInstance& op) {
  const std::string id = TM_OP_RADIX_HISTOGRAM;
  TM_ASSIGN_OR_RETURN(const TM_OpInstance instance, read_instance(op, TM_OP_RADIX_HISTOGRAM));
  if (instance.input_count != 2 || instance.output_count != 2) {
    return invalid(id, "takes 2 inputs (values, prefixes) and 2 outputs (counts, classes), got " +
                           std::to_string(instance.input_count) + " and " + std::to_string(instance.output_count));
  }
  RadixHistogramArgs args;
  const char* roles[] = {"input", "prefixes", "counts", "classes"};
  TensorArgument* targets[] = {&args.input, &args.prefixes, &args.counts, &args.classes};
  for (uint32_t i = 0; i < 4; ++i) {
    const bool output = i >= 2;
    TM_ASSIGN_OR_RETURN(TM_TensorArg arg, tensor_arg_at(id, roles[i], output ? instance.outputs : instance.inputs, i % 2));
    TM_ASSIGN_OR_RETURN(*targets[i], check_tensor(id, roles[i], arg, output));
  }
  TM_ASSIGN_OR_RETURN(auto attrs, read_attributes(id, instance, {kAttrKey, kAttrShift, kAttrBits}, {kAttrCenter}));
  const int64_t key = attrs.at(kAttrKey).i;
  if (key < TM_RADIX_KEY_VALUE || key > TM_RADIX_KEY_DEVIATION) {
    return invalid(id, "key " + std::to_string(key) + " is not a TM_RADIX_KEY_* value (0, 1 or 2)");
  }
  args.params.key = static_cast<RadixKey>(key);
  TM_ASSIGN_OR_RETURN(const uint64_t shift, non_negative(id, attrs, kAttrShift));
  TM_ASSIGN_OR_RETURN(const uint64_t bits, non_negative(id, attrs, kAttrBits));
  if (shift > 64 || bits > 64) return invalid(id, "shift " + std::to_string(shift) + " or bits " + std::to_string(bits) + " exceeds 64");
  args.params.shift = static_cast<uint32_t>(shift);
  args.params.bits = static_cast<uint32_t>(bits);
  if (const auto it = attrs.find(kAttrCenter); it != attrs.end()) args.params.center = it->second.f;
  if (args.params.key != RadixKey::kDeviation && args.params.center != 0) {
    return invalid(id, "the centre applies to the deviation key only");
  }
  if (args.prefixes.dtype != DType::kU64 || args.prefixes.arg.rank != 1) {
    return invalid(id, "prefixes must be U64 of rank 1, got " + std::string(dtype_name(args.prefixes.dtype)) +
                           shape_text(args.prefixes.arg));
  }
  TM_RETURN_IF_ERROR(check_radix_params(args.params, args.prefixes.elems));
  const uint64_t slots = radix_count_slots(args.params, args.prefixes.elems);
  if (args.counts.dtype != DType::kU64 || args.counts.arg.rank != 1 || args.counts.elems != slots) {
    return invalid(id, "counts must be U64[" + std::to_string(slots) + "], got " +
                           std::string(dtype_name(args.counts.dtype)) + shape_text(args.counts.arg));
  }
  if (args.classes.dtype != DType::kU64 || args.classes.arg.rank != 1 || args.classes.elems != kRadixClasses) {
    return invalid(id, "classes must be U64[4], got " + std::string(dtype_name(args.classes.dtype)) +
                           shape_text(args.classes.arg));
  }
  return args;
}

Result<TopKArgs> parse_top_k(const TM_OpInstance& op) {
  const std::string id = TM_OP_TOP_K;
  TM_ASSIGN_OR_RETURN(const TM_OpInstance instance, read_instance(op, TM_OP_TOP_K));
  if (instance.input_count != 1 || instance.output_count != 2) {
    return invalid(id, "takes 1 input and 2 outputs (indices, values), got " + std::to_string(instance.input_count) +
                           " and " + std::to_string(instance.output_count));
  }
  TopKArgs args;
  TM_ASSIGN_OR_RETURN(TM_TensorArg in, tensor_arg_at(id, "input", instance.inputs, 0));
  TM_ASSIGN_OR_RETURN(args.input, check_tensor(id, "input", in, false));
  TM_ASSIGN_OR_RETURN(TM_TensorArg indices, tensor_arg_at(id, "indices", instance.outputs, 0));
  TM_ASSIGN_OR_RETURN(args.indices, check_tensor(id, "indices", indices, true));
  TM_ASSIGN_OR_RETURN(TM_TensorArg values, tensor_arg_at(id, "values", instance.outputs, 1));
  TM_ASSIGN_OR_RETURN(args.values, check_tensor(id, "values", values, true));
  TM_ASSIGN_OR_RETURN(auto attrs, read_attributes(id, instance, {kAttrK}));
  TM_ASSIGN_OR_RETURN(args.k, non_negative(id, attrs, kAttrK));
  if (args.k < 1 || args.k > TM_TOP_K_MAX) {
    return invalid(id, "k " + std::to_string(args.k) + " is outside [1, " + std::to_string(TM_TOP_K_MAX) + "]");
  }
  if (args.indices.dtype != DType::kU64 || args.indices.arg.rank != 1 || args.indices.elems != args.k) {
    return invalid(id, "indices must be U64[" + std::to_string(args.k) + "], got " +
                           std::string(dtype_name(args.indices.dtype)) + shape_text(args.indices.arg));
  }
  if (args.values.dtype != DType::kF32 || args.values.arg.rank != 1 || args.values.elems != args.k) {
    return invalid(id, "values must be F32[" + std::to_string(args.k) + "], got " +
                           std::string(dtype_name(args.values.dtype)) + shape_text(args.values.arg));
  }
  return args;
}

Result<ChannelStatsArgs> parse_channel_stats(const TM_OpInstance& op) {
  const std::string id = TM_OP_CHANNEL_STATS;
  TM_ASSIGN_OR_RETURN(const TM_OpInstance instance, read_instance(op, TM_OP_CHANNEL_STATS));
  if (instance.input_count != 1 || instance.output_count != 2) {
    return invalid(id, "takes 1 input and 2 outputs (rows, columns), got " + std::to_string(instance.input_count) +
                           " and " + std::to_string(instance.output_count));
  }
  ChannelStatsArgs args;
  TM_ASSIGN_OR_RETURN(TM_TensorArg in, tensor_arg_at(id, "input", instance.inputs, 0));
  TM_ASSIGN_OR_RETURN(args.input, check_tensor(id, "input", in, false));
  TM_ASSIGN_OR_RETURN(TM_TensorArg rows, tensor_arg_at(id, "rows", instance.outputs, 0));
  TM_ASSIGN_OR_RETURN(args.rows_out, check_tensor(id, "rows", rows, true));
  TM_ASSIGN_OR_RETURN(TM_TensorArg cols, tensor_arg_at(id, "columns", instance.outputs, 1));
  TM_ASSIGN_OR_RETURN(args.cols_out, check_tensor(id, "columns", cols, true));
  TM_RETURN_IF_ERROR(read_attributes(id, instance, {}).status());
  if (args.input.arg.rank != 2) return invalid(id, "input has rank " + std::to_string(args.input.arg.rank) + ", not 2");
  args.rows = args.input.arg.shape[0];
  args.cols = args.input.arg.shape[1];
  TM_RETURN_IF_ERROR(matrix_row_bytes(args.input.dtype, args.cols).status());
  for (const auto& [out, n, what] : {std::tuple{&args.rows_out, args.rows, "rows"}, std::tuple{&args.cols_out, args.cols, "columns"}}) {
    uint64_t expected = 0;
    if (out->dtype != DType::kU8 || out->arg.rank != 1 ||
        __builtin_mul_overflow(n, uint64_t{sizeof(TM_TileStats)}, &expected) || out->elems != expected) {
      return invalid(id, std::string(what) + " must be U8[" + std::to_string(n) + " * " +
                             std::to_string(sizeof(TM_TileStats)) + "], got " + std::string(dtype_name(out->dtype)) +
                             shape_text(out->arg));
    }
  }
  return args;
}

namespace {

Result<DiffOffset> diff_offset(const std::string& op, const std::map<std::string, TM_Attribute>& attrs, const char* name) {
  DiffOffset o;
  const auto it = attrs.find(name);
  if (it == attrs.end() || it->second.f == 0) return o;
  const double v = it->second.f;
  if (!std::isfinite(v) || std::fabs(v) > 3.4028234663852886e38) {
    return invalid(op, std::string("attribute '") + name + "' (" + std::to_string(v) + ") is not a finite float32 value");
  }
  o.active = true;
  o.value = static_cast<float>(v);
  return o;
}

/// The two inputs and the output of tm.diff_stats@1 / tm.subtract@1, the element counts checked.
Status read_diff_io(const std::string& id, const TM_OpInstance& instance, DiffArgs& args) {
  if (instance.input_count != 2 || instance.output_count != 1) {
    return invalid(id, "takes 2 inputs (A, B) and 1 output, got " + std::to_string(instance.input_count) + " and " +
                           std::to_string(instance.output_count));
  }
  TM_ASSIGN_OR_RETURN(TM_TensorArg a, tensor_arg_at(id, "in[0] (A)", instance.inputs, 0));
  TM_ASSIGN_OR_RETURN(args.a, check_tensor(id, "in[0] (A)", a, false));
  TM_ASSIGN_OR_RETURN(TM_TensorArg b, tensor_arg_at(id, "in[1] (B)", instance.inputs, 1));
  TM_ASSIGN_OR_RETURN(args.b, check_tensor(id, "in[1] (B)", b, false));
  TM_ASSIGN_OR_RETURN(TM_TensorArg out, tensor_arg_at(id, "output", instance.outputs, 0));
  TM_ASSIGN_OR_RETURN(args.output, check_tensor(id, "output", out, true));
  if (args.a.elems != args.b.elems) {
    return invalid(id, "in[0] (A) " + std::string(dtype_name(args.a.dtype)) + shape_text(args.a.arg) + " holds " +
                           std::to_string(args.a.elems) + " elements but in[1] (B) " +
                           std::string(dtype_name(args.b.dtype)) + shape_text(args.b.arg) + " holds " +
                           std::to_string(args.b.elems) + ": both inputs need the same element count");
  }
  args.elems = args.a.elems;
  return Status::Ok();
}

}  // namespace

Result<DiffArgs> parse_diff_stats(const TM_OpInstance& op) {
  const std::string id = TM_OP_DIFF_STATS;
  TM_ASSIGN_OR_RETURN(const TM_OpInstance instance, read_instance(op, TM_OP_DIFF_STATS));
  DiffArgs args;
  TM_RETURN_IF_ERROR(read_diff_io(id, instance, args));
  TM_ASSIGN_OR_RETURN(auto attrs, read_attributes(id, instance, {}, {TM_ATTR_A_OFFSET, TM_ATTR_B_OFFSET, TM_ATTR_ELEMENT_OFFSET}));
  TM_ASSIGN_OR_RETURN(args.a_offset, diff_offset(id, attrs, TM_ATTR_A_OFFSET));
  TM_ASSIGN_OR_RETURN(args.b_offset, diff_offset(id, attrs, TM_ATTR_B_OFFSET));
  if (attrs.count(TM_ATTR_ELEMENT_OFFSET) != 0) {
    TM_ASSIGN_OR_RETURN(args.element_offset, non_negative(id, attrs, TM_ATTR_ELEMENT_OFFSET));
  }
  uint64_t end = 0;
  if (__builtin_add_overflow(args.element_offset, args.elems, &end) || end == ~uint64_t{0}) {
    return invalid(id, "element_offset " + std::to_string(args.element_offset) + " + " + std::to_string(args.elems) +
                           " elements overflows the index range");
  }
  args.chunks = (args.elems + TM_DIFF_CHUNK - 1) / TM_DIFF_CHUNK;
  uint64_t expected = 0;
  if (args.output.dtype != DType::kU8 || args.output.arg.rank != 1 ||
      __builtin_mul_overflow(args.chunks, uint64_t{sizeof(TM_DiffStats)}, &expected) || args.output.elems != expected) {
    return invalid(id, std::to_string(args.elems) + " elements make " + std::to_string(args.chunks) +
                           " chunks, which need an output of U8[" + std::to_string(args.chunks) + " * " +
                           std::to_string(sizeof(TM_DiffStats)) + "], got " + std::string(dtype_name(args.output.dtype)) +
                           shape_text(args.output.arg));
  }
  return args;
}

Result<DiffArgs> parse_subtract(const TM_OpInstance& op) {
  const std::string id = TM_OP_SUBTRACT;
  TM_ASSIGN_OR_RETURN(const TM_OpInstance instance, read_instance(op, TM_OP_SUBTRACT));
  DiffArgs args;
  TM_RETURN_IF_ERROR(read_diff_io(id, instance, args));
  TM_ASSIGN_OR_RETURN(auto attrs, read_attributes(id, instance, {}, {TM_ATTR_A_OFFSET, TM_ATTR_B_OFFSET}));
  TM_ASSIGN_OR_RETURN(args.a_offset, diff_offset(id, attrs, TM_ATTR_A_OFFSET));
  TM_ASSIGN_OR_RETURN(args.b_offset, diff_offset(id, attrs, TM_ATTR_B_OFFSET));
  if (args.output.dtype != DType::kF32 || args.output.elems != args.elems) {
    return invalid(id, "output must be F32 of " + std::to_string(args.elems) + " elements, got " +
                           std::string(dtype_name(args.output.dtype)) + shape_text(args.output.arg));
  }
  return args;
}

Status check_exactness_floor(TM_Exactness achieved, double achieved_bound, const TM_ExecutionPolicy& policy) {
  const int floor = static_cast<int>(policy.exactness_floor);
  if (floor < TM_EXACT_BITWISE || floor > TM_EXACT_APPROXIMATE) {
    return Status::InvalidArgument("unknown exactness floor " + std::to_string(floor));
  }
  if (static_cast<int>(achieved) > floor) {
    return Status::Unimplemented("this backend's result would be weaker than the exactness floor");
  }
  if (achieved == TM_EXACT_BOUNDED && policy.exactness_floor == TM_EXACT_BOUNDED &&
      achieved_bound > policy.max_error_bound) {
    return Status::Unimplemented("this backend's error bound " + std::to_string(achieved_bound) +
                                 " exceeds the policy's " + std::to_string(policy.max_error_bound));
  }
  return Status::Ok();
}

}  // namespace tensormorph::ops
