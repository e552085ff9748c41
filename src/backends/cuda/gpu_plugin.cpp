// The plugin ABI surface of the GPU module (libtm_cuda.so, or libtm_hip.so from the same source):
// the two exported symbols and the function table. Every entry point validates its pointers,
// reads host structs only up to their struct_size, holds the backend's lock while it touches the
// device, and turns every failure (and any exception) into a TM_Error.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "backends/cuda/gpu_backend.h"
#include "backends/cuda/gpu_exec.h"
#include "backends/cuda/gpu_render.h"
#include "backends/cuda/gpu_spectrum.h"
#include "core/dtype_abi.h"
#include "compute/ops/op_instance.h"
#include "compute/ops/plugin_error.h"

namespace tensormorph::gpu {
namespace {

constexpr const char* kName = TM_GPU_VENDOR;
constexpr const char* kImplemented = "F32, F16, BF16, F8_E4M3, F8_E5M2, Q8_0, Q4_0, Q4_K, Q6_K";

GpuBackend* backend_of(TM_Backend* b) { return reinterpret_cast<GpuBackend*>(b); }

Status require(bool condition, const char* what) {
  return condition ? Status::Ok() : Status::InvalidArgument(std::string(TM_GPU_VENDOR ": ") + what + " is null");
}

Result<ops::CoreOp> core_op_of(const TM_OpInstance& op) {
  const TM_OpInstance instance = ops::read_abi_struct(&op);
  if (instance.op == nullptr) return Status::InvalidArgument(TM_GPU_VENDOR ": operation instance names no operation");
  auto kind = ops::core_op_from_id(instance.op);
  // The exact summary is a sequential host pass over rare types: it has no device kernel.
  if (!kind || *kind == ops::CoreOp::kExactSummary) {
    return Status::Unimplemented(std::string(TM_GPU_VENDOR " does not implement ") + instance.op);
  }
  return *kind;
}

/// Modelled throughput of the kernels as a fraction of the device's measured read bandwidth.
double tile_stats_efficiency(tm_gpu::KernelDType dtype) {
  switch (dtype) {
    case tm_gpu::KernelDType::kF32: return 0.85;
    case tm_gpu::KernelDType::kF16:
    case tm_gpu::KernelDType::kBF16: return 0.75;
    case tm_gpu::KernelDType::kF8E4M3:
    case tm_gpu::KernelDType::kF8E5M2: return 0.4;
    default: return 0.3;
  }
}

/// The cost model (compute only: the host models transfers). Memory-bound kernels:
///   compute_ns = launch overhead + bytes_read / (read bandwidth * efficiency) [+ bytes written / bandwidth]
constexpr double kLaunchOverheadNs = 20'000.0;

/// Host time to colour one 256 x 256 tile from its block statistics.
constexpr double kHostColourNs = 65536.0 * 20.0;

/// The cost of a render instance this backend takes (estimate refuses the others, see gpu_render.h).
Result<TM_CostEstimate> render_estimate_of(const GpuBackend& b, const TM_OpInstance& op) {
  TM_ASSIGN_OR_RETURN(const ops::RenderArgs args, ops::parse_render_tile(op));
  TM_RETURN_IF_ERROR(render_instance_supported(args));
  TM_CostEstimate cost{};
  cost.struct_size = sizeof cost;
  cost.bytes_read = render_bytes_read(args);
  cost.bytes_written = ops::kRenderTileBytes;
  const double read_gbps = std::max(1.0, b.rates().device_read);
  const double link_gbps = std::max(0.1, b.rates().d2h_pageable);
  const ops::TileGrid grid = ops::tile_grid(ops::render_cell_view(args.params, args.rows, args.cols),
                                            static_cast<uint32_t>(args.params.cell));
  const double grid_bytes = static_cast<double>(grid.count() * sizeof(TM_TileStats));
  cost.compute_ns = kLaunchOverheadNs + static_cast<double>(cost.bytes_read) /
                                            (read_gbps * tile_stats_efficiency(*kernel_dtype(args.input.dtype))) +
                    grid_bytes / link_gbps + kHostColourNs;
  return cost;
}

Result<TM_CostEstimate> estimate_of(const GpuBackend& b, const TM_OpInstance& op) {
  if (const char* id = ops::read_abi_struct(&op).op; id != nullptr && ops::is_render_op(id)) {
    return render_estimate_of(b, op);
  }
  if (const char* id = ops::read_abi_struct(&op).op; id != nullptr && ops::spectrum_method_of(id)) {
    return spectrum_estimate(op);
  }
  TM_ASSIGN_OR_RETURN(const ops::CoreOp kind, core_op_of(op));
  TM_CostEstimate cost{};
  cost.struct_size = sizeof cost;
  const double read_gbps = std::max(1.0, b.rates().device_read);
  DType dtype = DType::kF32;
  double efficiency = 1.0;
  double extra_ns = 0.0;
  switch (kind) {
    case ops::CoreOp::kTileStats: {
      TM_ASSIGN_OR_RETURN(auto args, ops::parse_tile_stats(op));
      dtype = args.input.dtype;
      cost.bytes_read = tile_stats_bytes_read(args);
      cost.bytes_written = args.output.arg.nbytes;
      if (auto k = kernel_dtype(dtype)) efficiency = tile_stats_efficiency(*k);
      break;
    }
    case ops::CoreOp::kDecode: {
      TM_ASSIGN_OR_RETURN(auto args, ops::parse_decode(op));
      dtype = args.input.dtype;
      cost.bytes_read = args.input.arg.nbytes;
      cost.bytes_written = args.output.arg.nbytes;
      efficiency = 0.7;
      break;
    }
    case ops::CoreOp::kHistogram: {
      TM_ASSIGN_OR_RETURN(auto args, ops::parse_histogram(op));
      dtype = args.input.dtype;
      cost.bytes_read = args.input.arg.nbytes;
      cost.bytes_written = args.output.arg.nbytes;
      efficiency = 0.25;
      break;
    }
    case ops::CoreOp::kRadixHistogram: {
      TM_ASSIGN_OR_RETURN(auto args, ops::parse_radix_histogram(op));
      dtype = args.input.dtype;
      cost.bytes_read = args.input.arg.nbytes;
      cost.bytes_written = args.counts.arg.nbytes + args.classes.arg.nbytes;
      // Its atomics on a top digit's 65,536 counters, not memory, bound it (docs/PERFORMANCE.md).
      efficiency = args.prefixes.elems > 0 ? 0.25 : 0.02;
      break;
    }
    case ops::CoreOp::kTopK: {
      TM_ASSIGN_OR_RETURN(auto args, ops::parse_top_k(op));
      dtype = args.input.dtype;
      if (!kernel_dtype(dtype)) break;
      // Two passes (the top digit's histogram, the collection), a third or more when the threshold's
      // bucket is crowded; then the host sorts about k candidates.
      cost.bytes_read = 2 * args.input.arg.nbytes;
      cost.bytes_written = args.indices.arg.nbytes + args.values.arg.nbytes;
      cost.working_bytes = top_k_working_bytes(b, args, 0);
      efficiency = 0.5;
      extra_ns = 3 * kLaunchOverheadNs + static_cast<double>(args.k) * 30.0;  // syncs between passes; the sort
      break;
    }
    case ops::CoreOp::kChannelStats: {
      TM_ASSIGN_OR_RETURN(auto args, ops::parse_channel_stats(op));
      dtype = args.input.dtype;
      if (!kernel_dtype(dtype)) break;
      // One read from device memory (the column pass finds each band in L2) at the kernels' pace.
      cost.bytes_read = args.input.arg.nbytes;
      cost.bytes_written = args.rows_out.arg.nbytes + args.cols_out.arg.nbytes;
      cost.working_bytes = channel_stats_working_bytes(b, args, 0);
      efficiency = 0.4;
      break;
    }
    case ops::CoreOp::kDiffStats:
    case ops::CoreOp::kSubtract: {
      const bool stats = kind == ops::CoreOp::kDiffStats;
      TM_ASSIGN_OR_RETURN(auto args, stats ? ops::parse_diff_stats(op) : ops::parse_subtract(op));
      // The side this backend cannot decode, if any, is the one checked below.
      dtype = kernel_dtype(args.a.dtype) ? args.b.dtype : args.a.dtype;
      if (!kernel_dtype(dtype)) break;
      // One read of both inputs, decoded as the slower of the two (block types' decode bounds it).
      cost.bytes_read = args.a.arg.nbytes + args.b.arg.nbytes;
      cost.bytes_written = args.output.arg.nbytes;
      cost.working_bytes = diff_working_bytes(b, args, stats, 0);
      efficiency = std::min(tile_stats_efficiency(*kernel_dtype(args.a.dtype)), tile_stats_efficiency(*kernel_dtype(args.b.dtype)));
      if (stats) efficiency *= 0.8;  // five float64 sums per pair
      break;
    }
    case ops::CoreOp::kExactSummary: break;  // refused by core_op_of
  }
  if (!kernel_dtype(dtype)) {
    return Status::Unimplemented(std::string(TM_GPU_VENDOR " does not implement ") + std::string(dtype_name(dtype)));
  }
  cost.compute_ns = kLaunchOverheadNs + extra_ns + static_cast<double>(cost.bytes_read) / (read_gbps * efficiency) +
                    static_cast<double>(cost.bytes_written) / read_gbps;
  return cost;
}

// ---- The ABI entry points --------------------------------------------------------------------

TM_StatusCode error_code(const TM_Error* error) { return ops::plugin_error_code(error); }
const char* error_message(const TM_Error* error) { return ops::plugin_error_message(error); }
void error_destroy(TM_Error* error) { ops::plugin_error_destroy(error); }

TM_Error* device_count(uint32_t* count, char* why_none, size_t why_len) {
  return ops::guard_plugin_call("device_count", [&] {
    TM_RETURN_IF_ERROR(require(count != nullptr, "count"));
    const DeviceCensus census = take_census();
    *count = static_cast<uint32_t>(census.usable.size());
    if (why_none != nullptr && why_len > 0) std::snprintf(why_none, why_len, "%s", census.why_none.c_str());
    return Status::Ok();
  });
}

TM_Error* backend_create(const TM_BackendCreateArgs* args, TM_Backend** out) {
  return ops::guard_plugin_call("backend_create", [&] {
    TM_RETURN_IF_ERROR(require(out != nullptr, "out"));
    *out = nullptr;
    TM_BackendCreateArgs create{};
    if (args != nullptr) create = ops::read_abi_struct(args);
    TM_ASSIGN_OR_RETURN(auto backend, GpuBackend::create(create.device_index, create.options));
    *out = reinterpret_cast<TM_Backend*>(backend.release());
    return Status::Ok();
  });
}

void backend_destroy(TM_Backend* backend) {
  if (backend != nullptr) release_spectrum_solvers(*backend_of(backend));
  delete backend_of(backend);
}

TM_Error* device_traits(TM_Backend* backend, TM_DeviceTraits* out) {
  return ops::guard_plugin_call("device_traits", [&] {
    TM_RETURN_IF_ERROR(require(backend != nullptr && out != nullptr, "backend or out"));
    ops::write_abi_struct(backend_of(backend)->traits(), out);
    return Status::Ok();
  });
}

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
    if (q.op != nullptr && ops::spectrum_method_of(q.op)) {
      spectrum_support(q, support);
    } else if (render && std::string_view(q.op) == ops::kOpRenderTileSampled) {
      reason = TM_GPU_VENDOR " does not implement the sampled render rung";
    } else if (render && (!dtype || !kernel_dtype(*dtype) || q.shape_class != TM_SHAPE_MATRIX)) {
      reason = std::string(TM_GPU_VENDOR " renders values of matrices of ") + kImplemented +
               " only (statistics grids are coloured on the host)";
    } else if (render) {
      support.level = TM_SUPPORT_PARTIAL;
      reason = "values tiles with cells of 8 or more elements (block statistics on the device, colours on the host); "
               "smaller cells fall back";
    } else if (!kind || *kind == ops::CoreOp::kExactSummary) {
      reason = std::string(TM_GPU_VENDOR " does not implement ") + (q.op ? q.op : "(null)");
    } else if (!dtype) {
      reason = "unknown dtype id " + std::to_string(static_cast<int>(q.input_dtype));
    } else if (!kernel_dtype(*dtype)) {
      reason = std::string(TM_GPU_VENDOR " implements ") + q.op + " for " + kImplemented + " only, not " +
               std::string(dtype_name(*dtype));
    } else if ((*kind == ops::CoreOp::kDiffStats || *kind == ops::CoreOp::kSubtract) && q.input_count >= 2 &&
               (!from_abi_dtype(q.input_dtypes[1]) || !kernel_dtype(*from_abi_dtype(q.input_dtypes[1])))) {
      const auto second = from_abi_dtype(q.input_dtypes[1]);
      reason = std::string(TM_GPU_VENDOR " implements ") + q.op + " for inputs of " + kImplemented + " only, not in[1] " +
               (second ? std::string(dtype_name(*second)) : "of dtype id " + std::to_string(static_cast<int>(q.input_dtypes[1])));
    } else if (*kind == ops::CoreOp::kTileStats && q.shape_class != TM_SHAPE_MATRIX) {
      reason = "tm.tile_stats@1 takes a 2-D tensor (view a vector as [1, n])";
    } else if (*kind == ops::CoreOp::kChannelStats && q.shape_class != TM_SHAPE_MATRIX) {
      reason = "tm.channel_stats@1 takes a 2-D tensor";
    } else {
      support.level = TM_SUPPORT_FULL;  // bitwise: the canonical order, no FMA, the CPU's decoders
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
      return Status::InvalidArgument(std::string(TM_GPU_VENDOR " has no memory space ") + std::to_string(memory_space) +
                                     " (only device memory, 1)");
    }
    GpuBackend& b = *backend_of(backend);
    std::lock_guard lock(b.mutex);
    TM_ASSIGN_OR_RETURN(auto buffer, b.allocate(bytes));
    *out = reinterpret_cast<TM_Buffer*>(buffer.release());
    return Status::Ok();
  });
}

