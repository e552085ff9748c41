// Spectral metrics: closed-form norms and ranks, alpha recovered from sampled power laws, the fit
// against an independent Python reference (tests/fixtures/spectral/power_law_reference.py),
// Marchenko-Pastur spikes on the asymptotic spectrum, and the edge cases.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <numbers>
#include <random>
#include <vector>

#include "engine/spectral_metrics.h"

namespace tensormorph::engine {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

/// `n` draws of a continuous power law p(x) ~ x^-alpha on [xmin, inf), by inverting its CDF.
std::vector<double> pareto(uint64_t n, double alpha, double xmin, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  std::vector<double> out(n);
  for (auto& x : out) x = xmin * std::pow(1.0 - uniform(rng), -1.0 / (alpha - 1.0));
  return out;
}

/// A standard error of the MLE (Clauset, Shalizi & Newman 2009): (alpha - 1) / sqrt(n).
double standard_error(const PowerLawFit& fit) {
  return (fit.alpha - 1.0) / std::sqrt(static_cast<double>(fit.tail_size));
}

TEST(SpectralMetrics, ClosedFormNormsAndRanks) {
  // sigma = {4, 3} in any order: ||W||_F = 5, stable rank 25/16, p = {4/7, 3/7}.
  const std::vector<double> sv = {3.0, 4.0};
  const auto m = spectral_metrics(sv, 3, 2);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_DOUBLE_EQ(m->spectral_norm, 4.0);
  EXPECT_DOUBLE_EQ(m->frobenius_norm, 5.0);
  EXPECT_DOUBLE_EQ(m->stable_rank, 25.0 / 16.0);
  const double p = 4.0 / 7.0, q = 3.0 / 7.0;
  EXPECT_NEAR(m->effective_rank, std::exp(-(p * std::log(p) + q * std::log(q))), 1e-14);
  EXPECT_EQ(m->rank, 2u);
  EXPECT_DOUBLE_EQ(m->aspect_ratio, 1.5);
  EXPECT_DOUBLE_EQ(m->mp_noise_variance, 25.0 / 6.0);
  const double edge = 25.0 / 6.0 * std::pow(1.0 + 1.0 / std::sqrt(1.5), 2);
  EXPECT_NEAR(m->mp_bulk_edge, edge, 1e-14 * edge);
  EXPECT_EQ(m->mp_spikes, 0u);  // 16/3 < edge

  // A flat spectrum has effective and stable rank equal to its size.
  const std::vector<double> flat(4, 2.0);
  const auto f = spectral_metrics(flat, 4, 9);
  ASSERT_TRUE(f.ok());
  EXPECT_NEAR(f->effective_rank, 4.0, 1e-14);
  EXPECT_DOUBLE_EQ(f->stable_rank, 4.0);
  EXPECT_DOUBLE_EQ(f->frobenius_norm, 4.0);

  // Zeros and values under max(rows, cols) * eps * sigma_1 do not count toward the rank.
  const std::vector<double> low_rank = {5.0, 0.0, 1e-17, 0.0};
  const auto r = spectral_metrics(low_rank, 4, 6);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->rank, 1u);
  EXPECT_NEAR(r->effective_rank, 1.0, 1e-15);
  EXPECT_DOUBLE_EQ(r->stable_rank, 1.0);
}

TEST(PowerLawFit, RecoversAlphaOfPureParetoSamples) {
  for (const double alpha : {2.5, 4.0}) {
    std::vector<double> xmins;
    for (uint64_t seed = 1; seed <= 5; ++seed) {
      const auto sample = pareto(5000, alpha, 1.0, seed);
      const auto fit = fit_power_law(sample);
      ASSERT_TRUE(fit.ok() && fit->fitted) << fit.status().to_string();
      EXPECT_NEAR(fit->alpha, alpha, 3 * standard_error(*fit)) << "alpha " << alpha << " seed " << seed;
      EXPECT_GE(fit->xmin, 1.0);
      EXPECT_EQ(fit->tail_size, static_cast<uint64_t>(std::count_if(
                                    sample.begin(), sample.end(), [&](double x) { return x >= fit->xmin; })));
      EXPECT_GT(fit->ks_distance, 0.0);
      EXPECT_LT(fit->ks_distance, 0.05);
      xmins.push_back(fit->xmin);
    }
    // KS noise sometimes drops the low end of a pure power law; typically xmin is the sample's start.
    std::sort(xmins.begin(), xmins.end());
    EXPECT_LT(xmins[xmins.size() / 2], 1.15) << "median xmin for alpha " << alpha;
  }
}

