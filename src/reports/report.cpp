#include "reports/report.h"

#include <fnmatch.h>

#include <algorithm>

namespace tensormorph::reports {

bool name_selected(const std::string& name, const std::vector<std::string>& globs) {
  return globs.empty() || std::any_of(globs.begin(), globs.end(), [&](const std::string& g) {
           return fnmatch(g.c_str(), name.c_str(), 0) == 0;
         });
}

Result<std::vector<const TensorInfo*>> select_tensors(const Checkpoint& ckpt, const std::vector<std::string>& globs) {
  std::vector<const TensorInfo*> tensors;
  for (const TensorInfo& t : ckpt.tensors()) {
    if (name_selected(t.name, globs)) tensors.push_back(&t);
  }
  if (tensors.empty() && !globs.empty()) {
    std::string patterns;
    for (const auto& g : globs) patterns += (patterns.empty() ? "'" : ", '") + g + "'";
    return Status::NotFound(ckpt.path().string() + ": no tensor matches " + patterns);
  }
  return tensors;
}

nlohmann::ordered_json placements_json(const engine::Records& records) {
  nlohmann::ordered_json j = nlohmann::ordered_json::array();
  for (const auto& r : records) j.push_back(r.to_json());
  return j;
}

}  // namespace tensormorph::reports
