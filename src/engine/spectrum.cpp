#include "engine/spectrum.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include <xxhash.h>

#include "compute/ops/spectrum.h"
#include "core/dtype_abi.h"
#include "core/printable.h"
#include "engine/matrix_shape.h"
#include "engine/tensor_ops.h"
#include "tensormorph/decode.h"

namespace tensormorph::engine {
namespace {

constexpr const char* kExactBound = "|s_i - sigma_i| <= c eps max(rows, cols) s_1 (backward-stable SVD, c = 4)";
constexpr const char* kGramBound =
    "|s_i - sigma_i| <= min(sqrt(D), D / s_i), D = eps (max(rows, cols) ||A||_F^2 + c min(rows, cols) s_1^2): "
    "like the SVD's for the large values, weaker for the small ones";
constexpr const char* kRandomizedBound =
    "s_i <= sigma_i <= s_i + ||A - Q Q^T A||_F (a posteriori, per value); only the largest k";
constexpr const char* kSampleBound =
    "none deterministic: the sample's Gram matrix, scaled, is an unbiased estimate of A^T A; close for the large "
    "values when rows are alike in norm";

/// Rows the sample rung keeps of a rows x cols matrix (0: it is not on offer, the matrix is not tall).
uint64_t sample_rows(uint64_t rows, uint64_t cols) {
  const uint64_t keep = std::max(kMinSampleRows, kSampleRowsPerColumn * cols);
  return rows > cols && keep < rows ? keep : 0;
}

/// A spectrum request on `bytes`, a rows x cols matrix of `dtype`, into `values` and `bounds`.
compute::OpRequest spectrum_request(ops::SpectrumMethod method, const std::string& subject, DType dtype,
                                    std::span<const std::byte> bytes, uint64_t rows, uint64_t cols, uint64_t key,
                                    std::vector<double>& values, std::vector<double>& bounds, const SpectrumOptions& options) {
  compute::OpRequest req;
  req.op = ops::spectrum_op_id(method);
  req.subject = subject;
  req.inputs.push_back({to_abi_dtype(dtype), {rows, cols}, bytes, key});
  req.outputs.push_back({TM_DTYPE_F64, {values.size()}, std::as_writable_bytes(std::span(values))});
  req.outputs.push_back({TM_DTYPE_F64, {bounds.size()}, std::as_writable_bytes(std::span(bounds))});
  if (method == ops::SpectrumMethod::kRandomized) req.attributes.push_back({TM_ATTR_K, static_cast<int64_t>(values.size()), 0});
  // The bounded rungs' bounds scale with the matrix (relative to s_1): any a float64 SVD reaches.
  req.exactness_floor = method == ops::SpectrumMethod::kRandomized ? TM_EXACT_APPROXIMATE : TM_EXACT_BOUNDED;
  req.max_error_bound = 1e-6;
  req.max_threads = options.max_threads;
  return req;
}

struct MatrixInput {
  MatrixShape shape;
  MatrixRows data;
  uint64_t key = 0;
};

Result<MatrixInput> matrix_input(const Checkpoint& checkpoint, const TensorInfo& tensor) {
  const std::string where = tensor_location(checkpoint, tensor);
  if (tensor.shape.size() < 2) {
    return Status::FailedPrecondition(where + " has rank " + std::to_string(tensor.shape.size()) +
                                      ": a spectrum needs a matrix (rank 2 or more, seen as [leading dims, last dim])");
  }
  if (!dtype_decodable(tensor.dtype)) return Status::Unsupported(where + ": " + std::string(dtype_not_decodable_reason(tensor.dtype)));
  MatrixInput in;
  in.shape = as_matrix(tensor);
  if (in.shape.rows == 0 || in.shape.cols == 0) return Status::FailedPrecondition(where + " is empty: it has no spectrum");
  TM_ASSIGN_OR_RETURN(in.data, matrix_rows(checkpoint, tensor, 0, in.shape.rows));
  in.key = in.data.owned.empty() ? residency_key(checkpoint, tensor, 0, in.data.bytes.size()) : 0;
  return in;
}

uint64_t randomized_k(const MatrixShape& m, const SpectrumOptions& options) {
  return std::clamp<uint64_t>(options.top_k, 1, std::min({m.rows, m.cols, ops::kSpectrumMaxK}));
}

/// Rows of the sample rung, drawn without replacement, seeded by the tensor's name, ascending.
std::vector<uint64_t> sampled_row_indices(const TensorInfo& tensor, uint64_t rows, uint64_t keep) {
  std::vector<uint64_t> all(rows);
  for (uint64_t r = 0; r < rows; ++r) all[r] = r;
  std::mt19937_64 rng(XXH64(tensor.name.data(), tensor.name.size(), 0));
  for (uint64_t i = 0; i < keep; ++i) std::swap(all[i], all[i + std::uniform_int_distribution<uint64_t>(0, rows - 1 - i)(rng)]);
  all.resize(keep);
  std::sort(all.begin(), all.end());
  return all;
}

Status run_request(compute::Scheduler& scheduler, const compute::OpRequest& req, const std::string& where, Records* records) {
  auto placed = scheduler.run(req);
  if (!placed.ok()) return placed.status().with_context(where);
  auto& placement = *placed;
  if (!placement.executed) return placement.refusal.with_context(where);
  if (records) placement.take_records(*records);
  return Status::Ok();
}

}  // namespace

Result<SpectrumPlan> plan_spectrum(compute::Scheduler& scheduler, const Checkpoint& checkpoint, const TensorInfo& tensor,
                                   const SpectrumOptions& options) {
  TM_ASSIGN_OR_RETURN(const MatrixInput in, matrix_input(checkpoint, tensor));
  const uint64_t p = std::min(in.shape.rows, in.shape.cols);
  std::vector<double> values(p), bounds(p);
  auto estimate = [&](ops::SpectrumMethod method, std::span<const std::byte> bytes, uint64_t rows, uint64_t key) {
    values.resize(method == ops::SpectrumMethod::kRandomized ? randomized_k(in.shape, options) : std::min(rows, in.shape.cols));
    bounds.resize(values.size());
    return scheduler.estimate(spectrum_request(method, tensor.name, tensor.dtype, bytes, rows, in.shape.cols, key,
                                               values, bounds, options));
  };
  TM_ASSIGN_OR_RETURN(const compute::PlacementEstimate exact, estimate(ops::SpectrumMethod::kSvd, in.data.bytes, in.shape.rows, in.key));
  const double budget = scheduler.time_budget_ns();
  SpectrumPlan plan;
  plan.exact_ns = exact.estimated_ns;
  plan.exact_within_budget = exact.placeable && (budget <= 0 || exact.estimated_ns <= budget);
  if (plan.exact_within_budget) return plan;
  const std::string shape = std::to_string(in.shape.rows) + " x " + std::to_string(in.shape.cols);
  if (!exact.placeable) {
    plan.reason = "the exact spectrum of " + tensor_location(checkpoint, tensor) + " (" + shape + ") cannot run: " + exact.reason;
  } else {
    plan.reason = "the exact spectrum of " + tensor_location(checkpoint, tensor) + " (" + shape + ") would take about " +
                  duration_text(exact.estimated_ns) + " on " + exact.backend + ", over the time budget of " +
                  duration_text(budget) + " (compute.time_budget)";
    plan.ladder.push_back({kSpectrumRungExact, "all " + std::to_string(p) + " singular values by a backward-stable SVD",
                           kExactBound, exact.estimated_ns, exact.backend});
  }
  TM_ASSIGN_OR_RETURN(const auto gram, estimate(ops::SpectrumMethod::kGram, in.data.bytes, in.shape.rows, in.key));
  if (gram.placeable) {
    plan.ladder.push_back({kSpectrumRungGram, "all " + std::to_string(p) + " singular values from the eigenvalues of the float64 Gram matrix",
                           kGramBound, gram.estimated_ns, gram.backend});
  }
  TM_ASSIGN_OR_RETURN(const auto randomized, estimate(ops::SpectrumMethod::kRandomized, in.data.bytes, in.shape.rows, in.key));
  if (randomized.placeable) {
    plan.ladder.push_back({kSpectrumRungRandomized,
                           "the largest " + std::to_string(randomized_k(in.shape, options)) +
                               " singular values by a randomized range finder (" +
                               std::to_string(ops::kSpectrumPowerIterations) + " power iterations)",
                           kRandomizedBound, randomized.estimated_ns, randomized.backend});
  }
  if (const uint64_t keep = sample_rows(in.shape.rows, in.shape.cols); keep > 0) {
    TM_ASSIGN_OR_RETURN(const uint64_t row_bytes, dtype_storage_bytes(tensor.dtype, in.shape.cols));
    TM_ASSIGN_OR_RETURN(const auto sample, estimate(ops::SpectrumMethod::kSvd, in.data.bytes.first(keep * row_bytes), keep, 0));
    if (sample.placeable) {
      plan.ladder.push_back({kSpectrumRungSample,
                             "the singular values of " + std::to_string(keep) + " rows drawn at random, scaled by sqrt(" +
                                 std::to_string(in.shape.rows) + " / " + std::to_string(keep) + ")",
                             kSampleBound, sample.estimated_ns, sample.backend});
    }
  }
  if (plan.ladder.empty() && !exact.refusal.ok()) return exact.refusal.with_context("the spectrum of " + tensor_location(checkpoint, tensor));
  return plan;
}

Result<Spectrum> spectrum_by_rung(compute::Scheduler& scheduler, const Checkpoint& checkpoint, const TensorInfo& tensor,
                                  const SpectrumOptions& options, const std::string& rung, Records* records) {
  const std::string where = tensor_location(checkpoint, tensor);
  TM_ASSIGN_OR_RETURN(const MatrixInput in, matrix_input(checkpoint, tensor));
  Spectrum s;
  s.rung = rung;
  s.rows = in.shape.rows;
  s.cols = in.shape.cols;
  const uint64_t p = std::min(s.rows, s.cols);
  auto run = [&](ops::SpectrumMethod method, std::span<const std::byte> bytes, uint64_t rows, uint64_t key, uint64_t count) {
    s.values.assign(count, 0);
    s.bounds.assign(count, 0);
    return run_request(scheduler, spectrum_request(method, tensor.name, tensor.dtype, bytes, rows, s.cols, key, s.values, s.bounds, options),
                       where, records);
  };
  if (rung == kSpectrumRungExact) {
    s.error_bound = kExactBound;
    TM_RETURN_IF_ERROR(run(ops::SpectrumMethod::kSvd, in.data.bytes, s.rows, in.key, p));
  } else if (rung == kSpectrumRungGram) {
    s.error_bound = kGramBound;
    TM_RETURN_IF_ERROR(run(ops::SpectrumMethod::kGram, in.data.bytes, s.rows, in.key, p));
  } else if (rung == kSpectrumRungRandomized) {
    s.error_bound = kRandomizedBound;
    s.complete = false;
    TM_RETURN_IF_ERROR(run(ops::SpectrumMethod::kRandomized, in.data.bytes, s.rows, in.key, randomized_k(in.shape, options)));
  } else if (rung == kSpectrumRungSample) {
    const uint64_t keep = sample_rows(s.rows, s.cols);
    if (keep == 0) return Status::FailedPrecondition(where + ": the sample rung needs a matrix with more rows than columns");
    s.error_bound = kSampleBound;
    s.sampled_rows = keep;
    TM_ASSIGN_OR_RETURN(const uint64_t row_bytes, dtype_storage_bytes(tensor.dtype, s.cols));
    std::vector<std::byte> gathered(keep * row_bytes);
    const auto picked = sampled_row_indices(tensor, s.rows, keep);
    for (uint64_t i = 0; i < keep; ++i) {
      std::memcpy(gathered.data() + i * row_bytes, in.data.bytes.data() + picked[i] * row_bytes, row_bytes);
    }
    TM_RETURN_IF_ERROR(run(ops::SpectrumMethod::kSvd, gathered, keep, 0, std::min(keep, s.cols)));
    const double scale = std::sqrt(static_cast<double>(s.rows) / static_cast<double>(keep));
    for (double& v : s.values) v *= scale;
    std::fill(s.bounds.begin(), s.bounds.end(), std::nan(""));
  } else {
    return Status::InvalidArgument("unknown spectrum rung '" + rung + "' (exact, gram, randomized, sample)");
  }
  return s;
}

nlohmann::ordered_json spectrum_json(const Spectrum& s) {
  auto numbers = [](const std::vector<double>& v) {
    nlohmann::ordered_json a = nlohmann::ordered_json::array();
    for (double x : v) a.push_back(std::isfinite(x) ? nlohmann::ordered_json(x) : nlohmann::ordered_json(nullptr));
    return a;
  };
  nlohmann::ordered_json j = {{"rung", s.rung}, {"rows", s.rows}, {"cols", s.cols}, {"complete", s.complete},
                              {"error_bound", s.error_bound}};
  if (s.sampled_rows > 0) j["sampled_rows"] = s.sampled_rows;
  j["values"] = numbers(s.values);
  j["bounds"] = numbers(s.bounds);
  return j;
}

Result<Spectrum> spectrum_from_json(const nlohmann::json& j) {
  try {
    Spectrum s;
    s.rung = j.at("rung").get<std::string>();
    s.rows = j.at("rows").get<uint64_t>();
    s.cols = j.at("cols").get<uint64_t>();
    s.complete = j.at("complete").get<bool>();
    s.error_bound = j.at("error_bound").get<std::string>();
    s.sampled_rows = j.value("sampled_rows", uint64_t{0});
    for (const auto& v : j.at("values")) s.values.push_back(v.is_null() ? std::nan("") : v.get<double>());
    for (const auto& v : j.at("bounds")) s.bounds.push_back(v.is_null() ? std::nan("") : v.get<double>());
    if (s.values.size() != s.bounds.size()) return Status::FormatError("stored spectrum: values and bounds differ in count");
    return s;
  } catch (const nlohmann::json::exception& e) {
    return Status::FormatError(std::string("stored spectrum: ") + e.what());
  }
}

std::string spectrum_cache_key() { return "spectrum/1 exact"; }

}  // namespace tensormorph::engine
