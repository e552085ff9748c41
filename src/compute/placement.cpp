#include "compute/placement.h"

namespace tensormorph::compute {

const char* placement_reason_name(PlacementReason reason) {
  switch (reason) {
    case PlacementReason::kCheapest: return "cheapest";
    case PlacementReason::kPreferred: return "preferred";
    case PlacementReason::kFallback: return "fallback";
    case PlacementReason::kConsented: return "consented";
  }
  return "unknown";
}

nlohmann::ordered_json PlacementRecord::to_json() const {
  nlohmann::ordered_json j = {{"sequence", sequence},
                              {"op", op},
                              {"tensor", tensor},
                              {"dtype", dtype},
                              {"shape", shape},
                              {"backend", backend},
                              {"reason", placement_reason_name(reason)},
                              {"reason_detail", reason_detail},
                              {"estimated_ms", estimated_ns / 1e6},
                              {"measured_ms", measured_ns / 1e6},
                              {"bytes_moved", bytes_moved},
                              {"bytes_read", bytes_read},
                              {"bytes_written", bytes_written},
                              {"exactness", exactness},
                              {"error_bound", error_bound}};
  j["candidates"] = nlohmann::ordered_json::array();
  for (const auto& c : candidates) {
    nlohmann::ordered_json cj = {{"backend", c.backend}, {"verdict", c.verdict}};
    if (c.estimated_ns >= 0) cj["estimated_ms"] = c.estimated_ns / 1e6;
    j["candidates"].push_back(std::move(cj));
  }
  return j;
}

uint64_t PlacementLog::append(PlacementRecord record) {
  std::lock_guard lock(mutex_);
  record.sequence = next_++;
  records_.push_back(std::move(record));
  while (records_.size() > capacity_) records_.pop_front();
  return records_.back().sequence;
}

std::vector<PlacementRecord> PlacementLog::recent(size_t n) const {
  std::lock_guard lock(mutex_);
  size_t start = records_.size() > n ? records_.size() - n : 0;
  return {records_.begin() + static_cast<std::ptrdiff_t>(start), records_.end()};
}

std::vector<PlacementRecord> PlacementLog::since(uint64_t after) const {
  std::lock_guard lock(mutex_);
  std::vector<PlacementRecord> out;
  for (const auto& r : records_) {
    if (r.sequence > after) out.push_back(r);
  }
  return out;
}

}  // namespace tensormorph::compute
