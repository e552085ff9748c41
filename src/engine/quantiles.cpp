#include "engine/quantiles.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <string>

#include "core/dtype_abi.h"
#include "core/printable.h"
#include "engine/ladder.h"
#include "engine/matrix_shape.h"
#include "tensormorph/decode.h"

namespace tensormorph::engine {
namespace {

constexpr uint32_t kDigitBits = 16;

/// Where one wanted rank stands: the key bits selected so far and its rank among the elements
/// that share them.
struct Cursor {
  uint64_t prefix = 0;
  uint64_t rank = 0;
};

/// Moves `c` one digit down: the digit of `row` (counts of the digit's values among the elements
/// of c's prefix) that holds its rank.
Status narrow(Cursor& c, std::span<const uint64_t> row, uint32_t bits, uint32_t pass) {
  uint64_t below = 0;
  for (uint64_t d = 0; d < row.size(); ++d) {
    if (c.rank < below + row[d]) {
      c.prefix = (c.prefix << bits) | d;
      c.rank -= below;
      return Status::Ok();
    }
    below += row[d];
  }
  return Status::Internal("radix selection: pass " + std::to_string(pass) + " counts " + std::to_string(below) +
                          " elements under a prefix that held rank " + std::to_string(c.rank) +
                          " before (did the data change between passes?)");
}

}  // namespace

uint32_t decoded_zero_low_bits(DType dtype) {
  switch (dtype) {
    // At most 8 significant bits, and float32 holds each exactly with room below.
    case DType::kBF16:
    case DType::kF8E4M3:
    case DType::kF8E5M2:
    case DType::kF8E8M0:
    case DType::kF4E2M1:
    case DType::kF6E2M3:
    case DType::kF6E3M2:
    case DType::kI8:
    case DType::kU8:
    case DType::kBool: return 16;
    case DType::kF16: return 13;  // 11 significant bits
    case DType::kI16:
    case DType::kU16: return 8;  // 16 significant bits
    default: return 0;
  }
}

Result<KeySelection> select_keys(const RadixPass& pass, ops::RadixKey key, double center, uint32_t known_low_bits,
                                 const RanksOf& ranks_of) {
  const uint32_t width = ops::radix_key_bits(key);
  if (key == ops::RadixKey::kDeviation) known_low_bits = 0;
  known_low_bits = std::min(known_low_bits, width - kDigitBits);
  KeySelection out;
  std::vector<uint64_t> counts(uint64_t{1} << kDigitBits);
  ops::RadixParams params{key, width - kDigitBits, kDigitBits, center};
  TM_RETURN_IF_ERROR(pass(params, {}, counts, out.classes));
  out.passes = 1;
  out.ranks = ranks_of(out.classes[0]);
  std::vector<Cursor> cursors;
  for (const uint64_t r : out.ranks) {
    if (r >= out.classes[0]) {
      return Status::Internal("radix selection: rank " + std::to_string(r) + " of " + std::to_string(out.classes[0]) +
                              " finite elements");
    }
    cursors.push_back({0, r});
    TM_RETURN_IF_ERROR(narrow(cursors.back(), counts, kDigitBits, out.passes));
  }
  uint32_t known = kDigitBits;
  const uint32_t needed = width - known_low_bits;
  while (known < needed && !cursors.empty()) {
    params.bits = std::min(kDigitBits, needed - known);
    params.shift = width - known - params.bits;
    std::vector<uint64_t> prefixes;
    for (const Cursor& c : cursors) {
      if (std::find(prefixes.begin(), prefixes.end(), c.prefix) == prefixes.end()) prefixes.push_back(c.prefix);
    }
    std::vector<Cursor> next = cursors;
    for (size_t first = 0; first < prefixes.size(); first += TM_RADIX_MAX_PREFIXES) {
      const auto batch = std::span(prefixes).subspan(first, std::min<size_t>(TM_RADIX_MAX_PREFIXES, prefixes.size() - first));
      counts.assign(batch.size() << params.bits, 0);
      std::array<uint64_t, ops::kRadixClasses> classes{};
      TM_RETURN_IF_ERROR(pass(params, batch, counts, classes));
      ++out.passes;
      if (classes != out.classes) {
        return Status::Internal("radix selection: pass " + std::to_string(out.passes) + " counts " +
                                std::to_string(classes[0]) + " finite elements, the first " +
                                std::to_string(out.classes[0]) + " (did the data change between passes?)");
      }
      for (size_t i = 0; i < cursors.size(); ++i) {
        const auto at = std::find(batch.begin(), batch.end(), cursors[i].prefix);
        if (at == batch.end()) continue;
        const uint64_t row = static_cast<uint64_t>(at - batch.begin());
        TM_RETURN_IF_ERROR(narrow(next[i], std::span<const uint64_t>(counts).subspan(row << params.bits, uint64_t{1} << params.bits),
                                  params.bits, out.passes));
      }
    }
    cursors = std::move(next);
    known += params.bits;
  }
  const uint32_t unknown = width - known;
  const uint64_t low_mask = unknown == 0 ? 0 : (uint64_t{1} << unknown) - 1;
  for (const Cursor& c : cursors) {
    // The bits no pass counted are the decoded float's zero low bits: zeros in the key of a
    // non-negative value and of a magnitude, ones in the (complemented) key of a negative value.
    const bool negative = key == ops::RadixKey::kValue && unknown > 0 && ((c.prefix >> (known - 1)) & 1) == 0;
    out.keys.push_back(unknown == 0 ? c.prefix : (c.prefix << unknown) | (negative ? low_mask : 0));
  }
  return out;
}

uint64_t inverted_cdf_rank(uint64_t n, double q) {
  const double index = static_cast<double>(n) * q - 1.0;
  const double previous = std::floor(index);
  const double rank = index - previous > 0 ? previous + 1 : previous;
  return rank <= 0 ? 0 : std::min<uint64_t>(static_cast<uint64_t>(rank), n - 1);
}

namespace {

/// numpy's "linear" virtual index (n - 1) q and its neighbours.
struct LinearIndex {
  uint64_t below = 0, above = 0;
  double t = 0;
};

LinearIndex linear_index(uint64_t n, double q) {
  const double h = static_cast<double>(n - 1) * q;
  if (h >= static_cast<double>(n - 1)) return {n - 1, n - 1, 0};
  const double previous = std::floor(h);
  const uint64_t below = static_cast<uint64_t>(previous);
  return {below, below + 1, h - previous};
}

/// numpy's _lerp: a + (b - a) t, or b - (b - a)(1 - t) from t = 0.5 on.
double lerp(double a, double b, double t) {
  const double diff = b - a;
  return t >= 0.5 ? b - diff * (1 - t) : a + diff * t;
}

/// The linear quantile at `q` of the values whose ranks map to `value`.
double linear_quantile(uint64_t n, double q, const std::map<uint64_t, double>& value) {
  const LinearIndex i = linear_index(n, q);
  if (i.below == i.above) return value.at(i.below);
  return lerp(value.at(i.below), value.at(i.above), i.t);
}

void add_linear_ranks(uint64_t n, double q, std::vector<uint64_t>& ranks) {
  const LinearIndex i = linear_index(n, q);
  ranks.push_back(i.below);
  ranks.push_back(i.above);
}

std::vector<uint64_t> unique_sorted(std::vector<uint64_t> v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
  return v;
}

}  // namespace

Result<Quantiles> quantiles_of(const RadixPass& pass, DType dtype, const QuantileOptions& options) {
  for (const double q : options.probabilities) {
    if (!(q >= 0 && q <= 1)) return Status::InvalidArgument("probability " + std::to_string(q) + " is outside [0, 1]");
  }
  const auto ranks_of = [&](uint64_t n) {
    std::vector<uint64_t> ranks;
    if (n == 0) return ranks;
    for (const double q : options.probabilities) {
      ranks.push_back(inverted_cdf_rank(n, q));
      add_linear_ranks(n, q, ranks);
    }
    add_linear_ranks(n, 0.5, ranks);
    for (const double q : kRobustRangeProbabilities) add_linear_ranks(n, q, ranks);
    return unique_sorted(std::move(ranks));
  };
  TM_ASSIGN_OR_RETURN(const KeySelection values,
                      select_keys(pass, ops::RadixKey::kValue, 0, decoded_zero_low_bits(dtype), ranks_of));
  Quantiles out;
  out.finite = values.classes[0];
  out.nan = values.classes[1];
  out.pos_inf = values.classes[2];
  out.neg_inf = values.classes[3];
  out.passes = values.passes;
  if (out.finite == 0) return out;
  std::map<uint64_t, double> value;
  for (size_t i = 0; i < values.ranks.size(); ++i) {
    value[values.ranks[i]] = ops::value_from_order_key(static_cast<uint32_t>(values.keys[i]));
  }
  const uint64_t n = out.finite;
  for (const double q : options.probabilities) {
    out.values.push_back({q, value.at(inverted_cdf_rank(n, q)), linear_quantile(n, q, value)});
  }
  out.median = linear_quantile(n, 0.5, value);
  for (size_t i = 0; i < kRobustRangeProbabilities.size(); ++i) {
    out.robust_range[i] = linear_quantile(n, kRobustRangeProbabilities[i], value);
  }
  if (!options.median_absolute_deviation) return out;
  const auto median_ranks = [&](uint64_t count) {
    std::vector<uint64_t> ranks;
    if (count > 0) add_linear_ranks(count, 0.5, ranks);
    return unique_sorted(std::move(ranks));
  };
  TM_ASSIGN_OR_RETURN(const KeySelection deviations,
                      select_keys(pass, ops::RadixKey::kDeviation, out.median, 0, median_ranks));
  out.passes += deviations.passes;
  if (deviations.classes != values.classes) {
    return Status::Internal("radix selection: the deviation passes counted other elements than the value passes "
                            "(did the data change between passes?)");
  }
  std::map<uint64_t, double> deviation;
  for (size_t i = 0; i < deviations.ranks.size(); ++i) {
    deviation[deviations.ranks[i]] = std::bit_cast<double>(deviations.keys[i]);
  }
  out.median_absolute_deviation = linear_quantile(n, 0.5, deviation);
  return out;
}

Quantiles quantiles_from_estimates(uint64_t finite, const std::function<RankEstimate(uint64_t rank)>& at_rank,
                                   const QuantileOptions& options) {
  Quantiles out;
  out.finite = finite;
  if (finite == 0) return out;
  std::map<uint64_t, double> estimate, lower, upper;
  const auto need = [&](double q) {
    std::vector<uint64_t> ranks = {inverted_cdf_rank(finite, q)};
    add_linear_ranks(finite, q, ranks);
    for (const uint64_t r : ranks) {
      if (estimate.count(r)) continue;
      const RankEstimate e = at_rank(r);
      estimate[r] = e.estimate;
      lower[r] = e.lower;
      upper[r] = e.upper;
    }
  };
  for (const double q : options.probabilities) {
    need(q);
    const uint64_t r = inverted_cdf_rank(finite, q);
    const double lo = std::min(lower.at(r), linear_quantile(finite, q, lower));
    const double hi = std::max(upper.at(r), linear_quantile(finite, q, upper));
    out.values.push_back({q, estimate.at(r), linear_quantile(finite, q, estimate), std::array<double, 2>{lo, hi}});
  }
  need(0.5);
  out.median = linear_quantile(finite, 0.5, estimate);
  for (size_t i = 0; i < kRobustRangeProbabilities.size(); ++i) {
    need(kRobustRangeProbabilities[i]);
    out.robust_range[i] = linear_quantile(finite, kRobustRangeProbabilities[i], estimate);
  }
  return out;
}

nlohmann::ordered_json quantiles_json(const Quantiles& q, DType dtype) {
  nlohmann::ordered_json j = {{"finite", q.finite}, {"nan", q.nan}, {"pos_inf", q.pos_inf}, {"neg_inf", q.neg_inf}};
  // Float32 cannot hold every value of these types: they are ranked rounded (a monotone map, so
  // each order statistic is the float32 nearest the true one).
  if (ops::exact_summary_supported(dtype)) j["ranked_as"] = "float32 (values rounded to float32 before ranking)";
  nlohmann::ordered_json values = nlohmann::ordered_json::array();
  for (const auto& v : q.values) {
    values.push_back({{"probability", v.probability}, {"inverted_cdf", v.inverted_cdf}, {"linear", v.linear}});
    if (v.interval) values.back()["interval"] = {(*v.interval)[0], (*v.interval)[1]};
  }
  j["quantiles"] = values;
  if (q.finite > 0) {
    j["median"] = q.median;
    j["robust_range"] = {q.robust_range[0], q.robust_range[1]};
  }
  if (q.median_absolute_deviation) j["median_absolute_deviation"] = *q.median_absolute_deviation;
  j["passes"] = q.passes;
  j["exactness"] = q.rung == "exact" ? "exact" : "approximate";
  j["rung"] = q.rung;
  if (!q.error_bound.empty()) j["error_bound"] = q.error_bound;
  return j;
}

Result<Quantiles> quantiles_from_json(const nlohmann::json& j) {
  Quantiles q;
  try {
    q.finite = j.at("finite").get<uint64_t>();
    q.nan = j.at("nan").get<uint64_t>();
    q.pos_inf = j.at("pos_inf").get<uint64_t>();
    q.neg_inf = j.at("neg_inf").get<uint64_t>();
    for (const auto& v : j.at("quantiles")) {
      q.values.push_back({v.at("probability").get<double>(), v.at("inverted_cdf").get<double>(), v.at("linear").get<double>()});
    }
    if (q.finite > 0) {
      q.median = j.at("median").get<double>();
      q.robust_range = {j.at("robust_range").at(0).get<double>(), j.at("robust_range").at(1).get<double>()};
    }
    if (j.contains("median_absolute_deviation")) q.median_absolute_deviation = j["median_absolute_deviation"].get<double>();
    q.passes = j.at("passes").get<uint32_t>();
    q.rung = j.value("rung", std::string("exact"));
    q.error_bound = j.value("error_bound", std::string());
    size_t i = 0;
    for (const auto& v : j.at("quantiles")) {
      if (v.contains("interval")) q.values[i].interval = std::array<double, 2>{v["interval"].at(0).get<double>(), v["interval"].at(1).get<double>()};
      ++i;
    }
  } catch (const nlohmann::json::exception& e) {
    return Status::InvalidArgument(std::string("not a stored quantile result: ") + e.what());
  }
  return q;
}

std::string quantiles_cache_key(const QuantileOptions& options) {
  std::string key = "quantiles/1 p=";
  char text[32];
  for (size_t i = 0; i < options.probabilities.size(); ++i) {
    std::snprintf(text, sizeof text, "%s%.17g", i ? "," : "", options.probabilities[i]);
    key += text;
  }
  return key + (options.median_absolute_deviation ? " mad=1" : " mad=0");
}

namespace {

/// A tensor's rows in the bands of decode_rows, so that a device keeps what one pass uploaded for
/// the next: the requests of one radix pass, band by band.
class RadixBands {
 public:
  static Result<RadixBands> open(const Checkpoint& checkpoint, const TensorInfo& tensor) {
    RadixBands b(checkpoint, tensor);
    b.m_ = as_matrix(tensor);
    TM_ASSIGN_OR_RETURN(b.data_, matrix_rows(checkpoint, tensor, 0, b.m_.rows));
    TM_ASSIGN_OR_RETURN(b.row_bytes_, dtype_storage_bytes(tensor.dtype, b.m_.cols));
    b.band_rows_ = std::max<uint64_t>(1, (256ull << 20) / std::max<uint64_t>(b.row_bytes_, 1));
    return b;
  }
  uint64_t bands() const { return (m_.rows + band_rows_ - 1) / band_rows_; }
  /// The request counting band `band` under `params` into `counts` and `classes`.
  compute::OpRequest request(uint64_t band, const ops::RadixParams& params, std::span<const uint64_t> prefixes,
                             std::span<uint64_t> counts, std::span<uint64_t, ops::kRadixClasses> classes,
                             uint32_t max_threads) const {
    const uint64_t r0 = band * band_rows_;
    const uint64_t rows = std::min(band_rows_, m_.rows - r0);
    const bool keyed = data_.owned.empty();
    compute::OpRequest req;
    req.op = TM_OP_RADIX_HISTOGRAM;
    req.subject = tensor_->name;
    req.inputs.push_back({to_abi_dtype(tensor_->dtype), {rows * m_.cols}, data_.bytes.subspan(r0 * row_bytes_, rows * row_bytes_),
                          keyed ? residency_key(*checkpoint_, *tensor_, r0 * row_bytes_, rows * row_bytes_) : 0});
    req.inputs.push_back({TM_DTYPE_U64, {prefixes.size()}, std::as_bytes(prefixes), 0});
    req.outputs.push_back({TM_DTYPE_U64, {counts.size()}, std::as_writable_bytes(counts)});
    req.outputs.push_back({TM_DTYPE_U64, {ops::kRadixClasses}, std::as_writable_bytes(std::span<uint64_t>(classes))});
    req.attributes = {{TM_ATTR_KEY, static_cast<int64_t>(params.key), 0},
                      {TM_ATTR_SHIFT, params.shift, 0},
                      {TM_ATTR_BITS, params.bits, 0},
                      {TM_ATTR_CENTER, 0, params.center}};
    req.max_threads = max_threads;
    return req;
  }

