// What the analyses' exactness ladders share (quantiles, spectra): a rung on offer with what it
// computes, its bound and its modelled cost; a plan that says whether the exact result fits the
// budgets and, when not, why and what is on offer; the consent rule; their JSON and wording.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tensormorph/checkpoint.h"

namespace tensormorph::engine {

/// The rung id of the exact result, on every ladder.
inline constexpr const char* kRungExact = "exact";
/// The consent that names the cheapest rung below exact.
inline constexpr const char* kConsentApproximate = "approximate";

/// One rung of an analysis's exactness ladder.
struct LadderRung {
  std::string id;           ///< kRungExact or the analysis's own rung id
  std::string computes;     ///< what it computes, in words
  std::string error_bound;  ///< its error bound, in words
  double estimated_ns = 0;  ///< its modelled time
  std::string runs_on;      ///< where its operations would run ("host" for none)
};

/// Whether the exact result fits the budgets, and what is on offer when it does not.
struct LadderPlan {
  bool exact_within_budget = false;
  double exact_ns = 0;             ///< the exact rung's modelled time (when it can run)
  std::string reason;              ///< when not within budget: why
  std::vector<LadderRung> ladder;  ///< the rungs that can run: exact first when it can, then the cheaper ones
};

/// The rung `consent` names in `plan` (kConsentApproximate: the cheapest below exact), or nullopt.
std::optional<LadderRung> consented_rung(const LadderPlan& plan, const std::string& consent);

/// `plan` as JSON: {"reason", "ladder": [{id, computes, error_bound, estimated_ms, runs_on}]}.
nlohmann::ordered_json ladder_plan_json(const LadderPlan& plan);

/// A modelled duration in words ("12.3 ms", "4.5 s", "2.0 min").
std::string duration_text(double ns);

/// "FILE: tensor 'NAME'", how errors and reasons name a tensor.
std::string tensor_location(const Checkpoint& checkpoint, const TensorInfo& tensor);

}  // namespace tensormorph::engine
