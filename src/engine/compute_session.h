// A compute session: the operation registry, every backend found, and the scheduler over them.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "compute/op_registry.h"
#include "compute/plugin_loader.h"
#include "compute/scheduler.h"
#include "compute/settings.h"

namespace tensormorph::engine {

/// How to open a session.
struct SessionOptions {
  compute::Settings settings;                        ///< persisted settings (constraints, budgets, plugin path)
  std::optional<compute::Constraints> override_constraints;  ///< e.g. from --compute; replaces per key
  std::vector<std::string> extra_plugin_dirs;        ///< searched before the settings' path
  compute::DeviceOpening opening = compute::DeviceOpening::kAtLoad;  ///< when plugins open their devices
};

/// Owns the registry, the backends and the scheduler for one process or server.
class ComputeSession {
 public:
  /// Registers the core operations, loads built-in backends and plugins, builds the scheduler.
  /// A constraint of `override_constraints` naming no backend found is INVALID_ARGUMENT with the
  /// known names; one of the persisted settings is a warning (a plugin may be absent for a while).
  static Result<std::unique_ptr<ComputeSession>> open(const SessionOptions& options);

  /// The scheduler every operation goes through.
  compute::Scheduler& scheduler() { return *scheduler_; }
  /// Known operations.
  const compute::OpRegistry& registry() const { return registry_; }
  /// What was found and what failed to load.
  const std::vector<compute::BackendLoadReport>& load_reports() const { return backends_.reports; }
  /// Usable backends.
  std::span<const std::unique_ptr<compute::Backend>> backends() const { return backends_.backends; }
  /// What the user should hear about the session (e.g. a persisted constraint naming no backend).
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  ComputeSession() = default;
  compute::OpRegistry registry_;
  compute::BackendSet backends_;
  std::unique_ptr<compute::Scheduler> scheduler_;
  std::vector<std::string> warnings_;
};

/// Opens a session from the persisted settings plus an optional `--compute` spec ("" = none);
/// plugins' devices open when an operation needs them unless `opening` says otherwise.
Result<std::unique_ptr<ComputeSession>> open_default_session(
    const std::string& compute_spec, compute::DeviceOpening opening = compute::DeviceOpening::kWhenNeeded,
    const std::vector<std::string>& extra_plugin_dirs = {});

}  // namespace tensormorph::engine
