#include "compute/backend.h"

#include <dlfcn.h>

#include <algorithm>
#include <chrono>
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
  if (code <= 0 || code > static_cast<int>(StatusCode::kOutputTooSmall)) code = static_cast<int>(StatusCode::kInternal);
  return Status(static_cast<StatusCode>(code), backend + ": " + message);
}

Result<std::unique_ptr<Backend>> Backend::from_table(const TM_PluginApi* api, uint32_t device_index,
                                                     BackendOrigin origin, void* library_handle) {
  if (api == nullptr) return Status::InvalidArgument("plugin returned no function table");
  std::unique_ptr<Backend> b(new Backend());
  // Never read past what the plugin declared; missing entries stay null.
  std::memcpy(&b->api_, api, std::min(api->struct_size, sizeof(TM_PluginApi)));
  b->api_.struct_size = sizeof(TM_PluginApi);
  b->library_ = library_handle;
  b->origin_ = std::move(origin);
  b->device_index_ = device_index;
  const std::string base = b->api_.name ? b->api_.name : "unnamed";
  b->name_ = device_index == 0 ? base : base + ":" + std::to_string(device_index);
  b->version_ = b->api_.version ? b->api_.version : "";
  b->traits_ = zeroed_with_size<TM_DeviceTraits>();
  if (!b->api_.backend_create || !b->api_.query || !b->api_.execute || !b->api_.estimate) {
    b->library_ = nullptr;  // the caller still owns the handle when this fails
    return Status::InvalidArgument(b->name_ + ": plugin lacks a required entry (backend_create, query, estimate, execute)");
  }
  return b;
}

Result<std::unique_ptr<Backend>> Backend::create(const TM_PluginApi* api, uint32_t device_index,
                                                 BackendOrigin origin, void* library_handle) {
  TM_ASSIGN_OR_RETURN(auto b, from_table(api, device_index, std::move(origin), library_handle));
  b->device_count_ = 0;  // counted by the caller
  Status opened = b->open();
  if (!opened.ok()) {
    b->library_ = nullptr;  // the caller still owns the handle when this fails
    return opened;
  }
  return b;
}

Result<std::unique_ptr<Backend>> Backend::deferred(const TM_PluginApi* api, BackendOrigin origin, void* library_handle) {
  return from_table(api, 0, std::move(origin), library_handle);
}

Status Backend::open() const {
  if (state_.load() == State::kOpen) return Status::Ok();
  std::lock_guard lock(open_mutex_);
  if (state_.load() == State::kUnavailable) return Status::Unsupported(unavailable_);
  if (state_.load() == State::kOpen) return Status::Ok();
  const auto start = std::chrono::steady_clock::now();
  Status status = open_locked();
  open_ns_ = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  if (!status.ok()) {
    unavailable_ = status.message();
    state_.store(State::kUnavailable);
    return status;
  }
  state_.store(State::kOpen);
  return Status::Ok();
}

Status Backend::open_locked() const {
  // A deferred backend counts its plugin's devices first (device_count_ is 1 until then); one
  // created directly was counted by whoever created it (device_count_ 0).
  if (device_count_ != 0 && api_.device_count) {
    uint32_t count = 0;
    char why[512] = {0};
    TM_RETURN_IF_ERROR(check(api_.device_count(&count, why, sizeof why)));
    why[sizeof why - 1] = '\0';
    if (count == 0) return Status::Unsupported(why[0] ? why : "no device found");
    device_count_ = count;
  }
  if (device_count_ == 0) device_count_ = 1;
  TM_BackendCreateArgs args = zeroed_with_size<TM_BackendCreateArgs>();
  args.device_index = device_index_;
  TM_RETURN_IF_ERROR(check(api_.backend_create(&args, &handle_)));
  if (api_.device_traits) {
    TM_DeviceTraits traits = zeroed_with_size<TM_DeviceTraits>();
    TM_RETURN_IF_ERROR(check(api_.device_traits(handle_, &traits)));
    traits.device_name[sizeof(traits.device_name) - 1] = '\0';
    traits_ = traits;
  }
  return Status::Ok();
}

