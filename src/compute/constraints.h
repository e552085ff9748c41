// The user's placement constraints ("prefer X", "never Y", "only Z"): never a different code path.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tensormorph/status.h"

namespace tensormorph::compute {

/// Constraints on where operations may run. Names match backend names ("name", "name:1";
/// a bare plugin name also matches each of its devices).
struct Constraints {
  std::vector<std::string> prefer;  ///< chosen when eligible, even if dearer
  std::vector<std::string> never;   ///< never chosen
  std::vector<std::string> only;    ///< when non-empty, nothing else is chosen

  /// True when no constraint is set ("Compute: Auto").
  bool automatic() const { return prefer.empty() && never.empty() && only.empty(); }
  /// "auto" or "prefer=a,never=b+c".
  std::string to_string() const;
};

/// True when `backend` is named by `pattern` (exact, or the plugin name before ':').
bool backend_matches(std::string_view backend, std::string_view pattern);

/// Parses "prefer=a,never=b+c,only=d" (or "auto"). Unknown keys are INVALID_ARGUMENT.
Result<Constraints> parse_constraints(std::string_view spec);

/// `override_with`'s non-empty lists replace `base`'s (a CLI flag over the persisted setting).
Constraints merge_constraints(const Constraints& base, const Constraints& override_with);

}  // namespace tensormorph::compute
