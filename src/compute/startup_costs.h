// What opening each backend's device cost the last time it was opened on this machine, so the
// scheduler can weigh a device's start-up against the work it would take over.
#pragma once

#include <filesystem>
#include <map>
#include <mutex>
#include <string>

namespace tensormorph::compute {

/// Measured device start-up times, kept in the user's cache directory (device-startup.json)
/// keyed by backend name, plugin library and version. A missing or unreadable file is an empty
/// store; the store is only a hint and never fails an operation.
class StartupCosts {
 public:
  /// Start-up assumed for a device never opened on this machine.
  static constexpr double kUnknownStartupNs = 500e6;

  /// The store in `file` (empty: device-startup.json in the user's cache directory); nothing is
  /// read until first asked.
  explicit StartupCosts(std::filesystem::path file = {});
  /// The start-up of the device keyed `key` (kUnknownStartupNs when never measured).
  double startup_ns(const std::string& key);
  /// Records a measured start-up and writes the store back (errors are ignored: a hint).
  void record(const std::string& key, double nanoseconds);

 private:
  void load_locked();
  std::filesystem::path file_;
  std::mutex mutex_;
  bool loaded_ = false;
  std::map<std::string, double> costs_;
};

}  // namespace tensormorph::compute
