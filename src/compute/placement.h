// Placement records: every executed operation says where it ran, why, and what it cost.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tensormorph::compute {

/// Why the scheduler picked the backend it did.
enum class PlacementReason {
  kCheapest,    ///< lowest modelled cost among eligible backends
  kPreferred,   ///< the user's "prefer" constraint picked it among eligible backends
  kFallback,    ///< an earlier choice failed (UNIMPLEMENTED / RESOURCE_EXHAUSTED / DEVICE_LOST)
  kConsented,   ///< an approximate rung the caller consented to
};

/// "cheapest", "preferred", "fallback", "consented".
const char* placement_reason_name(PlacementReason reason);

/// How one candidate fared during placement.
struct CandidateVerdict {
  std::string backend;
  std::string verdict;       ///< "eligible", "never (constraint)", "unsupported: <reason>", ...
  double estimated_ns = -1;  ///< total modelled cost when eligible
};

/// The record of one executed operation.
struct PlacementRecord {
  uint64_t sequence = 0;
  std::string op;
  std::string tensor;         ///< the tensor the operation served ("" when none)
  std::string dtype;
  std::string shape;
  std::string backend;
  PlacementReason reason = PlacementReason::kCheapest;
  std::string reason_detail;  ///< the reason's particulars, printed after its name: "12.1 ms vs other 40.2 ms", "by constraint prefer=x"
  double estimated_ns = 0;    ///< modelled total (compute + transfers) of the chosen backend
  double measured_ns = 0;     ///< wall time the host measured (transfers included)
  uint64_t bytes_moved = 0;   ///< bytes copied between memory spaces
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  std::string exactness;      ///< "bitwise", "bounded", "approximate"
  double error_bound = 0;
  std::vector<CandidateVerdict> candidates;

  /// JSON form (schema tensormorph.placement/1).
  nlohmann::ordered_json to_json() const;
};

/// A bounded, thread-safe log of recent records.
class PlacementLog {
 public:
  /// Keeps at most `capacity` records.
  explicit PlacementLog(size_t capacity = 4096) : capacity_(capacity) {}
  /// Appends a record, assigning its sequence number; returns that number.
  uint64_t append(PlacementRecord record);
  /// The most recent `n` records, oldest first.
  std::vector<PlacementRecord> recent(size_t n) const;
  /// Records with sequence > `after`.
  std::vector<PlacementRecord> since(uint64_t after) const;

 private:
  mutable std::mutex mutex_;
  std::deque<PlacementRecord> records_;
  size_t capacity_;
  uint64_t next_ = 1;
};

}  // namespace tensormorph::compute
