#include "server/api_shared.h"

#include <algorithm>
#include <cmath>

#include "core/printable.h"
#include "server/http_util.h"
#include "server/name_suggestions.h"

namespace tensormorph::server {

using json = nlohmann::ordered_json;

std::optional<Target> target_of(const httplib::Request& req, httplib::Response& res, Catalog& catalog,
                                bool need_tensor) {
  auto id = uint_param(req, "ckpt", 0, UINT32_MAX);
  if (!id.ok()) {
    reply_error(res, id.status());
    return std::nullopt;
  }
  if (*id >= catalog.size()) {
    reply_error(res, Status::NotFound("no checkpoint " + std::to_string(*id)),
                catalog.size() == 0 ? "this server serves no checkpoint"
                                    : "this server serves checkpoints 0 to " + std::to_string(catalog.size() - 1) +
                                          " (GET /api/checkpoints lists them)");
    return std::nullopt;
  }
  Target t{*id, nullptr};
  if (!need_tensor) return t;
  const Checkpoint& ckpt = *catalog.at(*id).checkpoint;
  auto name = param(req, "tensor");
  if (!name) {
    reply_error(res, Status::InvalidArgument("missing parameter 'tensor'"),
                "add tensor=NAME (GET /api/tensors?ckpt=" + std::to_string(*id) + " lists the names)");
    return std::nullopt;
  }
  t.tensor = ckpt.find(*name);
  if (t.tensor == nullptr) {
    std::string hint = did_you_mean(closest_names(*name, ckpt.tensors()));
    if (hint.empty()) hint = "checkpoint " + std::to_string(*id) + " holds no tensors";
    reply_error(res, Status::NotFound("no tensor named " + quoted_name(*name)), hint);
    return std::nullopt;
  }
  return t;
}

double outlier_score(double min, double max, double mean, double std) {
  return std > 0 ? std::max(max - mean, mean - min) / std : 0.0;
}

json stats_json(const engine::TensorSummary& s, double mean, double std) {
  return {{"count", s.count}, {"finite", s.finite}, {"nan", s.nan}, {"pos_inf", s.pos_inf}, {"neg_inf", s.neg_inf},
          {"zeros", s.zeros}, {"min", s.min}, {"max", s.max}, {"absmax", s.absmax}, {"mean", mean}, {"std", std},
          {"outlier_score", outlier_score(s.min, s.max, mean, std)}};
}

json summary_json(const engine::TensorSummary& s, double mean, double std) {
  json j = stats_json(s, mean, std);
  // Robust colour ranges: mean +- 4 std, clipped to the finite extremes.
  double r = std::min(s.absmax, std::fabs(mean) + 4 * std);
  if (!(r > 0)) r = s.absmax > 0 ? s.absmax : 1;
  double lo = std::max(s.min, mean - 4 * std), hi = std::min(s.max, mean + 4 * std);
  if (!(lo < hi)) lo = s.min, hi = s.max;
  if (!(lo < hi)) lo = lo - 1, hi = hi + 1;
  const double top = s.absmax > 0 ? s.absmax : 1;
  j["range"] = {{"diverging", {-r, r}}, {"sequential", {lo, hi}}, {"magnitude", {0.0, r}}, {"log", {top * 1e-4, top}}};
  return j;
}

json summary_json(const engine::TensorSummary& s) { return summary_json(s, s.mean(), s.stddev()); }

std::optional<engine::TensorSummary> indexed_summary(Catalog& catalog, size_t id, const TensorInfo& tensor) {
  auto contents = catalog.index_of(id);
  if (!contents) return std::nullopt;
  const index::TensorPyramid* p = catalog.indexed(id, *contents, tensor.name);
  if (p == nullptr || p->levels.empty() || p->levels.back().tiles.empty()) return std::nullopt;
  return engine::summarize(p->levels.back().tiles[0]);
}

json records_json(const engine::Records& records) {
  json a = json::array();
  for (const auto& r : records) a.push_back(r.to_json());
  return a;
}

}  // namespace tensormorph::server
