#include "engine/quantization_error.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <thread>

#include "compute/ops/radix_histogram.h"
#include "core/printable.h"
#include "tensormorph/decode.h"
#include "core/quantize/quantize.h"
#include "engine/matrix_shape.h"
#include "engine/quantiles.h"

namespace tensormorph::engine {
namespace {

/// Both sides of some rows: the operands and whatever owns their bytes.
struct ErrorBand {
  DiffOperand quantized, reference;
  BandPair pair;                 // measured: the checkpoints' bytes
};

/// The rows [r0, r1) of both sides.
using ErrorBands = std::function<Result<ErrorBand>(uint64_t r0, uint64_t r1)>;

/// Runs `each` on e = quantized - reference of every band, computed through tm.subtract@1.
Status for_each_error_band(compute::Scheduler& scheduler, const ErrorBands& bands, MatrixShape m, uint64_t band_rows,
                           Records* records, uint32_t max_threads,
                           const std::function<Status(std::span<const float> e, uint64_t r0, uint64_t rows)>& each) {
  for (uint64_t r0 = 0; r0 < m.rows; r0 += band_rows) {
    const uint64_t r1 = std::min(m.rows, r0 + band_rows);
    TM_ASSIGN_OR_RETURN(auto band, bands(r0, r1));
    TM_ASSIGN_OR_RETURN(auto e, run_subtract(scheduler, band.quantized, band.reference, (r1 - r0) * m.cols, records,
                                             max_threads));
    TM_RETURN_IF_ERROR(each(e, r0, r1 - r0));
  }
  return Status::Ok();
}

Status run_f32_op(compute::Scheduler& scheduler, const std::string& subject, compute::OpRequest req, Records* records,
                  uint32_t max_threads) {
  req.subject = subject;
  req.max_threads = max_threads;
  return run_exact(scheduler, req, records);
}

/// tm.channel_stats@1 over `e` seen as [rows, cols]: the row records (the column ones are dropped).
Status row_stats(compute::Scheduler& scheduler, const std::string& subject, std::span<const float> e, uint64_t rows,
                 uint64_t cols, std::span<TM_TileStats> out_rows, Records* records, uint32_t max_threads) {
  std::vector<TM_TileStats> cols_out(cols);
  compute::OpRequest req;
  req.op = TM_OP_CHANNEL_STATS;
  req.inputs.push_back({TM_DTYPE_F32, {rows, cols}, std::as_bytes(e), 0});
  req.outputs.push_back({TM_DTYPE_U8, {rows * sizeof(TM_TileStats)}, std::as_writable_bytes(out_rows)});
  req.outputs.push_back({TM_DTYPE_U8, {cols * sizeof(TM_TileStats)}, std::as_writable_bytes(std::span(cols_out))});
  return run_f32_op(scheduler, subject, std::move(req), records, max_threads);
}

Result<QuantizationError> measure(compute::Scheduler& scheduler, const std::string& subject, const ErrorBands& bands,
                                  MatrixShape m,
                                  uint64_t chunk_band_rows, DType quantized, DType reference,
                                  const QuantizationErrorOptions& options, Records* records, uint32_t max_threads) {
  QuantizationError out;
  out.quantized = quantized;
  out.reference = reference;
  out.block_elements = dtype_info(quantized).block_elems;
  const uint64_t elements = m.rows * m.cols;
  // 1. Difference statistics, in chunk-aligned bands.
  std::vector<TM_DiffStats> chunks;
  for (uint64_t r0 = 0; r0 < m.rows && elements > 0; r0 += chunk_band_rows) {
    const uint64_t r1 = std::min(m.rows, r0 + chunk_band_rows);
    TM_ASSIGN_OR_RETURN(auto band, bands(r0, r1));
    // The reference first: relative figures divide by its norm (and d = reference - quantized = -e).
    TM_ASSIGN_OR_RETURN(auto part, run_diff_stats(scheduler, band.reference, band.quantized, (r1 - r0) * m.cols,
                                                  r0 * m.cols, records, max_threads));
    chunks.insert(chunks.end(), part.begin(), part.end());
  }
  out.stats = ops::merge_diff_stats(chunks);
  out.metrics = ops::diff_metrics(out.stats);
  if (elements == 0) return out;

  // 2. Exact percentiles of |e|: radix selection over the magnitude key of e.
  const RadixPass pass = [&](const ops::RadixParams& params, std::span<const uint64_t> prefixes,
                             std::span<uint64_t> counts, std::span<uint64_t, ops::kRadixClasses> classes) -> Status {
    std::fill(counts.begin(), counts.end(), 0);
    std::fill(classes.begin(), classes.end(), 0);
    std::vector<uint64_t> band_counts(counts.size());
    std::array<uint64_t, ops::kRadixClasses> band_classes{};
    return for_each_error_band(scheduler, bands, m, chunk_band_rows, records, max_threads,
                               [&](std::span<const float> e, uint64_t, uint64_t) -> Status {
                                 compute::OpRequest req;
                                 req.op = TM_OP_RADIX_HISTOGRAM;
                                 req.inputs.push_back({TM_DTYPE_F32, {e.size()}, std::as_bytes(e), 0});
                                 req.inputs.push_back({TM_DTYPE_U64, {prefixes.size()}, std::as_bytes(prefixes), 0});
                                 req.outputs.push_back({TM_DTYPE_U64, {band_counts.size()},
                                                        std::as_writable_bytes(std::span(band_counts))});
                                 req.outputs.push_back({TM_DTYPE_U64, {ops::kRadixClasses},
                                                        std::as_writable_bytes(std::span(band_classes))});
                                 req.attributes = {{TM_ATTR_KEY, static_cast<int64_t>(params.key), 0},
                                                   {TM_ATTR_SHIFT, params.shift, 0},
                                                   {TM_ATTR_BITS, params.bits, 0},
                                                   {TM_ATTR_CENTER, 0, params.center}};
                                 TM_RETURN_IF_ERROR(run_f32_op(scheduler, subject, std::move(req), records, max_threads));
                                 for (size_t i = 0; i < counts.size(); ++i) counts[i] += band_counts[i];
                                 for (size_t i = 0; i < classes.size(); ++i) classes[i] += band_classes[i];
                                 return Status::Ok();
                               });
  };
  const std::array<double, 3> probabilities = {0.5, 0.95, 0.99};
  const auto ranks_of = [&](uint64_t n) {
    std::vector<uint64_t> ranks;
    if (n == 0) return ranks;
    for (const double q : probabilities) ranks.push_back(inverted_cdf_rank(n, q));
    std::sort(ranks.begin(), ranks.end());
    ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
    return ranks;
  };
  TM_ASSIGN_OR_RETURN(const KeySelection selected, select_keys(pass, ops::RadixKey::kMagnitude, 0, 0, ranks_of));
  const auto magnitude_at = [&](uint64_t rank) {
    for (size_t i = 0; i < selected.ranks.size(); ++i) {
      if (selected.ranks[i] == rank) {
        float v;
        const uint32_t bits = static_cast<uint32_t>(selected.keys[i]);
        std::memcpy(&v, &bits, sizeof v);
        return static_cast<double>(v);
      }
    }
    return 0.0;
  };
  const uint64_t finite = selected.classes[0];
  if (finite > 0) {
    out.p50_abs = magnitude_at(inverted_cdf_rank(finite, 0.5));
    out.p95_abs = magnitude_at(inverted_cdf_rank(finite, 0.95));
    out.p99_abs = magnitude_at(inverted_cdf_rank(finite, 0.99));
  }

  // 3. The error histogram and, when asked, per-row and per-block statistics, in one sweep.
  const double reach = out.stats.max_abs_diff > 0 ? out.stats.max_abs_diff : 1.0;
  out.histogram_lo = -reach;
  out.histogram_hi = reach;
  out.histogram.assign(options.histogram_bins + 3, 0);
  if (options.rows) out.rows.resize(m.rows);
  const uint64_t block = std::max<uint64_t>(out.block_elements, 1);
  const bool blocks = options.blocks && m.cols % block == 0;
  if (blocks) out.blocks.resize(elements / block);
  std::vector<uint64_t> band_histogram(out.histogram.size());
  const auto sweep = [&](std::span<const float> e, uint64_t r0, uint64_t rows) -> Status {
        compute::OpRequest req;
        req.op = TM_OP_HISTOGRAM;
        req.inputs.push_back({TM_DTYPE_F32, {e.size()}, std::as_bytes(e), 0});
        req.outputs.push_back({TM_DTYPE_U64, {band_histogram.size()}, std::as_writable_bytes(std::span(band_histogram))});
        req.attributes = {{TM_ATTR_LO, 0, out.histogram_lo}, {TM_ATTR_HI, 0, out.histogram_hi},
                          {TM_ATTR_BINS, static_cast<int64_t>(options.histogram_bins), 0}};
        TM_RETURN_IF_ERROR(run_f32_op(scheduler, subject, std::move(req), records, max_threads));
        for (size_t i = 0; i < band_histogram.size(); ++i) out.histogram[i] += band_histogram[i];
        if (options.rows) {
          TM_RETURN_IF_ERROR(row_stats(scheduler, subject, e, rows, m.cols, std::span(out.rows).subspan(r0, rows), records,
                                       max_threads));
        }
        if (blocks) {
          const uint64_t per_row = m.cols / block;
          TM_RETURN_IF_ERROR(row_stats(scheduler, subject, e, rows * per_row, block,
                                       std::span(out.blocks).subspan(r0 * per_row, rows * per_row), records,
                                       max_threads));
        }
        return Status::Ok();
  };
  TM_RETURN_IF_ERROR(for_each_error_band(scheduler, bands, m, chunk_band_rows, records, max_threads, sweep));
  return out;
}

/// Rows per band whose elements are whole TM_DIFF_CHUNKs, about 64 MiB of float32 error each.
uint64_t error_band_rows(MatrixShape m) {
  const uint64_t align = m.cols == 0 ? 1 : TM_DIFF_CHUNK / std::gcd<uint64_t>(m.cols, TM_DIFF_CHUNK);
  if (align * m.cols * sizeof(float) > (1ull << 30)) return std::max<uint64_t>(m.rows, 1);
  uint64_t rows = std::max<uint64_t>(1, (64ull << 20) / std::max<uint64_t>(m.cols * sizeof(float), 1));
  rows -= rows % align;
  return std::max(rows, align);
}

std::string where(const Checkpoint& checkpoint, const TensorInfo& tensor) {
  return checkpoint.files()[tensor.file].path.string() + ": tensor " + quoted_name(tensor.name);
}

}  // namespace

bool is_ggml_quantized(DType dtype) {
  return dtype_info(dtype).is_quantized;
}

Result<QuantizationError> measured_quantization_error(compute::Scheduler& scheduler, const Checkpoint& a,
                                                      const Checkpoint& b, const MatchedTensors& match,
                                                      const QuantizationErrorOptions& options, Records* records,
                                                      uint32_t max_threads) {
  TM_RETURN_IF_ERROR(check_pair(a, b, match));
  const bool qa = is_ggml_quantized(match.a->dtype), qb = is_ggml_quantized(match.b->dtype);
  if (qa == qb) {
    return Status::InvalidArgument(where(a, *match.a) + " (" + std::string(dtype_name(match.a->dtype)) + ") and " +
                                   where(b, *match.b) + " (" + std::string(dtype_name(match.b->dtype)) + "): " +
                                   (qa ? "both sides are quantized" : "neither side is quantized") +
                                   "; quantization error needs one quantized side and its reference");
  }
  const PairReader reader(a, b, match);
  const ErrorBands bands = [&](uint64_t r0, uint64_t r1) -> Result<ErrorBand> {
    ErrorBand band;
    TM_ASSIGN_OR_RETURN(band.pair, reader.rows(r0, r1));
    band.quantized = qa ? band.pair.left : band.pair.right;
    band.reference = qa ? band.pair.right : band.pair.left;
    return band;
  };
  const MatrixShape m = as_matrix(*match.a);
  return measure(scheduler, pair_subject(match.a->name, match.b->name), bands, m, error_band_rows(m),
                 qa ? match.a->dtype : match.b->dtype,
                 qa ? match.b->dtype : match.a->dtype, options, records, max_threads);
}

std::string what_if_obstacle(const TensorInfo& tensor, DType type) {
  if (!dtype_encodable(type)) return "no encoder for " + std::string(dtype_name(type));
  if (!dtype_decodable(tensor.dtype)) return std::string(dtype_not_decodable_reason(tensor.dtype));
  const MatrixShape m = as_matrix(tensor);
  const uint64_t block = dtype_info(type).block_elems;
  if (block > 1 && m.cols % block != 0) {
    return "rows of " + std::to_string(m.cols) + " elements are not a whole number of " + std::string(dtype_name(type)) +
           " blocks of " + std::to_string(block);
  }
  return "";
}

Result<QuantizationError> what_if_quantization_error(compute::Scheduler& scheduler, const Checkpoint& checkpoint,
                                                     const TensorInfo& tensor, DType type,
                                                     const QuantizationErrorOptions& options, Records* records,
                                                     uint32_t max_threads) {
  if (const std::string why = what_if_obstacle(tensor, type); !why.empty()) {
    return Status::Unsupported(where(checkpoint, tensor) + ": cannot quantize to " + std::string(dtype_name(type)) +
                                      ": " + why);
  }
  const MatrixShape m = as_matrix(tensor);
  TM_ASSIGN_OR_RETURN(const uint64_t q_row_bytes, dtype_storage_bytes(type, m.cols));
  // The whole tensor is encoded once (it is smaller than its source) and then read like a file.
  std::vector<std::byte> encoded(m.rows * q_row_bytes);
  const uint64_t band_rows = error_band_rows(m);
  for (uint64_t r0 = 0; r0 < m.rows; r0 += band_rows) {
    const uint64_t r1 = std::min(m.rows, r0 + band_rows);
    TM_ASSIGN_OR_RETURN(auto values, decode_rows(scheduler, checkpoint, tensor, r0, r1, records));
    // ggml's reference quantizers are sequential per row; rows go to threads.
    const uint64_t rows = r1 - r0;
    const uint32_t workers = static_cast<uint32_t>(std::clamp<uint64_t>(
        max_threads ? max_threads : std::max(1u, std::thread::hardware_concurrency()), 1, rows));
    std::vector<Status> failures(workers);
    std::vector<std::thread> threads;
    for (uint32_t w = 0; w < workers; ++w) {
      threads.emplace_back([&, w] {
        const uint64_t begin = rows * w / workers, end = rows * (w + 1) / workers;
        if (begin == end) return;
        auto bytes = encode_from_f32(type, std::span(values).subspan(begin * m.cols, (end - begin) * m.cols));
        if (!bytes.ok()) {
          failures[w] = bytes.status();
          return;
        }
        std::memcpy(encoded.data() + (r0 + begin) * q_row_bytes, bytes->data(), bytes->size());
      });
    }
    for (auto& t : threads) t.join();
    for (const auto& f : failures) TM_RETURN_IF_ERROR(f.with_context(where(checkpoint, tensor) + ": quantizing"));
  }
  const ErrorBands bands = [&](uint64_t r0, uint64_t r1) -> Result<ErrorBand> {
    ErrorBand band;
    TM_ASSIGN_OR_RETURN(band.pair.a, matrix_rows(checkpoint, tensor, r0, r1));
    band.reference = {band.pair.a.bytes, tensor.dtype, 0, 0, tensor.name};
    band.quantized = {std::span<const std::byte>(encoded).subspan(r0 * q_row_bytes, (r1 - r0) * q_row_bytes), type, 0, 0,
                      tensor.name};
    return band;
  };
  return measure(scheduler, tensor.name, bands, m, band_rows, type, tensor.dtype, options, records, max_threads);
}

namespace {

nlohmann::ordered_json error_stats_json(const TM_TileStats& s) {
  const uint64_t finite = s.count - s.nan - s.pos_inf - s.neg_inf;
  return {{"count", s.count},
          {"rmse", finite ? std::sqrt(s.sum_sq / static_cast<double>(finite)) : 0.0},
          {"max_abs", s.absmax},
          {"mean", finite ? s.sum / static_cast<double>(finite) : 0.0},
          {"non_finite", s.nan + s.pos_inf + s.neg_inf}};
}

}  // namespace

nlohmann::ordered_json quantization_error_json(const QuantizationError& e) {
  nlohmann::ordered_json j = {{"quantized", std::string(dtype_name(e.quantized))},
                              {"reference", std::string(dtype_name(e.reference))},
                              {"rmse", figure_json(e.metrics.rmse)},
                              {"max_abs", figure_json(e.metrics.max_abs_diff)},
                              {"p50_abs", e.p50_abs},
                              {"p95_abs", e.p95_abs},
                              {"p99_abs", e.p99_abs},
                              {"mean_error", figure_json(-e.metrics.mean_diff)},
                              {"rel_rms", figure_json(e.metrics.rel_frobenius)},
                              {"snr_db", figure_json(e.metrics.snr_db)},
                              {"cosine", figure_json(e.metrics.cosine)},
                              {"pairs", e.stats.pairs},
                              {"finite_pairs", e.stats.finite_pairs},
                              {"class_mismatch", e.stats.class_mismatch}};
  if (e.stats.max_abs_index != UINT64_MAX) j["max_abs_index"] = e.stats.max_abs_index;
  j["histogram"] = {{"lo", e.histogram_lo}, {"hi", e.histogram_hi}, {"counts", e.histogram}};
  if (!e.rows.empty()) {
    j["rows"] = nlohmann::ordered_json::array();
    for (const auto& r : e.rows) j["rows"].push_back(error_stats_json(r));
  }
  if (!e.blocks.empty()) {
    j["block_elements"] = e.block_elements;
    j["blocks"] = nlohmann::ordered_json::array();
    for (const auto& b : e.blocks) j["blocks"].push_back(error_stats_json(b));
  }
  return j;
}

}  // namespace tensormorph::engine
