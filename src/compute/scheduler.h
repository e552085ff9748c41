// The scheduler: places each operation on the cheapest eligible backend, falls back operation by
// operation, never runs anything approximate without consent, and records every placement.
// It knows backends only through the contract: no backend is named here.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "compute/backend.h"
#include "compute/constraints.h"
#include "compute/cost_model.h"
#include "compute/op_registry.h"
#include "compute/placement.h"
#include "compute/residency.h"
#include "compute/split.h"
#include "compute/startup_costs.h"

namespace tensormorph::compute {

/// An input tensor of a request, in host memory.
struct InputTensor {
  TM_DType dtype = TM_DTYPE_INVALID;
  std::vector<uint64_t> shape;
  std::span<const std::byte> bytes;
  uint64_t residency_key = 0;  ///< identity of the data for residency tracking (0: don't cache copies)
  /// When `bytes` are part of the data `residency_key` names (a part of a split operation): that
  /// data's size, and where `bytes` start in it. A part reads a resident copy of the whole in place
  /// and never caches its slice under the whole's key. 0: `bytes` are the whole.
  uint64_t residency_whole_bytes = 0;
  uint64_t residency_offset = 0;  ///< see residency_whole_bytes
};

/// An output tensor of a request, written to host memory.
struct OutputTensor {
  TM_DType dtype = TM_DTYPE_INVALID;
  std::vector<uint64_t> shape;
  std::span<std::byte> bytes;
  /// For a data-dependent output: the vector `bytes` views. When a backend needs more room
  /// (OUTPUT_TOO_SMALL) the scheduler grows it and runs again; afterwards it holds what was written.
  std::vector<std::byte>* growable = nullptr;
};

/// A named scalar attribute.
struct AttributeValue {
  std::string name;
  int64_t i = 0;
  double f = 0;
};

/// One operation to place and run.
struct OpRequest {
  std::string op;
  std::string subject;  ///< the tensor it serves ("a/b" for a pair; "" when none), copied into the record
  std::vector<InputTensor> inputs;
  std::vector<OutputTensor> outputs;
  std::vector<AttributeValue> attributes;
  TM_Exactness exactness_floor = TM_EXACT_BITWISE;  ///< the weakest result acceptable without consent
  /// With a bounded floor: the largest error bound accepted, in the unit the operation's exactness
  /// definition states (relative to the reference, or to its largest value for spectra).
  double max_error_bound = 0;
  std::string consent;  ///< id of a ladder rung the caller consents to ("" = none)
  uint32_t max_threads = 0;  ///< passed to the backend's execution policy (0: it decides)
};

/// One rung of the exactness ladder offered for consent.
struct LadderOffer {
  std::string id;           ///< pass back as OpRequest::consent
  std::string op;           ///< operation that would run
  std::string backend;      ///< where it would run
  std::string computes;     ///< what it computes instead of the exact result
  std::string error_bound;  ///< its error bound, in words
  double estimated_ns = 0;
};

/// The outcome of run(): executed with a record, or a structured "needs consent".
struct Placement {
  bool executed = false;
  PlacementRecord record;            ///< when executed
  std::vector<uint64_t> output_nbytes;  ///< when executed: bytes written to each output
  /// When executed in parts on several backends: each part's record, in order (`record` is the merge's).
  std::vector<PlacementRecord> parts;

  /// Moves the records of what ran into `out`: the parts' (when split), then `record`.
  void take_records(std::vector<PlacementRecord>& out);
  std::string needs_consent_reason;  ///< when not executed: why exact is out of reach
  std::vector<LadderOffer> ladder;   ///< when not executed: the rungs on offer
  /// When not executed: the error for a caller that cannot offer consent (RESOURCE_EXHAUSTED over
  /// the memory budget, FAILED_PRECONDITION when constraints exclude backends, else UNIMPLEMENTED),
  /// its message the reason and the rungs, with a hint.
  Status refusal;
};

/// What placing a request would cost now, without running it.
struct PlacementEstimate {
  bool placeable = false;   ///< some backend computes it exactly within the constraints and budgets
  std::string backend;      ///< the backend run() would choose
  double estimated_ns = 0;  ///< its modelled time: compute (calibrated) and transfers
  std::string reason;       ///< when not placeable: why, with every backend's verdict
  Status refusal;           ///< when not placeable: the error run() would return without a ladder (see Placement)
};

/// Scheduler settings.
struct SchedulerOptions {
  Constraints constraints;
  uint64_t memory_budget_bytes = 0;  ///< cap on one operation's working memory (0: unlimited)
  /// Cap on the modelled time of one analysis of one tensor (0: unlimited). The scheduler places
  /// single operations; analyses made of many compare their estimate with it before they start.
  double time_budget_ns = 0;
  uint64_t device_cache_bytes = 1ull << 30;
  bool calibrate = true;  ///< learn from measured times (off in tests that pin costs)
  std::filesystem::path startup_costs_file;  ///< where device start-up times are kept (empty: the user's cache)
  SplitPolicy split;  ///< when one operation is split across several backends at once
};

/// Places and runs operations. Thread-safe for concurrent run() calls.
class Scheduler {
 public:
  /// `backends` must outlive the scheduler.
  Scheduler(const OpRegistry& registry, std::span<const std::unique_ptr<Backend>> backends,
            SchedulerOptions options);

