#include "engine/checkpoint_diff.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <tuple>

#include "core/printable.h"
#include "tensormorph/decode.h"
#include "engine/matrix_shape.h"

namespace tensormorph::engine {
namespace {

/// Bytes of one side a band reads at most (the larger side decides the band's rows).
constexpr uint64_t kPairBandBytes = 256ull << 20;
/// A band whose chunk alignment needs more rows than this many bytes is the whole tensor instead.
constexpr uint64_t kLargestAlignedBand = 1ull << 30;

std::string where(const Checkpoint& checkpoint, const TensorInfo& tensor) {
  return checkpoint.files()[tensor.file].path.string() + ": tensor " + quoted_name(tensor.name);
}

/// How B's rows line up with A's: b_row[r] is the B row that pairs with A's row r (empty: the same).
std::vector<uint64_t> b_rows_in_a_order(const MatchedTensors& match) {
  std::vector<uint64_t> b_row;
  const uint32_t heads = match.transform.permuted_heads;
  if (heads == 0) return b_row;
  const uint64_t rows = as_matrix(*match.a).rows;
  b_row.resize(rows);
  if (match.transform.gguf_side == 0) {
    // A is the GGUF side: its row g holds the Hugging Face row gguf_row_source(g).
    for (uint64_t g = 0; g < rows; ++g) b_row[g] = gguf_row_source(g, rows, heads);
  } else {
    for (uint64_t g = 0; g < rows; ++g) b_row[gguf_row_source(g, rows, heads)] = g;
  }
  return b_row;
}

/// The value offsets that undo the converter: the side that is not GGUF gets what the GGUF side holds extra.
std::pair<double, double> side_offsets(const ConverterTransform& t) {
  if (t.gguf_offset == 0) return {0.0, 0.0};
  return t.gguf_side == 0 ? std::pair{0.0, t.gguf_offset} : std::pair{t.gguf_offset, 0.0};
}

/// Rows per band of the comparison: about kPairBandBytes of the larger side, a multiple of
/// `align_rows` (so every band starts at a multiple of the chunk); all rows when that is too much.
Result<uint64_t> band_rows_of(const MatchedTensors& match, uint64_t align_rows) {
  const MatrixShape m = as_matrix(*match.a);
  TM_ASSIGN_OR_RETURN(const uint64_t a_row, dtype_storage_bytes(match.a->dtype, m.cols));
  TM_ASSIGN_OR_RETURN(const uint64_t b_row, dtype_storage_bytes(match.b->dtype, m.cols));
  const uint64_t row_bytes = std::max<uint64_t>({a_row, b_row, 1});
  if (align_rows * row_bytes > kLargestAlignedBand) return m.rows;
  uint64_t rows = std::max<uint64_t>(1, kPairBandBytes / row_bytes);
  rows -= rows % align_rows;
  return std::max(rows, align_rows);
}

/// Rows whose elements are a whole number of TM_DIFF_CHUNKs.
uint64_t chunk_rows(uint64_t cols) {
  if (cols == 0) return 1;
  return TM_DIFF_CHUNK / std::gcd<uint64_t>(cols, TM_DIFF_CHUNK);
}

}  // namespace

Status check_pair(const Checkpoint& a, const Checkpoint& b, const MatchedTensors& match) {
  if (match.a->shape != match.b->shape) {
    return Status::InvalidArgument(where(a, *match.a) + " and " + where(b, *match.b) + " have different shapes");
  }
  for (const auto& [ckpt, t] : {std::pair{&a, match.a}, std::pair{&b, match.b}}) {
    if (!dtype_decodable(t->dtype)) {
      return Status::Unsupported(where(*ckpt, *t) + ": " + std::string(dtype_not_decodable_reason(t->dtype)));
    }
  }
  return Status::Ok();
}

PairReader::PairReader(const Checkpoint& a, const Checkpoint& b, const MatchedTensors& match)
    : a_(&a), b_(&b), match_(match), b_row_(b_rows_in_a_order(match)) {
  std::tie(a_offset_, b_offset_) = side_offsets(match.transform);
}

Result<BandPair> PairReader::rows(uint64_t r0, uint64_t r1) const {
  BandPair out;
  TM_ASSIGN_OR_RETURN(out.a, matrix_rows(*a_, *match_.a, r0, r1));
  if (b_row_.empty()) {
    TM_ASSIGN_OR_RETURN(out.b, matrix_rows(*b_, *match_.b, r0, r1));
  } else {
    const MatrixShape m = as_matrix(*match_.b);
    TM_ASSIGN_OR_RETURN(const uint64_t row_bytes, dtype_storage_bytes(match_.b->dtype, m.cols));
    out.b.owned.resize((r1 - r0) * row_bytes);
    for (uint64_t r = r0; r < r1; ++r) {
      TM_ASSIGN_OR_RETURN(auto one, matrix_rows(*b_, *match_.b, b_row_[r], b_row_[r] + 1));
      std::memcpy(out.b.owned.data() + (r - r0) * row_bytes, one.bytes.data(), row_bytes);
    }
    out.b.bytes = out.b.owned;
  }
  // Spans into `owned` stay valid when the vectors move with the struct.
  out.left = {out.a.bytes, match_.a->dtype, a_offset_, 0, match_.a->name};
  out.right = {out.b.bytes, match_.b->dtype, b_offset_, 0, match_.b->name};
  return out;
}

Result<uint64_t> diff_band_rows(const MatchedTensors& match) {
  return band_rows_of(match, chunk_rows(as_matrix(*match.a).cols));
}

Result<TM_DiffStats> compare_tensors(compute::Scheduler& scheduler, const Checkpoint& a, const Checkpoint& b,
                                     const MatchedTensors& match, Records* records, uint32_t max_threads,
                                     const PairBandDone& band_done) {
  TM_RETURN_IF_ERROR(check_pair(a, b, match));
  const MatrixShape m = as_matrix(*match.a);
  std::vector<TM_DiffStats> chunks;
  if (match.a->elements() == 0) return ops::merge_diff_stats(chunks);
  const PairReader reader(a, b, match);
  TM_ASSIGN_OR_RETURN(const uint64_t band_rows, diff_band_rows(match));
  for (uint64_t r0 = 0; r0 < m.rows; r0 += band_rows) {
    const uint64_t r1 = std::min(m.rows, r0 + band_rows);
    TM_ASSIGN_OR_RETURN(auto rows, reader.rows(r0, r1));
    TM_ASSIGN_OR_RETURN(auto band, run_diff_stats(scheduler, rows.left, rows.right, (r1 - r0) * m.cols, r0 * m.cols,
                                                  records, max_threads));
    chunks.insert(chunks.end(), band.begin(), band.end());
    if (band_done) band_done(rows.a.bytes.size() + rows.b.bytes.size());
  }
  return ops::merge_diff_stats(chunks);
}

Result<std::vector<float>> difference_rows(compute::Scheduler& scheduler, const Checkpoint& a, const Checkpoint& b,
                                           const MatchedTensors& match, uint64_t row_begin, uint64_t row_end,
                                           Records* records, uint32_t max_threads) {
  TM_RETURN_IF_ERROR(check_pair(a, b, match));
  const MatrixShape m = as_matrix(*match.a);
  if (row_begin > row_end || row_end > m.rows) {
    return Status::InvalidArgument(where(a, *match.a) + ": rows [" + std::to_string(row_begin) + ", " +
                                   std::to_string(row_end) + ") are outside its " + std::to_string(m.rows) + " rows");
  }
  std::vector<float> out;
  out.reserve((row_end - row_begin) * m.cols);
  const PairReader reader(a, b, match);
  TM_ASSIGN_OR_RETURN(const uint64_t band_rows, band_rows_of(match, 1));
  for (uint64_t r0 = row_begin; r0 < row_end; r0 += band_rows) {
    const uint64_t r1 = std::min(row_end, r0 + band_rows);
    TM_ASSIGN_OR_RETURN(auto rows, reader.rows(r0, r1));
    TM_ASSIGN_OR_RETURN(auto band, run_subtract(scheduler, rows.left, rows.right, (r1 - r0) * m.cols, records,
                                                max_threads));
    out.insert(out.end(), band.begin(), band.end());
  }
  return out;
}

Result<PyramidLevel> difference_tile_stats(compute::Scheduler& scheduler, const Checkpoint& a, const Checkpoint& b,
                                           const MatchedTensors& match, uint32_t tile, Records* records,
                                           uint32_t max_threads) {
  TM_RETURN_IF_ERROR(check_pair(a, b, match));
  const MatrixShape m = as_matrix(*match.a);
  PyramidLevel level;
  level.grid = ops::tile_grid({0, m.rows, 0, m.cols}, tile);
  level.tiles.assign(level.grid.count(), ops::empty_tile_stats());
  if (match.a->elements() == 0) return level;
  // The difference is float32 whatever the sides store: bands of whole tile rows of it.
  const uint64_t diff_row_bytes = std::max<uint64_t>(m.cols * sizeof(float), 1);
  uint64_t band_rows = std::max<uint64_t>(1, (kPairBandBytes / 4) / diff_row_bytes);
  band_rows = std::max<uint64_t>(tile, band_rows - band_rows % tile);
  for (uint64_t r0 = 0; r0 < m.rows; r0 += band_rows) {
    const uint64_t r1 = std::min(m.rows, r0 + band_rows);
    TM_ASSIGN_OR_RETURN(auto diff, difference_rows(scheduler, a, b, match, r0, r1, records, max_threads));
    const ops::TileGrid grid = ops::tile_grid({0, r1 - r0, 0, m.cols}, tile);
    const auto out = std::span(level.tiles).subspan(r0 / tile * level.grid.cols, grid.count());
    compute::OpRequest req;
    req.op = TM_OP_TILE_STATS;
    req.subject = pair_subject(match.a->name, match.b->name);
    req.inputs.push_back({TM_DTYPE_F32, {r1 - r0, m.cols}, std::as_bytes(std::span(diff)), 0});
    req.outputs.push_back({TM_DTYPE_U8, {out.size() * sizeof(TM_TileStats)}, std::as_writable_bytes(out)});
    req.max_threads = max_threads;
    req.attributes = {{TM_ATTR_ROW_BEGIN, 0, 0}, {TM_ATTR_ROW_END, static_cast<int64_t>(r1 - r0), 0},
                      {TM_ATTR_COL_BEGIN, 0, 0}, {TM_ATTR_COL_END, static_cast<int64_t>(m.cols), 0},
                      {TM_ATTR_TILE, tile, 0}};
    TM_RETURN_IF_ERROR(run_exact(scheduler, req, records).with_context("difference of " + quoted_name(match.a->name)));
  }
  return level;
}

uint64_t pair_bytes(const MatchedTensors& match) { return match.a->nbytes + match.b->nbytes; }

const std::vector<std::string>& diff_metric_names() {
  static const std::vector<std::string> names = {"rel_fro", "max_abs", "rmse", "nmse", "cosine", "snr_db",
                                                 "mean_diff", "differing", "mismatched"};
  return names;
}

bool smaller_is_more_changed(const std::string& metric) { return metric == "cosine" || metric == "snr_db"; }

double most_changed_key(const TensorComparison& c, const std::string& metric) {
  if (!c.error.empty()) return INFINITY;
  const double v = diff_metric(c, metric);
  if (std::isnan(v)) return smaller_is_more_changed(metric) ? (c.metrics.identical ? -INFINITY : INFINITY) : -INFINITY;
  return smaller_is_more_changed(metric) ? -v : v;
}

nlohmann::ordered_json figure_json(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

double diff_metric(const TensorComparison& c, const std::string& name) {
  const ops::DiffMetrics& m = c.metrics;
  if (name == "rel_fro") return m.rel_frobenius;
  if (name == "max_abs") return m.max_abs_diff;
  if (name == "rmse") return m.rmse;
  if (name == "nmse") return m.nmse;
  if (name == "cosine") return m.cosine;
  if (name == "snr_db") return m.snr_db;
  if (name == "mean_diff") return m.mean_diff;
  if (name == "differing") return static_cast<double>(c.stats.differing);
  if (name == "mismatched") return static_cast<double>(c.stats.class_mismatch);
  return std::nan("");
}

namespace {

nlohmann::ordered_json coordinates(const TensorInfo& tensor, uint64_t flat) {
  const MatrixShape m = as_matrix(tensor);
  return {{"index", flat}, {"row", m.cols ? flat / m.cols : 0}, {"col", m.cols ? flat % m.cols : 0}};
}

}  // namespace

nlohmann::ordered_json comparison_json(const TensorComparison& c) {
  nlohmann::ordered_json j = {{"a", c.match.a->name},
                              {"b", c.match.b->name},
                              {"a_dtype", std::string(dtype_name(c.match.a->dtype))},
                              {"b_dtype", std::string(dtype_name(c.match.b->dtype))},
                              {"shape", c.match.a->shape}};
  if (!c.match.transform.identity()) j["transform"] = c.match.transform.describe();
  if (c.match.from_user_map) j["from_map"] = true;
  if (!c.error.empty()) {
    j["error"] = c.error;
    return j;
  }
  const TM_DiffStats& s = c.stats;
  j["identical"] = c.metrics.identical;
  for (const auto& name : diff_metric_names()) j[name] = figure_json(diff_metric(c, name));
  if (s.max_abs_index != UINT64_MAX) {
    j["max_abs_at"] = coordinates(*c.match.a, s.max_abs_index);
    j["max_abs_at"]["a"] = figure_json(s.a_at_max);
    j["max_abs_at"]["b"] = figure_json(s.b_at_max);
  }
  j["counts"] = {{"pairs", s.pairs},   {"finite_pairs", s.finite_pairs}, {"differing", s.differing},
                 {"bits_differing", s.bits_differing}, {"class_mismatch", s.class_mismatch},
                 {"nan_a", s.nan_a},   {"nan_b", s.nan_b}, {"inf_a", s.inf_a}, {"inf_b", s.inf_b}};
  return j;
}

nlohmann::ordered_json matching_json(const TensorMatching& matching) {
  nlohmann::ordered_json j = {{"naming", matching.naming}, {"matched", matching.matched.size()}};
  j["shape_mismatched"] = nlohmann::ordered_json::array();
  for (const auto& m : matching.shape_mismatched) {
    j["shape_mismatched"].push_back({{"a", m.a->name}, {"b", m.b->name}, {"a_shape", m.a->shape}, {"b_shape", m.b->shape}});
  }
  j["only_a"] = nlohmann::ordered_json::array();
  for (const auto* t : matching.only_a) j["only_a"].push_back(t->name);
  j["only_b"] = nlohmann::ordered_json::array();
  for (const auto* t : matching.only_b) j["only_b"].push_back(t->name);
  return j;
}

}  // namespace tensormorph::engine
