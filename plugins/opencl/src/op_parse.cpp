#include "op_parse.h"

#include <algorithm>

namespace tm_opencl {
namespace {

/// The shape class a tensor of `rank` belongs to.
TM_ShapeClass shape_class_of(uint32_t rank) {
  if (rank <= 1) return TM_SHAPE_VECTOR;
  return rank == 2 ? TM_SHAPE_MATRIX : TM_SHAPE_TENSOR;
}

// A pointer the host handed us plus offset and length must name real addresses: a wrapped range
// would make the copies read or write somewhere else entirely.
bool wraps(const void* base, uint64_t offset, uint64_t bytes) {
  uintptr_t end = 0;
  return __builtin_add_overflow(reinterpret_cast<uintptr_t>(base), offset, &end) ||
         __builtin_add_overflow(end, bytes, &end);
}

// Where an input's bytes are. The kit has checked the argument's form (exactly one of host memory
// and a buffer unless empty); only this backend can check that a buffer is its own, holds the
// range, and is aligned for the element loads of its kernels.
Result<InputSource> input_source(const TM_Backend& backend, const std::string& op, const TM_TensorArg& arg,
                                 uint64_t alignment) {
  InputSource source;
  source.nbytes = arg.nbytes;
  if (arg.buffer != nullptr) {
    TMCL_RETURN_IF_ERROR(check_buffer_range(backend, *arg.buffer, arg.byte_offset, arg.nbytes, (op + ": input").c_str()));
    if (arg.byte_offset % alignment != 0) {
      return invalid_argument("opencl: " + op + ": input byte_offset " + std::to_string(arg.byte_offset) +
                              " into the buffer is not a multiple of " + std::to_string(alignment));
    }
    source.buffer = arg.buffer;
    source.byte_offset = arg.byte_offset;
    return source;
  }
  if (arg.host_data == nullptr) return source;
  if (wraps(arg.host_data, arg.byte_offset, arg.nbytes)) {
    return invalid_argument("opencl: " + op + ": input host_data + byte_offset + nbytes wraps around the address space");
  }
  source.host = static_cast<const std::byte*>(arg.host_data) + arg.byte_offset;
  return source;
}

// The host memory an output goes to (null when it has no bytes); outputs into device buffers are
// not implemented.
Result<std::byte*> output_target(const std::string& op, const TM_TensorArg& arg) {
  if (arg.buffer != nullptr) {
    return unimplemented("opencl: " + op + ": an output into a device buffer is not implemented; pass host_out");
  }
  if (arg.host_out == nullptr) return static_cast<std::byte*>(nullptr);
  if (wraps(arg.host_out, arg.byte_offset, arg.nbytes)) {
    return invalid_argument("opencl: " + op + ": output host_out + byte_offset + nbytes wraps around the address space");
  }
  return static_cast<std::byte*>(arg.host_out) + arg.byte_offset;
}

// Refuses, with the capability's reason, what this backend does not run at all.
Status require_support(const Capability& capability) {
  if (capability.level == TM_SUPPORT_NONE) return unimplemented(capability.reason);
  return {};
}

/// Fills parsed.tile_stats from a tm.tile_stats@1 instance.
Status parse_tile_stats(const TM_Backend& backend, const TM_OpInstance* instance, ParsedOp& parsed) {
  TM_KitTileStats k;
  TM_KitStatus status = tm_kit_ok();
  if (!tm_kit_parse_tile_stats(instance, &k, &status)) return kit_failure(status);
  parsed.capability = capability_of(backend, parsed.op, k.input.dtype, TM_SHAPE_MATRIX);
  TMCL_RETURN_IF_ERROR(require_support(parsed.capability));
  TileStatsJob& job = parsed.tile_stats;
  job.dtype = k.input.dtype;
  job.element_bytes = job.dtype == TM_DTYPE_F16 ? 2u : 4u;
  job.rows = k.rows;
  job.cols = k.cols;
  job.row_begin = k.row_begin;
  job.row_end = k.row_end;
  job.col_begin = k.col_begin;
  job.col_end = k.col_end;
  job.tile = k.tile;
  job.tiles_down = k.tiles_down;
  job.tiles_across = k.tiles_across;
  TMCL_ASSIGN_OR_RETURN(job.input, input_source(backend, parsed.op, k.input, job.element_bytes));
  TMCL_ASSIGN_OR_RETURN(job.out, output_target(parsed.op, k.output));
  parsed.output_nbytes = k.output.nbytes;
  return {};
}

/// Fills parsed.decode from a tm.decode@1 instance.
Status parse_decode(const TM_Backend& backend, const TM_OpInstance* instance, ParsedOp& parsed) {
  TM_KitDecode k;
  TM_KitStatus status = tm_kit_ok();
  if (!tm_kit_parse_decode(instance, &k, &status)) return kit_failure(status);
  parsed.capability = capability_of(backend, parsed.op, k.input.dtype, shape_class_of(k.input.rank));
  TMCL_RETURN_IF_ERROR(require_support(parsed.capability));
  DecodeJob& job = parsed.decode;
  job.elements = k.elements;
  TMCL_ASSIGN_OR_RETURN(job.input, input_source(backend, parsed.op, k.input, 1));
  TMCL_ASSIGN_OR_RETURN(job.out, output_target(parsed.op, k.output));
  parsed.output_nbytes = k.output.nbytes;
  return {};
}

/// Fills parsed.render from a tm.render_tile@1 or tm.render_tile_sampled@1 instance.
Status parse_render(const TM_Backend& backend, const TM_OpInstance* instance, ParsedOp& parsed) {
  TM_KitRenderTile k;
  TM_KitStatus status = tm_kit_ok();
  if (!tm_kit_parse_render_tile(instance, &k, &status)) return kit_failure(status);
  const bool values = k.source == TM_RENDER_SOURCE_VALUES;
  parsed.capability = capability_of(backend, parsed.op, k.input.dtype, values ? TM_SHAPE_MATRIX : TM_SHAPE_TENSOR);
  TMCL_RETURN_IF_ERROR(require_support(parsed.capability));
  if (values && k.cell < kMinRenderCell) {
    return unimplemented("opencl: " + parsed.op + " renders values with cell >= " + std::to_string(kMinRenderCell) +
                         " and magnify 1 only, not cell " + std::to_string(k.cell) + " with magnify " +
                         std::to_string(k.magnify));
  }
  RenderJob& job = parsed.render;
  job.rows = k.rows;
  job.cols = k.cols;
  job.row_begin = k.row_begin;
  job.col_begin = k.col_begin;
  job.magnify = k.magnify;
  job.stat = k.stat;
  job.colormap = k.colormap;
  job.lo = k.lo;
  job.hi = k.hi;
  if (values) {
    // Block (y, x) of the tile is tile (y, x) of tm.tile_stats@1 with T = cell over the elements
    // the tile covers: the reference's blocks start at row_begin + y * cell, and those past the
    // matrix are empty, so clipping the view changes no block.
    parsed.kind = OpKind::kRenderValues;
    const uint64_t span = uint64_t{TM_RENDER_TILE_PIXELS} * k.cell;
    TileStatsJob& blocks = job.blocks;
    blocks.dtype = k.input.dtype;
    blocks.element_bytes = blocks.dtype == TM_DTYPE_F16 ? 2u : 4u;
    blocks.rows = k.rows;
    blocks.cols = k.cols;
    blocks.row_begin = std::min(k.row_begin, k.rows);
    blocks.row_end = blocks.row_begin + std::min(span, k.rows - blocks.row_begin);
    blocks.col_begin = std::min(k.col_begin, k.cols);
    blocks.col_end = blocks.col_begin + std::min(span, k.cols - blocks.col_begin);
    blocks.tile = static_cast<uint32_t>(k.cell);
    blocks.tiles_down = (blocks.row_end - blocks.row_begin + k.cell - 1) / k.cell;
    blocks.tiles_across = (blocks.col_end - blocks.col_begin + k.cell - 1) / k.cell;
    TMCL_ASSIGN_OR_RETURN(job.input, input_source(backend, parsed.op, k.input, blocks.element_bytes));
    blocks.input = job.input;
  } else {
    parsed.kind = OpKind::kRenderStats;
    TMCL_ASSIGN_OR_RETURN(job.input, input_source(backend, parsed.op, k.input, 1));
  }
  TMCL_ASSIGN_OR_RETURN(job.out, output_target(parsed.op, k.output));
  parsed.output_nbytes = k.output.nbytes;
  return {};
}

}  // namespace

Result<ParsedOp> parse_op(const TM_Backend& backend, const TM_OpInstance* instance) {
  if (instance == nullptr) return invalid_argument("opencl: the operation instance is null");
  TM_OpInstance head{};
  tm_kit_read_struct(&head, sizeof head, instance);
  if (head.op == nullptr) return invalid_argument("opencl: the operation id is null");
  ParsedOp parsed;
  parsed.op = head.op;
  if (parsed.op == TM_OP_TILE_STATS) {
    parsed.kind = OpKind::kTileStats;
    TMCL_RETURN_IF_ERROR(parse_tile_stats(backend, instance, parsed));
  } else if (parsed.op == TM_OP_DECODE) {
    parsed.kind = OpKind::kDecode;
    TMCL_RETURN_IF_ERROR(parse_decode(backend, instance, parsed));
  } else if (parsed.op == TM_OP_RENDER_TILE || parsed.op == TM_OP_RENDER_TILE_SAMPLED) {
    TMCL_RETURN_IF_ERROR(parse_render(backend, instance, parsed));
  } else {
    return unimplemented(capability_of(backend, parsed.op, TM_DTYPE_INVALID, TM_SHAPE_VECTOR).reason);
  }
  return parsed;
}

}  // namespace tm_opencl
