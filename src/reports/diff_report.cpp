#include "reports/diff_report.h"

#include <algorithm>
#include <chrono>

namespace tensormorph::reports {

Result<DiffReport> diff_report(compute::Scheduler& scheduler, const Checkpoint& a, const Checkpoint& b,
                               const DiffRequest& request, engine::Records& records, const ProgressFn& progress) {
  const auto& names = engine::diff_metric_names();
  if (std::find(names.begin(), names.end(), request.sort) == names.end()) {
    std::string known;
    for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
    return Status::InvalidArgument("sort '" + request.sort + "' is not a metric (" + known + ")");
  }
  engine::NameMapping mapping;
  if (!request.map_file.empty()) {
    TM_ASSIGN_OR_RETURN(mapping, engine::read_name_mapping(request.map_file));
  }
  DiffReport report;
  TM_ASSIGN_OR_RETURN(report.matching, engine::match_tensors(a, b, mapping));
  engine::TensorMatching& matching = report.matching;
  if (!request.globs.empty()) {
    auto keep = [&](const TensorInfo* t) { return name_selected(t->name, request.globs); };
    std::erase_if(matching.matched, [&](const auto& m) { return !keep(m.a) && !keep(m.b); });
    std::erase_if(matching.shape_mismatched, [&](const auto& m) { return !keep(m.a) && !keep(m.b); });
    std::erase_if(matching.only_a, [&](const auto* t) { return !keep(t); });
    std::erase_if(matching.only_b, [&](const auto* t) { return !keep(t); });
    if (matching.matched.empty() && matching.shape_mismatched.empty() && matching.only_a.empty() &&
        matching.only_b.empty()) {
      return Status::NotFound("no tensor of either checkpoint matches the --tensor globs");
    }
  }
  uint64_t total = 0, done = 0;
  for (const auto& m : matching.matched) total += engine::pair_bytes(m);
  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  bool stopped = false;
  for (size_t i = 0; i < matching.matched.size() && !stopped; ++i) {
    const auto& m = matching.matched[i];
    engine::TensorComparison c;
    c.match = m;
    const uint64_t before = done;
    auto stats = engine::compare_tensors(scheduler, a, b, m, &records, request.threads, [&](uint64_t bytes) {
      done += bytes;
      if (progress && !stopped) {
        stopped = !progress({i, matching.matched.size(), static_cast<double>(done), static_cast<double>(total),
                             m.a->name, seconds()});
      }
    });
    if (stats.ok()) {
      c.stats = *stats;
      c.metrics = ops::diff_metrics(c.stats);
    } else {
      c.error = stats.status().message();
    }
    done = before + engine::pair_bytes(m);
    report.comparisons.push_back(std::move(c));
  }
  if (stopped) {
    return Status::InvalidArgument("stopped after " + std::to_string(report.comparisons.size()) + " of " +
                                   std::to_string(matching.matched.size()) + " pairs");
  }
  if (progress) {
    const std::string last = matching.matched.empty() ? std::string() : matching.matched.back().a->name;
    progress({matching.matched.size(), matching.matched.size(), static_cast<double>(total),
              static_cast<double>(total), last, seconds()});
  }
  std::stable_sort(report.comparisons.begin(), report.comparisons.end(), [&](const auto& x, const auto& y) {
    return engine::most_changed_key(x, request.sort) > engine::most_changed_key(y, request.sort);
  });
  return report;
}

nlohmann::ordered_json diff_document(const Checkpoint& a, const Checkpoint& b, const DiffRequest& request,
                                     const DiffReport& report, const engine::Records* records) {
  nlohmann::ordered_json j = {{"schema", "tensormorph.diff/1"}, {"a", a.path().string()}, {"b", b.path().string()}};
  j["matching"] = engine::matching_json(report.matching);
  j["sort"] = request.sort;
  j["tensors"] = nlohmann::ordered_json::array();
  for (const auto& c : report.comparisons) j["tensors"].push_back(engine::comparison_json(c));
  if (records != nullptr) j["placements"] = placements_json(*records);
  return j;
}

}  // namespace tensormorph::reports
