// Finds backends: the built-in ones and plugins on the search path, with their load errors.
#pragma once

#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "compute/backend.h"

namespace tensormorph::compute {

/// What happened to one backend source (a built-in entry or a plugin library).
struct BackendLoadReport {
  std::string name;          ///< backend name when known
  std::string library_path;  ///< empty for built-ins
  bool builtin = true;
  bool available = false;    ///< at least one device was created
  bool deferred = false;     ///< its device opens on first use (available is then unknown)
  std::string detail;        ///< why it is unavailable or failed to load; empty when fine
};

/// When plugins open their devices.
enum class DeviceOpening {
  kAtLoad,      ///< every device of every plugin is counted and opened while loading
  kWhenNeeded,  ///< a plugin's first device opens on first use (see Backend::deferred)
};

/// Every usable backend plus a report line per source.
struct BackendSet {
  std::vector<std::unique_ptr<Backend>> backends;
  std::vector<BackendLoadReport> reports;
};

/// The plugin search path: `configured` (settings and --plugin-dir), then `plugins/` beside the
/// executable (modules built with Tensormorph).
std::vector<std::filesystem::path> plugin_search_path(const std::vector<std::string>& configured);

/// Loads the built-in backends (their entry points), then every `*.so` found in `search_path`
/// (each directory sorted by name). A plugin whose ABI major differs from the host's is refused
/// before any other function runs.
/// The first built-in backend (the host's own) always opens at load; the other built-ins follow
/// `opening` like plugins (a device runtime's start-up: an instance, a device, its kernels).
BackendSet load_backends(std::span<const TM_PluginGetApiFn> builtins,
                         const std::vector<std::filesystem::path>& search_path,
                         DeviceOpening opening = DeviceOpening::kAtLoad);

/// Loads one plugin library; used by load_backends and tests.
void load_plugin_library(const std::filesystem::path& path, BackendSet& into,
                         DeviceOpening opening = DeviceOpening::kAtLoad);

}  // namespace tensormorph::compute
