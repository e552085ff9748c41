// A backend as the host sees it: a plugin function table plus one created device instance.
// Everything here is generic; no backend is named.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

#include "tensormorph/c/plugin.h"
#include "tensormorph/status.h"

namespace tensormorph::compute {

/// Converts a plugin error (and releases it) into a Status prefixed with the backend name.
Status status_from_plugin_error(const TM_PluginApi& api, TM_Error* error, const std::string& backend);

/// Where a backend came from, for `tensormorph backends`.
struct BackendOrigin {
  bool builtin = true;
  std::string library_path;  ///< shared library for plugins
};

/// One usable backend instance (one device of one plugin).
class Backend {
 public:
  /// Creates device `device_index` of the plugin whose table is `api` (copied up to its struct_size).
  static Result<std::unique_ptr<Backend>> create(const TM_PluginApi* api, uint32_t device_index,
                                                 BackendOrigin origin, void* library_handle);
  ~Backend();
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  /// Stable name used in records and constraints (the plugin name, "name:1" for a second device).
  const std::string& name() const { return name_; }
  /// The plugin's own version string.
  const std::string& version() const { return version_; }
  /// Where it came from.
  const BackendOrigin& origin() const { return origin_; }
  /// Device traits, read once at creation.
  const TM_DeviceTraits& traits() const { return traits_; }
  /// True when kernels read host memory in place (no transfers to model).
  bool host_visible() const { return traits_.host_memory_visible != 0; }

  /// Support for (op, dtype, shape class); cached, since the contract makes it pure.
  Result<TM_OpSupport> query(const std::string& op, TM_DType dtype, TM_ShapeClass shape_class) const;
  /// Compute-only cost of one instance.
  Result<TM_CostEstimate> estimate(const TM_OpInstance& op) const;
  /// Runs one instance under `policy`.
  Result<TM_ExecutionReport> execute(const TM_OpInstance& op, const TM_ExecutionPolicy& policy) const;

  /// Allocates a buffer in the backend's first memory space (RESOURCE_EXHAUSTED when full).
  Result<TM_Buffer*> allocate(uint64_t bytes) const;
  /// Releases a buffer allocated by allocate().
  void release(TM_Buffer* buffer) const;
  /// Copies host bytes into a buffer.
  Status write(TM_Buffer* buffer, const void* src, uint64_t bytes) const;

  /// Marks the backend as lost (after DEVICE_LOST); it is then never chosen again.
  void mark_lost(const std::string& why);
  /// Why it was marked lost (empty while usable).
  const std::string& lost_reason() const { return lost_reason_; }

 private:
  Backend() = default;
  Status check(TM_Error* error) const { return status_from_plugin_error(api_, error, name_); }

  TM_PluginApi api_{};  // zero-filled beyond what the plugin declared
  TM_Backend* handle_ = nullptr;
  void* library_ = nullptr;  // dlopen handle, closed last (not owned when built in)
  std::string name_, version_;
  BackendOrigin origin_;
  TM_DeviceTraits traits_{};
  std::string lost_reason_;
  mutable std::mutex query_mutex_;
  mutable std::map<std::tuple<std::string, int, int>, TM_OpSupport> query_cache_;
};

}  // namespace tensormorph::compute
