#include "op_parse.h"

#include <bit>
#include <cstring>
#include <map>

#include "abi_io.h"

namespace tm_opencl {
namespace {

constexpr uint64_t kQ8BlockElements = 32;
constexpr uint64_t kQ8BlockBytes = 34;  // fp16 scale + 32 int8 quants

Failure bad(const std::string& op, const std::string& what) { return invalid_argument("opencl: " + op + ": " + what); }

TM_ShapeClass shape_class_of(uint32_t rank) {
  if (rank <= 1) return TM_SHAPE_VECTOR;
  return rank == 2 ? TM_SHAPE_MATRIX : TM_SHAPE_TENSOR;
}

Result<uint64_t> element_count(const std::string& op, const TM_TensorArg& arg, const char* which) {
  uint64_t count = 1;
  for (uint32_t d = 0; d < arg.rank; ++d) {
    if (__builtin_mul_overflow(count, arg.shape[d], &count)) {
      return bad(op, std::string(which) + ": the element count overflows 64 bits");
    }
  }
  return count;
}

Result<uint64_t> checked_product(const std::string& op, uint64_t a, uint64_t b, const char* what) {
  uint64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product)) return bad(op, std::string(what) + " overflows 64 bits");
  return product;
}

Status check_nbytes(const std::string& op, const char* which, uint64_t actual, uint64_t expected) {
  if (actual != expected) {
    return bad(op, std::string(which) + ": nbytes is " + std::to_string(actual) + ", expected " + std::to_string(expected));
  }
  return {};
}

Result<InputSource> input_source(const TM_Backend& backend, const std::string& op, const TM_TensorArg& arg,
                                 uint64_t alignment) {
  InputSource source;
  source.nbytes = arg.nbytes;
  if ((arg.host_data == nullptr) == (arg.buffer == nullptr)) {
    return bad(op, "input 0: exactly one of host_data and buffer must be set");
  }
  if (arg.buffer != nullptr) {
    TMCL_RETURN_IF_ERROR(check_buffer_range(backend, *arg.buffer, arg.byte_offset, arg.nbytes, "input 0"));
    if (arg.byte_offset % alignment != 0) {
      return bad(op, "input 0: byte_offset " + std::to_string(arg.byte_offset) + " into the buffer is not a multiple of " +
                         std::to_string(alignment));
    }
    source.buffer = arg.buffer;
    source.byte_offset = arg.byte_offset;
    return source;
  }
  const auto base = reinterpret_cast<uintptr_t>(arg.host_data);
  uintptr_t end = 0;
  if (__builtin_add_overflow(base, arg.byte_offset, &end) || __builtin_add_overflow(end, arg.nbytes, &end)) {
    return bad(op, "input 0: host_data + byte_offset + nbytes wraps around the address space");
  }
  source.host = static_cast<const std::byte*>(arg.host_data) + arg.byte_offset;
  return source;
}

// The host memory an output goes to; outputs into device buffers are not implemented.
Result<std::byte*> output_target(const std::string& op, const TM_TensorArg& arg) {
  if (arg.buffer != nullptr) {
    return unimplemented("opencl: " + op + ": output 0 into a device buffer is not implemented; pass host_out");
  }
  if (arg.host_out == nullptr) {
    if (arg.nbytes == 0) return static_cast<std::byte*>(nullptr);
    return bad(op, "output 0: host_out is null");
  }
  const auto base = reinterpret_cast<uintptr_t>(arg.host_out);
  uintptr_t end = 0;
  if (__builtin_add_overflow(base, arg.byte_offset, &end) || __builtin_add_overflow(end, arg.nbytes, &end)) {
    return bad(op, "output 0: host_out + byte_offset + nbytes wraps around the address space");
  }
  return static_cast<std::byte*>(arg.host_out) + arg.byte_offset;
}

Result<std::map<std::string, TM_Attribute>> read_attributes(const std::string& op, const TM_OpInstance& instance) {
  std::map<std::string, TM_Attribute> attributes;
  if (instance.attribute_count == 0) return attributes;
  if (instance.attributes == nullptr) return bad(op, "attribute_count is non-zero but attributes is null");
  for (uint32_t i = 0; i < instance.attribute_count; ++i) {
    TMCL_ASSIGN_OR_RETURN(TM_Attribute attribute, read_versioned_element(instance.attributes, i, "attributes"));
    if (attribute.name == nullptr) return bad(op, "attributes[" + std::to_string(i) + "].name is null");
    if (!attributes.emplace(attribute.name, attribute).second) {
      return bad(op, std::string("attribute '") + attribute.name + "' is given twice");
    }
  }
  return attributes;
}