  /// Places and executes `request`; output bytes are written in place.
  Result<Placement> run(const OpRequest& original);

  /// Where `request` would run exactly and at what modelled cost; nothing runs and nothing is
  /// recorded (a device the placement rule would open for it is opened).
  Result<PlacementEstimate> estimate(const OpRequest& request);

  /// Replaces the user's constraints (takes effect for the next run()).
  void set_constraints(Constraints constraints);
  /// The constraints in force.
  Constraints constraints() const;
  /// Replaces the cap on one operation's working memory (0: unlimited), from the next run().
  void set_memory_budget(uint64_t bytes);
  /// Replaces the cap on one analysis's modelled time (0: unlimited).
  void set_time_budget(double ns);
  /// The cap on one analysis's modelled time (0: unlimited).
  double time_budget_ns() const;
  /// Replaces when operations are split across backends (from the next run()).
  void set_split_policy(SplitPolicy policy);
  /// Replaces each backend's device-cache budget, evicting cached copies now to fit it.
  void set_device_cache_budget(uint64_t bytes);
  /// Recent placement records.
  const PlacementLog& log() const { return log_; }
  /// Residency of cached device copies.
  ResidencyCache& residency() { return residency_; }
  /// The backends it chooses among.
  std::span<const std::unique_ptr<Backend>> backends() const { return backends_; }

 private:
  struct Candidate;
  struct Obstacles;
  std::vector<Candidate> evaluate(const OpRequest& request, const std::string& op, TM_Exactness floor,
                                  const std::vector<const Backend*>& excluded, std::vector<CandidateVerdict>& verdicts,
                                  Obstacles* obstacles = nullptr);
  Status refusal(const std::string& why, const std::string& verdicts, const Obstacles& obstacles) const;
  Result<TM_ExecutionReport> execute_on(const Backend& backend, const OpRequest& request, const std::string& op,
                                        TM_Exactness floor, uint64_t& bytes_moved, std::vector<uint64_t>& output_needs);
  std::vector<LadderOffer> ladder_for(const OpRequest& request, std::vector<Candidate>& weaker);
  Result<Placement> place(const OpRequest& original, std::vector<const Backend*> failed, bool may_split,
                          uint64_t split_group = 0, const std::string& split_part = "");
  Result<std::optional<Placement>> run_split(const OpRequest& request, const std::vector<Candidate>& exact,
                                             const std::vector<CandidateVerdict>& verdicts);
  Result<PlacementRecord> run_part(const OpRequest& part, const Backend& backend, uint64_t group, const std::string& label);
  void learn(const Candidate& chosen, const std::string& op, const TM_ExecutionReport& report, double measured_ns);
  void note_failure(const Backend& backend, const Status& failure);
  PlacementRecord record_of(const Candidate& chosen, const OpRequest& request, const std::string& op,
                            const TM_ExecutionReport& report, double measured_ns, uint64_t bytes_moved,
                            const std::vector<CandidateVerdict>& verdicts) const;

  const OpRegistry& registry_;
  std::span<const std::unique_ptr<Backend>> backends_;
  SchedulerOptions options_;
  mutable std::mutex options_mutex_;
  CostModel cost_model_;
  ResidencyCache residency_;
  PlacementLog log_;
  StartupCosts startup_costs_;
  std::atomic<double> placed_ns_{0};  // modelled time of every operation run so far
};

/// "bitwise", "bounded", "approximate".
const char* exactness_name(TM_Exactness exactness);
/// TM_ShapeClass of a shape.
TM_ShapeClass shape_class_of(std::span<const uint64_t> shape);

}  // namespace tensormorph::compute
