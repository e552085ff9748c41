#include "compute/cost_model.h"

#include <algorithm>

namespace tensormorph::compute {

double CostModel::host_to_device_ns(const Backend& backend, uint64_t bytes) const {
  if (backend.host_visible() || bytes == 0) return 0;
  double gbps = backend.traits().host_to_device_gbps > 0 ? backend.traits().host_to_device_gbps : kDefaultLinkGbps;
  return kTransferLatencyNs + static_cast<double>(bytes) / gbps;  // 1 GB/s moves 1 byte per ns
}

double CostModel::device_to_host_ns(const Backend& backend, uint64_t bytes) const {
  if (backend.host_visible() || bytes == 0) return 0;
  double gbps = backend.traits().device_to_host_gbps > 0 ? backend.traits().device_to_host_gbps : kDefaultLinkGbps;
  return kTransferLatencyNs + static_cast<double>(bytes) / gbps;
}

double CostModel::calibration(const std::string& backend, const std::string& op) const {
  std::lock_guard lock(mutex_);
  auto it = factors_.find({backend, op});
  return it == factors_.end() ? 1.0 : it->second;
}

void CostModel::observe(const std::string& backend, const std::string& op, double estimated_ns, double measured_ns) {
  if (estimated_ns < kMinObservedNs || measured_ns <= 0) return;
  const double ratio = std::clamp(measured_ns / estimated_ns, 1.0 / 16, 16.0);
  std::lock_guard lock(mutex_);
  auto [it, fresh] = factors_.try_emplace({backend, op}, ratio);
  if (!fresh) it->second = std::clamp(0.7 * it->second + 0.3 * ratio, 1.0 / 16, 16.0);
}

}  // namespace tensormorph::compute
