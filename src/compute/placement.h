// Placement records: every executed operation says where it ran, why, and what it cost.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
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
  kPreferredUnavailable,  ///< a preference was set, but no preferred backend could serve it (the detail says why)
  kSplit,       ///< one part of an operation split across backends, or the merge of its parts
};

/// "cheapest", "preferred", "fallback", "consented", "preferred-unavailable", "split".
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
  std::string tensor;         ///< the tensor the operation served (OpRequest::subject), "" when none
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
  /// Of an operation split across backends: an id shared by its parts and its merge (0: not split).
  uint64_t split_group = 0;
  /// Of a split operation: "part 1/3: granules [0, 40) of 128" for a part, "merge" for the merge.
  std::string split_part;

  /// True for the record of a split operation's merge (its parts hold the backends' work).
  bool is_merge() const { return split_group != 0 && split_part == "merge"; }

  /// JSON form (schema tensormorph.placement/1).
  nlohmann::ordered_json to_json() const;
};

/// Counts of executed operations, by how they were placed.
struct PlacementCounts {
  uint64_t operations = 0;
  uint64_t fallbacks = 0;    ///< placed again after a backend failed (reason fallback)
  uint64_t consented = 0;    ///< ran a rung the caller consented to (reason consented)
  uint64_t bounded = 0;      ///< results within a stated error bound of the exact one (exactness bounded)
  uint64_t approximate = 0;  ///< approximate results (sampling, sketches: exactness approximate)
};

/// Totals since the log was created; they outlive the records the log keeps.
struct PlacementSummary {
  PlacementCounts total;
  std::map<std::string, PlacementCounts> by_backend;
  std::deque<PlacementRecord> consents;  ///< the last kKeptConsents consented records, oldest first

  /// How many consented records are kept.
  static constexpr size_t kKeptConsents = 20;
  /// JSON form: {operations, by_backend: {NAME: counts}, fallbacks, consented, bounded, approximate,
  /// consents: [{sequence, op, tensor, backend, exactness, detail}]}.
  nlohmann::ordered_json to_json() const;
};

/// A bounded, thread-safe log of recent records, with running totals since it was created.
class PlacementLog {
 public:
  /// Keeps at most `capacity` records.
  explicit PlacementLog(size_t capacity = 4096) : capacity_(capacity) {}
  /// Appends a record, assigning its sequence number; returns that number.
  uint64_t append(PlacementRecord record);
  /// The most recent `n` records, oldest first.
  std::vector<PlacementRecord> recent(size_t n) const;
  /// A new id for the records of one split operation.
  uint64_t next_split_group();
  /// Records with sequence > `after`.
  std::vector<PlacementRecord> since(uint64_t after) const;
  /// The running totals.
  PlacementSummary summary() const;

 private:
  mutable std::mutex mutex_;
  std::deque<PlacementRecord> records_;
  size_t capacity_;
  uint64_t next_ = 1;
  uint64_t next_group_ = 1;
  PlacementSummary summary_;
};

}  // namespace tensormorph::compute
