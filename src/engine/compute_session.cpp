#include "engine/compute_session.h"

#include <algorithm>
#include <string>
#include <utility>

#include "compute/builtin_backends.h"

namespace tensormorph::engine {
namespace {

/// Every name of `c` that no backend found answers to (see compute::backend_matches), with the
/// key it was given under ("prefer=cdua").
std::vector<std::string> unknown_names(const compute::Constraints& c, const std::vector<compute::BackendLoadReport>& found) {
  std::vector<std::string> unknown;
  for (const auto& [key, names] : {std::pair{"prefer", &c.prefer}, std::pair{"never", &c.never}, std::pair{"only", &c.only}}) {
    for (const std::string& name : *names) {
      const bool known = std::any_of(found.begin(), found.end(), [&](const compute::BackendLoadReport& r) {
        return !r.name.empty() && (compute::backend_matches(r.name, name) || compute::backend_matches(name, r.name));
      });
      if (!known) unknown.push_back(std::string(key) + "=" + name);
    }
  }
  return unknown;
}

std::string known_names(const std::vector<compute::BackendLoadReport>& found) {
  std::string names;
  for (const auto& r : found) {
    if (!r.name.empty()) names += (names.empty() ? "" : ", ") + r.name;
  }
  return names;
}

}  // namespace

Result<std::unique_ptr<ComputeSession>> ComputeSession::open(const SessionOptions& options) {
  std::unique_ptr<ComputeSession> session(new ComputeSession());
  session->registry_ = compute::OpRegistry::builtin();
  std::vector<std::string> dirs = options.extra_plugin_dirs;
  dirs.insert(dirs.end(), options.settings.plugin_path.begin(), options.settings.plugin_path.end());
  session->backends_ =
      compute::load_backends(compute::builtin_backend_entry_points(), compute::plugin_search_path(dirs), options.opening);
  const auto& found = session->backends_.reports;
  if (options.override_constraints) {
    if (const auto unknown = unknown_names(*options.override_constraints, found); !unknown.empty()) {
      return Status::InvalidArgument("--compute " + unknown.front() + " names no backend (known: " + known_names(found) + ")");
    }
  }
  for (const std::string& name : unknown_names(options.settings.constraints, found)) {
    session->warnings_.push_back("the setting compute " + name + " names no backend found (known: " + known_names(found) +
                                 "); it has no effect");
  }
  compute::SchedulerOptions scheduler_options;
  scheduler_options.constraints = options.settings.constraints;
  if (options.override_constraints) {
    scheduler_options.constraints =
        compute::merge_constraints(scheduler_options.constraints, *options.override_constraints);
  }
  scheduler_options.memory_budget_bytes = options.settings.memory_budget_bytes;
  scheduler_options.time_budget_ns = options.settings.time_budget_seconds * 1e9;
  scheduler_options.device_cache_bytes = options.settings.device_cache_bytes;
  scheduler_options.split.enabled = options.settings.split;
  session->scheduler_ = std::make_unique<compute::Scheduler>(session->registry_, session->backends_.backends,
                                                             std::move(scheduler_options));
  return session;
}

Result<std::unique_ptr<ComputeSession>> open_default_session(const std::string& compute_spec,
                                                             compute::DeviceOpening opening,
                                                             const std::vector<std::string>& extra_plugin_dirs) {
  SessionOptions options;
  options.opening = opening;
  options.extra_plugin_dirs = extra_plugin_dirs;
  TM_ASSIGN_OR_RETURN(options.settings, compute::load_settings(compute::settings_path()));
  if (!compute_spec.empty()) {
    TM_ASSIGN_OR_RETURN(auto parsed, compute::parse_constraints(compute_spec));
    options.override_constraints = parsed;
    if (compute_spec == "auto") options.settings.constraints = {};
  }
  return ComputeSession::open(options);
}

}  // namespace tensormorph::engine
