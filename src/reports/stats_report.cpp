#include "reports/stats_report.h"

#include <cmath>

#include "engine/pyramid.h"
#include "reports/report.h"
#include "tensormorph/decode.h"

namespace tensormorph::reports {
namespace {

void fill(StatsRow& s, const engine::TensorSummary& sum) {
  s.nan = sum.nan;
  s.pos_inf = sum.pos_inf;
  s.neg_inf = sum.neg_inf;
  s.zeros = sum.zeros;
  s.finite = sum.finite;
  s.min = sum.min;
  s.max = sum.max;
  s.absmax = sum.absmax;
  s.mean = sum.mean();
  s.std = sum.stddev();
}

// F64 and 32/64-bit integers: float32, which tile statistics go through, cannot hold their values.
void fill_exact(StatsRow& s, const TM_ExactSummary& e) {
  const engine::ExactView v = engine::exact_view(e, s.tensor->dtype);
  fill(s, v.summary);
  s.mean = v.mean;
  s.std = v.std;
  s.exact_min = v.min;
  s.exact_max = v.max;
  s.exact_absmax = v.absmax;
}

}  // namespace

StatsSource::StatsSource(compute::Scheduler& scheduler, const Checkpoint& ckpt, const index::IndexContents& contents,
                         const index::IndexReport& report, uint32_t tile, engine::Records& records)
    : scheduler_(scheduler), ckpt_(ckpt), tile_(tile), records_(records) {
  pyramids_.reserve(contents.tensors.size());
  for (const auto& p : contents.tensors) pyramids_.emplace(p.name, &p);
  for (const auto& why : report.skipped) {
    if (why.kind == index::SkippedTensor::Kind::kFailed) failed_.emplace(why.name, why.reason);
  }
}

StatsRow StatsSource::stats_of(const TensorInfo& t) {
  const size_t first_record = records_.size();
  StatsRow s = compute(t);
  if (records_.size() == first_record && s.error.empty()) ++from_index_;
  return s;
}

StatsRow StatsSource::compute(const TensorInfo& t) {
  StatsRow s;
  s.tensor = &t;
  s.count = t.elements();
  if (ops::exact_summary_supported(t.dtype)) {
    auto exact = engine::tensor_exact_summary(scheduler_, ckpt_, t, &records_);
    if (!exact.ok()) {
      s.error = exact.status().message();
    } else {
      fill_exact(s, *exact);
    }
    return s;
  }
  if (const auto it = pyramids_.find(t.name); it != pyramids_.end()) {
    fill(s, engine::summarize(it->second->levels.back().tiles[0]));
    return s;
  }
  if (!dtype_decodable(t.dtype)) {
    s.error = std::string(dtype_not_decodable_reason(t.dtype));
    return s;
  }
  if (const auto it = failed_.find(t.name); it != failed_.end()) {
    s.error = it->second;  // it failed while indexing: it would fail again
    return s;
  }
  auto level0 = engine::tensor_tile_stats(scheduler_, ckpt_, t, tile_, &records_);
  if (!level0.ok()) {
    s.error = level0.status().message();
    return s;
  }
  fill(s, engine::summarize(engine::build_pyramid(std::move(level0).value()).back().tiles[0]));
  return s;
}

uint64_t non_finite(const StatsRow& s) { return s.nan + s.pos_inf + s.neg_inf; }

double stats_sort_value(const StatsRow& s, const std::string& key) {
  if (key == "absmax") return s.absmax;
  if (key == "std") return s.std;
  if (key == "mean") return s.mean;
  if (key == "min") return s.min;
  if (key == "max") return s.max;
  if (key == "nan") return static_cast<double>(s.nan);
  if (key == "inf") return static_cast<double>(s.pos_inf + s.neg_inf);
  if (key == "zeros" || key == "sparsity") return s.count ? static_cast<double>(s.zeros) / static_cast<double>(s.count) : 0;
  if (key == "count" || key == "params") return static_cast<double>(s.count);
  return 0;
}

nlohmann::ordered_json stats_row_json(const StatsRow& s) {
  const TensorInfo& t = *s.tensor;
  nlohmann::ordered_json j = {{"name", t.name}, {"dtype", std::string(dtype_name(t.dtype))}, {"shape", t.shape},
                              {"count", s.count}};
  if (dtype_info(t.dtype).is_quantized) j["storage_type"] = std::string(dtype_name(t.dtype));
  if (!s.error.empty()) {
    j["error"] = s.error;
    return j;
  }
  auto num = [](double v) { return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr); };
  j["finite"] = s.finite;
  j["mean"] = num(s.mean);
  j["std"] = num(s.std);
  j["min"] = s.exact_min ? *s.exact_min : num(s.min);
  j["max"] = s.exact_max ? *s.exact_max : num(s.max);
  j["absmax"] = s.exact_absmax ? *s.exact_absmax : num(s.absmax);
  j["nan"] = s.nan;
  j["pos_inf"] = s.pos_inf;
  j["neg_inf"] = s.neg_inf;
  j["zeros"] = s.zeros;
  j["sparsity"] = s.count ? static_cast<double>(s.zeros) / static_cast<double>(s.count) : 0.0;
  return j;
}

nlohmann::ordered_json stats_document(const Checkpoint& ckpt, const std::vector<StatsRow>& rows,
                                      const engine::Records* records, size_t from_index) {
  nlohmann::ordered_json j = {{"schema", "tensormorph.stats/1"}, {"path", ckpt.path().string()}};
  j["tensors"] = nlohmann::ordered_json::array();
  for (const auto& s : rows) j["tensors"].push_back(stats_row_json(s));
  j["nonfinite_tensors"] = nlohmann::ordered_json::array();
  for (const auto& s : rows) {
    if (s.error.empty() && non_finite(s) > 0) j["nonfinite_tensors"].push_back(s.tensor->name);
  }
  if (records != nullptr) {
    j["placements"] = placements_json(*records);
    j["tensors_from_index"] = from_index;
  }
  return j;
}

}  // namespace tensormorph::reports
