#include "reports/channels_report.h"

#include <chrono>

#include "engine/matrix_shape.h"
#include "engine/outliers.h"
#include "index/channel_store.h"

namespace tensormorph::reports {

Result<ChannelsReport> channels_report(compute::Scheduler& scheduler, const Checkpoint& ckpt,
                                       const ChannelsRequest& request, engine::Records& records,
                                       const ProgressFn& progress) {
  TM_ASSIGN_OR_RETURN(auto store, index::ChannelStore::open(ckpt));
  double total = 0, done = 0;
  for (const TensorInfo* t : request.tensors) total += static_cast<double>(t->nbytes);
  const auto start = std::chrono::steady_clock::now();
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
    done += static_cast<double>(t.nbytes);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (progress && !progress({i + 1, request.tensors.size(), done, total, t.name, seconds})) {
      (void)store.save();  // what is done is kept: the next run starts from it
      return Status::InvalidArgument("stopped after " + std::to_string(i + 1) + " of " +
                                     std::to_string(request.tensors.size()) + " tensors (the results are kept)");
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
    const engine::MatrixShape m = engine::as_matrix(*r.tensor);
    nlohmann::ordered_json t = {{"name", r.tensor->name}, {"dtype", std::string(dtype_name(r.tensor->dtype))},
                                {"shape", r.tensor->shape}, {"rows", m.rows}, {"cols", m.cols}};
    if (r.error.empty()) {
      t["channels"] = nlohmann::ordered_json::array();
      for (const auto& c : r.channels) t["channels"].push_back(engine::channel_json(c));
    } else {
      t["error"] = r.error;
    }
    j["tensors"].push_back(t);
  }
  if (records != nullptr) j["placements"] = placements_json(*records);
  return j;
}

}  // namespace tensormorph::reports
