// The scheduler's registry of operations: the definitions (compute/ops/op_definition.h) it places,
// keyed by id.
#pragma once

#include <map>
#include <string>

#include "compute/ops/op_definition.h"
#include "tensormorph/status.h"

namespace tensormorph::compute {

using ops::LadderRung;
using ops::OpDefinition;

/// The operations a scheduler knows, keyed by id.
class OpRegistry {
 public:
  /// Every built-in operation (compute/ops/definitions.h).
  static OpRegistry builtin();
  /// Adds a definition; a duplicate id is a programmer error reported as INTERNAL.
  Status add(OpDefinition definition);
  /// The definition of `id`, or nullptr.
  const OpDefinition* find(const std::string& id) const;
  /// Every definition, ordered by id.
  const std::map<std::string, OpDefinition>& all() const { return ops_; }

 private:
  std::map<std::string, OpDefinition> ops_;
};

}  // namespace tensormorph::compute
