// The registry of operations: stable versioned ids, typed signatures, exactness definitions.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "tensormorph/c/plugin.h"
#include "tensormorph/status.h"

namespace tensormorph::compute {

/// Kind of an attribute value.
enum class AttributeKind { kInt, kFloat };

/// One typed slot of an operation's signature.
struct ParameterSpec {
  std::string name;         ///< e.g. "input", "tile"
  std::string type;         ///< e.g. "tensor<any decodable>[rows, cols]", "i64", "f64", "TM_TileStats[]"
  std::string description;  ///< one line for `tensormorph backends --json` and docs
};

/// A cheaper rung of the exactness ladder offered when the exact operation is out of reach.
struct LadderRung {
  std::string op;           ///< the approximate operation that computes this rung
  std::string computes;     ///< what it computes, in words
  std::string error_bound;  ///< its error bound, in words (with the formula)
};

/// The definition of one operation.
struct OpDefinition {
  std::string id;                       ///< "tm.tile_stats@1"
  std::string summary;                  ///< one line
  std::vector<ParameterSpec> inputs;    ///< tensors read
  std::vector<ParameterSpec> attributes;
  std::vector<ParameterSpec> outputs;   ///< tensors written
  std::string exactness_definition;     ///< what "exact" means for this operation
  std::vector<LadderRung> ladder;       ///< approximate rungs, strongest first (empty: always exact)
};

/// All known operations, keyed by id. Operations are registered at start-up by src/ops.
class OpRegistry {
 public:
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