void buffer_free(TM_Backend* backend, TM_Buffer* buffer) {
  if (backend == nullptr || buffer == nullptr) return;
  GpuBackend& b = *backend_of(backend);
  std::lock_guard lock(b.mutex);
  auto* gpu_buffer = reinterpret_cast<GpuBuffer*>(buffer);
  if (!b.owns(gpu_buffer)) return;  // not ours: never free what we did not allocate
  b.release(std::unique_ptr<GpuBuffer>(gpu_buffer));
}

Status check_range(GpuBackend& b, TM_Buffer* buffer, uint64_t offset, uint64_t bytes, const void* host) {
  TM_RETURN_IF_ERROR(require(buffer != nullptr, "buffer"));
  TM_RETURN_IF_ERROR(require(host != nullptr || bytes == 0, "host memory"));
  auto* gpu_buffer = reinterpret_cast<GpuBuffer*>(buffer);
  if (!b.owns(gpu_buffer)) {
    return Status::InvalidArgument(std::string(TM_GPU_VENDOR ": the buffer was not allocated by this backend"));
  }
  uint64_t end = 0;
  if (__builtin_add_overflow(offset, bytes, &end) || end > gpu_buffer->bytes) {
    return Status::InvalidArgument(std::string(TM_GPU_VENDOR ": bytes [") + std::to_string(offset) + ", +" +
                                   std::to_string(bytes) + ") exceed the buffer's " + std::to_string(gpu_buffer->bytes));
  }
  return Status::Ok();
}

