// Spectra: the singular values of tm.spectrum@1 and its rungs against an independent long-double
// Jacobi SVD on random, graded (ill-conditioned), low-rank and rank-deficient matrices, with their
// stated bounds holding; `tensormorph spectrum` against numpy, on the demo's planted spikes, and
// through the ladder (budget, consent, refusal).
#include <gtest/gtest.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "compute/ops/spectrum.h"
#include "formats/safetensors/safetensors.h"
#include "core/quantize/quantize.h"
#include "test_util.h"

namespace tensormorph {
namespace {

using testing::run_cli;
using testing::TempDir;

struct Matrix {
  std::string label;
  uint64_t rows = 0, cols = 0;
  std::vector<double> v;  // row-major
};

/// Singular values by one-sided Jacobi (Hestenes) in long double: rotations of column pairs until
/// every pair is orthogonal to the working precision, then the column norms. Independent of LAPACK
/// and about 2^11 times more precise than the float64 results it checks.
std::vector<double> jacobi_singular_values(const Matrix& m) {
  const bool wide = m.cols > m.rows;
  const uint64_t r = wide ? m.cols : m.rows, c = wide ? m.rows : m.cols;
  std::vector<long double> a(r * c);  // column-major r x c with r >= c
  for (uint64_t i = 0; i < m.rows; ++i) {
    for (uint64_t j = 0; j < m.cols; ++j) a[wide ? i * r + j : j * r + i] = m.v[i * m.cols + j];
  }
  for (int sweep = 0; sweep < 60; ++sweep) {
    bool rotated = false;
    for (uint64_t p = 0; p + 1 < c; ++p) {
      for (uint64_t q = p + 1; q < c; ++q) {
        long double alpha = 0, beta = 0, gamma = 0;
        for (uint64_t i = 0; i < r; ++i) {
          alpha += a[p * r + i] * a[p * r + i];
          beta += a[q * r + i] * a[q * r + i];
          gamma += a[p * r + i] * a[q * r + i];
        }
        if (gamma == 0 || std::fabs(gamma) <= 1e-19L * std::sqrt(alpha * beta)) continue;
        rotated = true;
        const long double zeta = (beta - alpha) / (2 * gamma);
        const long double t = (zeta >= 0 ? 1 : -1) / (std::fabs(zeta) + std::sqrt(1 + zeta * zeta));
        const long double cs = 1 / std::sqrt(1 + t * t), sn = cs * t;
        for (uint64_t i = 0; i < r; ++i) {
          const long double x = a[p * r + i], y = a[q * r + i];
          a[p * r + i] = cs * x - sn * y;
          a[q * r + i] = sn * x + cs * y;
        }
      }
    }
    if (!rotated) break;
  }
  std::vector<double> s(c);
  for (uint64_t j = 0; j < c; ++j) {
    long double norm = 0;
    for (uint64_t i = 0; i < r; ++i) norm += a[j * r + i] * a[j * r + i];
    s[j] = static_cast<double>(std::sqrt(norm));
  }
  std::sort(s.rbegin(), s.rend());
  return s;
}

Matrix random_matrix(std::string label, uint64_t rows, uint64_t cols, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  Matrix m{std::move(label), rows, cols, std::vector<double>(rows * cols)};
  for (double& x : m.v) x = normal(rng);
  return m;
}

/// sum_k s_k u_k w_k^T with random u, w, plus noise of `noise` per element.
Matrix low_rank_matrix(std::string label, uint64_t rows, uint64_t cols, std::vector<double> strengths, double noise, uint32_t seed) {
  Matrix m = random_matrix(std::move(label), rows, cols, seed);
  for (double& x : m.v) x *= noise;
  std::mt19937_64 rng(seed + 1);
  std::normal_distribution<double> normal;
  for (double s : strengths) {
    std::vector<double> u(rows), w(cols);
    for (double& x : u) x = normal(rng) / std::sqrt(static_cast<double>(rows));
    for (double& x : w) x = normal(rng) / std::sqrt(static_cast<double>(cols));
    for (uint64_t i = 0; i < rows; ++i) {
      for (uint64_t j = 0; j < cols; ++j) m.v[i * cols + j] += s * u[i] * w[j];
    }
  }
  return m;
}

std::vector<Matrix> test_matrices() {
  std::vector<Matrix> out = {random_matrix("1x1", 1, 1, 1),        random_matrix("1x7", 1, 7, 2),
                             random_matrix("7x1", 7, 1, 3),        random_matrix("30x20", 30, 20, 4),
                             random_matrix("20x30", 20, 30, 5),    random_matrix("64x64", 64, 64, 6),
                             random_matrix("200x17", 200, 17, 7)};
  // Graded: rows scaled over twelve orders of magnitude (condition number near 1e12).
  Matrix graded = random_matrix("graded 48x40", 48, 40, 8);
  for (uint64_t i = 0; i < graded.rows; ++i) {
    for (uint64_t j = 0; j < graded.cols; ++j) graded.v[i * graded.cols + j] *= std::pow(10.0, -12.0 * static_cast<double>(i) / 47);
  }
  out.push_back(std::move(graded));
  // Wider than one band of the two-stage reduction (64): panels from both sides, a real band.
  out.push_back(random_matrix("190x150", 190, 150, 11));
  out.push_back(random_matrix("150x190", 150, 190, 12));
  Matrix graded_wide = random_matrix("graded 140x160", 140, 160, 13);
  for (uint64_t j = 0; j < graded_wide.cols; ++j) {
    for (uint64_t i = 0; i < graded_wide.rows; ++i) graded_wide.v[i * graded_wide.cols + j] *= std::pow(10.0, -12.0 * static_cast<double>(j) / 159);
  }
  out.push_back(std::move(graded_wide));
  out.push_back(low_rank_matrix("rank 3 + noise 60x50", 60, 50, {100, 50, 10}, 1e-3, 9));
  out.push_back(low_rank_matrix("rank 4 + noise 170x130", 170, 130, {30, 20, 5, 1}, 1e-6, 14));
  out.push_back(low_rank_matrix("rank 2 exactly 40x30", 40, 30, {7, 3}, 0, 10));
  out.push_back({"zero 5x4", 5, 4, std::vector<double>(20, 0.0)});
  return out;
}

Matrix test_matrix(std::string_view label) {
  for (Matrix& m : test_matrices()) {
    if (m.label == label) return std::move(m);
  }
  ADD_FAILURE() << "no test matrix " << label;
  return {};
}

struct Computed {
  std::vector<double> values, bounds;
};

Computed compute(const Matrix& m, ops::SpectrumMethod method, uint64_t count) {
  Computed c{std::vector<double>(count), std::vector<double>(count)};
  const ops::MatrixView view{DType::kF64, std::as_bytes(std::span(m.v)), m.rows, m.cols};
  const Status s = ops::compute_spectrum(view, method, c.values, c.bounds, 0);
  EXPECT_TRUE(s.ok()) << m.label << ": " << s.to_string();
  for (size_t i = 1; i < c.values.size(); ++i) EXPECT_LE(c.values[i], c.values[i - 1]) << m.label << " not descending at " << i;
  return c;
}

TEST(SpectrumOp, SvdAndGramHoldTheirBoundsAgainstALongDoubleJacobiSvd) {
  double worst_svd = 0;  // max |s_i - sigma_i| / (eps max(m, n) s_1): the constant c the bound states
  for (const Matrix& m : test_matrices()) {
    SCOPED_TRACE(m.label);
    const std::vector<double> truth = jacobi_singular_values(m);
    const Computed svd = compute(m, ops::SpectrumMethod::kSvd, truth.size());
    const Computed gram = compute(m, ops::SpectrumMethod::kGram, truth.size());
    for (size_t i = 0; i < truth.size(); ++i) {
      EXPECT_LE(std::fabs(svd.values[i] - truth[i]), svd.bounds[i]) << "svd value " << i << " of " << truth[i];
      EXPECT_LE(std::fabs(gram.values[i] - truth[i]), gram.bounds[i]) << "gram value " << i << " of " << truth[i];
      if (truth[0] > 0) {
        const double unit = DBL_EPSILON * static_cast<double>(std::max(m.rows, m.cols)) * truth[0];
        worst_svd = std::max(worst_svd, std::fabs(svd.values[i] - truth[i]) / unit);
      }
    }
  }
  std::printf("largest SVD error over the matrices: %.3f eps max(rows, cols) s_1 (the bound states c = %g)\n", worst_svd,
              ops::kSpectrumSvdConstant);
  EXPECT_LT(worst_svd, ops::kSpectrumSvdConstant);
}

TEST(SpectrumOp, TheGramBoundIsWeakerForSmallValuesAndStillHolds) {
  // Graded rows: the small singular values are far below eps^(1/2) s_1, where the Gram matrix's
  // eigenvalues lose them; the bound must say so rather than claim the SVD's accuracy.
  const Matrix graded = test_matrix("graded 48x40");
  const std::vector<double> truth = jacobi_singular_values(graded);
  const Computed gram = compute(graded, ops::SpectrumMethod::kGram, truth.size());
  const Computed svd = compute(graded, ops::SpectrumMethod::kSvd, truth.size());
  EXPECT_GT(gram.bounds.back(), 1e3 * svd.bounds.back());
  EXPECT_GT(gram.bounds.back(), truth.back()) << "the smallest value is below what the Gram rung can resolve";
}

TEST(SpectrumOp, RandomizedTopKIsBelowTheTruthAndWithinItsAPosterioriBound) {
  for (const Matrix& m : test_matrices()) {
    SCOPED_TRACE(m.label);
    const std::vector<double> truth = jacobi_singular_values(m);
    const uint64_t k = std::min<uint64_t>(truth.size(), 5);
    const Computed top = compute(m, ops::SpectrumMethod::kRandomized, k);
    const double rounding = 8 * DBL_EPSILON * static_cast<double>(std::max(m.rows, m.cols)) * truth[0];
    for (size_t i = 0; i < k; ++i) {
      EXPECT_LE(top.values[i], truth[i] + rounding) << "value " << i;
      EXPECT_LE(truth[i], top.values[i] + top.bounds[i]) << "value " << i;
    }
  }
  // A rank-3 matrix plus small noise: the range finder captures the three and says how well.
  const Matrix low = test_matrix("rank 3 + noise 60x50");
  const Computed top = compute(low, ops::SpectrumMethod::kRandomized, 3);
  const std::vector<double> truth = jacobi_singular_values(low);
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(top.values[i], truth[i], 1e-3 * truth[i]);
  EXPECT_LT(top.bounds[0], 0.1) << "the residual of a rank-3 range on a rank-3-plus-1e-3-noise matrix";
}

TEST(SpectrumOp, ANonFiniteValueIsRefusedWithItsPosition) {
  Matrix m = random_matrix("nan", 6, 5, 11);
  m.v[3 * 5 + 2] = std::nan("");
  std::vector<double> values(5), bounds(5);
  const Status s = ops::compute_spectrum({DType::kF64, std::as_bytes(std::span(m.v)), 6, 5}, ops::SpectrumMethod::kSvd, values,
                                         bounds, 0);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("row 3, column 2 is NaN"), std::string::npos) << s.message();
}

// ---- The command against numpy ----------------------------------------------------------------

std::string python() { return std::filesystem::exists("/usr/bin/python3") ? "/usr/bin/python3" : "python3"; }

nlohmann::json run_numpy(const std::filesystem::path& file) {
  const std::string command = python() + " '" + std::string(TM_SOURCE_DIR) + "/tests/numpy_spectrum.py' '" + file.string() + "'";
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  EXPECT_NE(pipe, nullptr);
  if (pipe == nullptr) return {};
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) out.append(buffer, n);
  EXPECT_EQ(::pclose(pipe), 0) << "numpy reference failed: " << command;
  return nlohmann::json::parse(out, nullptr, false);
}