Result<uint64_t> view_bound(const std::string& op, const std::map<std::string, TM_Attribute>& attributes,
                            const char* name) {
  const auto found = attributes.find(name);
  if (found == attributes.end()) return bad(op, std::string("missing attribute '") + name + "'");
  if (found->second.i < 0) return bad(op, std::string("attribute ") + name + " = " + std::to_string(found->second.i) + " is negative");
  return static_cast<uint64_t>(found->second.i);
}

Status parse_tile_stats(const TM_Backend& backend, const std::string& op, const TM_OpInstance& instance,
                        const TM_TensorArg& in, const TM_TensorArg& out, TileStatsJob& job) {
  job.dtype = in.dtype;
  job.element_bytes = in.dtype == TM_DTYPE_F16 ? 2u : 4u;
  job.rows = in.shape[0];
  job.cols = in.shape[1];
  TMCL_ASSIGN_OR_RETURN(const uint64_t count, element_count(op, in, "input 0"));
  TMCL_ASSIGN_OR_RETURN(const uint64_t in_bytes, checked_product(op, count, job.element_bytes, "input 0 byte size"));
  TMCL_RETURN_IF_ERROR(check_nbytes(op, "input 0", in.nbytes, in_bytes));
  TMCL_ASSIGN_OR_RETURN(job.input, input_source(backend, op, in, job.element_bytes));

  TMCL_ASSIGN_OR_RETURN(auto attributes, read_attributes(op, instance));
  for (const auto& [name, attribute] : attributes) {
    if (name != "row_begin" && name != "row_end" && name != "col_begin" && name != "col_end" && name != "tile") {
      return bad(op, "unknown attribute '" + name + "' (expected row_begin, row_end, col_begin, col_end, tile)");
    }
  }
  TMCL_ASSIGN_OR_RETURN(job.row_begin, view_bound(op, attributes, "row_begin"));
  TMCL_ASSIGN_OR_RETURN(job.row_end, view_bound(op, attributes, "row_end"));
  TMCL_ASSIGN_OR_RETURN(job.col_begin, view_bound(op, attributes, "col_begin"));
  TMCL_ASSIGN_OR_RETURN(job.col_end, view_bound(op, attributes, "col_end"));
  TMCL_ASSIGN_OR_RETURN(const uint64_t tile, view_bound(op, attributes, "tile"));
  if (tile < 8 || tile > 4096 || !std::has_single_bit(tile)) {
    return bad(op, "tile = " + std::to_string(tile) + " is not a power of two in [8, 4096]");
  }
  job.tile = static_cast<uint32_t>(tile);
  if (job.row_begin > job.row_end || job.row_end > job.rows) {
    return bad(op, "view rows [" + std::to_string(job.row_begin) + ", " + std::to_string(job.row_end) +
                       ") are not inside [0, " + std::to_string(job.rows) + ")");
  }
  if (job.col_begin > job.col_end || job.col_end > job.cols) {
    return bad(op, "view columns [" + std::to_string(job.col_begin) + ", " + std::to_string(job.col_end) +
                       ") are not inside [0, " + std::to_string(job.cols) + ")");
  }
  job.tiles_down = (job.row_end - job.row_begin + tile - 1) / tile;
  job.tiles_across = (job.col_end - job.col_begin + tile - 1) / tile;

  // The output is an array of TM_TileStats, which has no TM_DType: its dtype and shape are not read.
  TMCL_ASSIGN_OR_RETURN(const uint64_t tiles, checked_product(op, job.tiles_down, job.tiles_across, "tile count"));
  TMCL_ASSIGN_OR_RETURN(const uint64_t out_bytes, checked_product(op, tiles, sizeof(TM_TileStats), "output size"));
  TMCL_RETURN_IF_ERROR(check_nbytes(op, "output 0", out.nbytes, out_bytes));
  TMCL_ASSIGN_OR_RETURN(job.out, output_target(op, out));
  return {};
}