TM_Error* buffer_write(TM_Backend* backend, TM_Buffer* buffer, uint64_t offset, const void* src, uint64_t bytes) {
  return ops::guard_plugin_call("buffer_write", [&] {
    TM_RETURN_IF_ERROR(require(backend != nullptr, "backend"));
    GpuBackend& b = *backend_of(backend);
    std::lock_guard lock(b.mutex);
    TM_RETURN_IF_ERROR(check_range(b, buffer, offset, bytes, src));
    if (bytes == 0) return Status::Ok();
    TM_RETURN_IF_ERROR(b.activate());
    return b.copy_to_device(reinterpret_cast<GpuBuffer*>(buffer)->data + offset, src, bytes);
  });
}

TM_Error* buffer_read(TM_Backend* backend, TM_Buffer* buffer, uint64_t offset, void* dst, uint64_t bytes) {
  return ops::guard_plugin_call("buffer_read", [&] {
    TM_RETURN_IF_ERROR(require(backend != nullptr, "backend"));
    GpuBackend& b = *backend_of(backend);
    std::lock_guard lock(b.mutex);
    TM_RETURN_IF_ERROR(check_range(b, buffer, offset, bytes, dst));
    if (bytes == 0) return Status::Ok();
    TM_RETURN_IF_ERROR(b.activate());
    return b.copy_to_host(dst, reinterpret_cast<GpuBuffer*>(buffer)->data + offset, bytes);
  });
}