/// Random, low-rank-plus-noise and planted-spike matrices in F32, BF16 and F16, and a vector.
std::filesystem::path write_spectrum_file(const TempDir& dir) {
  std::vector<safetensors::TensorToWrite> write;
  std::vector<std::vector<std::byte>> keep;
  auto add = [&](const std::string& name, DType dtype, const Matrix& m) {
    std::vector<float> f(m.v.begin(), m.v.end());
    keep.push_back(*encode_from_f32(dtype, f));
    write.push_back({name, dtype, {m.rows, m.cols}, keep.back()});
  };
  add("random.f32", DType::kF32, random_matrix("", 300, 200, 21));
  add("wide.bf16", DType::kBF16, random_matrix("", 128, 384, 22));
  add("odd.f16", DType::kF16, random_matrix("", 77, 91, 23));
  add("low_rank.f32", DType::kF32, low_rank_matrix("", 256, 128, {40, 20, 10, 5}, 0.01, 24));
  // Noise of element variance 1 has its squared singular values below about (sqrt(400) + sqrt(100))^2 = 900;
  // three spikes far above.
  add("spikes.f32", DType::kF32, low_rank_matrix("", 400, 100, {200, 150, 120}, 1.0, 25));
  std::vector<float> vector(64, 0.5f);
  keep.push_back(*encode_from_f32(DType::kF32, vector));
  write.push_back({"vector.f32", DType::kF32, {64}, keep.back()});
  const auto path = dir / "spectra.safetensors";
  EXPECT_TRUE(safetensors::write_file(path, write, {}).ok());
  return path;
}

