// The GPU backend's link and memory bandwidths, remembered between runs per device: measuring
// them allocates and times half a gigabyte of device memory and several copies each way, which is
// most of backend_create's time. Plain C++ (no vendor header), so it is testable without a GPU.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "tensormorph/status.h"

namespace tensormorph::gpu {

/// Bandwidths in GB/s (bytes per nanosecond), as measured at creation.
struct LinkRates {
  double h2d_pinned = 0;    ///< host -> device from pinned memory
  double h2d_pageable = 0;  ///< host -> device from ordinary memory, one runtime copy
  double h2d_staged = 0;    ///< host -> device through buffer_write's staging pipeline
  double d2h_pinned = 0;    ///< device -> host into pinned memory
  double d2h_pageable = 0;  ///< device -> host into ordinary memory
  double device_read = 0;   ///< device memory, read by a kernel
  bool measured = false;    ///< false when probes were skipped (rates are then declared)
};

/// What a remembered measurement is valid for: one physical device, under one driver and runtime,
/// measured by one version of the module with the same pipeline settings.
struct DeviceIdentity {
  std::string uuid;            ///< the device's UUID, as lowercase hex
  std::string name;            ///< the device's marketing name
  std::string pci;             ///< PCI domain:bus:device
  uint64_t memory_bytes = 0;   ///< device memory size
  int driver_version = 0;      ///< the driver's API version
  int runtime_version = 0;     ///< the runtime's version
  std::string module_version;  ///< the module's version (a new pipeline measures again)
  std::string settings;        ///< the options the probes depend on (staging, threads, probe size)
};

/// How long a remembered measurement is trusted (a week, as the CPU backend's): long enough to
/// spare most starts, short enough to follow a moved card or a changed host.
inline constexpr int64_t kLinkCalibrationLifetimeSeconds = 7 * 24 * 3600;

/// The folder of the calibrations: user_cache_dir()/<vendor>-calibration.
std::filesystem::path link_calibration_dir(std::string_view vendor);

/// The file of one device inside `dir`, named by its UUID (other characters than hex digits and
/// '-' are dropped, so a UUID cannot name a path outside `dir`).
std::filesystem::path link_calibration_path(const std::filesystem::path& dir, const DeviceIdentity& device);

/// The rates remembered in `path` for `device`, if the file is there, well formed, names exactly
/// this identity, holds finite positive rates and is younger than kLinkCalibrationLifetimeSeconds
/// at `now_unix`; otherwise nothing (the caller measures again).
std::optional<LinkRates> remembered_link_rates(const std::filesystem::path& path, const DeviceIdentity& device,
                                               int64_t now_unix);

/// Remembers measured `rates` for `device` in `path`, written whole and then renamed into place.
/// A failure is returned for the caller to ignore: an unwritable cache only costs the next start
/// a measurement.
Status remember_link_rates(const std::filesystem::path& path, const DeviceIdentity& device, const LinkRates& rates,
                           int64_t now_unix);

/// Seconds since the Unix epoch, from the system clock.
int64_t unix_now_seconds();

}  // namespace tensormorph::gpu
