// Persisted user settings (XDG config dir): compute constraints, budgets, plugin path.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "compute/constraints.h"
#include "tensormorph/status.h"

namespace tensormorph::compute {

/// Everything Tensormorph persists between runs.
struct Settings {
  Constraints constraints;                ///< "compute" in the file
  uint64_t memory_budget_bytes = 0;       ///< 0: unlimited
  double time_budget_seconds = 0;         ///< modelled time one analysis of one tensor may take (0: unlimited)
  uint64_t device_cache_bytes = 1ull << 30;
  bool split = true;                      ///< one operation may run in parts on several backends at once
  std::vector<std::string> plugin_path;   ///< extra plugin directories
};

/// $TENSORMORPH_CONFIG if set, else $XDG_CONFIG_HOME/tensormorph/settings.json, else
/// ~/.config/tensormorph/settings.json.
std::filesystem::path settings_path();

/// Reads the settings file; a missing file gives defaults, a malformed one an error naming it.
Result<Settings> load_settings(const std::filesystem::path& path);

/// Writes the settings file atomically (temporary file + rename), creating its directory.
Status save_settings(const std::filesystem::path& path, const Settings& settings);

/// Reads one key ("compute", "compute.memory_budget", "compute.time_budget", "compute.device_cache",
/// "compute.split" (auto or off), "plugins.path") as text.
Result<std::string> get_setting(const Settings& settings, const std::string& key);

/// Sets one key from text (same keys as get_setting; a time is seconds or a number with ms, s, m, h; 0 or
/// "off" is unlimited).
Status set_setting(Settings& settings, const std::string& key, const std::string& value);

}  // namespace tensormorph::compute
