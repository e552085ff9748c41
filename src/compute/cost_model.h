// The host's cost model: transfers between memory spaces, and calibration of plugin estimates
// against measured times (in the spirit of StarPU's dmda: learn each backend's real speed).
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "compute/backend.h"

namespace tensormorph::compute {

/// Transfer and calibration model shared by every placement decision.
class CostModel {
 public:
  /// Fixed cost of starting one transfer (driver call, synchronisation).
  static constexpr double kTransferLatencyNs = 10'000;
  /// Link speed assumed when a backend declares none.
  static constexpr double kDefaultLinkGbps = 8.0;
  /// Estimates below this do not teach the calibration: their time is mostly a backend's fixed
  /// costs (waking threads, a launch, the first call's thread start), which a per-byte estimate
  /// does not model and a factor must not learn.
  static constexpr double kMinObservedNs = 500'000;

  /// Modelled time to copy `bytes` from host memory into `backend`'s memory (0 when host-visible).
  double host_to_device_ns(const Backend& backend, uint64_t bytes) const;
  /// Modelled time to copy `bytes` back to host memory (0 when host-visible).
  double device_to_host_ns(const Backend& backend, uint64_t bytes) const;

  /// Factor by which `backend`'s compute estimates for `op` are off, learned from measurements (1 at first).
  double calibration(const std::string& backend, const std::string& op) const;
  /// Folds one measurement into the factor (exponential moving average, clamped to [1/16, 16]);
  /// ignored when `estimated_ns` is below kMinObservedNs.
  void observe(const std::string& backend, const std::string& op, double estimated_ns, double measured_ns);

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, std::string>, double> factors_;
};

}  // namespace tensormorph::compute
