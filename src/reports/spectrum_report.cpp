#include "reports/spectrum_report.h"

#include <algorithm>

#include "index/analysis_cache.h"

namespace tensormorph::reports {

std::vector<const TensorInfo*> spectrum_tensors(const std::vector<const TensorInfo*>& selected, bool named) {
  std::vector<const TensorInfo*> tensors;
  for (const TensorInfo* t : selected) {
    if (named || t->shape.size() >= 2) tensors.push_back(t);
  }
  return tensors;
}

Result<SpectrumReport> spectrum_report(compute::Scheduler& scheduler, const Checkpoint& ckpt,
                                       const SpectrumRequest& request, engine::Records& records,
                                       const ProgressFn& progress) {
  TM_ASSIGN_OR_RETURN(auto cache, index::AnalysisCache::open(ckpt));
  engine::SpectrumOptions options;
  if (request.top > 0) options.top_k = request.top;
  options.max_threads = request.threads;
  const std::string key = engine::spectrum_cache_key();
  const auto& tensors = request.tensors;
  // Each tensor's modelled time drives the progress: a 128k-row embedding costs more than a
  // thousand norms.
  std::vector<double> work(tensors.size(), 1.0);
  std::vector<std::optional<engine::SpectrumPlan>> plans(tensors.size());
  double work_total = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (auto plan = engine::plan_spectrum(scheduler, ckpt, *tensors[i], options); plan.ok()) {
      work[i] = std::max(plan->exact_ns, 1.0);
      plans[i] = std::move(plan).value();
    }
    work_total += work[i];
  }
  SpectrumReport report;
  TensorProgress tracker(progress, tensors.size(), work_total);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorInfo& t = *tensors[i];
    SpectrumRow row;
    row.tensor = &t;
    auto compute = [&]() -> Result<engine::Spectrum> {
      if (auto kept = request.recompute ? std::nullopt : cache.find(t.name, key)) {
        if (auto s = engine::spectrum_from_json(*kept); s.ok()) {
          row.stored = true;
          return s;
        }
      }
      engine::SpectrumPlan plan;
      if (plans[i]) {
        plan = *plans[i];
      } else {
        TM_ASSIGN_OR_RETURN(plan, engine::plan_spectrum(scheduler, ckpt, t, options));
      }
      if (plan.exact_within_budget) {
        return engine::spectrum_by_rung(scheduler, ckpt, t, options, engine::kSpectrumRungExact, &records);
      }
      if (const auto rung = engine::consented_rung(plan, request.consent)) {
        return engine::spectrum_by_rung(scheduler, ckpt, t, options, rung->id, &records);
      }
      row.needs_consent = std::move(plan);
      return engine::Spectrum{};
    };
    auto s = compute();
    if (!s.ok()) {
      row.error = s.status().message();
    } else if (!row.needs_consent) {
      row.spectrum = std::move(s).value();
      if (row.spectrum.complete) {
        if (auto m = engine::spectral_metrics(row.spectrum.values, row.spectrum.rows, row.spectrum.cols); m.ok()) {
          row.metrics = std::move(m).value();
        }
      }
      if (!row.stored && row.spectrum.rung == engine::kSpectrumRungExact) {
        cache.put(t.name, key, engine::spectrum_json(row.spectrum));
      }
    }
    report.rows.push_back(std::move(row));
    if (!tracker.finished(work[i], t.name)) {
      (void)cache.save();  // what is done is kept: the next run starts from it
      return tracker.stopped("the exact spectra computed are kept");
    }
  }
  report.kept = cache.save();
  return report;
}

nlohmann::ordered_json spectrum_row_json(const SpectrumRow& r, uint64_t top) {
  const TensorInfo& t = *r.tensor;
  nlohmann::ordered_json j = row_head(t);
  if (ended_without_result(j, r.error, r.needs_consent ? &*r.needs_consent : nullptr)) return j;
  engine::Spectrum shown = r.spectrum;
  if (top > 0 && shown.values.size() > top) {
    shown.values.resize(top);
    shown.bounds.resize(top);
  }
  j.update(engine::spectrum_json(shown));
  // Metrics come from every value, not only the ones listed.
  if (r.metrics) j["metrics"] = engine::spectral_metrics_json(*r.metrics);
  j["source"] = r.stored ? "stored" : "computed";
  return j;
}

nlohmann::ordered_json spectrum_document(const Checkpoint& ckpt, const std::vector<SpectrumRow>& rows, uint64_t top,
                                         const engine::Records* records) {
  nlohmann::ordered_json j = {{"schema", "tensormorph.spectrum/1"}, {"path", ckpt.path().string()}};
  j["needs_consent"] = std::count_if(rows.begin(), rows.end(), [](const SpectrumRow& r) { return r.needs_consent.has_value(); });
  j["tensors"] = nlohmann::ordered_json::array();
  for (const auto& r : rows) j["tensors"].push_back(spectrum_row_json(r, top));
  if (records != nullptr) j["placements"] = placements_json(*records);
  return j;
}

}  // namespace tensormorph::reports
