#include "compute/placement.h"

namespace tensormorph::compute {

const char* placement_reason_name(PlacementReason reason) {
  switch (reason) {
    case PlacementReason::kCheapest: return "cheapest";
    case PlacementReason::kPreferred: return "preferred";
    case PlacementReason::kFallback: return "fallback";
    case PlacementReason::kConsented: return "consented";
    case PlacementReason::kPreferredUnavailable: return "preferred-unavailable";
    case PlacementReason::kSplit: return "split";
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
  if (split_group != 0) {
    j["split_group"] = split_group;
    j["split_part"] = split_part;
  }
  return j;
}

namespace {

void count(PlacementCounts& c, const PlacementRecord& r) {
  ++c.operations;
  if (r.reason == PlacementReason::kFallback) ++c.fallbacks;
  if (r.reason == PlacementReason::kConsented) ++c.consented;
  if (r.exactness == "bounded") ++c.bounded;
  if (r.exactness == "approximate") ++c.approximate;
}

nlohmann::ordered_json counts_json(const PlacementCounts& c) {
  return {{"operations", c.operations}, {"fallbacks", c.fallbacks}, {"consented", c.consented},
          {"bounded", c.bounded}, {"approximate", c.approximate}};
}

}  // namespace

nlohmann::ordered_json PlacementSummary::to_json() const {
  nlohmann::ordered_json backends = nlohmann::ordered_json::object();
  for (const auto& [name, c] : by_backend) backends[name] = counts_json(c);
  nlohmann::ordered_json kept = nlohmann::ordered_json::array();
  for (const auto& r : consents) {
    kept.push_back({{"sequence", r.sequence}, {"op", r.op}, {"tensor", r.tensor}, {"backend", r.backend},
                    {"exactness", r.exactness}, {"detail", r.reason_detail}});
  }
  return {{"operations", total.operations}, {"by_backend", std::move(backends)}, {"fallbacks", total.fallbacks},
          {"consented", total.consented}, {"bounded", total.bounded}, {"approximate", total.approximate},
          {"consents", std::move(kept)}};
}

uint64_t PlacementLog::append(PlacementRecord record) {
  std::lock_guard lock(mutex_);
  record.sequence = next_++;
  if (!record.is_merge()) {  // the parts are the backends' work; the merge is the host's bookkeeping
    count(summary_.total, record);
    count(summary_.by_backend[record.backend], record);
  }
  if (record.reason == PlacementReason::kConsented) {
    PlacementRecord kept = record;
    kept.candidates.clear();  // the summary says what ran, not how it was chosen
    summary_.consents.push_back(std::move(kept));
    while (summary_.consents.size() > PlacementSummary::kKeptConsents) summary_.consents.pop_front();
  }
  records_.push_back(std::move(record));
  while (records_.size() > capacity_) records_.pop_front();
  return records_.back().sequence;
}

std::vector<PlacementRecord> PlacementLog::recent(size_t n) const {
  std::lock_guard lock(mutex_);
  size_t start = records_.size() > n ? records_.size() - n : 0;
  return {records_.begin() + static_cast<std::ptrdiff_t>(start), records_.end()};
}

PlacementSummary PlacementLog::summary() const {
  std::lock_guard lock(mutex_);
  return summary_;
}

uint64_t PlacementLog::next_split_group() {
  std::lock_guard lock(mutex_);
  return next_group_++;
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
