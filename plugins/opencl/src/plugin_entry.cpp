// The ABI surface: the two exported symbols and the function table. Every entry point validates
// its pointers, reads host structs only up to their struct_size, and turns every failure (and any
// exception) into one of the plugin kit's error objects: nothing throws or aborts across the
// boundary. Errors are made only in this file, the one that hands out tm_kit_error_destroy, so
// every error the table returns is one that entry knows.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <type_traits>

#include "backend.h"
#include "errors.h"
#include "estimate.h"
#include "exec.h"
#include "op_parse.h"
#include "support.h"
#include "tensormorph/c/plugin.h"
#include "tensormorph/c/plugin_kit.h"

namespace tm_opencl {
namespace {

/// The kit's error object for `failure`.
TM_Error* to_error(const Failure& failure) { return tm_kit_error(failure.code, "%s", failure.message.c_str()); }

/// Runs an entry point's body, turning its failure or any exception into an error object.
template <typename Body>
TM_Error* guarded(Body&& body) noexcept {
  try {
    Status status = body();
    return status.ok() ? nullptr : to_error(status.take_failure());
  } catch (const std::bad_alloc&) {
    return tm_kit_error(TM_STATUS_RESOURCE_EXHAUSTED, "opencl: out of host memory");
  } catch (const std::exception& error) {
    return tm_kit_error(TM_STATUS_INTERNAL, "opencl: unexpected exception: %s", error.what());
  } catch (...) {
    return tm_kit_error(TM_STATUS_INTERNAL, "opencl: unexpected exception");
  }
}

/// An INVALID_ARGUMENT failure for a null pointer argument.
Failure null_argument(const char* function, const char* argument) {
  return invalid_argument(std::string("opencl: ") + function + ": " + argument + " is null");
}

/// A copy of the host's struct at `p`, read no further than its struct_size (the rest zero).
template <typename T>
T read_host_struct(const T* p) {
  T copy{};
  tm_kit_read_struct(&copy, sizeof copy, p);
  return copy;
}

/// Writes `value` into the host's struct at `out` no further than its struct_size (0: all of it).
template <typename T>
Status write_host_struct(T* out, const T& value, const char* function) {
  // The kit always writes the struct_size field itself, so a size smaller than it has no room.
  const size_t room = tm_kit_struct_size(out);
  if (room != 0 && room < sizeof(size_t)) {
    return invalid_argument(std::string("opencl: ") + function + ": the output's struct_size " + std::to_string(room) +
                            " is smaller than the struct_size field itself");
  }
  tm_kit_write_struct(out, &value, sizeof value);
  return {};
}

/// device_count: the OpenCL devices of every platform, or why there are none.
TM_Error* api_device_count(uint32_t* count, char* why_none, size_t why_len) {
  return guarded([&]() -> Status {
    if (count == nullptr) return null_argument("device_count", "count");
    const DeviceList list = list_devices();
    *count = static_cast<uint32_t>(std::min<size_t>(list.devices.size(), std::numeric_limits<uint32_t>::max()));
    if (why_none != nullptr && why_len > 0) {
      const size_t n = std::min(list.why_none.size(), why_len - 1);
      list.why_none.copy(why_none, n);
      why_none[n] = '\0';
    }
    return {};
  });
}

/// backend_create: opens a device, compiles the kernels, measures the link.
TM_Error* api_backend_create(const TM_BackendCreateArgs* args, TM_Backend** out) {
  return guarded([&]() -> Status {
    if (out == nullptr) return null_argument("backend_create", "out");
    *out = nullptr;
    if (args == nullptr) return null_argument("backend_create", "args");
    TMCL_ASSIGN_OR_RETURN(std::unique_ptr<TM_Backend> backend, create_backend(read_host_struct(args)));
    *out = backend.release();
    return {};
  });
}

/// backend_destroy: waits for queued work, then releases everything.
void api_backend_destroy(TM_Backend* backend) {
  if (backend == nullptr) return;
  clFinish(backend->queue.get());
  delete backend;
}

/// device_traits.
TM_Error* api_device_traits(TM_Backend* backend, TM_DeviceTraits* out) {
  return guarded([&]() -> Status {
    if (backend == nullptr) return null_argument("device_traits", "backend");
    if (out == nullptr) return null_argument("device_traits", "out");
    return write_host_struct(out, device_traits_of(*backend), "device_traits");
  });
}

/// query: the capability of (operation, dtype, shape class) on this device.
TM_Error* api_query(TM_Backend* backend, const TM_OpQuery* query_ptr, TM_OpSupport* out) {
  return guarded([&]() -> Status {
    if (backend == nullptr) return null_argument("query", "backend");
    if (query_ptr == nullptr) return null_argument("query", "query");
    if (out == nullptr) return null_argument("query", "out");
    const TM_OpQuery query = read_host_struct(query_ptr);
    if (query.op == nullptr) return null_argument("query", "query->op");
    const int dtype = raw_enum_value(query.input_dtype);
    if (!is_known_dtype(dtype)) {
      return invalid_argument("opencl: query: input_dtype " + std::to_string(dtype) + " is not a TM_DType value");
    }
    const int shape_class = raw_enum_value(query.shape_class);
    if (shape_class < TM_SHAPE_VECTOR || shape_class > TM_SHAPE_TENSOR) {
      return invalid_argument("opencl: query: shape_class " + std::to_string(shape_class) +
                              " is not a TM_ShapeClass value");
    }
    const Capability capability = capability_of(*backend, query.op, query.input_dtype, query.shape_class);
    TM_OpSupport support{};
    support.level = capability.level;
    support.exactness = capability.exactness;
    support.error_bound = capability.error_bound;
    std::snprintf(support.reason, sizeof support.reason, "%s", capability.reason.c_str());
    return write_host_struct(out, support, "query");
  });
}

/// estimate: validates like execute, so what execute would refuse is refused here first.
TM_Error* api_estimate(TM_Backend* backend, const TM_OpInstance* op, TM_CostEstimate* out) {
  return guarded([&]() -> Status {
    if (backend == nullptr) return null_argument("estimate", "backend");
    if (out == nullptr) return null_argument("estimate", "out");
    TMCL_ASSIGN_OR_RETURN(const ParsedOp parsed, parse_op(*backend, op));
    return write_host_struct(out, estimate_cost(*backend, parsed), "estimate");
  });
}

/// buffer_alloc: device global memory (space 1) only.
TM_Error* api_buffer_alloc(TM_Backend* backend, uint32_t memory_space, uint64_t bytes, TM_Buffer** out) {
  return guarded([&]() -> Status {
    if (out == nullptr) return null_argument("buffer_alloc", "out");
    *out = nullptr;
    if (backend == nullptr) return null_argument("buffer_alloc", "backend");
    TMCL_ASSIGN_OR_RETURN(std::unique_ptr<TM_Buffer> buffer, allocate_buffer(*backend, memory_space, bytes));
    *out = buffer.release();
    return {};
  });
}

/// buffer_free.
void api_buffer_free(TM_Backend* backend, TM_Buffer* buffer) {
  if (buffer == nullptr) return;
  if (backend != nullptr) {
    // Commands reading the buffer may still be queued; the cl_mem outlives them by refcount, but
    // finishing keeps the free observable to the host as "done with it".
    std::lock_guard lock(backend->mutex);
    clFinish(backend->queue.get());
  }
  delete buffer;
}

/// buffer_write.
TM_Error* api_buffer_write(TM_Backend* backend, TM_Buffer* buffer, uint64_t offset, const void* src, uint64_t bytes) {
  return guarded([&]() -> Status {
    if (backend == nullptr) return null_argument("buffer_write", "backend");
    if (buffer == nullptr) return null_argument("buffer_write", "buffer");
    return write_buffer(*backend, *buffer, offset, src, bytes);
  });
}

/// buffer_read.
TM_Error* api_buffer_read(TM_Backend* backend, TM_Buffer* buffer, uint64_t offset, void* dst, uint64_t bytes) {
  return guarded([&]() -> Status {
    if (backend == nullptr) return null_argument("buffer_read", "backend");
    if (buffer == nullptr) return null_argument("buffer_read", "buffer");
    return read_buffer(*backend, *buffer, offset, dst, bytes);
  });
}

/// execute: validates, checks the policy, runs the job under the backend's lock, reports.
TM_Error* api_execute(TM_Backend* backend, const TM_OpInstance* op, const TM_ExecutionPolicy* policy_ptr,
                      TM_ExecutionReport* report) {
  return guarded([&]() -> Status {
    if (backend == nullptr) return null_argument("execute", "backend");
    TMCL_ASSIGN_OR_RETURN(const ParsedOp parsed, parse_op(*backend, op));
    // No policy means the strictest one: bitwise results only.
    const TM_ExecutionPolicy policy = policy_ptr != nullptr ? read_host_struct(policy_ptr) : TM_ExecutionPolicy{};
    TMCL_RETURN_IF_ERROR(check_policy(parsed.capability, policy, parsed.op));
    // max_threads is not applicable: the OpenCL runtime owns the device's parallelism.
    RunStats stats;
    {
      std::lock_guard lock(backend->mutex);
      switch (parsed.kind) {
        case OpKind::kTileStats: {
          TMCL_ASSIGN_OR_RETURN(stats, run_tile_stats(*backend, parsed.tile_stats, policy.memory_budget_bytes));
          break;
        }
        case OpKind::kDecode: {
          TMCL_ASSIGN_OR_RETURN(stats, run_decode(*backend, parsed.decode, policy.memory_budget_bytes));
          break;
        }
        case OpKind::kRenderValues: {
          TMCL_ASSIGN_OR_RETURN(stats, run_render_values(*backend, parsed.render, policy.memory_budget_bytes));
          break;
        }
        case OpKind::kRenderStats: {
          TMCL_ASSIGN_OR_RETURN(stats, run_render_stats(*backend, parsed.render));
          break;
        }
      }
    }
    if (report == nullptr) return {};
    TM_ExecutionReport filled{};
    filled.exactness = parsed.capability.exactness;
    filled.error_bound = parsed.capability.error_bound;
    filled.device_ns = stats.device_ns;
    filled.bytes_read = stats.bytes_read;
    filled.bytes_written = stats.bytes_written;
    filled.output_nbytes[0] = parsed.output_nbytes;
    return write_host_struct(report, filled, "execute");
  });
}

const TM_PluginApi kApi = {
    .struct_size = sizeof(TM_PluginApi),
    .abi_major = TM_PLUGIN_ABI_MAJOR,
    .abi_minor = TM_PLUGIN_ABI_MINOR,
    .name = "opencl",
    .version = "0.1.0",
    .error_code = &tm_kit_error_code,
    .error_message = &tm_kit_error_message,
    .error_destroy = &tm_kit_error_destroy,
    .device_count = &api_device_count,
    .backend_create = &api_backend_create,
    .backend_destroy = &api_backend_destroy,
    .device_traits = &api_device_traits,
    .query = &api_query,
    .estimate = &api_estimate,
    .buffer_alloc = &api_buffer_alloc,
    .buffer_free = &api_buffer_free,
    .buffer_write = &api_buffer_write,
    .buffer_read = &api_buffer_read,
    .execute = &api_execute,
};

}  // namespace
}  // namespace tm_opencl

#define TM_OPENCL_EXPORT __attribute__((visibility("default")))

extern "C" {

/// The ABI version this plugin was built against; no side effects.
TM_OPENCL_EXPORT uint32_t tm_plugin_abi_version(void) {
  return TM_PLUGIN_ABI_VERSION_PACK(TM_PLUGIN_ABI_MAJOR, TM_PLUGIN_ABI_MINOR);
}

/// The function table, or NULL for a host of another major version. A host of an older or newer
/// minor gets the same table: it reads no further than its own struct_size says it knows.
TM_OPENCL_EXPORT const TM_PluginApi* tm_plugin_get_api(uint32_t host_major, uint32_t host_minor) {
  (void)host_minor;
  if (host_major != TM_PLUGIN_ABI_MAJOR) return nullptr;
  return &tm_opencl::kApi;
}

}  // extern "C"

static_assert(std::is_same_v<decltype(&tm_plugin_abi_version), TM_PluginAbiVersionFn>);
static_assert(std::is_same_v<decltype(&tm_plugin_get_api), TM_PluginGetApiFn>);