Status parse_decode(const TM_Backend& backend, const std::string& op, const TM_OpInstance& instance,
                    const TM_TensorArg& in, const TM_TensorArg& out, DecodeJob& job) {
  if (instance.attribute_count != 0) return bad(op, "decode takes no attributes");
  if (in.rank == 0) return bad(op, "input 0: rank 0 is not a whole number of Q8_0 blocks");
  TMCL_ASSIGN_OR_RETURN(job.elements, element_count(op, in, "input 0"));
  if (job.elements % kQ8BlockElements != 0) {
    return bad(op, "input 0: " + std::to_string(job.elements) + " elements is not a whole number of 32-element Q8_0 blocks");
  }
  TMCL_RETURN_IF_ERROR(check_nbytes(op, "input 0", in.nbytes, job.elements / kQ8BlockElements * kQ8BlockBytes));
  TMCL_ASSIGN_OR_RETURN(job.input, input_source(backend, op, in, 1));

  if (enum_value(out.dtype) != TM_DTYPE_F32) {
    return bad(op, "output 0: dtype must be F32, got " + dtype_name(enum_value(out.dtype)));
  }
  if (out.rank > 8) return bad(op, "output 0: rank " + std::to_string(out.rank) + " exceeds 8");
  TMCL_ASSIGN_OR_RETURN(const uint64_t out_count, element_count(op, out, "output 0"));
  if (out_count != job.elements) {
    return bad(op, "output 0 has " + std::to_string(out_count) + " elements, input 0 has " + std::to_string(job.elements));
  }
  TMCL_ASSIGN_OR_RETURN(const uint64_t out_bytes, checked_product(op, job.elements, sizeof(float), "output size"));
  TMCL_RETURN_IF_ERROR(check_nbytes(op, "output 0", out.nbytes, out_bytes));
  TMCL_ASSIGN_OR_RETURN(job.out, output_target(op, out));
  return {};
}

}  // namespace

Result<ParsedOp> parse_op(const TM_Backend& backend, const TM_OpInstance* instance_ptr) {
  if (instance_ptr == nullptr) return invalid_argument("opencl: null operation instance");
  const TM_OpInstance instance = read_versioned(instance_ptr);
  if (instance.op == nullptr) return invalid_argument("opencl: operation id is null");
  ParsedOp parsed;
  parsed.op = instance.op;
  const std::string& op = parsed.op;
  if (op == TM_OP_TILE_STATS) {
    parsed.kind = OpKind::kTileStats;
  } else if (op == TM_OP_DECODE) {
    parsed.kind = OpKind::kDecode;
  } else {
    return unimplemented(capability_of(backend, op, TM_DTYPE_INVALID, TM_SHAPE_VECTOR).reason);
  }
  if (instance.input_count != 1) return bad(op, "takes 1 input, got " + std::to_string(instance.input_count));
  if (instance.output_count != 1) return bad(op, "takes 1 output, got " + std::to_string(instance.output_count));
  if (instance.inputs == nullptr || instance.outputs == nullptr) return bad(op, "inputs or outputs is null");
  TMCL_ASSIGN_OR_RETURN(const TM_TensorArg in, read_versioned_element(instance.inputs, 0, "inputs"));
  TMCL_ASSIGN_OR_RETURN(const TM_TensorArg out, read_versioned_element(instance.outputs, 0, "outputs"));
  if (!is_known_dtype(enum_value(in.dtype))) {
    return bad(op, "input 0: " + dtype_name(enum_value(in.dtype)) + " is not a TM_DType value");
  }
  if (in.rank > 8) return bad(op, "input 0: rank " + std::to_string(in.rank) + " exceeds 8");

  parsed.capability = capability_of(backend, op, in.dtype, shape_class_of(in.rank));
  if (parsed.capability.level == TM_SUPPORT_NONE) return unimplemented(parsed.capability.reason);
  if (parsed.kind == OpKind::kTileStats) {
    TMCL_RETURN_IF_ERROR(parse_tile_stats(backend, op, instance, in, out, parsed.tile_stats));
  } else {
    TMCL_RETURN_IF_ERROR(parse_decode(backend, op, instance, in, out, parsed.decode));
  }
  return parsed;
}

}  // namespace tm_opencl
