#include "compute/scheduler.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <thread>

#include "core/dtype_abi.h"

namespace tensormorph::compute {
namespace {

bool retryable(StatusCode code) {
  return code == StatusCode::kUnimplemented || code == StatusCode::kResourceExhausted ||
         code == StatusCode::kDeviceLost;
}

bool named_in(const std::string& backend, const std::vector<std::string>& patterns) {
  return std::any_of(patterns.begin(), patterns.end(), [&](const auto& p) { return backend_matches(backend, p); });
}

// Why a plugin built for an older minor ABI cannot take this instance: an attribute value beyond
// the range it knew (the range grew later). Empty when it can.
std::string older_abi_reason(const Backend& b, const OpDefinition* def, const OpRequest& request) {
  if (def == nullptr) return "";
  for (const auto& spec : def->attributes) {
    if (spec.widened_in_minor == 0 || b.abi_minor() >= spec.widened_in_minor) continue;
    for (const auto& attr : request.attributes) {
      const double value = spec.kind == ops::AttributeKind::kInt ? static_cast<double>(attr.i) : attr.f;
      if (attr.name == spec.name && value > spec.max_before) {
        const std::string shown = spec.kind == ops::AttributeKind::kInt ? std::to_string(attr.i) : std::to_string(attr.f);
        return "built for plugin ABI " + std::to_string(TM_PLUGIN_ABI_MAJOR) + "." + std::to_string(b.abi_minor()) +
               ": " + spec.name + " " + shown + " came in " + std::to_string(TM_PLUGIN_ABI_MAJOR) + "." +
               std::to_string(spec.widened_in_minor);
      }
    }
  }
  return "";
}

std::string milliseconds(double ns) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g ms", ns / 1e6);
  return buf;
}

// "64 MiB": sizes as the settings take them (binary units), rounded up so "at least" holds.
std::string bytes_text(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
  size_t unit = 0;
  double value = static_cast<double>(bytes);
  while (value >= 1024 && unit + 1 < std::size(kUnits)) value /= 1024, ++unit;
  char buf[32];
  std::snprintf(buf, sizeof buf, unit == 0 ? "%.0f %s" : "%.4g %s", unit == 0 ? value : std::ceil(value * 10) / 10,
                kUnits[unit]);
  return buf;
}

std::string shape_text(std::span<const uint64_t> shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// ABI views of a request's tensors and attributes; they point into the request and this struct.
struct AbiInstance {
  std::vector<TM_TensorArg> inputs, outputs;
  std::vector<TM_Attribute> attributes;
  TM_OpInstance instance{};

  AbiInstance(const OpRequest& request, const std::string& op) {
    for (const auto& in : request.inputs) {
      TM_TensorArg a = tensor_arg(in.dtype, in.shape, in.bytes.size());
      a.host_data = in.bytes.data();  // host memory only: the host_file fields stay zero (ABI 1.2)
      inputs.push_back(a);
    }
    for (const auto& out : request.outputs) {
      TM_TensorArg a = tensor_arg(out.dtype, out.shape, out.bytes.size());
      a.host_out = out.bytes.data();
      outputs.push_back(a);
    }
    for (const auto& attr : request.attributes) {
      TM_Attribute a{};
      a.struct_size = sizeof a;
      a.name = attr.name.c_str();
      a.i = attr.i;
      a.f = attr.f;
      attributes.push_back(a);
    }
    instance.struct_size = sizeof instance;
    instance.op = op.c_str();
    instance.inputs = inputs.data();
    instance.input_count = static_cast<uint32_t>(inputs.size());
    instance.outputs = outputs.data();
    instance.output_count = static_cast<uint32_t>(outputs.size());
    instance.attributes = attributes.data();
    instance.attribute_count = static_cast<uint32_t>(attributes.size());
  }

  static TM_TensorArg tensor_arg(TM_DType dtype, const std::vector<uint64_t>& shape, uint64_t nbytes) {
    TM_TensorArg a{};
    a.struct_size = sizeof a;
    a.dtype = dtype;
    a.rank = static_cast<uint32_t>(std::min<size_t>(shape.size(), 8));
    for (uint32_t i = 0; i < a.rank; ++i) a.shape[i] = shape[i];
    a.nbytes = nbytes;
    return a;
  }
};

/// The size of the data an input's residency key names: the whole's for a part of a split.
uint64_t resident_bytes(const InputTensor& in) {
  return in.residency_whole_bytes != 0 ? in.residency_whole_bytes : in.bytes.size();
}

uint64_t input_bytes(const OpRequest& r) {
  uint64_t n = 0;
  for (const auto& in : r.inputs) n += in.bytes.size();
  return n;
}

// Grows each data-dependent output to the bytes the backend said it needs.
Status grow_outputs(OpRequest& request, const std::vector<uint64_t>& needs) {
  if (needs.size() != request.outputs.size()) return Status::Internal("a backend asked for more room without saying how much");
  for (size_t i = 0; i < needs.size(); ++i) {
    OutputTensor& out = request.outputs[i];
    if (needs[i] <= out.bytes.size()) continue;
    if (out.growable == nullptr) {
      return Status::Internal("output " + std::to_string(i) + " of " + request.op + " needs " + std::to_string(needs[i]) +
                              " bytes but is not data-dependent");
    }
    out.growable->resize(needs[i]);
    out.bytes = std::span(*out.growable);
    const auto dtype = from_abi_dtype(out.dtype);
    const uint64_t element_bytes = dtype ? std::max<uint64_t>(1, dtype_info(*dtype).block_bytes / dtype_info(*dtype).block_elems) : 1;
    if (out.shape.size() == 1) out.shape[0] = needs[i] / element_bytes;
  }
  return Status::Ok();
}

uint64_t output_bytes(const OpRequest& r) {
  uint64_t n = 0;
  for (const auto& out : r.outputs) n += out.bytes.size();
  return n;
}

}  // namespace

void Placement::take_records(std::vector<PlacementRecord>& out) {
  for (auto& part : parts) out.push_back(std::move(part));
  parts.clear();
  out.push_back(std::move(record));
}

const char* exactness_name(TM_Exactness exactness) {
  switch (exactness) {
    case TM_EXACT_BITWISE: return "bitwise";
    case TM_EXACT_BOUNDED: return "bounded";
    case TM_EXACT_APPROXIMATE: return "approximate";
  }
  return "unknown";
}

TM_ShapeClass shape_class_of(std::span<const uint64_t> shape) {
  if (shape.size() <= 1) return TM_SHAPE_VECTOR;
  return shape.size() == 2 ? TM_SHAPE_MATRIX : TM_SHAPE_TENSOR;
}

// A backend that can run the operation, with its modelled cost.
struct Scheduler::Candidate {
  const Backend* backend = nullptr;
  TM_OpSupport support{};
  double compute_ns = 0;
  double transfer_ns = 0;
  double total_ns = 0;
  TM_CostEstimate estimate{};
};

// What kept backends from computing an operation exactly, so that a refusal can say what to do.
struct Scheduler::Obstacles {
  std::vector<std::string> excluded;  // backends the constraints ruled out
  std::string constraints;            // the constraints in force, as text
  uint64_t smallest_need = 0;         // the least memory an over-budget backend needed (0: none was over)
  uint64_t budget = 0;                // the memory budget in force
};

Status Scheduler::refusal(const std::string& why, const std::string& verdicts, const Obstacles& o) const {
  // The hint comes right after what was refused: a message cut short for a table keeps it.
  std::string hint;
  if (o.smallest_need > 0) {
    hint = "raise the memory budget (now " + bytes_text(o.budget) + ") to at least " + bytes_text(o.smallest_need) +
           ": compute.memory_budget, in Compute or with `tensormorph config set compute.memory_budget SIZE`";
    return Status::ResourceExhausted(why + "; " + hint + verdicts).with_hint(hint);
  }
  if (!o.excluded.empty()) {
    std::string names;
    for (const auto& n : o.excluded) names += (names.empty() ? "" : ", ") + n;
    hint = "allow a backend in Compute (or with --compute): the constraints " + o.constraints + " rule out " + names;
    return Status::FailedPrecondition(why + "; " + hint + verdicts).with_hint(hint);
  }
  return Status::Unimplemented(why + verdicts);
}

/// Among eligible candidates, the cheapest of those `prefer=` names, else the cheapest of all;
/// ties keep backend order. `by_preference` says whether a preference decided.
template <typename Candidate>
const Candidate& choose(const std::vector<Candidate>& eligible, const Constraints& constraints, bool* by_preference) {
  const Candidate* best = nullptr;
  bool preferred_best = false;
  for (const auto& c : eligible) {
    const bool preferred = named_in(c.backend->name(), constraints.prefer);
    if (best == nullptr || (preferred && !preferred_best) || (preferred == preferred_best && c.total_ns < best->total_ns)) {
      best = &c;
      preferred_best = preferred;
    }
  }
  if (by_preference != nullptr) *by_preference = preferred_best;
  return *best;
}

Scheduler::Scheduler(const OpRegistry& registry, std::span<const std::unique_ptr<Backend>> backends,
                     SchedulerOptions options)
    : registry_(registry),
      backends_(backends),
      options_(std::move(options)),
      residency_(options_.device_cache_bytes),
      startup_costs_(options_.startup_costs_file) {}

void Scheduler::set_constraints(Constraints constraints) {
  std::lock_guard lock(options_mutex_);
  options_.constraints = std::move(constraints);
}

void Scheduler::set_memory_budget(uint64_t bytes) {
  std::lock_guard lock(options_mutex_);
  options_.memory_budget_bytes = bytes;
}

void Scheduler::set_time_budget(double ns) {
  std::lock_guard lock(options_mutex_);
  options_.time_budget_ns = ns;
}

double Scheduler::time_budget_ns() const {
  std::lock_guard lock(options_mutex_);
  return options_.time_budget_ns;
}

void Scheduler::set_device_cache_budget(uint64_t bytes) { residency_.set_budget(bytes); }

Constraints Scheduler::constraints() const {
  std::lock_guard lock(options_mutex_);
  return options_.constraints;
}

std::vector<Scheduler::Candidate> Scheduler::evaluate(const OpRequest& request, const std::string& op,
                                                      TM_Exactness floor, const std::vector<const Backend*>& excluded,
                                                      std::vector<CandidateVerdict>& verdicts, Obstacles* obstacles) {
  const Constraints constraints = this->constraints();
  uint64_t budget;
  {
    std::lock_guard lock(options_mutex_);
    budget = options_.memory_budget_bytes;
  }
  std::vector<QueryInput> query_inputs;
  for (const auto& in : request.inputs) query_inputs.push_back({in.dtype, shape_class_of(in.shape)});
  AbiInstance abi(request, op);
  std::vector<Candidate> eligible;
  std::vector<CandidateVerdict> by_backend(backends_.size());
  std::vector<size_t> deferred;  // unopened backends, decided once the open ones are known
  Obstacles noted;
  noted.constraints = constraints.to_string();
  noted.budget = budget;
  const OpDefinition* definition = registry_.find(op);
  // A backend the constraints rule out is an obstacle unless it is known not to support the
  // operation either (an unopened device is not asked: that would open it).
  const auto note_excluded = [&](const Backend& b) {
    if (b.opened()) {
      auto support = b.query(op, query_inputs);
      if (support.ok() && support->level == TM_SUPPORT_NONE) return;
    }
    noted.excluded.push_back(b.name());
  };

  const auto consider = [&](size_t index) {
    const Backend& b = *backends_[index];
    CandidateVerdict& v = by_backend[index];
    if (auto support = b.query(op, query_inputs); !support.ok()) {
      v.verdict = b.unavailable_reason().empty() ? "query failed: " + support.status().message()
                                                 : "unavailable: " + b.unavailable_reason();
    } else if (support->level == TM_SUPPORT_NONE) {
      v.verdict = std::string("unsupported: ") + support->reason;
    } else if (auto estimate = b.estimate(abi.instance); !estimate.ok()) {
      v.verdict = "estimate failed: " + estimate.status().message();
    } else {
      Candidate c;
      c.backend = &b;
      c.support = *support;
      c.estimate = *estimate;
      c.compute_ns = estimate->compute_ns * cost_model_.calibration(b.name(), op);
      for (const auto& in : request.inputs) {
        if (in.residency_key == 0 || !residency_.resident(in.residency_key, b, resident_bytes(in))) {
          c.transfer_ns += cost_model_.host_to_device_ns(b, in.bytes.size());
        }
      }
      c.transfer_ns += cost_model_.device_to_host_ns(b, output_bytes(request));
      c.total_ns = c.compute_ns + c.transfer_ns;
      const uint64_t device_need = b.host_visible() ? 0 : input_bytes(request) + output_bytes(request);
      if (support->exactness > floor) {
        v.verdict = std::string("weaker exactness (") + exactness_name(support->exactness) + ") than required";
        v.estimated_ns = c.total_ns;
        c.support.level = TM_SUPPORT_NONE;  // marks "eligible only with consent"
        eligible.push_back(c);
      } else if (const uint64_t need = estimate->bytes_written + estimate->working_bytes; budget > 0 && need > budget) {
        v.verdict = "over the memory budget (" + std::to_string(estimate->bytes_written) + " bytes of output + " +
                    std::to_string(estimate->working_bytes) + " of working memory > " + std::to_string(budget) + ")";
        if (noted.smallest_need == 0 || need < noted.smallest_need) noted.smallest_need = need;
      } else if (b.traits().memory_bytes > 0 && device_need > b.traits().memory_bytes) {
        v.verdict = "does not fit in device memory";
      } else {
        v.verdict = support->level == TM_SUPPORT_PARTIAL ? std::string("eligible (partial: ") + support->reason + ")"
                                                         : "eligible";
        v.estimated_ns = c.total_ns;
        eligible.push_back(c);
      }
    }
  };

  for (size_t index = 0; index < backends_.size(); ++index) {
    const Backend& b = *backends_[index];
    CandidateVerdict& v = by_backend[index];
    v = {b.name(), "", -1};
    if (std::find(excluded.begin(), excluded.end(), &b) != excluded.end()) {
      v.verdict = "failed earlier in this request";
    } else if (!b.lost_reason().empty()) {
      v.verdict = "device lost: " + b.lost_reason();
    } else if (named_in(b.name(), constraints.never)) {
      v.verdict = "never (constraint)";
      note_excluded(b);
    } else if (!constraints.only.empty() && !named_in(b.name(), constraints.only)) {
      v.verdict = "not in only= (constraint)";
      note_excluded(b);
    } else if (!b.unavailable_reason().empty()) {
      v.verdict = "unavailable: " + b.unavailable_reason();
    } else if (std::string older = older_abi_reason(b, definition, request); !older.empty()) {
      v.verdict = older;
    } else if (!b.opened()) {
      deferred.push_back(index);
    } else {
      consider(index);
    }
  }
  // A device not opened yet opens when the user asked for it, when nothing open can compute the
  // operation exactly, or once the work placed so far plus this operation would pay for its
  // start-up (renting the open backends until the rent reaches the price of buying: never more
  // than twice the cost of the best choice made in hindsight).
  double best_ns = -1;
  for (const auto& c : eligible) {
    if (c.support.level != TM_SUPPORT_NONE && (best_ns < 0 || c.total_ns < best_ns)) best_ns = c.total_ns;
  }
  for (size_t index : deferred) {
    const Backend& b = *backends_[index];
    const std::string key = b.name() + "|" + b.origin().library_path + "|" + b.version();
    const double startup_ns = startup_costs_.startup_ns(key);
    const double placed_ns = placed_ns_.load();
    const bool asked = named_in(b.name(), constraints.prefer) || named_in(b.name(), constraints.only);
    if (!asked && best_ns >= 0 && placed_ns + best_ns < startup_ns) {
      by_backend[index].verdict = "not opened: its start-up (" + milliseconds(startup_ns) +
                                  ") outweighs the work placed so far (" + milliseconds(placed_ns + best_ns) + ")";
      continue;
    }
    if (Status opened = b.open(); !opened.ok()) {
      by_backend[index].verdict = "unavailable: " + opened.message();
      continue;
    }
    startup_costs_.record(key, b.open_ns());
    consider(index);
  }
  verdicts = std::move(by_backend);
  if (obstacles != nullptr) *obstacles = std::move(noted);
  return eligible;
}

Result<TM_ExecutionReport> Scheduler::execute_on(const Backend& backend, const OpRequest& request,
                                                 const std::string& op, TM_Exactness floor, uint64_t& bytes_moved,
                                                 std::vector<uint64_t>& output_needs) {
  AbiInstance abi(request, op);
  std::vector<TM_Buffer*> temporary;
  auto release_temporary = [&] {
    for (TM_Buffer* t : temporary) backend.release(t);
  };
  if (!backend.host_visible()) {
    // The host owns residency: copy inputs in (or reuse a cached copy) before execution.
    for (size_t i = 0; i < request.inputs.size(); ++i) {
      const InputTensor& in = request.inputs[i];
      // A part of a split operation reads a resident copy of the whole in place, at its offset.
      const bool part_of_whole = in.residency_whole_bytes != 0;
      TM_Buffer* buffer = in.residency_key ? residency_.find(in.residency_key, backend, resident_bytes(in)) : nullptr;
      abi.inputs[i].byte_offset = buffer != nullptr && part_of_whole ? in.residency_offset : 0;
      if (buffer == nullptr) {
        auto allocated = backend.allocate(in.bytes.size());
        if (!allocated.ok()) {
          release_temporary();
          return allocated.status();
        }
        buffer = *allocated;
        Status written = backend.write(buffer, in.bytes.data(), in.bytes.size());
        if (!written.ok()) {
          backend.release(buffer);
          release_temporary();
          return written;
        }
        bytes_moved += in.bytes.size();
        if (part_of_whole || in.residency_key == 0 ||
            !residency_.insert(in.residency_key, backend, buffer, in.bytes.size())) {
          temporary.push_back(buffer);
        }
      }
      abi.inputs[i].host_data = nullptr;
      abi.inputs[i].buffer = buffer;
    }
    bytes_moved += output_bytes(request);
  }
  TM_ExecutionPolicy policy{};
  policy.struct_size = sizeof policy;
  policy.exactness_floor = floor;
  policy.max_error_bound = request.max_error_bound;
  policy.max_threads = request.max_threads;
  {
    std::lock_guard lock(options_mutex_);
    policy.memory_budget_bytes = options_.memory_budget_bytes;
  }
  auto report = backend.execute(abi.instance, policy, &output_needs);
  release_temporary();
  return report;
}

std::vector<LadderOffer> Scheduler::ladder_for(const OpRequest& request, std::vector<Candidate>& weaker) {
  std::vector<LadderOffer> ladder;
  // Rung kind 1: the same operation on a backend that only promises a weaker exactness.
  std::sort(weaker.begin(), weaker.end(), [](const auto& a, const auto& b) { return a.total_ns < b.total_ns; });
  for (const auto& c : weaker) {
    char bound[96];
    std::snprintf(bound, sizeof bound, "%s, relative error <= %g", exactness_name(c.support.exactness),
                  c.support.error_bound);
    ladder.push_back({"backend:" + c.backend->name(), request.op, c.backend->name(),
                      "the same " + request.op + " on " + c.backend->name() + " without the bitwise guarantee",
                      bound, c.total_ns});
  }
  // Rung kind 2: the operation's registered approximate variants, wherever they can run.
  if (const OpDefinition* def = registry_.find(request.op)) {
    for (const LadderRung& rung : def->ladder) {
      std::vector<CandidateVerdict> verdicts;
      auto options = evaluate(request, rung.op, TM_EXACT_APPROXIMATE, {}, verdicts);
      options.erase(std::remove_if(options.begin(), options.end(),
                                   [](const auto& c) { return c.support.level == TM_SUPPORT_NONE; }),
                    options.end());
      if (options.empty()) continue;
      auto best = std::min_element(options.begin(), options.end(),
                                   [](const auto& a, const auto& b) { return a.total_ns < b.total_ns; });
      ladder.push_back({rung.op, rung.op, best->backend->name(), rung.computes, rung.error_bound, best->total_ns});
    }
  }
  return ladder;
}

Result<PlacementEstimate> Scheduler::estimate(const OpRequest& request) {
  if (registry_.find(request.op) == nullptr) return Status::InvalidArgument("unknown operation '" + request.op + "'");
  std::vector<CandidateVerdict> verdicts;
  Obstacles obstacles;
  auto candidates = evaluate(request, request.op, request.exactness_floor, {}, verdicts, &obstacles);
  std::erase_if(candidates, [](const Candidate& c) { return c.support.level == TM_SUPPORT_NONE; });
  PlacementEstimate out;
  if (candidates.empty()) {
    const std::string why = "no backend can compute " + request.op + " exactly within the constraints and memory budget";
    std::string verdict_text;
    for (const auto& v : verdicts) verdict_text += "; " + v.backend + ": " + v.verdict;
    out.reason = why + verdict_text;
    out.refusal = refusal(why, verdict_text, obstacles);
    return out;
  }
  const Candidate& chosen = choose(candidates, constraints(), nullptr);
  out.placeable = true;
  out.backend = chosen.backend->name();
  out.estimated_ns = chosen.total_ns;
  return out;
}

Result<Placement> Scheduler::run(const OpRequest& original) { return place(original, {}, true); }

namespace {

// A record of `op` on `request`'s subject: what it served, before where and how it ran.
PlacementRecord record_of_subject(const OpRequest& request, const std::string& op) {
  PlacementRecord record;
  record.op = op;
  record.tensor = request.subject;
  record.dtype = request.inputs.empty() ? "" : abi_dtype_name(request.inputs[0].dtype);
  record.shape = request.inputs.empty() ? "" : shape_text(request.inputs[0].shape);
  return record;
}

}  // namespace

void Scheduler::learn(const Candidate& chosen, const std::string& op, const TM_ExecutionReport& report,
                      double measured_ns) {
  if (!options_.calibrate) return;
  cost_model_.observe(chosen.backend->name(), op, chosen.estimate.compute_ns,
                      report.device_ns > 0 ? report.device_ns : measured_ns - chosen.transfer_ns);
}

void Scheduler::note_failure(const Backend& backend, const Status& failure) {
  if (failure.code() != StatusCode::kDeviceLost) return;
  const_cast<Backend&>(backend).mark_lost(failure.message());
  residency_.drop_backend(backend);
}

PlacementRecord Scheduler::record_of(const Candidate& chosen, const OpRequest& request, const std::string& op,
                                     const TM_ExecutionReport& report, double measured_ns, uint64_t bytes_moved,
                                     const std::vector<CandidateVerdict>& verdicts) const {
  PlacementRecord record = record_of_subject(request, op);
  record.backend = chosen.backend->name();
  record.estimated_ns = chosen.total_ns;
  record.measured_ns = measured_ns;
  record.bytes_moved = bytes_moved;
  record.bytes_read = report.bytes_read;
  record.bytes_written = report.bytes_written;
  record.exactness = exactness_name(report.exactness);
  record.error_bound = report.error_bound;
  record.candidates = verdicts;
  return record;
}

Result<Placement> Scheduler::place(const OpRequest& original, std::vector<const Backend*> failed, bool may_split,
                                   uint64_t split_group, const std::string& split_part) {
  OpRequest request = original;  // data-dependent outputs may grow
  if (registry_.find(request.op) == nullptr) {
    return Status::InvalidArgument("unknown operation '" + request.op + "'");
  }
  const std::string dtype_label = request.inputs.empty() ? "" : abi_dtype_name(request.inputs[0].dtype);
  const std::string shape_label = request.inputs.empty() ? "" : shape_text(request.inputs[0].shape);
  std::string fallback_note;
  if (!failed.empty()) fallback_note = split_part;  // a split's part placed again: its label says why
  std::vector<CandidateVerdict> verdicts;
  Obstacles obstacles;

  std::string op = request.op;
  TM_Exactness floor = request.exactness_floor;
  bool consented = false;
  const Backend* forced = nullptr;

  for (;;) {
    auto candidates = evaluate(request, op, floor, failed, verdicts, &obstacles);
    std::vector<Candidate> weaker;
    std::vector<Candidate> exact;
    for (auto& c : candidates) (c.support.level == TM_SUPPORT_NONE ? weaker : exact).push_back(c);
    if (forced != nullptr) {
      exact.erase(std::remove_if(exact.begin(), exact.end(), [&](const auto& c) { return c.backend != forced; }),
                  exact.end());
    }

    if (exact.empty()) {
      if (!consented && !request.consent.empty()) {
        // The caller consented to a rung: re-place as that rung.
        auto ladder = ladder_for(request, weaker);
        auto rung = std::find_if(ladder.begin(), ladder.end(), [&](const auto& r) { return r.id == request.consent; });
        if (rung != ladder.end()) {
          consented = true;
          op = rung->op;
          floor = TM_EXACT_APPROXIMATE;
          if (rung->id.rfind("backend:", 0) == 0) {
            for (const auto& b : backends_) {
              if (b->name() == rung->backend) forced = b.get();
            }
          }
          fallback_note = "consented to rung '" + rung->id + "': " + rung->computes + " (" + rung->error_bound + ")";
          continue;
        }
      }
      auto ladder = ladder_for(request, weaker);
      const std::string why = "no backend can compute " + request.op + " on " + dtype_label + " " + shape_label +
                              " exactly within the constraints and memory budget";
      std::string verdict_text;
      for (const auto& v : verdicts) verdict_text += "; " + v.backend + ": " + v.verdict;
      // Nothing to consent to: a refusal that says what would let it run (a kernel error from a
      // backend is UNIMPLEMENTED and was placed again above; this is the scheduler's own answer).
      if (ladder.empty()) return refusal(why, verdict_text, obstacles);
      Placement p;
      p.executed = false;
      p.needs_consent_reason = why + verdict_text;
      p.refusal = refusal(why, verdict_text, obstacles);
      p.ladder = std::move(ladder);
      return p;
    }

    // Several backends can: one operation may run in parts on them at once, when its definition
    // says how to cut and merge it and the model says the parts finish sooner together.
    if (may_split && !consented && forced == nullptr && failed.empty() && exact.size() >= 2) {
      TM_ASSIGN_OR_RETURN(auto split, run_split(request, exact, verdicts));
      if (split) return std::move(*split);
    }

    // Preferences pick among eligible backends; otherwise the cheapest wins. Ties keep backend order.
    const Constraints constraints = this->constraints();
    bool by_preference = false;
    const Candidate& chosen = choose(exact, constraints, &by_preference);

    uint64_t bytes_moved = 0;
    std::vector<uint64_t> output_needs;
    const auto start = std::chrono::steady_clock::now();
    auto report = execute_on(*chosen.backend, request, op, floor, bytes_moved, output_needs);
    for (int regrow = 0; regrow < 2 && !report.ok() && report.status().code() == StatusCode::kOutputTooSmall; ++regrow) {
      // A data-dependent output needs more room: grow it and run again on the same backend.
      TM_RETURN_IF_ERROR(grow_outputs(request, output_needs).with_context(chosen.backend->name()));
      report = execute_on(*chosen.backend, request, op, floor, bytes_moved, output_needs);
    }
    const double measured_ns =
        std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();

    if (!report.ok()) {
      if (!retryable(report.status().code())) return report.status();
      note_failure(*chosen.backend, report.status());
      failed.push_back(chosen.backend);
      fallback_note += (fallback_note.empty() ? "" : "; ") + std::string("fallback from ") +
                       chosen.backend->name() + ": " + report.status().to_string();
      continue;
    }

    learn(chosen, op, *report, measured_ns);
    PlacementRecord record = record_of(chosen, request, op, *report, measured_ns, bytes_moved, verdicts);
    record.split_group = split_group;
    record.split_part = split_part;
    if (consented) {
      record.reason = PlacementReason::kConsented;
      record.reason_detail = fallback_note;
    } else if (!failed.empty()) {
      record.reason = PlacementReason::kFallback;
      record.reason_detail = fallback_note;
    } else if (by_preference) {
      record.reason = PlacementReason::kPreferred;
      record.reason_detail = "by constraint " + constraints.to_string();
    } else {
      record.reason = PlacementReason::kCheapest;
      record.reason_detail = milliseconds(chosen.total_ns);
      for (const auto& c : exact) {
        if (c.backend != chosen.backend) record.reason_detail += " vs " + c.backend->name() + " " + milliseconds(c.total_ns);
      }
      if (exact.size() == 1) record.reason_detail = "only eligible backend";
      if (!constraints.prefer.empty()) {
        // A preference was set and could not be met: say why (partial support is normal, not an
        // error), then how the backend that served was chosen.
        std::string why_not;
        for (const auto& v : verdicts) {
          if (!named_in(v.backend, constraints.prefer)) continue;
          why_not += (why_not.empty() ? "" : "; ") + ("preferred " + v.backend + " " + v.verdict);
        }
        if (why_not.empty()) {
          std::string names;
          for (const auto& p : constraints.prefer) names += (names.empty() ? "" : ", ") + p;
          why_not = "no loaded backend is named " + names;
        }
        record.reason = PlacementReason::kPreferredUnavailable;
        record.reason_detail = why_not + "; then the cheapest: " + record.reason_detail;
      }
    }
    record.sequence = log_.append(record);
    placed_ns_.fetch_add(chosen.total_ns);  // the model's (calibrated) view of the work, as the rule compares
    Placement p;
    p.executed = true;
    p.record = std::move(record);
    for (size_t i = 0; i < request.outputs.size(); ++i) {
      const uint64_t written = i < TM_MAX_OP_OUTPUTS && report->output_nbytes[i] > 0 ? report->output_nbytes[i]
                                                                                    : request.outputs[i].bytes.size();
      p.output_nbytes.push_back(std::min<uint64_t>(written, request.outputs[i].bytes.size()));
      if (request.outputs[i].growable != nullptr) request.outputs[i].growable->resize(p.output_nbytes.back());
    }
    return p;
  }
}

void Scheduler::set_split_policy(SplitPolicy policy) {
  std::lock_guard lock(options_mutex_);
  options_.split = policy;
}

Result<std::optional<Placement>> Scheduler::run_split(const OpRequest& request, const std::vector<Candidate>& exact,
                                                      const std::vector<CandidateVerdict>& verdicts) {
  const OpDefinition* definition = registry_.find(request.op);
  if (definition == nullptr || !definition->split.splittable()) return std::optional<Placement>();
  for (const auto& out : request.outputs) {
    if (out.growable != nullptr) return std::optional<Placement>();
  }
  SplitPolicy policy;
  {
    std::lock_guard lock(options_mutex_);
    policy = options_.split;
  }
  const ops::SplitRule& rule = definition->split;
  const ops::SplitInstance whole = split_instance_of(request);
  TM_ASSIGN_OR_RETURN(const uint64_t granules, rule.granules(whole));
  // A preference narrows the split to the preferred backends, as it narrows a single choice.
  const Constraints constraints = this->constraints();
  const bool any_preferred = std::any_of(exact.begin(), exact.end(), [&](const Candidate& c) {
    return named_in(c.backend->name(), constraints.prefer);
  });
  std::vector<SplitOption> options;
  for (size_t i = 0; i < exact.size(); ++i) {
    if (!any_preferred || named_in(exact[i].backend->name(), constraints.prefer)) {
      options.push_back({i, exact[i].total_ns, exact[i].backend->traits().runs_on_host_cores != 0, exact[i].transfer_ns});
    }
  }
  const SplitPlan plan = plan_split(options, granules, policy);
  if (plan.shares.empty()) return std::optional<Placement>();

  // The parts, in granule order: one per share, or one per granule when a part is one granule.
  struct Part {
    size_t share = 0;
    uint64_t begin = 0, end = 0;
    std::string label;
    OpRequest request;
    std::vector<std::vector<std::byte>> scratch;
    Result<PlacementRecord> record = Status::Internal("not run");
  };
  std::vector<Part> parts;
  for (size_t s = 0; s < plan.shares.size(); ++s) {
    const SplitShare& share = plan.shares[s];
    if (rule.parts_span_granules) {
      parts.push_back({s, share.begin, share.end});
    } else {
      for (uint64_t g = share.begin; g < share.end; ++g) parts.push_back({s, g, g + 1});
    }
  }
  const uint64_t group = log_.next_split_group();
  for (size_t k = 0; k < parts.size(); ++k) {
    Part& part = parts[k];
    TM_ASSIGN_OR_RETURN(const ops::PartInstance cut, rule.part(whole, part.begin, part.end));
    part.request = part_request(request, cut, part.scratch);
    part.label = "part " + std::to_string(k + 1) + "/" + std::to_string(parts.size()) + ": granules [" +
                 std::to_string(part.begin) + ", " + std::to_string(part.end) + ") of " + std::to_string(granules);
  }

  // Each share's parts run in order on a thread of their own; the first share's on this thread.
  const auto start = std::chrono::steady_clock::now();
  const auto run_share = [&](size_t s) {
    const Backend& backend = *exact[plan.shares[s].candidate].backend;
    for (Part& part : parts) {
      if (part.share == s) part.record = run_part(part.request, backend, group, part.label);
    }
  };
  std::vector<std::thread> threads;
  for (size_t s = 1; s < plan.shares.size(); ++s) threads.emplace_back(run_share, s);
  run_share(0);
  for (auto& t : threads) t.join();
  for (const Part& part : parts) {
    if (!part.record.ok()) return part.record.status().with_context(request.op + " " + part.label);
  }

  std::vector<ops::PartResult> results;
  for (const Part& part : parts) {
    ops::PartResult r{part.begin, part.end, {}};
    for (const auto& s : part.scratch) r.scratch.emplace_back(s);
    results.push_back(std::move(r));
  }
  std::vector<std::span<std::byte>> outputs;
  for (const auto& out : request.outputs) outputs.push_back(out.bytes);
  TM_RETURN_IF_ERROR(rule.merge(whole, results, outputs).with_context(request.op + " merge"));
  const double measured_ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();

  PlacementRecord merge = record_of_subject(request, request.op);
  merge.reason = PlacementReason::kSplit;
  merge.estimated_ns = plan.estimated_ns;
  merge.measured_ns = measured_ns;
  merge.exactness = exactness_name(TM_EXACT_BITWISE);
  std::string shares;
  for (const SplitShare& share : plan.shares) {
    const std::string& name = exact[share.candidate].backend->name();
    merge.backend += (merge.backend.empty() ? "" : "+") + name;
    char line[160];
    std::snprintf(line, sizeof line, "%s granules [%llu, %llu) %s", name.c_str(),
                  static_cast<unsigned long long>(share.begin), static_cast<unsigned long long>(share.end),
                  milliseconds(share.estimated_ns).c_str());
    shares += (shares.empty() ? "" : ", ") + std::string(line);
  }
  merge.reason_detail = std::to_string(parts.size()) + " parts at once (" + shares + "), modelled " +
                        milliseconds(plan.estimated_ns) + " vs " + milliseconds(plan.best_whole_ns) +
                        " on the best one alone; merge: " + rule.merge_rule;
  Placement p;
  p.executed = true;
  for (Part& part : parts) {
    PlacementRecord& r = *part.record;
    merge.bytes_moved += r.bytes_moved;
    merge.bytes_read += r.bytes_read;
    merge.bytes_written += r.bytes_written;
    if (r.exactness != exactness_name(TM_EXACT_BITWISE)) merge.exactness = r.exactness;
    merge.error_bound = std::max(merge.error_bound, r.error_bound);
    p.parts.push_back(std::move(r));
  }
  merge.candidates = verdicts;
  merge.split_group = group;
  merge.split_part = "merge";
  merge.sequence = log_.append(merge);
  placed_ns_.fetch_add(plan.estimated_ns);
  p.record = std::move(merge);
  for (const auto& out : request.outputs) p.output_nbytes.push_back(out.bytes.size());
  return std::optional<Placement>(std::move(p));
}

Result<PlacementRecord> Scheduler::run_part(const OpRequest& part, const Backend& backend, uint64_t group,
                                            const std::string& label) {
  std::vector<CandidateVerdict> verdicts;
  auto candidates = evaluate(part, part.op, part.exactness_floor, {}, verdicts);
  const auto chosen = std::find_if(candidates.begin(), candidates.end(), [&](const Candidate& c) {
    return c.backend == &backend && c.support.level != TM_SUPPORT_NONE;
  });
  std::string why;
  if (chosen != candidates.end()) {
    uint64_t bytes_moved = 0;
    std::vector<uint64_t> output_needs;
    const auto start = std::chrono::steady_clock::now();
    auto report = execute_on(backend, part, part.op, part.exactness_floor, bytes_moved, output_needs);
    const double measured_ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
    if (report.ok()) {
      learn(*chosen, part.op, *report, measured_ns);
      PlacementRecord record = record_of(*chosen, part, part.op, *report, measured_ns, bytes_moved, verdicts);
      record.reason = PlacementReason::kSplit;
      record.reason_detail = label;
      record.split_group = group;
      record.split_part = label;
      record.sequence = log_.append(record);
      return record;
    }
    if (!retryable(report.status().code())) return report.status();
    note_failure(backend, report.status());
    why = report.status().to_string();
  } else {
    for (const auto& v : verdicts) {
      if (v.backend == backend.name()) why = v.verdict;
    }
  }
  // This part alone falls back, placed like any operation (never split again).
  TM_ASSIGN_OR_RETURN(Placement placed, place(part, {&backend}, false, group, label + "; " + backend.name() + ": " + why));
  if (!placed.executed) return placed.refusal;
  return std::move(placed.record);
}

}  // namespace tensormorph::compute
