// The spectrum routes: one tensor's singular values with their metrics and the ESD histogram the
// viewer draws (/api/spectrum), and the metrics of every matrix of a checkpoint for the overview,
// computed on request a few tensors at a time so that the viewer can show progress (/api/spectra).
// Both keep exact spectra in the analysis cache beside the index, like `tensormorph spectrum`.
#include <algorithm>
#include <cmath>
#include <optional>

#include <httplib.h>

#include "engine/spectral_metrics.h"
#include "engine/spectrum.h"
#include "index/analysis_cache.h"
#include "server/api.h"
#include "server/api_shared.h"
#include "server/http_util.h"

namespace tensormorph::server {
namespace {

using json = nlohmann::ordered_json;

constexpr uint64_t kDefaultEsdBins = 40;
constexpr uint64_t kMaxEsdBins = 512;

// Metrics need every singular value; a randomized top-k has only the largest.
std::optional<engine::SpectralMetrics> metrics_of(const engine::Spectrum& s) {
  if (!s.complete) return std::nullopt;
  auto m = engine::spectral_metrics(s.values, s.rows, s.cols);
  if (!m.ok()) return std::nullopt;
  return std::move(m).value();
}

// The ESD as a histogram on log-spaced bins of lambda = sigma^2 / N (N = max(rows, cols), the
// convention of spectral_metrics.h, so that xmin and the bulk edge fall on the same axis). Zeros
// have no place on a log axis and are counted apart. `fit` holds, per bin, the count the fitted
// power law expects there (its tail_size eigenvalues spread by the survival function
// (x / xmin)^(1 - alpha)), null below xmin: a log-log straight line the viewer draws over the bars.
json esd_json(const engine::Spectrum& s, const engine::SpectralMetrics* m, uint64_t bins) {
  const double n = static_cast<double>(std::max(s.rows, s.cols));
  std::vector<double> lambdas;
  uint64_t zeros = 0;
  for (double v : s.values) {
    if (!std::isfinite(v)) continue;
    if (v > 0) lambdas.push_back(v * v / n);
    else ++zeros;
  }
  json j = {{"units", "lambda = sigma^2 / max(rows, cols)"}, {"count", lambdas.size()}, {"zeros", zeros}};
  if (m) {
    j["mp_bulk_edge"] = m->mp_bulk_edge;
    j["mp_spikes"] = m->mp_spikes;
    j["power_law"] = engine::spectral_metrics_json(*m)["power_law"];
  }
  if (lambdas.empty()) {
    j["edges"] = json::array();
    j["counts"] = json::array();
    return j;
  }
  double lo = *std::min_element(lambdas.begin(), lambdas.end()), hi = *std::max_element(lambdas.begin(), lambdas.end());
  if (!(lo < hi)) lo /= 1.5, hi *= 1.5;  // one distinct value: a bin around it
  const double log_lo = std::log(lo), step = (std::log(hi) - log_lo) / static_cast<double>(bins);
  std::vector<double> edges(bins + 1);
  for (uint64_t i = 0; i <= bins; ++i) edges[i] = std::exp(log_lo + step * static_cast<double>(i));
  edges.front() = lo;  // exact ends: the extremes fall inside, whatever exp(log(x)) rounds to
  edges.back() = hi;
  std::vector<uint64_t> counts(bins, 0);
  for (double x : lambdas) {
    const double at = std::floor((std::log(x) - log_lo) / step);
    counts[static_cast<uint64_t>(std::clamp(at, 0.0, static_cast<double>(bins - 1)))]++;
  }
  j["edges"] = edges;
  j["counts"] = counts;
  if (m && m->power_law.fitted) {
    const auto& fit = m->power_law;
    auto survival = [&](double x) { return std::pow(x / fit.xmin, 1 - fit.alpha); };
    json expected = json::array();
    for (uint64_t i = 0; i < bins; ++i) {
      if (edges[i + 1] <= fit.xmin) {
        expected.push_back(nullptr);
      } else {
        const double a = std::max(edges[i], fit.xmin);
        expected.push_back(static_cast<double>(fit.tail_size) * (survival(a) - survival(edges[i + 1])));
      }
    }
    j["fit"] = std::move(expected);
  }
  return j;
}

// The exact spectrum kept for `name`, if any (a damaged entry reads as absent: computed again).
std::optional<engine::Spectrum> kept_spectrum(const Result<index::AnalysisCache>& cache, const std::string& name) {
  if (!cache.ok()) return std::nullopt;
  auto kept = cache->find(name, engine::spectrum_cache_key());
  if (!kept) return std::nullopt;
  auto s = engine::spectrum_from_json(*kept);
  if (!s.ok()) return std::nullopt;
  return std::move(s).value();
}

// The ladder answer (HTTP 409) of the consent protocol, as /api/quantiles gives it.
json needs_consent_json(const engine::SpectrumPlan& plan, const std::string& tensor) {
  json answer = engine::ladder_plan_json(plan);
  for (auto& r : answer["ladder"]) r["backend"] = r["runs_on"];
  answer["op"] = "spectrum";
  answer["tensor"] = tensor;
  return answer;
}

}  // namespace

void ApiContext::register_spectrum_routes(httplib::Server& http) {
  http.Get("/api/spectrum", [this](const httplib::Request& req, httplib::Response& res) {
    auto target = target_of(req, res, *catalog_);
    if (!target) return;
    auto top = uint_param(req, "top", 0, UINT32_MAX);
    auto bins = uint_param(req, "bins", kDefaultEsdBins, kMaxEsdBins);
    if (!top.ok() || !bins.ok()) return reply_error(res, top.ok() ? bins.status() : top.status());
    if (*bins < 2) return reply_error(res, Status::InvalidArgument("'bins' must be at least 2"));
    const Checkpoint& ckpt = *catalog_->at(target->checkpoint).checkpoint;
    const TensorInfo& tensor = *target->tensor;
    engine::SpectrumOptions options;
    if (*top > 0) options.top_k = *top;
    // Kept beside the index like the command's: a tensor opened again reads nothing.
    auto cache = index::AnalysisCache::open(ckpt);
    engine::Records records;
    std::optional<engine::Spectrum> spectrum = kept_spectrum(cache, tensor.name);
    const bool stored = spectrum.has_value();
    if (!spectrum) {
      // Exact within the budgets, or the rung the caller consented to, or the ladder (409).
      auto plan = engine::plan_spectrum(scheduler(), ckpt, tensor, options);
      if (!plan.ok()) return reply_error(res, plan.status());
      std::string rung = engine::kSpectrumRungExact;
      if (!plan->exact_within_budget) {
        const auto chosen = engine::consented_rung(*plan, param(req, "consent").value_or(""));
        if (!chosen) {
          json answer = needs_consent_json(*plan, tensor.name);
          note_consent_request(answer);
          answer["error"] = "needs consent";
          answer["needs_consent"] = true;
          return reply_json(res, answer, 409);
        }
        rung = chosen->id;
      }
      auto computed = engine::spectrum_by_rung(scheduler(), ckpt, tensor, options, rung, &records);
      if (!computed.ok()) return reply_error(res, computed.status());
      spectrum = std::move(computed).value();
      if (cache.ok() && spectrum->rung == engine::kSpectrumRungExact) {
        cache->put(tensor.name, engine::spectrum_cache_key(), engine::spectrum_json(*spectrum));
        (void)cache->save();  // not kept: computed again next time
      }
    }
    // Metrics and the histogram come from every value, not only the ones listed.
    const auto metrics = metrics_of(*spectrum);
    json esd = esd_json(*spectrum, metrics ? &*metrics : nullptr, *bins);
    engine::Spectrum shown = std::move(*spectrum);
    if (*top > 0 && shown.values.size() > *top) {
      shown.values.resize(*top);
      shown.bounds.resize(*top);
    }
    json j = engine::spectrum_json(shown);
    j["tensor"] = tensor.name;
    // The exact rung's bound is the SVD's own; the Gram rung is bounded more weakly; the others approximate.
    j["exactness"] = shown.rung == engine::kSpectrumRungExact ? "exact"
                     : shown.rung == engine::kSpectrumRungGram ? "bounded"
                                                               : "approximate";
    if (metrics) j["metrics"] = engine::spectral_metrics_json(*metrics);
    j["esd"] = std::move(esd);
    j["source"] = stored ? "stored" : "computed";
    j["records"] = records_json(records);
    reply_json(res, j);
  });

  // Every matrix's metrics where its exact spectrum is kept; with compute=1, the missing ones of
  // [from, from + limit) computed too when exact within the budgets (never an approximate rung:
  // those need a consent per tensor, which the inspector asks for). The viewer walks `next`.
  http.Get("/api/spectra", [this](const httplib::Request& req, httplib::Response& res) {
    auto target = target_of(req, res, *catalog_, false);
    if (!target) return;
    const bool compute = param(req, "compute").value_or("0") == "1";
    auto from = uint_param(req, "from", 0, UINT64_MAX);
    auto limit = uint_param(req, "limit", UINT64_MAX, UINT64_MAX);
    if (!from.ok() || !limit.ok()) return reply_error(res, from.ok() ? limit.status() : from.status());
    if (*limit == 0) return reply_error(res, Status::InvalidArgument("'limit' must be at least 1"));
    const Checkpoint& ckpt = *catalog_->at(target->checkpoint).checkpoint;
    // Vectors and scalars have no spectrum beyond their norm: matrices only, as the command lists them.
    std::vector<const TensorInfo*> matrices;
    for (const TensorInfo& t : ckpt.tensors()) {
      if (t.shape.size() >= 2) matrices.push_back(&t);
    }
    const uint64_t begin = std::min<uint64_t>(*from, matrices.size());
    const uint64_t end = begin + std::min<uint64_t>(*limit, matrices.size() - begin);
    auto cache = index::AnalysisCache::open(ckpt);
    engine::Records records;
    const engine::SpectrumOptions options;
    json rows = json::array();
    bool put = false;
    for (uint64_t i = begin; i < end; ++i) {
      const TensorInfo& t = *matrices[i];
      json row = {{"name", t.name}, {"shape", t.shape}};
      std::optional<engine::Spectrum> s = kept_spectrum(cache, t.name);
      row["state"] = s ? "stored" : "missing";
      if (!s && compute) {
        auto plan = engine::plan_spectrum(scheduler(), ckpt, t, options);
        if (!plan.ok()) {
          row["state"] = "error";
          row["error"] = plan.status().message();
        } else if (!plan->exact_within_budget) {
          row["state"] = "needs_consent";
          row["reason"] = plan->reason;
        } else if (auto computed = engine::spectrum_by_rung(scheduler(), ckpt, t, options, engine::kSpectrumRungExact, &records);
                   !computed.ok()) {
          row["state"] = "error";
          row["error"] = computed.status().message();
        } else {
          s = std::move(computed).value();
          row["state"] = "computed";
          if (cache.ok()) {
            cache->put(t.name, engine::spectrum_cache_key(), engine::spectrum_json(*s));
            put = true;
          }
        }
      }
      if (s) {
        row["rows"] = s->rows;
        row["cols"] = s->cols;
        if (const auto m = metrics_of(*s)) row["metrics"] = engine::spectral_metrics_json(*m);
      }
      rows.push_back(std::move(row));
    }
    if (put) (void)cache->save();  // not kept: computed again next time
    if (!compute) {
      // Listing only: the missing ones are left out (most are, before anything was computed).
      json known = json::array();
      for (auto& r : rows) {
        if (r["state"] != "missing") known.push_back(std::move(r));
      }
      rows = std::move(known);
    }
    reply_json(res, {{"total", matrices.size()}, {"from", begin}, {"next", end}, {"tensors", std::move(rows)},
                     {"records", records_json(records)}});
  });
}

}  // namespace tensormorph::server