TM_Error* execute(TM_Backend* backend, const TM_OpInstance* op, const TM_ExecutionPolicy* policy_in,
                  TM_ExecutionReport* report) {
  return ops::guard_plugin_call("execute", [&] {
    TM_RETURN_IF_ERROR(require(backend != nullptr && op != nullptr, "backend or op"));
    GpuBackend& b = *backend_of(backend);
    TM_ExecutionPolicy policy{};
    policy.struct_size = sizeof policy;
    if (policy_in != nullptr) policy = ops::read_abi_struct(policy_in);
    RunReport run;
    if (const char* id = ops::read_abi_struct(op).op; id != nullptr && ops::spectrum_method_of(id)) {
      // Spectra are bounded: the floor must accept that, and the bound it reaches.
      TM_ASSIGN_OR_RETURN(const ops::SpectrumArgs args, ops::parse_spectrum(*op));
      TM_RETURN_IF_ERROR(ops::check_exactness_floor(TM_EXACT_BOUNDED, 0.0, policy));
      TM_ASSIGN_OR_RETURN(const OutputRef values_out, output_of(b, args.values));
      TM_ASSIGN_OR_RETURN(const OutputRef bounds_out, output_of(b, args.bounds));
      if (values_out.host == nullptr || bounds_out.host == nullptr) {
        return Status::Unimplemented(TM_GPU_VENDOR " writes spectra to host memory only");
      }
      std::vector<double> values(args.count), bounds(args.count);
      std::lock_guard lock(b.mutex);
      TM_ASSIGN_OR_RETURN(run, run_spectrum(b, args, policy.memory_budget_bytes, values, bounds));
      const double relative = values[0] > 0 ? bounds[0] / values[0] : 0;
      TM_RETURN_IF_ERROR(ops::check_exactness_floor(TM_EXACT_BOUNDED, relative, policy));
      std::memcpy(values_out.host, values.data(), args.values.arg.nbytes);
      std::memcpy(bounds_out.host, bounds.data(), args.bounds.arg.nbytes);
      ops::write_execution_report(report, TM_EXACT_BOUNDED, run.device_ns, run.bytes_read, run.bytes_written);
      if (report != nullptr) {
        TM_ExecutionReport r = ops::read_abi_struct(report);
        r.error_bound = relative;
        ops::write_abi_struct(r, report);
      }
      return Status::Ok();
    }
    // Every other result of this backend is bitwise: only an unknown floor can be refused here.
    TM_RETURN_IF_ERROR(ops::check_exactness_floor(TM_EXACT_BITWISE, 0.0, policy));
    if (const char* id = ops::read_abi_struct(op).op; id != nullptr && ops::is_render_op(id)) {
      TM_ASSIGN_OR_RETURN(const ops::RenderArgs args, ops::parse_render_tile(*op));
      std::lock_guard lock(b.mutex);
      TM_ASSIGN_OR_RETURN(run, run_render(b, args, policy.memory_budget_bytes));
      ops::write_execution_report(report, TM_EXACT_BITWISE, run.device_ns, run.bytes_read, run.bytes_written);
      return Status::Ok();
    }
    TM_ASSIGN_OR_RETURN(const ops::CoreOp kind, core_op_of(*op));
    std::lock_guard lock(b.mutex);
    switch (kind) {
      case ops::CoreOp::kDecode: {
        TM_ASSIGN_OR_RETURN(auto args, ops::parse_decode(*op));
        TM_ASSIGN_OR_RETURN(run, run_decode(b, args, policy.memory_budget_bytes));
        break;
      }
      case ops::CoreOp::kTileStats: {
        TM_ASSIGN_OR_RETURN(auto args, ops::parse_tile_stats(*op));
        TM_ASSIGN_OR_RETURN(run, run_tile_stats(b, args, policy.memory_budget_bytes));
        break;
      }
      case ops::CoreOp::kHistogram: {
        TM_ASSIGN_OR_RETURN(auto args, ops::parse_histogram(*op));
        TM_ASSIGN_OR_RETURN(run, run_histogram(b, args, policy.memory_budget_bytes));
        break;
      }
      case ops::CoreOp::kRadixHistogram: {
        TM_ASSIGN_OR_RETURN(auto args, ops::parse_radix_histogram(*op));
        TM_ASSIGN_OR_RETURN(run, run_radix_histogram(b, args, policy.memory_budget_bytes));
        break;
      }
      case ops::CoreOp::kChannelStats: {
        TM_ASSIGN_OR_RETURN(auto args, ops::parse_channel_stats(*op));
        TM_ASSIGN_OR_RETURN(run, run_channel_stats(b, args, policy.memory_budget_bytes));
        break;
      }
      case ops::CoreOp::kDiffStats: {
        TM_ASSIGN_OR_RETURN(auto args, ops::parse_diff_stats(*op));
        TM_ASSIGN_OR_RETURN(run, run_diff_stats(b, args, policy.memory_budget_bytes));
        break;
      }
      case ops::CoreOp::kSubtract: {
        TM_ASSIGN_OR_RETURN(auto args, ops::parse_subtract(*op));
        TM_ASSIGN_OR_RETURN(run, run_subtract(b, args, policy.memory_budget_bytes));
        break;
      }
      case ops::CoreOp::kTopK: {
        TM_ASSIGN_OR_RETURN(auto args, ops::parse_top_k(*op));
        uint64_t written = 0;
        TM_ASSIGN_OR_RETURN(run, run_top_k(b, args, policy.memory_budget_bytes, &written));
        ops::write_execution_report(report, TM_EXACT_BITWISE, run.device_ns, run.bytes_read, run.bytes_written);
        if (report != nullptr) {
          // Data-dependent outputs: how much of each holds entries (the rest is padding).
          TM_ExecutionReport r = ops::read_abi_struct(report);
          r.output_nbytes[0] = written * sizeof(uint64_t);
          r.output_nbytes[1] = written * sizeof(float);
          ops::write_abi_struct(r, report);
        }
        return Status::Ok();
      }
      case ops::CoreOp::kExactSummary: break;  // refused by core_op_of
    }
    ops::write_execution_report(report, TM_EXACT_BITWISE, run.device_ns, run.bytes_read, run.bytes_written);
    return Status::Ok();
  });
}

