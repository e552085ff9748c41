// A backend as the host sees it: a plugin function table plus one created device instance.
// Everything here is generic; no backend is named.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <tuple>
#include <vector>

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

/// One input's dtype and shape class, as a query sees it.
struct QueryInput {
  TM_DType dtype = TM_DTYPE_INVALID;
  TM_ShapeClass shape_class = TM_SHAPE_VECTOR;
};

/// One backend instance (one device of one plugin). A deferred backend has loaded its plugin but
/// not counted or opened its device: that happens on first use (open(), or any call that needs
/// the device), so that commands which never need it never pay for its start-up.
class Backend {
 public:
  /// Creates and opens device `device_index` of the plugin whose table is `api` (copied up to its
  /// struct_size).
  static Result<std::unique_ptr<Backend>> create(const TM_PluginApi* api, uint32_t device_index,
                                                 BackendOrigin origin, void* library_handle);
  /// The plugin's first device, not yet opened: open() counts the plugin's devices and creates it.
  static Result<std::unique_ptr<Backend>> deferred(const TM_PluginApi* api, BackendOrigin origin, void* library_handle);
  ~Backend();
  Backend(const Backend&) = delete;
  Backend& operator=(const Backend&) = delete;

  /// Stable name used in records and constraints (the plugin name, "name:1" for a second device).
  const std::string& name() const { return name_; }
  /// The plugin's own version string.
  const std::string& version() const { return version_; }
  /// The minor ABI version the plugin was built for (its table's abi_minor).
  uint32_t abi_minor() const { return api_.abi_minor; }
  /// Where it came from.
  const BackendOrigin& origin() const { return origin_; }
  /// Opens the device if it is not open yet (once; thread-safe); the reason when it cannot be.
  Status open() const;
  /// True once the device is open and usable.
  bool opened() const { return state_.load() == State::kOpen; }
  /// Why the device cannot be used (no device, or creating it failed); empty otherwise.
  std::string unavailable_reason() const;
  /// Nanoseconds open() took (0 until it ran).
  double open_ns() const { return open_ns_; }
  /// Devices the plugin reported when it was opened (1 for a backend created directly).
  uint32_t device_count() const { return device_count_; }

  /// Device traits (opens the device; zero when it cannot be opened).
  const TM_DeviceTraits& traits() const;
  /// True when kernels read host memory in place (no transfers to model).
  bool host_visible() const { return traits().host_memory_visible != 0; }

  /// Support for (op, inputs' dtypes and shape classes); cached, since the contract makes it pure.
  Result<TM_OpSupport> query(const std::string& op, std::span<const QueryInput> inputs) const;
  /// Support for a one-input operation.
  Result<TM_OpSupport> query(const std::string& op, TM_DType dtype, TM_ShapeClass shape_class) const {
    const QueryInput input{dtype, shape_class};
    return query(op, std::span(&input, 1));
  }
  /// Compute-only cost of one instance.
  Result<TM_CostEstimate> estimate(const TM_OpInstance& op) const;
  /// Runs one instance under `policy`. On OUTPUT_TOO_SMALL, `output_needs` (when given) receives
  /// the bytes each output needs.
  Result<TM_ExecutionReport> execute(const TM_OpInstance& op, const TM_ExecutionPolicy& policy,
                                     std::vector<uint64_t>* output_needs = nullptr) const;

  /// Allocates a buffer in the backend's first memory space (RESOURCE_EXHAUSTED when full).
  Result<TM_Buffer*> allocate(uint64_t bytes) const;
  /// Releases a buffer allocated by allocate().
  void release(TM_Buffer* buffer) const;
  /// Copies host bytes into a buffer.
  Status write(TM_Buffer* buffer, const void* src, uint64_t bytes) const;
  /// Copies a buffer's first `bytes` to the host.
  Status read(TM_Buffer* buffer, void* dst, uint64_t bytes) const;

  /// Marks the backend as lost (after DEVICE_LOST); it is then never chosen again.
  void mark_lost(const std::string& why);
  /// Why it was marked lost (empty while usable).
  const std::string& lost_reason() const { return lost_reason_; }

 private:
  enum class State { kDeferred, kOpen, kUnavailable };
  Backend() = default;
  static Result<std::unique_ptr<Backend>> from_table(const TM_PluginApi* api, uint32_t device_index,
                                                     BackendOrigin origin, void* library_handle);
  Status open_locked() const;
  Status check(TM_Error* error) const { return status_from_plugin_error(api_, error, name_); }

  TM_PluginApi api_{};  // zero-filled beyond what the plugin declared
  mutable TM_Backend* handle_ = nullptr;
  void* library_ = nullptr;  // dlopen handle, closed last (not owned when built in)
  uint32_t device_index_ = 0;
  std::string name_, version_;
  BackendOrigin origin_;
  mutable TM_DeviceTraits traits_{};
  mutable std::mutex open_mutex_;
  mutable std::atomic<State> state_{State::kDeferred};
  mutable std::string unavailable_;
  mutable double open_ns_ = 0;
  mutable uint32_t device_count_ = 1;
  std::string lost_reason_;
  mutable std::mutex query_mutex_;
  mutable std::map<std::pair<std::string, std::vector<int>>, TM_OpSupport> query_cache_;
};

}  // namespace tensormorph::compute
