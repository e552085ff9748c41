#include "reports/channels_report.h"

#include "engine/outliers.h"
#include "index/channel_store.h"

namespace tensormorph::reports {

Result<ChannelsReport> channels_report(compute::Scheduler& scheduler, const Checkpoint& ckpt,
                                       const ChannelsRequest& request, engine::Records& records,
                                       const ProgressFn& progress) {
  TM_ASSIGN_OR_RETURN(auto store, index::ChannelStore::open(ckpt));
  TensorProgress tracker(progress, request.tensors.size(), stored_bytes(request.tensors));
  ChannelsReport report;
  for (size_t i = 0; i < request.tensors.size(); ++i) {
    const TensorInfo& t = *request.tensors[i];
    ChannelsRow row;
    row.tensor = &t;
    auto stats = index::kept_channel_stats(store, request.recompute, scheduler, ckpt, t, &records, request.threads, nullptr);
    if (stats.ok()) {
      row.channels = request.rows ? std::move(stats->rows) : std::move(stats->cols);
    } else {
      row.error = stats.status().message();
    }
    report.rows.push_back(std::move(row));
    if (!tracker.finished(static_cast<double>(t.nbytes), t.name)) {
      (void)store.save();  // what is done is kept: the next run starts from it
      return tracker.stopped("the results are kept");
    }
  }
  report.kept = store.save();
  return report;
}

nlohmann::ordered_json channels_document(const Checkpoint& ckpt, const ChannelsRequest& request,
                                         const std::vector<ChannelsRow>& rows, const engine::Records* records) {
  nlohmann::ordered_json j = {{"schema", "tensormorph.channels/1"}, {"path", ckpt.path().string()},
                              {"axis", request.rows ? "rows" : "cols"}};
  j["tensors"] = nlohmann::ordered_json::array();
  for (const auto& r : rows) {
    nlohmann::ordered_json t = row_head(*r.tensor, /*matrix=*/true);
    if (!ended_without_result(t, r.error, nullptr)) {
      t["channels"] = nlohmann::ordered_json::array();
      for (const auto& c : r.channels) t["channels"].push_back(engine::channel_json(c));
    }
    j["tensors"].push_back(t);
  }
  if (records != nullptr) j["placements"] = placements_json(*records);
  return j;
}

}  // namespace tensormorph::reports
