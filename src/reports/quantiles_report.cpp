#include "reports/quantiles_report.h"

#include <algorithm>

#include "index/analysis_cache.h"
#include "index/index_builder.h"

namespace tensormorph::reports {
namespace {

/// What the index knows of `t` (its current entry's histogram and summary), if anything.
engine::StoredKnowledge stored_knowledge(const index::CurrentEntries* entries, const TensorInfo& t) {
  engine::StoredKnowledge k;
  if (entries == nullptr) return k;
  const auto it = entries->by_name.find(t.name);
  if (it == entries->by_name.end() || it->second->dtype != t.dtype || it->second->shape != t.shape) return k;
  k.value_histogram = it->second->value_histogram;
  k.summary = engine::summarize(it->second->levels.back().tiles.front());
  return k;
}

nlohmann::ordered_json row_json(const QuantilesRow& r) {
  const TensorInfo& t = *r.tensor;
  nlohmann::ordered_json j = row_head(t);
  j["count"] = t.elements();
  if (ended_without_result(j, r.error, r.needs_consent ? &*r.needs_consent : nullptr)) return j;
  j.update(engine::quantiles_json(r.q, t.dtype));
  j["source"] = r.stored ? "stored" : "computed";
  return j;
}

}  // namespace

Result<QuantilesReport> quantiles_report(compute::Scheduler& scheduler, const Checkpoint& ckpt,
                                         const QuantilesRequest& request, engine::Records& records,
                                         const ProgressFn& progress) {
  TM_ASSIGN_OR_RETURN(auto cache, index::AnalysisCache::open(ckpt));
  const engine::QuantileOptions options{request.probabilities, request.mad};
  const std::string key = engine::quantiles_cache_key(options);
  // The index is read only when some tensor meets the ladder (its histogram is a rung).
  std::unique_ptr<index::CurrentEntries> entries;
  bool entries_read = false;
  const auto quantiles_within_budget = [&](const TensorInfo& t, QuantilesRow& row) -> Result<engine::Quantiles> {
    TM_ASSIGN_OR_RETURN(engine::QuantilePlan plan,
                        engine::plan_quantiles(scheduler, ckpt, t, options, {}, request.threads));
    if (plan.exact_within_budget) return engine::tensor_quantiles(scheduler, ckpt, t, options, &records, request.threads);
    if (!entries_read) {
      entries_read = true;
      if (auto read = index::read_current_entries(ckpt); read.ok()) entries = std::move(read).value();
    }
    const engine::StoredKnowledge stored = stored_knowledge(entries.get(), t);
    TM_ASSIGN_OR_RETURN(plan, engine::plan_quantiles(scheduler, ckpt, t, options, stored, request.threads));
    if (const auto rung = engine::consented_rung(plan, request.consent)) {
      return engine::quantiles_by_rung(scheduler, ckpt, t, options, stored, rung->id, &records, request.threads);
    }
    row.needs_consent = std::move(plan);
    return engine::Quantiles{};
  };
  TensorProgress tracker(progress, request.tensors.size(), stored_bytes(request.tensors));
  QuantilesReport report;
  for (size_t i = 0; i < request.tensors.size(); ++i) {
    const TensorInfo& t = *request.tensors[i];
    QuantilesRow row;
    row.tensor = &t;
    std::optional<nlohmann::json> kept = request.recompute ? std::nullopt : cache.find(t.name, key);
    if (auto q = kept ? engine::quantiles_from_json(*kept) : Result<engine::Quantiles>(Status::NotFound("")); q.ok()) {
      row.q = std::move(q).value();
      row.stored = true;
    } else if (auto computed = quantiles_within_budget(t, row); !computed.ok()) {
      row.error = computed.status().message();
    } else if (!row.needs_consent) {
      row.q = std::move(computed).value();
      if (row.q.rung == engine::kRungExact) cache.put(t.name, key, engine::quantiles_json(row.q, t.dtype));
    }
    report.rows.push_back(std::move(row));
    if (!tracker.finished(static_cast<double>(t.nbytes), t.name)) {
      (void)cache.save();  // what is done is kept: the next run starts from it
      return tracker.stopped("the exact results are kept");
    }
  }
  report.kept = cache.save();
  return report;
}

nlohmann::ordered_json quantiles_document(const Checkpoint& ckpt, const QuantilesRequest& request,
                                          const std::vector<QuantilesRow>& rows, const engine::Records* records) {
  nlohmann::ordered_json j = {{"schema", "tensormorph.quantiles/1"}, {"path", ckpt.path().string()},
                              {"probabilities", request.probabilities}};
  j["needs_consent"] = std::count_if(rows.begin(), rows.end(), [](const QuantilesRow& r) { return r.needs_consent.has_value(); });
  j["tensors"] = nlohmann::ordered_json::array();
  for (const auto& r : rows) j["tensors"].push_back(row_json(r));
  if (records != nullptr) j["placements"] = placements_json(*records);
  return j;
}

}  // namespace tensormorph::reports
