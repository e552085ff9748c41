#include "compute/op_registry.h"

namespace tensormorph::compute {

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
