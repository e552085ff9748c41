#include "backends/cpu/cpu_calibration.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <sstream>
#include <system_error>

#include "backends/cpu/cpu_device.h"
#include "core/cache_dir.h"

namespace tensormorph::cpu {
namespace {

/// One line that names the machine; a model name with a newline cannot forge another line.
std::string identity_line(const MachineIdentity& machine) {
  std::string model = machine.model;
  for (char& c : model) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return "machine " + model + " | threads " + std::to_string(machine.threads) + " | memory " +
         std::to_string(machine.memory_bytes);
}

/// The cost model's bandwidth when the machine cannot be measured.
constexpr double kFallbackGbps = 5.0;

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::filesystem::path calibration_path() { return user_cache_dir() / "cpu-calibration"; }

double remembered_read_bandwidth_gbps(const std::filesystem::path& path, const MachineIdentity& machine,
                                      int64_t now_unix) {
  std::ifstream in(path);
  std::string identity, gbps_line, time_line;
  if (!std::getline(in, identity) || !std::getline(in, gbps_line) || !std::getline(in, time_line)) return 0;
  if (identity != identity_line(machine)) return 0;
  std::istringstream gbps_in(gbps_line), time_in(time_line);
  std::string gbps_key, time_key;
  double gbps = 0;
  int64_t measured = 0;
  if (!(gbps_in >> gbps_key >> gbps) || gbps_key != "read_gbps" || !(time_in >> time_key >> measured) ||
      time_key != "measured_unix") {
    return 0;
  }
  const bool fresh = measured <= now_unix && now_unix - measured < kCalibrationLifetimeSeconds;
  return fresh && std::isfinite(gbps) && gbps > 0 ? gbps : 0;
}

void remember_read_bandwidth_gbps(const std::filesystem::path& path, const MachineIdentity& machine, double gbps,
                                  int64_t now_unix) {
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) return;
  std::filesystem::path temporary = path;
  temporary += ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(temporary, std::ios::trunc);
    out.precision(17);
    out << identity_line(machine) << "\nread_gbps " << gbps << "\nmeasured_unix " << now_unix << "\n";
    if (!out.flush()) {
      std::filesystem::remove(temporary, ec);
      return;
    }
  }
  std::filesystem::rename(temporary, path, ec);
  if (ec) std::filesystem::remove(temporary, ec);
}

double calibrated_read_bandwidth_gbps(const MachineIdentity& machine) {
  const std::filesystem::path path = calibration_path();
  const int64_t now = unix_now();
  const double remembered = remembered_read_bandwidth_gbps(path, machine, now);
  if (remembered > 0) return remembered;
  const double measured = measure_read_bandwidth_gbps();
  if (measured <= 0) return kFallbackGbps;  // not remembered: the next start measures again
  remember_read_bandwidth_gbps(path, machine, measured, now);
  return measured;
}

}  // namespace tensormorph::cpu