const TM_PluginApi kApi = {
    sizeof(TM_PluginApi), TM_PLUGIN_ABI_MAJOR, TM_PLUGIN_ABI_MINOR, kName, kModuleVersion,
    &error_code, &error_message, &error_destroy,
    &device_count, &backend_create, &backend_destroy, &device_traits,
    &query, &estimate,
    &buffer_alloc, &buffer_free, &buffer_write, &buffer_read,
    &execute,
};

}  // namespace
}  // namespace tensormorph::gpu

#define TM_GPU_EXPORT __attribute__((visibility("default")))

extern "C" {

/// The ABI version this module was built against; no side effects.
TM_GPU_EXPORT uint32_t tm_plugin_abi_version(void) {
  return TM_PLUGIN_ABI_VERSION_PACK(TM_PLUGIN_ABI_MAJOR, TM_PLUGIN_ABI_MINOR);
}

/// The function table, or NULL for a host of another major version.
TM_GPU_EXPORT const TM_PluginApi* tm_plugin_get_api(uint32_t host_major, uint32_t /*host_minor*/) {
  return host_major == TM_PLUGIN_ABI_MAJOR ? &tensormorph::gpu::kApi : nullptr;
}

}  // extern "C"

static_assert(std::is_same_v<decltype(&tm_plugin_abi_version), TM_PluginAbiVersionFn>);
static_assert(std::is_same_v<decltype(&tm_plugin_get_api), TM_PluginGetApiFn>);
