// The CPU backend's measurement of memory bandwidth (its cost model's one machine constant),
// remembered between runs: measuring takes ~40 ms, most of a small command's start-up.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

namespace tensormorph::cpu {

/// What a calibration is valid for: the same processor model, thread count and memory size.
struct MachineIdentity {
  std::string model;
  uint32_t threads = 0;
  uint64_t memory_bytes = 0;
};

/// How long a remembered measurement is trusted (a week): long enough to spare most starts,
/// short enough to follow a changed machine or neighbourhood.
inline constexpr int64_t kCalibrationLifetimeSeconds = 7 * 24 * 3600;

/// The calibration file: user_cache_dir()/cpu-calibration.
std::filesystem::path calibration_path();

/// The read bandwidth remembered in `path` for `machine`, if it is there, well formed, positive
/// and younger than kCalibrationLifetimeSeconds at `now_unix`; else 0.
double remembered_read_bandwidth_gbps(const std::filesystem::path& path, const MachineIdentity& machine,
                                      int64_t now_unix);

/// Remembers `gbps` for `machine` in `path` (written whole, then renamed into place). Best effort:
/// a cache that cannot be written only costs the next start a measurement.
void remember_read_bandwidth_gbps(const std::filesystem::path& path, const MachineIdentity& machine, double gbps,
                                  int64_t now_unix);

/// The remembered bandwidth for this machine, or a fresh measurement, which is then remembered
/// (a failed measurement gives a fixed fallback and is not remembered).
double calibrated_read_bandwidth_gbps(const MachineIdentity& machine);

}  // namespace tensormorph::cpu
