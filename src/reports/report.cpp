#include "reports/report.h"

#include <fnmatch.h>

#include <algorithm>

#include "engine/matrix_shape.h"

namespace tensormorph::reports {

TensorProgress::TensorProgress(const ProgressFn& progress, size_t items, double work_total)
    : progress_(progress), items_(items), work_total_(work_total) {}

bool TensorProgress::finished(double work, const std::string& current) {
  ++items_done_;
  work_done_ += work;
  if (!progress_) return true;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  return progress_({items_done_, items_, work_done_, work_total_, current, seconds});
}

Status TensorProgress::stopped(const std::string& kept) const {
  return Status::InvalidArgument("stopped after " + std::to_string(items_done_) + " of " + std::to_string(items_) +
                                 " tensors" + (kept.empty() ? "" : " (" + kept + ")"));
}

double stored_bytes(const std::vector<const TensorInfo*>& tensors) {
  double total = 0;
  for (const TensorInfo* t : tensors) total += static_cast<double>(t->nbytes);
  return total;
}

nlohmann::ordered_json row_head(const TensorInfo& t, bool matrix) {
  nlohmann::ordered_json j = {{"name", t.name}, {"dtype", std::string(dtype_name(t.dtype))}, {"shape", t.shape}};
  if (matrix) {
    const engine::MatrixShape m = engine::as_matrix(t);
    j["rows"] = m.rows;
    j["cols"] = m.cols;
  }
  return j;
}

bool ended_without_result(nlohmann::ordered_json& row, const std::string& error, const engine::LadderPlan* plan) {
  if (!error.empty()) {
    row["error"] = error;
    return true;
  }
  if (plan != nullptr) {
    row["needs_consent"] = engine::ladder_plan_json(*plan);
    return true;
  }
  return false;
}

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