TEST(PowerLawFit, FindsTheTailGraftedOntoABulk) {
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> bulk(0.1, 2.0);
  std::vector<double> sample;
  for (int i = 0; i < 4000; ++i) sample.push_back(bulk(rng));
  const auto tail = pareto(1000, 3.0, 2.0, 43);
  sample.insert(sample.end(), tail.begin(), tail.end());
  const auto fit = fit_power_law(sample);
  ASSERT_TRUE(fit.ok() && fit->fitted) << fit.status().to_string();
  EXPECT_NEAR(fit->alpha, 3.0, 3 * standard_error(*fit));
  EXPECT_GE(fit->xmin, 1.9);
  EXPECT_LT(fit->xmin, 2.6);
  EXPECT_GT(fit->tail_size, 500u);
  EXPECT_LT(fit->tail_size, 1300u);
}

TEST(PowerLawFit, MatchesPythonReference) {
  // The sample and the numbers printed by tests/fixtures/spectral/power_law_reference.py.
  const std::vector<double> sample = {
      0.8655, 1.3085, 0.3576, 0.5321, 0.1051, 2.1133, 0.5982, 1.364,  3.0745, 0.9774,
      1.4729, 0.0856, 0.4533, 0.9503, 1.2865, 0.1933, 0.0943, 1.2417, 0.5591, 1.9575,
      1.244,  0.8355, 0.6461, 0.1188, 0.6684, 1.8648, 0.462,  0.1676, 1.4797, 0.1164,
      1.3405, 1.5545, 1.636,  0.3974, 2.2615, 0.1362, 0.2621, 0.4268, 0.3251, 1.9472};
  const auto fit = fit_power_law(sample);
  ASSERT_TRUE(fit.ok() && fit->fitted) << fit.status().to_string();
  EXPECT_NEAR(fit->alpha, 7.595487784574, 1e-9);
  EXPECT_DOUBLE_EQ(fit->xmin, 1.8648);
  EXPECT_NEAR(fit->ks_distance, 0.12969738354053784, 1e-12);
  EXPECT_EQ(fit->tail_size, 6u);
}

TEST(PowerLawFit, GridSearchAgreesWithTheFullSearchOnALargeSpectrum) {
  // A spectrum the size of an MLP projection's: a bulk with a heavy tail.
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> bulk(0.01, 1.0);
  std::vector<double> sample;
  for (int i = 0; i < 9008; ++i) sample.push_back(bulk(rng));
  const auto tail = pareto(2000, 2.5, 1.0, 8);
  sample.insert(sample.end(), tail.begin(), tail.end());

  const auto start = std::chrono::steady_clock::now();
  const auto grid = fit_power_law(sample);
  const double grid_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const auto full = fit_power_law(sample, std::numeric_limits<uint64_t>::max());
  ASSERT_TRUE(grid.ok() && grid->fitted && full.ok() && full->fitted);
  EXPECT_LE(full->ks_distance, grid->ks_distance);  // the full search is the optimum
  EXPECT_NEAR(grid->ks_distance, full->ks_distance, 0.002);
  EXPECT_NEAR(grid->alpha, full->alpha, standard_error(*full));
  EXPECT_NEAR(full->alpha, 2.5, 3 * standard_error(*full));
  RecordProperty("grid_search_seconds", std::to_string(grid_seconds));
}

TEST(PowerLawFit, TiedValuesAllBelongToTheTail) {
  auto sample = pareto(2000, 3.0, 1.0, 11);
  for (auto& x : sample) x = std::round(x * 10) / 10;  // many ties
  const auto fit = fit_power_law(sample);
  ASSERT_TRUE(fit.ok() && fit->fitted);
  EXPECT_EQ(fit->tail_size, static_cast<uint64_t>(std::count_if(sample.begin(), sample.end(),
                                                                [&](double x) { return x >= fit->xmin; })));
}

TEST(PowerLawFit, ScaleChangesXminOnly) {
  const auto sample = pareto(3000, 3.5, 1.0, 5);
  std::vector<double> scaled(sample);
  for (auto& x : scaled) x *= 1024.0;  // a power of two: the logs shift, the ratios stay exact
  const auto a = fit_power_law(sample), b = fit_power_law(scaled);
  ASSERT_TRUE(a.ok() && b.ok() && a->fitted && b->fitted);
  EXPECT_NEAR(a->alpha, b->alpha, 1e-9);
  EXPECT_DOUBLE_EQ(a->xmin * 1024.0, b->xmin);
  EXPECT_EQ(a->tail_size, b->tail_size);
}

