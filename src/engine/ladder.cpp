#include "engine/ladder.h"

#include <cstdio>

#include "core/printable.h"

namespace tensormorph::engine {

std::optional<LadderRung> consented_rung(const LadderPlan& plan, const std::string& consent) {
  std::optional<LadderRung> chosen;
  for (const LadderRung& r : plan.ladder) {
    if (r.id == consent) return r;
    if (consent == kConsentApproximate && r.id != kRungExact && (!chosen || r.estimated_ns < chosen->estimated_ns)) chosen = r;
  }
  return chosen;
}

nlohmann::ordered_json ladder_plan_json(const LadderPlan& plan) {
  nlohmann::ordered_json ladder = nlohmann::ordered_json::array();
  for (const LadderRung& r : plan.ladder) {
    ladder.push_back({{"id", r.id}, {"computes", r.computes}, {"error_bound", r.error_bound},
                      {"estimated_ms", r.estimated_ns / 1e6}, {"runs_on", r.runs_on}});
  }
  return {{"reason", plan.reason}, {"ladder", ladder}};
}

std::string duration_text(double ns) {
  char text[48];
  if (ns >= 60e9) {
    std::snprintf(text, sizeof text, "%.1f min", ns / 60e9);
  } else if (ns >= 1e9) {
    std::snprintf(text, sizeof text, "%.1f s", ns / 1e9);
  } else {
    std::snprintf(text, sizeof text, "%.1f ms", ns / 1e6);
  }
  return text;
}

std::string tensor_location(const Checkpoint& checkpoint, const TensorInfo& tensor) {
  return checkpoint.files()[tensor.file].path.string() + ": tensor " + quoted_name(tensor.name);
}

}  // namespace tensormorph::engine