std::string Backend::unavailable_reason() const {
  if (state_.load() != State::kUnavailable) return "";
  std::lock_guard lock(open_mutex_);
  return unavailable_;
}

const TM_DeviceTraits& Backend::traits() const {
  (void)open();  // an unavailable device keeps zero traits; callers see why in unavailable_reason()
  return traits_;
}

Backend::~Backend() {
  if (handle_ != nullptr && api_.backend_destroy) api_.backend_destroy(handle_);
  if (library_ != nullptr) dlclose(library_);
}

Result<TM_OpSupport> Backend::query(const std::string& op, std::span<const QueryInput> inputs) const {
  std::vector<int> classes;
  for (const auto& in : inputs) {
    classes.push_back(static_cast<int>(in.dtype));
    classes.push_back(static_cast<int>(in.shape_class));
  }
  auto key = std::make_pair(op, classes);
  {
    std::lock_guard lock(query_mutex_);
    auto it = query_cache_.find(key);
    if (it != query_cache_.end()) return it->second;
  }
  TM_RETURN_IF_ERROR(open());
  TM_OpQuery q = zeroed_with_size<TM_OpQuery>();
  q.op = op.c_str();
  q.input_dtype = inputs.empty() ? TM_DTYPE_INVALID : inputs[0].dtype;
  q.shape_class = inputs.empty() ? TM_SHAPE_VECTOR : inputs[0].shape_class;
  if (inputs.size() > TM_MAX_OP_INPUTS) {
    return Status::InvalidArgument(op + ": " + std::to_string(inputs.size()) + " inputs, the ABI carries at most " +
                                   std::to_string(TM_MAX_OP_INPUTS));
  }
  q.input_count = static_cast<uint32_t>(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    q.input_dtypes[i] = inputs[i].dtype;
    q.input_shape_classes[i] = inputs[i].shape_class;
  }
  TM_OpSupport support = zeroed_with_size<TM_OpSupport>();
  TM_RETURN_IF_ERROR(check(api_.query(handle_, &q, &support)));
  support.reason[sizeof(support.reason) - 1] = '\0';
  std::lock_guard lock(query_mutex_);
  query_cache_[key] = support;
  return support;
}

Result<TM_CostEstimate> Backend::estimate(const TM_OpInstance& op) const {
  TM_RETURN_IF_ERROR(open());
  TM_CostEstimate cost = zeroed_with_size<TM_CostEstimate>();
  TM_RETURN_IF_ERROR(check(api_.estimate(handle_, &op, &cost)));
  return cost;
}

Result<TM_ExecutionReport> Backend::execute(const TM_OpInstance& op, const TM_ExecutionPolicy& policy,
                                            std::vector<uint64_t>* output_needs) const {
  TM_RETURN_IF_ERROR(open());
  TM_ExecutionReport report = zeroed_with_size<TM_ExecutionReport>();
  Status status = check(api_.execute(handle_, &op, &policy, &report));
  if (status.code() == StatusCode::kOutputTooSmall && output_needs != nullptr) {
    // The report says how much room each data-dependent output needs; the caller grows and retries.
    output_needs->assign(report.output_nbytes,
                         report.output_nbytes + std::min<uint32_t>(op.output_count, TM_MAX_OP_OUTPUTS));
  }
  TM_RETURN_IF_ERROR(status);
  return report;
}

Result<TM_Buffer*> Backend::allocate(uint64_t bytes) const {
  TM_RETURN_IF_ERROR(open());
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

Status Backend::read(TM_Buffer* buffer, void* dst, uint64_t bytes) const {
  if (!api_.buffer_read) return Status::Unimplemented(name_ + ": no buffer reads");
  return check(api_.buffer_read(handle_, buffer, 0, dst, bytes));
}

void Backend::mark_lost(const std::string& why) { lost_reason_ = why; }

}  // namespace tensormorph::compute