TEST(PowerLawFit, SaysWhyItDidNotFit) {
  const std::vector<double> few = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  const auto f = fit_power_law(few);
  ASSERT_TRUE(f.ok());
  EXPECT_FALSE(f->fitted);
  EXPECT_NE(f->reason.find("fewer than the 10"), std::string::npos) << f->reason;

  const std::vector<double> equal(50, 0.25);
  const auto e = fit_power_law(equal);
  ASSERT_TRUE(e.ok());
  EXPECT_FALSE(e->fitted);
  EXPECT_NE(e->reason.find("equal"), std::string::npos) << e->reason;
  EXPECT_EQ(e->alpha, 0.0);

  for (const double bad : {kNaN, kInf, -1.0, 0.0}) {
    std::vector<double> v(20, 1.5);
    v[13] = bad;
    const auto r = fit_power_law(v);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("eigenvalue 13"), std::string::npos) << r.status().message();
  }
}

/// The quantiles (i + 1/2) / count of the Marchenko-Pastur law of variance 1 and ratio q = N / M,
/// by inverting its CDF integrated on a fine grid: the spectrum a large noise matrix approaches.
std::vector<double> marchenko_pastur_quantiles(uint64_t count, double q) {
  const double lo = std::pow(1 - 1 / std::sqrt(q), 2), hi = std::pow(1 + 1 / std::sqrt(q), 2);
  const int steps = 200000;
  std::vector<double> grid(steps + 1), cdf(steps + 1, 0.0);
  auto density = [&](double x) {
    return std::sqrt(std::max(0.0, (hi - x) * (x - lo))) / (2 * std::numbers::pi * x / q);
  };
  for (int i = 0; i <= steps; ++i) grid[i] = lo + (hi - lo) * i / steps;
  for (int i = 1; i <= steps; ++i) cdf[i] = cdf[i - 1] + (density(grid[i - 1]) + density(grid[i])) / 2 * (hi - lo) / steps;
  std::vector<double> out;
  for (uint64_t k = 0; k < count; ++k) {
    const double target = (static_cast<double>(k) + 0.5) / static_cast<double>(count) * cdf.back();
    const auto it = std::lower_bound(cdf.begin(), cdf.end(), target);
    const size_t i = std::max<size_t>(1, it - cdf.begin());
    const double t = (target - cdf[i - 1]) / (cdf[i] - cdf[i - 1]);
    out.push_back(grid[i - 1] + t * (grid[i] - grid[i - 1]));
  }
  return out;
}

TEST(SpectralMetrics, CountsPlantedSpikesAboveTheMarchenkoPasturEdge) {
  const uint64_t rows = 2000, cols = 1000;  // N = 2000, M = 1000, Q = 2
  const double q = 2.0, edge = std::pow(1 + 1 / std::sqrt(q), 2);
  auto singular_values_of = [&](const std::vector<double>& lambdas) {
    std::vector<double> sv;
    for (const double l : lambdas) sv.push_back(std::sqrt(static_cast<double>(rows) * l));
    return sv;
  };

  const auto noise = spectral_metrics(singular_values_of(marchenko_pastur_quantiles(cols, q)), rows, cols);
  ASSERT_TRUE(noise.ok()) << noise.status().to_string();
  EXPECT_NEAR(noise->mp_noise_variance, 1.0, 1e-3);
  EXPECT_NEAR(noise->mp_bulk_edge, edge, 1e-2);
  EXPECT_EQ(noise->mp_spikes, 0u);

  auto lambdas = marchenko_pastur_quantiles(cols - 2, q);
  lambdas.push_back(4 * edge);
  lambdas.push_back(6 * edge);
  const auto spiked = spectral_metrics(singular_values_of(lambdas), rows, cols);
  ASSERT_TRUE(spiked.ok());
  EXPECT_EQ(spiked->mp_spikes, 2u);
  EXPECT_GT(spiked->mp_noise_variance, noise->mp_noise_variance);  // spikes inflate the estimate
  EXPECT_LT(spiked->mp_noise_variance, 1.05);
}

