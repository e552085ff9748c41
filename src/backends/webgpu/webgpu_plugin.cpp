// The plugin ABI surface of the WebGPU backend (built in, found through
// tm_webgpu_backend_get_api). Every entry point validates its pointers, reads host structs only
// up to their struct_size, holds the backend's lock while it touches the device, and turns every
// failure (and any exception) into a TM_Error.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

#include "backends/webgpu/webgpu_backend.h"
#include "backends/webgpu/wgsl_kernels.h"
#include "compute/ops/op_instance.h"
#include "compute/ops/plugin_error.h"
#include "compute/ops/reference.h"
#include "core/dtype_abi.h"
#include "tensormorph/dtype.h"

namespace tensormorph::webgpu {
namespace {

constexpr const char* kName = "webgpu";
constexpr const char* kVersion = "1.0";
constexpr const char* kImplemented = "F32, F16, BF16, Q8_0, Q4_K";

WebGpuBackend* backend_of(TM_Backend* b) { return reinterpret_cast<WebGpuBackend*>(b); }

Status require(bool condition, const char* what) {
  return condition ? Status::Ok() : Status::InvalidArgument(std::string("webgpu: ") + what + " is null");
}

bool implemented(ops::CoreOp kind) {
  return kind == ops::CoreOp::kDecode || kind == ops::CoreOp::kTileStats || kind == ops::CoreOp::kHistogram ||
         kind == ops::CoreOp::kRadixHistogram || kind == ops::CoreOp::kDiffStats || kind == ops::CoreOp::kSubtract ||
         kind == ops::CoreOp::kChannelStats;
}

Status check_dtype(DType dtype) {
  if (kernel_dtype_supported(dtype)) return Status::Ok();
  return Status::Unimplemented("webgpu implements " + std::string(kImplemented) + " only, not " +
                               std::string(dtype_name(dtype)));
}

/// Launches, bind groups and the wait for results, per execution.
constexpr double kLaunchOverheadNs = 60'000.0;

/// The cost model (compute only: the host models transfers): the measured F32 tile_stats rate,
/// scaled by how much more work a byte of each dtype takes (block decoders; per element of the
/// 16-bit floats less, since their squares sum exactly in integers, but on half the bytes).
double bytes_per_ns(const WebGpuBackend& b, DType dtype, ops::CoreOp kind) {
  const double f32 = std::max(1e-3, b.rates().tile_stats_gbps);
  double factor = 1.0;
  switch (dtype) {
    case DType::kF16:
    case DType::kBF16: factor = 0.75; break;
    case DType::kQ8_0: factor = 0.25; break;
    case DType::kQ4_K: factor = 0.12; break;
    default: break;
  }
  // Decoding and counting skip the float64 sums that dominate tile_stats.
  if (kind != ops::CoreOp::kTileStats) factor *= 4.0;
  return f32 * factor;
}

/// Memory a tile_stats execution holds beyond its input and output: the staging of host rows (one
/// chunk), the partial records of the first kernel and the grid the second one writes.
uint64_t tile_stats_working_bytes(const WebGpuBackend& b, const ops::TensorArgument& input, uint64_t view_bytes,
                                  uint64_t view_rows, uint32_t tile, uint64_t tiles) {
  const uint64_t staging = input.arg.buffer != nullptr ? 0 : std::min(b.chunk_bytes(), view_bytes);
  const uint64_t parts = tile_stats_parts(input.dtype, tile);
  const uint64_t tile_rows = (view_rows + tile - 1) / std::max<uint32_t>(tile, 1);
  const uint64_t tiles_x = tile_rows == 0 ? 0 : tiles / tile_rows;
  const uint64_t records = tile_rows * parts * tiles_x * kRowRecordWords * 4;
  return staging + records + tiles * sizeof(TM_TileStats);
}

Result<TM_CostEstimate> estimate_of(const WebGpuBackend& b, const TM_OpInstance& op) {
  TM_CostEstimate cost{};
  cost.struct_size = sizeof cost;
  const TM_OpInstance instance = ops::read_abi_struct(&op);
  if (instance.op == nullptr) return Status::InvalidArgument("webgpu: operation instance names no operation");
  DType dtype = DType::kF32;
  ops::CoreOp kind = ops::CoreOp::kTileStats;
  if (ops::is_render_op(instance.op)) {
    if (std::string_view(instance.op) == ops::kOpRenderTileSampled) {
      return Status::Unimplemented("webgpu does not implement the sampled render rung");
    }
    TM_ASSIGN_OR_RETURN(const ops::RenderArgs args, ops::parse_render_tile(op));
    if (args.params.source != ops::RenderSource::kValues || args.params.cell < ops::kMinTileStatsCell) {
      return Status::Unimplemented("webgpu renders values tiles with cells of at least 8 elements only");
    }
    dtype = args.input.dtype;
    TM_RETURN_IF_ERROR(check_dtype(dtype));
    const ops::ViewRange view = ops::render_cell_view(args.params, args.rows, args.cols);
    TM_ASSIGN_OR_RETURN(const uint64_t row_bytes, ops::matrix_row_bytes(dtype, args.cols));
    cost.bytes_read = (view.row_end - view.row_begin) * row_bytes;
    cost.bytes_written = ops::kRenderTileBytes;
    const uint64_t tiles = ops::tile_grid(view, static_cast<uint32_t>(args.params.cell)).count();
    // The blocks' statistics twice (device, then host for colouring) and the tile's pixels.
    cost.working_bytes = tile_stats_working_bytes(b, args.input, cost.bytes_read, view.row_end - view.row_begin,
                                                  static_cast<uint32_t>(args.params.cell), tiles) +
                         tiles * sizeof(TM_TileStats) + ops::kRenderTileBytes;
    // Plus the grid's read-back and the host's colouring of 65,536 pixels.
    cost.compute_ns = 2 * kLaunchOverheadNs + static_cast<double>(cost.bytes_read) / bytes_per_ns(b, dtype, kind) +
                      65536.0 * 20.0;
    return cost;
  }
  auto core = ops::core_op_from_id(instance.op);
  if (!core || !implemented(*core)) return Status::Unimplemented(std::string("webgpu does not implement ") + instance.op);
  kind = *core;
  switch (kind) {
    case ops::CoreOp::kTileStats: {
      TM_ASSIGN_OR_RETURN(auto args, ops::parse_tile_stats(op));
      dtype = args.input.dtype;
      TM_ASSIGN_OR_RETURN(const uint64_t row_bytes, ops::matrix_row_bytes(dtype, args.cols));
      cost.bytes_read = (args.range.row_end - args.range.row_begin) * row_bytes;
      cost.bytes_written = args.output.arg.nbytes;
      cost.working_bytes = tile_stats_working_bytes(b, args.input, cost.bytes_read, args.range.row_end - args.range.row_begin,
                                                    args.tile, args.grid.count());
      break;
    }
    case ops::CoreOp::kDecode: {
      TM_ASSIGN_OR_RETURN(auto args, ops::parse_decode(op));
      dtype = args.input.dtype;
      cost.bytes_read = args.input.arg.nbytes;
      cost.bytes_written = args.output.arg.nbytes;
      // A chunk of staged input and its decoded floats (both chunks of the input's bytes at most).
      const uint64_t chunk = std::min(b.chunk_bytes(), args.input.arg.nbytes);
      cost.working_bytes = (args.input.arg.buffer != nullptr ? 0 : chunk) +
                           std::min(args.output.arg.nbytes, chunk * 4 / std::max<uint64_t>(1, dtype_info(dtype).block_bytes) *
                                                                dtype_info(dtype).block_elems);
      break;
    }
    case ops::CoreOp::kChannelStats: {
      TM_ASSIGN_OR_RETURN(auto args, ops::parse_channel_stats(op));
      dtype = args.input.dtype;
      TM_ASSIGN_OR_RETURN(const uint64_t row_bytes, ops::matrix_row_bytes(dtype, args.cols));
      cost.bytes_read = args.rows * row_bytes;
      cost.bytes_written = args.rows_out.arg.nbytes + args.cols_out.arg.nbytes;
      if (row_bytes + 8 > b.max_binding_bytes()) {
        return Status::Unimplemented("webgpu: channel statistics of rows up to " + std::to_string(b.max_binding_bytes()) +
                                     " bytes (one binding); these have " + std::to_string(row_bytes));
      }
      cost.working_bytes = b.channel_plan(args, 0).working_bytes;
      break;
    }
    case ops::CoreOp::kDiffStats:
    case ops::CoreOp::kSubtract: {
      TM_ASSIGN_OR_RETURN(auto args, kind == ops::CoreOp::kDiffStats ? ops::parse_diff_stats(op) : ops::parse_subtract(op));
      TM_RETURN_IF_ERROR(check_dtype(args.b.dtype));
      dtype = args.a.dtype;
      cost.bytes_read = args.a.arg.nbytes + args.b.arg.nbytes;
      cost.bytes_written = args.output.arg.nbytes;
      // Both sides staged (one staging chunk) and the batch's output.
      cost.working_bytes = std::min(b.chunk_bytes(), cost.bytes_read) + std::min(b.chunk_bytes() * 4, cost.bytes_written);
      break;
    }
    case ops::CoreOp::kRadixHistogram: {
      TM_ASSIGN_OR_RETURN(auto args, ops::parse_radix_histogram(op));
      dtype = args.input.dtype;
      cost.bytes_read = args.input.arg.nbytes;
      cost.bytes_written = args.counts.arg.nbytes + args.classes.arg.nbytes;
      // u32 counters on the device and read back, the host's u64 totals, and a chunk of staged input.
      cost.working_bytes = cost.bytes_written * 2 + (args.input.arg.buffer != nullptr ? 0 : std::min(b.chunk_bytes(), cost.bytes_read));
      break;
    }
    default: {
      TM_ASSIGN_OR_RETURN(auto args, ops::parse_histogram(op));
      dtype = args.input.dtype;
      cost.bytes_read = args.input.arg.nbytes;
      cost.bytes_written = args.output.arg.nbytes;
      // Counters and edges on the device and the host's totals, and a chunk of staged input.
      cost.working_bytes = (args.bins + 3) * 16 + (args.input.arg.buffer != nullptr ? 0 : std::min(b.chunk_bytes(), cost.bytes_read));
      break;
    }
  }
  TM_RETURN_IF_ERROR(check_dtype(dtype));
  cost.compute_ns = kLaunchOverheadNs + static_cast<double>(cost.bytes_read) / bytes_per_ns(b, dtype, kind);
  return cost;
}

// ---- The ABI entry points --------------------------------------------------------------------

TM_StatusCode error_code(const TM_Error* error) { return ops::plugin_error_code(error); }
const char* error_message(const TM_Error* error) { return ops::plugin_error_message(error); }
void error_destroy(TM_Error* error) { ops::plugin_error_destroy(error); }

TM_Error* device_count(uint32_t* count, char* why_none, size_t why_len) {
  return ops::guard_plugin_call("device_count", [&] {
    TM_RETURN_IF_ERROR(require(count != nullptr, "count"));
    // Dawn offers the adapter it ranks first; whether one exists is known only by asking.
    auto library = load_dawn({});
    *count = library.ok() ? 1 : 0;
    if (!library.ok() && why_none != nullptr && why_len > 0) {
      std::snprintf(why_none, why_len, "%s", library.status().message().c_str());
    }
    return Status::Ok();
  });
}

TM_Error* backend_create(const TM_BackendCreateArgs* args, TM_Backend** out) {
  return ops::guard_plugin_call("backend_create", [&] {
    TM_RETURN_IF_ERROR(require(out != nullptr, "out"));
    *out = nullptr;
    TM_BackendCreateArgs create{};
    if (args != nullptr) create = ops::read_abi_struct(args);
    if (create.device_index != 0) {
      return Status::InvalidArgument("webgpu: device " + std::to_string(create.device_index) +
                                     " does not exist (Dawn offers one adapter)");
    }
    TM_ASSIGN_OR_RETURN(auto backend, WebGpuBackend::create(create.options));
    *out = reinterpret_cast<TM_Backend*>(backend.release());
    return Status::Ok();
  });
}

void backend_destroy(TM_Backend* backend) { delete backend_of(backend); }

TM_Error* device_traits(TM_Backend* backend, TM_DeviceTraits* out) {
  return ops::guard_plugin_call("device_traits", [&] {
    TM_RETURN_IF_ERROR(require(backend != nullptr && out != nullptr, "backend or out"));
    ops::write_abi_struct(backend_of(backend)->traits(), out);
    return Status::Ok();
  });
}

/// Whether the operation's second input is values too (the radix histogram's is its U64 prefixes).
bool compares_two_tensors(ops::CoreOp kind) { return kind == ops::CoreOp::kDiffStats || kind == ops::CoreOp::kSubtract; }

TM_Error* query(TM_Backend* backend, const TM_OpQuery* query_in, TM_OpSupport* out) {
  return ops::guard_plugin_call("query", [&] {
    TM_RETURN_IF_ERROR(require(backend != nullptr && query_in != nullptr && out != nullptr, "backend, query or out"));
    const TM_OpQuery q = ops::read_abi_struct(query_in);
    TM_OpSupport support{};
    support.struct_size = sizeof support;
    support.level = TM_SUPPORT_NONE;
    support.exactness = TM_EXACT_BITWISE;
    std::string reason;
    const auto kind = q.op ? ops::core_op_from_id(q.op) : std::nullopt;
    const auto dtype = from_abi_dtype(q.input_dtype);
    const bool render = q.op != nullptr && ops::is_render_op(q.op);
    if (render && std::string_view(q.op) == ops::kOpRenderTileSampled) {
      reason = "webgpu does not implement the sampled render rung";
    } else if (render && (!dtype || !kernel_dtype_supported(*dtype) || q.shape_class != TM_SHAPE_MATRIX)) {
      reason = std::string("webgpu renders values of matrices of ") + kImplemented +
               " only (statistics grids are coloured on the host)";
    } else if (render) {
      support.level = TM_SUPPORT_PARTIAL;
      reason = "values tiles with cells of 8 or more elements (block statistics on the device, colours on the host); "
               "smaller cells fall back";
    } else if (!kind || !implemented(*kind)) {
      reason = std::string("webgpu does not implement ") + (q.op ? q.op : "(null)");
    } else if (!dtype) {
      reason = "unknown dtype id " + std::to_string(static_cast<int>(q.input_dtype));
    } else if (!kernel_dtype_supported(*dtype)) {
      reason = std::string("webgpu implements ") + q.op + " for " + kImplemented + " only, not " +
               std::string(dtype_name(*dtype));
    } else if (const auto second = q.input_count > 1 && compares_two_tensors(*kind) ? from_abi_dtype(q.input_dtypes[1]) : dtype;
               !second || !kernel_dtype_supported(*second)) {
      reason = std::string("webgpu implements ") + q.op + " for " + kImplemented + " only, not " +
               (second ? std::string(dtype_name(*second)) : "dtype id " + std::to_string(static_cast<int>(q.input_dtypes[1]))) +
               " (the second input)";
    } else if (*kind == ops::CoreOp::kTileStats && q.shape_class != TM_SHAPE_MATRIX) {
      reason = "tm.tile_stats@1 takes a 2-D tensor (view a vector as [1, n])";
    } else if (*kind == ops::CoreOp::kChannelStats && q.shape_class != TM_SHAPE_MATRIX) {
      reason = "tm.channel_stats@1 takes a 2-D tensor";
    } else if (*kind == ops::CoreOp::kChannelStats) {
      support.level = TM_SUPPORT_PARTIAL;
      reason = "rows that fit one binding; longer rows fall back";
    } else if (*kind == ops::CoreOp::kHistogram) {
      support.level = TM_SUPPORT_PARTIAL;
      reason = "up to 1,048,576 bins; more fall back";
    } else {
      // Bitwise: the canonical halving order in integer float64, the CPU's decoders.
      support.level = TM_SUPPORT_FULL;
    }
    std::snprintf(support.reason, sizeof support.reason, "%s", reason.c_str());
    ops::write_abi_struct(support, out);
    return Status::Ok();
  });
}

TM_Error* estimate(TM_Backend* backend, const TM_OpInstance* op, TM_CostEstimate* out) {
  return ops::guard_plugin_call("estimate", [&] {
    TM_RETURN_IF_ERROR(require(backend != nullptr && op != nullptr && out != nullptr, "backend, op or out"));
    TM_ASSIGN_OR_RETURN(const TM_CostEstimate cost, estimate_of(*backend_of(backend), *op));
    ops::write_abi_struct(cost, out);
    return Status::Ok();
  });
}

TM_Error* buffer_alloc(TM_Backend* backend, uint32_t memory_space, uint64_t bytes, TM_Buffer** out) {
  return ops::guard_plugin_call("buffer_alloc", [&] {
    TM_RETURN_IF_ERROR(require(backend != nullptr && out != nullptr, "backend or out"));
    *out = nullptr;
    if (memory_space != 1) {
      return Status::InvalidArgument("webgpu has no memory space " + std::to_string(memory_space) +
                                     " (only device memory, 1)");
    }
    WebGpuBackend& b = *backend_of(backend);
    std::lock_guard lock(b.mutex);
    TM_ASSIGN_OR_RETURN(auto buffer, b.allocate(bytes));
    *out = reinterpret_cast<TM_Buffer*>(buffer.release());
    return Status::Ok();
  });
}

void buffer_free(TM_Backend* backend, TM_Buffer* buffer) {
  if (backend == nullptr || buffer == nullptr) return;
  WebGpuBackend& b = *backend_of(backend);
  std::lock_guard lock(b.mutex);
  auto* owned = reinterpret_cast<HostVisibleBuffer*>(buffer);
  if (!b.owns(owned)) return;  // never free what this backend did not allocate
  b.release(std::unique_ptr<HostVisibleBuffer>(owned));
}

Result<HostVisibleBuffer*> checked_range(WebGpuBackend& b, TM_Buffer* buffer, uint64_t offset, uint64_t bytes,
                                         const void* host) {
  TM_RETURN_IF_ERROR(require(buffer != nullptr, "buffer"));
  TM_RETURN_IF_ERROR(require(host != nullptr || bytes == 0, "host memory"));
  auto* owned = reinterpret_cast<HostVisibleBuffer*>(buffer);
  if (!b.owns(owned)) return Status::InvalidArgument("webgpu: the buffer was not allocated by this backend");
  uint64_t end = 0;
  if (__builtin_add_overflow(offset, bytes, &end) || end > owned->bytes) {
    return Status::InvalidArgument("webgpu: bytes [" + std::to_string(offset) + ", +" + std::to_string(bytes) +
                                   ") exceed the buffer's " + std::to_string(owned->bytes));
  }
  return owned;
}

TM_Error* buffer_write(TM_Backend* backend, TM_Buffer* buffer, uint64_t offset, const void* src, uint64_t bytes) {
  return ops::guard_plugin_call("buffer_write", [&] {
    TM_RETURN_IF_ERROR(require(backend != nullptr, "backend"));
    WebGpuBackend& b = *backend_of(backend);
    std::lock_guard lock(b.mutex);
    TM_ASSIGN_OR_RETURN(HostVisibleBuffer * owned, checked_range(b, buffer, offset, bytes, src));
    if (bytes == 0) return Status::Ok();
    if (offset % 4 != 0) {
      return Status::InvalidArgument("webgpu: buffer writes start at a multiple of 4 bytes, not " + std::to_string(offset));
    }
    return b.device().write(owned->device, offset, src, bytes);
  });
}

TM_Error* buffer_read(TM_Backend* backend, TM_Buffer* buffer, uint64_t offset, void* dst, uint64_t bytes) {
  return ops::guard_plugin_call("buffer_read", [&] {
    TM_RETURN_IF_ERROR(require(backend != nullptr, "backend"));
    WebGpuBackend& b = *backend_of(backend);
    std::lock_guard lock(b.mutex);
    TM_ASSIGN_OR_RETURN(HostVisibleBuffer * owned, checked_range(b, buffer, offset, bytes, dst));
    if (bytes == 0) return Status::Ok();
    return b.device().read(owned->device, offset, dst, bytes);
  });
}

TM_Error* execute(TM_Backend* backend, const TM_OpInstance* op, const TM_ExecutionPolicy* policy_in,
                  TM_ExecutionReport* report) {
  return ops::guard_plugin_call("execute", [&] {
    TM_RETURN_IF_ERROR(require(backend != nullptr && op != nullptr, "backend or op"));
    WebGpuBackend& b = *backend_of(backend);
    TM_ExecutionPolicy policy{};
    policy.struct_size = sizeof policy;
    if (policy_in != nullptr) policy = ops::read_abi_struct(policy_in);
    TM_RETURN_IF_ERROR(ops::check_exactness_floor(TM_EXACT_BITWISE, 0.0, policy));
    // Validation and the cost model's refusals come first: what estimate refuses, execute refuses.
    TM_ASSIGN_OR_RETURN(const TM_CostEstimate cost, estimate_of(b, *op));
    const char* id = ops::read_abi_struct(op).op;
    // Channel statistics fit a budget by their bands (run_channel_stats refuses when none fits).
    const bool banded = !ops::is_render_op(id) && ops::core_op_from_id(id) == ops::CoreOp::kChannelStats;
    if (!banded && policy.memory_budget_bytes != 0 && cost.working_bytes > policy.memory_budget_bytes) {
      return Status::ResourceExhausted("webgpu: the execution needs " + std::to_string(cost.working_bytes) +
                                       " bytes of working memory, over the budget of " +
                                       std::to_string(policy.memory_budget_bytes));
    }
    std::lock_guard lock(b.mutex);
    RunReport run;
    if (ops::is_render_op(id)) {
      TM_ASSIGN_OR_RETURN(const ops::RenderArgs args, ops::parse_render_tile(*op));
      TM_ASSIGN_OR_RETURN(run, b.run_render(args));
    } else {
      switch (*ops::core_op_from_id(id)) {
        case ops::CoreOp::kDecode: {
          TM_ASSIGN_OR_RETURN(auto args, ops::parse_decode(*op));
          TM_ASSIGN_OR_RETURN(run, b.run_decode(args));
          break;
        }
        case ops::CoreOp::kTileStats: {
          TM_ASSIGN_OR_RETURN(auto args, ops::parse_tile_stats(*op));
          TM_ASSIGN_OR_RETURN(run, b.run_tile_stats(args));
          break;
        }
        case ops::CoreOp::kChannelStats: {
          TM_ASSIGN_OR_RETURN(auto args, ops::parse_channel_stats(*op));
          TM_ASSIGN_OR_RETURN(run, b.run_channel_stats(args, policy.memory_budget_bytes));
          break;
        }
        case ops::CoreOp::kDiffStats: {
          TM_ASSIGN_OR_RETURN(auto args, ops::parse_diff_stats(*op));
          TM_ASSIGN_OR_RETURN(run, b.run_diff(args, true));
          break;
        }
        case ops::CoreOp::kSubtract: {
          TM_ASSIGN_OR_RETURN(auto args, ops::parse_subtract(*op));
          TM_ASSIGN_OR_RETURN(run, b.run_diff(args, false));
          break;
        }
        case ops::CoreOp::kRadixHistogram: {
          TM_ASSIGN_OR_RETURN(auto args, ops::parse_radix_histogram(*op));
          TM_ASSIGN_OR_RETURN(run, b.run_radix_histogram(args));
          break;
        }
        default: {
          TM_ASSIGN_OR_RETURN(auto args, ops::parse_histogram(*op));
          TM_ASSIGN_OR_RETURN(run, b.run_histogram(args));
          break;
        }
      }
    }
    ops::write_execution_report(report, TM_EXACT_BITWISE, run.device_ns, run.bytes_read, run.bytes_written);
    return Status::Ok();
  });
}

const TM_PluginApi kApi = {
    sizeof(TM_PluginApi), TM_PLUGIN_ABI_MAJOR, TM_PLUGIN_ABI_MINOR, kName, kVersion,
    &error_code, &error_message, &error_destroy,
    &device_count, &backend_create, &backend_destroy, &device_traits,
    &query, &estimate,
    &buffer_alloc, &buffer_free, &buffer_write, &buffer_read,
    &execute,
};

}  // namespace
}  // namespace tensormorph::webgpu

/// The WebGPU backend's function table, or NULL for a host of another major version.
extern "C" const TM_PluginApi* tm_webgpu_backend_get_api(uint32_t host_major, uint32_t /*host_minor*/) {
  return host_major == TM_PLUGIN_ABI_MAJOR ? &tensormorph::webgpu::kApi : nullptr;
}