 private:
  RadixBands(const Checkpoint& checkpoint, const TensorInfo& tensor) : checkpoint_(&checkpoint), tensor_(&tensor) {}
  const Checkpoint* checkpoint_;
  const TensorInfo* tensor_;
  MatrixShape m_;
  MatrixRows data_;
  uint64_t row_bytes_ = 0, band_rows_ = 1;
};

}  // namespace

uint32_t exact_quantile_passes(DType dtype, const QuantileOptions& options) {
  const uint32_t value_passes = decoded_zero_low_bits(dtype) >= kDigitBits ? 1 : 2;
  return value_passes + (options.median_absolute_deviation ? 4 : 0);
}

Result<compute::PlacementEstimate> estimate_exact_quantiles(compute::Scheduler& scheduler, const Checkpoint& checkpoint,
                                                            const TensorInfo& tensor, const QuantileOptions& options,
                                                            uint32_t max_threads) {
  if (!dtype_decodable(tensor.dtype)) {
    return Status::Unsupported(tensor_location(checkpoint, tensor) + ": " + std::string(dtype_not_decodable_reason(tensor.dtype)));
  }
  TM_ASSIGN_OR_RETURN(const RadixBands bands, RadixBands::open(checkpoint, tensor));
  // A first pass counts the top digit alone; the others count one digit under each wanted prefix.
  ops::RadixParams first;
  first.shift = 16;
  ops::RadixParams narrowing = first;
  narrowing.shift = 0;
  const std::vector<uint64_t> one_prefix = {0};
  std::vector<uint64_t> counts(uint64_t{1} << kDigitBits);
  std::array<uint64_t, ops::kRadixClasses> classes{};
  compute::PlacementEstimate total;
  total.placeable = true;
  const uint32_t passes = exact_quantile_passes(tensor.dtype, options);
  for (uint64_t band = 0; band < bands.bands(); ++band) {
    for (const bool opening : {true, false}) {
      const auto req = opening ? bands.request(band, first, {}, counts, classes, max_threads)
                               : bands.request(band, narrowing, one_prefix, counts, classes, max_threads);
      TM_ASSIGN_OR_RETURN(const compute::PlacementEstimate one, scheduler.estimate(req));
      if (!one.placeable) return one;
      total.backend = one.backend;
      total.estimated_ns += one.estimated_ns * (opening ? 1 : passes - 1);
    }
  }
  return total;
}

Result<Quantiles> tensor_quantiles(compute::Scheduler& scheduler, const Checkpoint& checkpoint, const TensorInfo& tensor,
                                   const QuantileOptions& options, Records* records, uint32_t max_threads) {
  const auto where = [&] { return tensor_location(checkpoint, tensor); };
  if (!dtype_decodable(tensor.dtype)) {
    return Status::Unsupported(where() + ": " + std::string(dtype_not_decodable_reason(tensor.dtype)));
  }
  TM_ASSIGN_OR_RETURN(const RadixBands bands, RadixBands::open(checkpoint, tensor));
  const RadixPass pass = [&](const ops::RadixParams& params, std::span<const uint64_t> prefixes,
                             std::span<uint64_t> counts, std::span<uint64_t, ops::kRadixClasses> classes) -> Status {
    std::fill(counts.begin(), counts.end(), uint64_t{0});
    std::fill(classes.begin(), classes.end(), uint64_t{0});
    std::vector<uint64_t> band_counts(counts.size());
    std::array<uint64_t, ops::kRadixClasses> band_classes{};
    for (uint64_t band = 0; band < bands.bands(); ++band) {
      TM_ASSIGN_OR_RETURN(auto placement,
                          scheduler.run(bands.request(band, params, prefixes, band_counts, band_classes, max_threads)));
      if (!placement.executed) return placement.refusal.with_context(where());
      if (records) placement.take_records(*records);
      for (size_t i = 0; i < counts.size(); ++i) counts[i] += band_counts[i];
      for (size_t i = 0; i < classes.size(); ++i) classes[i] += band_classes[i];
    }
    return Status::Ok();
  };
  auto result = quantiles_of(pass, tensor.dtype, options);
  if (!result.ok()) return result.status().with_context(where());
  return result;
}

}  // namespace tensormorph::engine