TEST(SpectralMetrics, FitsTheScaledSpectrumAndWeighsAlphaByTheUnscaledTop) {
  const uint64_t rows = 4096, cols = 1024;
  auto sv = pareto(cols, 3.0, 1.0, 21);
  for (auto& s : sv) s = std::sqrt(s) * 8.0;  // sigma^2 = 64 x a Pareto draw
  const auto m = spectral_metrics(sv, rows, cols);
  ASSERT_TRUE(m.ok() && m->power_law.fitted) << m.status().to_string();

  std::vector<double> esd;
  for (const double s : sv) esd.push_back(s * s / static_cast<double>(rows));
  const auto direct = fit_power_law(esd);
  ASSERT_TRUE(direct.ok());
  EXPECT_DOUBLE_EQ(m->power_law.alpha, direct->alpha);
  EXPECT_DOUBLE_EQ(m->power_law.xmin, direct->xmin);
  EXPECT_EQ(m->power_law.tail_size, direct->tail_size);
  const double sigma_1 = *std::max_element(sv.begin(), sv.end());
  EXPECT_DOUBLE_EQ(m->weighted_alpha, direct->alpha * std::log10(sigma_1 * sigma_1));

  const auto j = spectral_metrics_json(*m);
  EXPECT_EQ(j["power_law"]["tail_size"].get<uint64_t>(), m->power_law.tail_size);
  EXPECT_DOUBLE_EQ(j["weighted_alpha"].get<double>(), m->weighted_alpha);
  EXPECT_EQ(j["rank"].get<uint64_t>(), cols);
}

/// Every number of `m` is finite (nlohmann writes NaN as null, which would hide one in the JSON).
void expect_all_finite(const SpectralMetrics& m) {
  for (const double v : {m.spectral_norm, m.frobenius_norm, m.stable_rank, m.effective_rank, m.aspect_ratio,
                         m.mp_noise_variance, m.mp_bulk_edge, m.power_law.alpha, m.power_law.xmin,
                         m.power_law.ks_distance, m.weighted_alpha}) {
    EXPECT_TRUE(std::isfinite(v));
  }
}

TEST(SpectralMetrics, EdgeCases) {
  const auto empty = spectral_metrics({}, 0, 5);
  ASSERT_TRUE(empty.ok()) << empty.status().to_string();
  EXPECT_EQ(empty->rank, 0u);
  EXPECT_FALSE(empty->power_law.fitted);
  EXPECT_NE(empty->power_law.reason.find("empty"), std::string::npos);
  expect_all_finite(*empty);

  const std::vector<double> zeros(16, 0.0);
  const auto zero = spectral_metrics(zeros, 16, 32);
  ASSERT_TRUE(zero.ok());
  EXPECT_EQ(zero->rank, 0u);
  EXPECT_EQ(zero->stable_rank, 0.0);
  EXPECT_EQ(zero->effective_rank, 0.0);
  EXPECT_EQ(zero->mp_spikes, 0u);
  EXPECT_FALSE(zero->power_law.fitted);
  EXPECT_NE(zero->power_law.reason.find("zero"), std::string::npos);
  expect_all_finite(*zero);
  const auto zj = spectral_metrics_json(*zero);
  EXPECT_TRUE(zj["power_law"]["alpha"].is_null());
  EXPECT_TRUE(zj["weighted_alpha"].is_null());
  EXPECT_EQ(zj["power_law"]["reason"].get<std::string>(), zero->power_law.reason);

  const std::vector<double> one = {2.0};
  const auto single = spectral_metrics(one, 1, 7);
  ASSERT_TRUE(single.ok());
  EXPECT_EQ(single->rank, 1u);
  EXPECT_DOUBLE_EQ(single->stable_rank, 1.0);
  EXPECT_DOUBLE_EQ(single->effective_rank, 1.0);
  EXPECT_DOUBLE_EQ(single->frobenius_norm, 2.0);
  EXPECT_FALSE(single->power_law.fitted);
  EXPECT_EQ(single->weighted_alpha, 0.0);
  expect_all_finite(*single);

  // Tiny singular values fall under WeightWatcher's sigma^2 floor and leave too few to fit.
  std::vector<double> tiny(12, 1e-3);
  tiny[0] = 1.0;
  const auto floored = spectral_metrics(tiny, 12, 12);
  ASSERT_TRUE(floored.ok());
  EXPECT_FALSE(floored->power_law.fitted);
  EXPECT_NE(floored->power_law.reason.find("1 of 12"), std::string::npos) << floored->power_law.reason;

  for (const double bad : {kNaN, kInf, -kInf, -0.5, 1e200}) {
    std::vector<double> sv = {3.0, 2.0, 1.0};
    sv[1] = bad;
    const auto r = spectral_metrics(sv, 3, 4);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(r.status().message().find("singular value 1"), std::string::npos) << r.status().message();
  }
  const std::vector<double> three = {3.0, 2.0, 1.0};
  const auto wrong_count = spectral_metrics(three, 2, 8);
  ASSERT_FALSE(wrong_count.ok());
  EXPECT_EQ(wrong_count.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(wrong_count.status().message().find("2 x 8"), std::string::npos);
}

}  // namespace
}  // namespace tensormorph::engine
