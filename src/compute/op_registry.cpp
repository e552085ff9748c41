#include "compute/op_registry.h"

#include "compute/ops/definitions.h"

namespace tensormorph::compute {

OpRegistry OpRegistry::builtin() {
  OpRegistry registry;
  for (const OpDefinition& definition : ops::builtin_definitions()) registry.ops_.emplace(definition.id, definition);
  return registry;
}

Status OpRegistry::add(OpDefinition definition) {
  std::string id = definition.id;
  if (!ops_.emplace(id, std::move(definition)).second) {
    return Status::Internal("operation " + id + " registered twice");
  }
  return Status::Ok();
}

const OpDefinition* OpRegistry::find(const std::string& id) const {
  auto it = ops_.find(id);
  return it == ops_.end() ? nullptr : &it->second;
}

}  // namespace tensormorph::compute