TEST(SpectrumCommand, EqualsNumpyWithinTheStatedBoundsAndFindsThePlantedSpikes) {
  TempDir dir;
  const auto file = write_spectrum_file(dir);
  const auto want = run_numpy(file);
  ASSERT_TRUE(want.is_object()) << "numpy reference printed no JSON";
  auto r = run_cli({"spectrum", file.string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto got = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(got.is_object()) << r.out;
  EXPECT_EQ(got["schema"], "tensormorph.spectrum/1");
  ASSERT_EQ(got["tensors"].size(), want.size()) << "every matrix, and no vector";
  for (const auto& t : got["tensors"]) {
    const std::string name = t["name"];
    SCOPED_TRACE(name);
    EXPECT_EQ(t["rung"], "exact");
    EXPECT_EQ(t["source"], "computed");
    const auto& w = want.at(name);
    ASSERT_EQ(t["values"].size(), w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      // numpy's float64 SVD is bound by the same guarantee: the two agree within twice the bound.
      EXPECT_LE(std::fabs(t["values"][i].get<double>() - w[i].get<double>()), 2 * t["bounds"][i].get<double>()) << i;
    }
    EXPECT_NEAR(t["metrics"]["spectral_norm"].get<double>(), w[0].get<double>(), 1e-9 * w[0].get<double>());
  }
  const auto by_name = [&](const std::string& name) {
    for (const auto& t : got["tensors"]) {
      if (t["name"] == name) return t;
    }
    return nlohmann::json();
  };
  EXPECT_EQ(by_name("spikes.f32")["metrics"]["mp_spikes"], 3);
  EXPECT_EQ(by_name("random.f32")["metrics"]["mp_spikes"], 0);
  EXPECT_EQ(by_name("low_rank.f32")["metrics"]["rank"], 128);

  // Kept beside the index: the second run reads them.
  r = run_cli({"spectrum", file.string(), "--json", "--top", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto again = nlohmann::json::parse(r.out);
  for (const auto& t : again["tensors"]) {
    EXPECT_EQ(t["source"], "stored") << t["name"];
    EXPECT_EQ(t["values"].size(), 3u) << t["name"];
    EXPECT_EQ(t["values"][0], by_name(t["name"])["values"][0]) << t["name"];
  }
  // A named vector is an error that says why, not a silent skip.
  r = run_cli({"spectrum", file.string(), "--tensor", "vector.f32"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("needs a matrix"), std::string::npos) << r.out;
}

TEST(SpectrumCommand, TheDemoPlantsSpikesInOneQueryProjectionAndANaNTheCommandNames) {
  TempDir dir;
  ASSERT_EQ(run_cli({"demo", dir.path().string()}).exit_code, 0);
  const auto r = run_cli({"spectrum", dir.path().string(), "--tensor", "*q_proj*", "--tensor", "*down_proj*", "--json"});
  EXPECT_EQ(r.exit_code, 1) << "the NaN the demo plants in layer 2's down_proj fails that tensor: " << r.err;
  const auto j = nlohmann::json::parse(r.out);
  int64_t others = -1;
  for (const auto& t : j["tensors"]) {
    const std::string name = t["name"];
    if (name == "model.layers.2.mlp.down_proj.weight") {
      const std::string error = t["error"];
      EXPECT_NE(error.find("tensor 'model.layers.2.mlp.down_proj.weight'"), std::string::npos) << error;
      EXPECT_NE(error.find("row 7, column 11 is NaN"), std::string::npos) << error;
      continue;
    }
    if (name.find("q_proj") == std::string::npos) continue;
    const int64_t spikes = t["metrics"]["mp_spikes"];
    // Two outlier columns in every query projection; layer 1's adds a rank-2 component.
    if (name == "model.layers.1.self_attn.q_proj.weight") {
      EXPECT_EQ(spikes, 4) << name;
    } else {
      EXPECT_TRUE(others == -1 || others == spikes) << name;
      others = spikes;
    }
  }
  EXPECT_EQ(others, 2);
}

TEST(SpectrumLadder, OverTheTimeBudgetTheRungsAreOfferedAndConsentIsHonoured) {
  TempDir dir;
  const auto file = write_spectrum_file(dir);
  testing::ScopedEnv config("TENSORMORPH_CONFIG", (dir.path() / "settings.json").string());
  testing::write_bytes(dir.path() / "settings.json", R"({"compute": {"time_budget_seconds": 1e-9}})");
  auto r = run_cli({"spectrum", file.string(), "--tensor", "spikes.f32", "--json"});
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("over the time budget"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--consent"), std::string::npos) << r.err;
  const auto plan = nlohmann::json::parse(r.out)["tensors"][0]["needs_consent"];
  std::vector<std::string> ids;
  for (const auto& rung : plan["ladder"]) {
    ids.push_back(rung["id"]);
    EXPECT_GT(rung["estimated_ms"].get<double>(), 0.0) << rung.dump();
    EXPECT_FALSE(rung["error_bound"].get<std::string>().empty()) << rung.dump();
  }
  EXPECT_EQ(ids, (std::vector<std::string>{"exact", "gram", "randomized"})) << plan.dump()
      << " (no sample rung: 400 rows are fewer than the sample would keep)";

  r = run_cli({"spectrum", file.string(), "--tensor", "spikes.f32", "--json", "--consent", "gram"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto gram = nlohmann::json::parse(r.out)["tensors"][0];
  EXPECT_EQ(gram["rung"], "gram");
  EXPECT_EQ(gram["metrics"]["mp_spikes"], 3);

  r = run_cli({"spectrum", file.string(), "--tensor", "spikes.f32", "--json", "--consent", "randomized", "--top", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto top = nlohmann::json::parse(r.out)["tensors"][0];
  EXPECT_EQ(top["rung"], "randomized");
  EXPECT_EQ(top["complete"], false);
  ASSERT_EQ(top["values"].size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(top["values"][i].get<double>(), gram["values"][i].get<double>(), top["bounds"][i].get<double>() + 1e-6);
  }
  // Nothing but exact is kept: a later run without consent still asks.
  r = run_cli({"spectrum", file.string(), "--tensor", "spikes.f32"});
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
}

}  // namespace
}  // namespace tensormorph
