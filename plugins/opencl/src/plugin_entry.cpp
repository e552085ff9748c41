// The ABI surface: the two exported symbols and the function table. Every entry point validates
// its pointers, reads host structs only up to their struct_size, and turns every failure (and any
// exception) into a TM_Error: nothing throws or aborts across the boundary.
#include <exception>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <type_traits>

#include "abi_io.h"
#include "backend.h"
#include "errors.h"
#include "estimate.h"
#include "exec.h"
#include "op_parse.h"
#include "support.h"
#include "tensormorph/c/plugin.h"

namespace tm_opencl {
namespace {

template <typename Body>
TM_Error* guarded(Body&& body) noexcept {
  try {
    Status status = body();
    return status.ok() ? nullptr : to_tm_error(status.take_failure());
  } catch (const std::bad_alloc&) {
    return to_tm_error(resource_exhausted("opencl: out of host memory"));
  } catch (const std::exception& error) {
    return to_tm_error(internal_error(std::string("opencl: unexpected exception: ") + error.what()));
  } catch (...) {
    return to_tm_error(internal_error("opencl: unexpected exception"));
  }
}

Failure null_argument(const char* function, const char* argument) {
  return invalid_argument(std::string("opencl: ") + function + ": " + argument + " is null");
}

TM_StatusCode api_error_code(const TM_Error* error) { return error != nullptr ? error->code : TM_STATUS_OK; }

const char* api_error_message(const TM_Error* error) { return error != nullptr ? error->message.c_str() : ""; }

void api_error_destroy(TM_Error* error) { destroy_tm_error(error); }

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

TM_Error* api_backend_create(const TM_BackendCreateArgs* args, TM_Backend** out) {
  return guarded([&]() -> Status {
    if (out == nullptr) return null_argument("backend_create", "out");
    *out = nullptr;
    if (args == nullptr) return null_argument("backend_create", "args");
    TMCL_ASSIGN_OR_RETURN(std::unique_ptr<TM_Backend> backend, create_backend(read_versioned(args)));
    *out = backend.release();
    return {};
  });
}

void api_backend_destroy(TM_Backend* backend) {
  if (backend == nullptr) return;
  clFinish(backend->queue.get());
  delete backend;
}

TM_Error* api_device_traits(TM_Backend* backend, TM_DeviceTraits* out) {
  return guarded([&]() -> Status {
    if (backend == nullptr) return null_argument("device_traits", "backend");
    if (out == nullptr) return null_argument("device_traits", "out");
    return write_versioned(out, device_traits_of(*backend));
  });
}

TM_Error* api_query(TM_Backend* backend, const TM_OpQuery* query_ptr, TM_OpSupport* out) {
  return guarded([&]() -> Status {
    if (backend == nullptr) return null_argument("query", "backend");
    if (query_ptr == nullptr) return null_argument("query", "query");
    if (out == nullptr) return null_argument("query", "out");
    const TM_OpQuery query = read_versioned(query_ptr);
    if (query.op == nullptr) return null_argument("query", "query->op");
    const int dtype = enum_value(query.input_dtype);
    if (!is_known_dtype(dtype)) {
      return invalid_argument("opencl: query: input_dtype " + std::to_string(dtype) + " is not a TM_DType value");
    }
    const int shape_class = enum_value(query.shape_class);
    if (shape_class < TM_SHAPE_VECTOR || shape_class > TM_SHAPE_TENSOR) {
      return invalid_argument("opencl: query: shape_class " + std::to_string(shape_class) +
                              " is not a TM_ShapeClass value");
    }
    const Capability capability = capability_of(*backend, query.op, query.input_dtype, query.shape_class);
    TM_OpSupport support{};
    support.level = capability.level;
    support.exactness = capability.exactness;
    support.error_bound = capability.error_bound;
    copy_text(support.reason, capability.reason);
    return write_versioned(out, support);
  });
}

TM_Error* api_estimate(TM_Backend* backend, const TM_OpInstance* op, TM_CostEstimate* out) {
  return guarded([&]() -> Status {
    if (backend == nullptr) return null_argument("estimate", "backend");
    if (out == nullptr) return null_argument("estimate", "out");
    TMCL_ASSIGN_OR_RETURN(const ParsedOp parsed, parse_op(*backend, op));
    return write_versioned(out, estimate_cost(*backend, parsed));
  });
}

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

TM_Error* api_buffer_write(TM_Backend* backend, TM_Buffer* buffer, uint64_t offset, const void* src, uint64_t bytes) {
  return guarded([&]() -> Status {
    if (backend == nullptr) return null_argument("buffer_write", "backend");
    if (buffer == nullptr) return null_argument("buffer_write", "buffer");
    return write_buffer(*backend, *buffer, offset, src, bytes);
  });
}

TM_Error* api_buffer_read(TM_Backend* backend, TM_Buffer* buffer, uint64_t offset, void* dst, uint64_t bytes) {
  return guarded([&]() -> Status {
    if (backend == nullptr) return null_argument("buffer_read", "backend");
    if (buffer == nullptr) return null_argument("buffer_read", "buffer");
    return read_buffer(*backend, *buffer, offset, dst, bytes);
  });
}

TM_Error* api_execute(TM_Backend* backend, const TM_OpInstance* op, const TM_ExecutionPolicy* policy_ptr,
                      TM_ExecutionReport* report) {
  return guarded([&]() -> Status {
    if (backend == nullptr) return null_argument("execute", "backend");
    TMCL_ASSIGN_OR_RETURN(const ParsedOp parsed, parse_op(*backend, op));
    // No policy means the strictest one: bitwise results only.
    const TM_ExecutionPolicy policy = policy_ptr != nullptr ? read_versioned(policy_ptr) : TM_ExecutionPolicy{};
    TMCL_RETURN_IF_ERROR(check_policy(parsed.capability, policy, parsed.op));
    // max_threads is not applicable: the OpenCL runtime owns the device's parallelism.
    RunStats stats;
    {
      std::lock_guard lock(backend->mutex);
      if (parsed.kind == OpKind::kTileStats) {
        TMCL_ASSIGN_OR_RETURN(stats, run_tile_stats(*backend, parsed.tile_stats, policy.memory_budget_bytes));
      } else {
        TMCL_ASSIGN_OR_RETURN(stats, run_decode(*backend, parsed.decode, policy.memory_budget_bytes));
      }
    }
    if (report == nullptr) return {};
    TM_ExecutionReport filled{};
    filled.exactness = parsed.capability.exactness;
    filled.error_bound = parsed.capability.error_bound;
    filled.device_ns = stats.device_ns;
    filled.bytes_read = stats.bytes_read;
    filled.bytes_written = stats.bytes_written;
    return write_versioned(report, filled);
  });
}

const TM_PluginApi kApi = {
    .struct_size = sizeof(TM_PluginApi),
    .abi_major = TM_PLUGIN_ABI_MAJOR,
    .abi_minor = TM_PLUGIN_ABI_MINOR,
    .name = "opencl",
    .version = "0.1.0",
    .error_code = &api_error_code,
    .error_message = &api_error_message,
    .error_destroy = &api_error_destroy,
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
