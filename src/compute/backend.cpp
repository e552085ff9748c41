#include "compute/backend.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstring>

namespace tensormorph::compute {
namespace {

template <typename T>
T zeroed_with_size() {
  T value{};
  value.struct_size = sizeof(T);
  return value;
}

}  // namespace

Status status_from_plugin_error(const TM_PluginApi& api, TM_Error* error, const std::string& backend) {
  if (error == nullptr) return Status::Ok();
  int code = api.error_code ? static_cast<int>(api.error_code(error)) : static_cast<int>(TM_STATUS_INTERNAL);
  std::string message = api.error_message ? api.error_message(error) : "(no message)";
  if (api.error_destroy) api.error_destroy(error);
  if (code <= 0 || code > static_cast<int>(StatusCode::kInternal)) code = static_cast<int>(StatusCode::kInternal);
  return Status(static_cast<StatusCode>(code), backend + ": " + message);
}

Result<std::unique_ptr<Backend>> Backend::create(const TM_PluginApi* api, uint32_t device_index,
                                                 BackendOrigin origin, void* library_handle) {
  if (api == nullptr) return Status::InvalidArgument("plugin returned no function table");
  std::unique_ptr<Backend> b(new Backend());
  // Never read past what the plugin declared; missing entries stay null.
  std::memcpy(&b->api_, api, std::min(api->struct_size, sizeof(TM_PluginApi)));
  b->api_.struct_size = sizeof(TM_PluginApi);
  b->library_ = library_handle;
  b->origin_ = std::move(origin);
  const std::string base = b->api_.name ? b->api_.name : "unnamed";
  b->name_ = device_index == 0 ? base : base + ":" + std::to_string(device_index);
  b->version_ = b->api_.version ? b->api_.version : "";
  if (!b->api_.backend_create || !b->api_.query || !b->api_.execute || !b->api_.estimate) {
    return Status::InvalidArgument(b->name_ + ": plugin lacks a required entry (backend_create, query, estimate, execute)");
  }
  TM_BackendCreateArgs args = zeroed_with_size<TM_BackendCreateArgs>();
  args.device_index = device_index;
  TM_RETURN_IF_ERROR(b->check(b->api_.backend_create(&args, &b->handle_)));
  b->traits_ = zeroed_with_size<TM_DeviceTraits>();
  if (b->api_.device_traits) {
    TM_RETURN_IF_ERROR(b->check(b->api_.device_traits(b->handle_, &b->traits_)));
  }
  b->traits_.device_name[sizeof(b->traits_.device_name) - 1] = '\0';
  return b;
}

Backend::~Backend() {
  if (handle_ != nullptr && api_.backend_destroy) api_.backend_destroy(handle_);
  if (library_ != nullptr) dlclose(library_);
}

Result<TM_OpSupport> Backend::query(const std::string& op, TM_DType dtype, TM_ShapeClass shape_class) const {
  auto key = std::make_tuple(op, static_cast<int>(dtype), static_cast<int>(shape_class));
  {
    std::lock_guard lock(query_mutex_);
    auto it = query_cache_.find(key);
    if (it != query_cache_.end()) return it->second;
  }
  TM_OpQuery q = zeroed_with_size<TM_OpQuery>();
  q.op = op.c_str();
  q.input_dtype = dtype;
  q.shape_class = shape_class;
  TM_OpSupport support = zeroed_with_size<TM_OpSupport>();
  TM_RETURN_IF_ERROR(check(api_.query(handle_, &q, &support)));
  support.reason[sizeof(support.reason) - 1] = '\0';
  std::lock_guard lock(query_mutex_);
  query_cache_[key] = support;
  return support;
}

Result<TM_CostEstimate> Backend::estimate(const TM_OpInstance& op) const {
  TM_CostEstimate cost = zeroed_with_size<TM_CostEstimate>();
  TM_RETURN_IF_ERROR(check(api_.estimate(handle_, &op, &cost)));
  return cost;
}

Result<TM_ExecutionReport> Backend::execute(const TM_OpInstance& op, const TM_ExecutionPolicy& policy) const {
  TM_ExecutionReport report = zeroed_with_size<TM_ExecutionReport>();
  TM_RETURN_IF_ERROR(check(api_.execute(handle_, &op, &policy, &report)));
  return report;
}

Result<TM_Buffer*> Backend::allocate(uint64_t bytes) const {
  if (!api_.buffer_alloc) return Status::Unimplemented(name_ + ": no buffers");
  TM_Buffer* buffer = nullptr;
  uint32_t space = traits_.memory_space_count > 0 ? 1u : TM_MEMORY_SPACE_HOST;
  TM_RETURN_IF_ERROR(check(api_.buffer_alloc(handle_, space, bytes, &buffer)));
  return buffer;
}

void Backend::release(TM_Buffer* buffer) const {
  if (buffer != nullptr && api_.buffer_free) api_.buffer_free(handle_, buffer);
}

Status Backend::write(TM_Buffer* buffer, const void* src, uint64_t bytes) const {
  if (!api_.buffer_write) return Status::Unimplemented(name_ + ": no buffer writes");
  return check(api_.buffer_write(handle_, buffer, 0, src, bytes));
}

void Backend::mark_lost(const std::string& why) { lost_reason_ = why; }

}  // namespace tensormorph::compute
