#include "reports/outliers_report.h"

#include "index/analysis_cache.h"
#include "index/channel_store.h"

namespace tensormorph::reports {

Result<OutliersReport> outliers_report(compute::Scheduler& scheduler, const Checkpoint& ckpt,
                                       const OutliersRequest& request, engine::Records& records,
                                       const ProgressFn& progress) {
  TM_ASSIGN_OR_RETURN(auto cache, index::AnalysisCache::open(ckpt));
  index::ChannelStore store = index::ChannelStore::beside(cache);
  auto save = [&]() {
    Status kept = cache.save();
    Status channels_kept = store.save();
    return kept.ok() ? channels_kept : kept;
  };
  TensorProgress tracker(progress, request.tensors.size(), stored_bytes(request.tensors));
  OutliersReport report;
  for (size_t i = 0; i < request.tensors.size(); ++i) {
    const TensorInfo& t = *request.tensors[i];
    OutliersRow row;
    row.tensor = &t;
    auto top = index::kept_top_k(cache, request.recompute, scheduler, ckpt, t, request.k, &records, request.threads, nullptr);
    if (top.ok()) {
      row.extremes = std::move(top).value();
      auto stats = index::kept_channel_stats(store, request.recompute, scheduler, ckpt, t, &records, request.threads, nullptr);
      if (stats.ok()) {
        row.channels = engine::outlier_channels(*stats, request.rule);
      } else {
        row.error = stats.status().message();
      }
    } else {
      row.error = top.status().message();
    }
    report.rows.push_back(std::move(row));
    if (!tracker.finished(static_cast<double>(t.nbytes), t.name)) {
      (void)save();  // what is done is kept: the next run starts from it
      return tracker.stopped("the results are kept");
    }
  }
  report.kept = save();
  return report;
}

nlohmann::ordered_json outliers_document(const Checkpoint& ckpt, const OutliersRequest& request,
                                         const std::vector<OutliersRow>& rows, const engine::Records* records) {
  nlohmann::ordered_json j = {{"schema", "tensormorph.outliers/1"}, {"path", ckpt.path().string()}, {"k", request.k},
                              {"rule", {{"magnitude", request.rule.magnitude}, {"robust_z", request.rule.robust_z}}}};
  j["tensors"] = nlohmann::ordered_json::array();
  for (const auto& r : rows) {
    nlohmann::ordered_json t = row_head(*r.tensor, /*matrix=*/true);
    if (!ended_without_result(t, r.error, nullptr)) {
      t["top_k"] = engine::extremes_json(r.extremes);
      t["outlier_channels"] = engine::outlier_channels_json(r.channels);
    }
    j["tensors"].push_back(t);
  }
  if (records != nullptr) j["placements"] = placements_json(*records);
  return j;
}

}  // namespace tensormorph::reports
