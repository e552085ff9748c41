// The Compare mode's routes: the comparison of two served checkpoints (tensormorph.diff/1, each
// tensor compared on first need and kept), difference tiles (a - b, zero-centred), quantization
// error (measured against a served reference, or what-if per ggml type) and the anatomy of one
// quantization block. Every computation holds only its own entry's lock: a slow comparison never
// holds up other routes, nor other tensors of the same pair.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <list>
#include <functional>
#include <map>
#include <mutex>

#include <httplib.h>

#include "core/decode/block_anatomy.h"
#include "core/quantize/quantize.h"
#include "engine/checkpoint_diff.h"
#include "engine/matrix_shape.h"
#include "engine/quantization_error.h"
#include "engine/render_ops.h"
#include "index/pair_index.h"
#include "server/api.h"
#include "server/http_util.h"
#include "server/png.h"
#include "tensormorph/decode.h"

namespace tensormorph::server {

using json = nlohmann::ordered_json;

namespace {

/// One tensor's comparison, computed once (its mutex is held while computing).
struct ComparisonSlot {
  std::mutex mutex;
  bool done = false;
  engine::TensorComparison comparison;
};

/// A pair of served checkpoints: how their tensors match, and the comparisons made so far.
struct PairState {
  std::mutex mutex;  // guards the fields below, never held while comparing
  bool matched = false;
  Status match_status;
  engine::TensorMatching matching;
  std::map<std::string, std::shared_ptr<ComparisonSlot>> slots;  // by A's name
};

/// A difference pyramid (tile statistics of a - b), built once.
struct PyramidSlot {
  std::mutex mutex;  // held while building
  std::shared_ptr<const StatsPyramid> pyramid;
  uint64_t last_use = 0;  // the store's mutex guards these two
  uint64_t bytes = 0;
};

/// A quantization error measurement, made once.
struct QuantSlot {
  std::mutex mutex;
  std::optional<json> answer;
  uint64_t last_use = 0;
};

constexpr uint64_t kPyramidBudget = uint64_t{256} << 20;
constexpr size_t kMaxQuantAnswers = 32;


Result<size_t> checkpoint_param(const httplib::Request& req, const char* name, const Catalog& catalog) {
  if (!param(req, name)) return Status::InvalidArgument(std::string("missing parameter '") + name + "'");
  TM_ASSIGN_OR_RETURN(const uint64_t id, uint_param(req, name, 0, UINT32_MAX));
  if (id >= catalog.size()) return Status::NotFound("no checkpoint " + std::to_string(id));
  return static_cast<size_t>(id);
}

size_t index_in(const Checkpoint& c, const TensorInfo* t) { return static_cast<size_t>(t - c.tensors().data()); }

std::string cache_number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.17g", v);
  return text;
}

}  // namespace

/// The state behind the Compare routes.
class CompareStore {
 public:
  CompareStore(Catalog& catalog, compute::Scheduler& scheduler) : catalog_(catalog), scheduler_(scheduler), tiles_(uint64_t{64} << 20) {}

  /// The pair (a, b), its matching made on first use.
  Result<std::shared_ptr<PairState>> pair(size_t a, size_t b) {
    std::shared_ptr<PairState> p;
    {
      std::lock_guard lock(mutex_);
      auto& slot = pairs_[{a, b}];
      if (!slot) slot = std::make_shared<PairState>();
      p = slot;
    }
    std::lock_guard lock(p->mutex);
    if (!p->matched) {
      auto m = engine::match_tensors(*catalog_.at(a).checkpoint, *catalog_.at(b).checkpoint);
      p->matched = true;
      if (m.ok()) {
        p->matching = std::move(m).value();
      } else {
        p->match_status = m.status();
      }
    }
    if (!p->match_status.ok()) return p->match_status;
    return p;
  }

  /// The comparison of `match` (a matched pair of `p`), computed on first need.
  const engine::TensorComparison& comparison(size_t a, size_t b, PairState& p, const engine::MatchedTensors& match) {
    std::shared_ptr<ComparisonSlot> slot;
    {
      std::lock_guard lock(p.mutex);
      auto& s = p.slots[match.a->name];
      if (!s) s = std::make_shared<ComparisonSlot>();
      slot = s;
    }
    std::lock_guard lock(slot->mutex);
    if (!slot->done) {
      slot->comparison.match = match;
      auto stats = engine::compare_tensors(scheduler_, *catalog_.at(a).checkpoint, *catalog_.at(b).checkpoint, match);
      if (stats.ok()) {
        slot->comparison.stats = *stats;
        slot->comparison.metrics = ops::diff_metrics(*stats);
      } else {
        slot->comparison.error = stats.status().message();
      }
      slot->done = true;
    }
    return slot->comparison;
  }

  /// The difference pyramid of `match`, built on first need and kept within kPyramidBudget.
  Result<std::shared_ptr<const StatsPyramid>> pyramid(size_t a, size_t b, const engine::MatchedTensors& match) {
    const std::string key = std::to_string(a) + "/" + std::to_string(b) + "/" + match.a->name;
    std::shared_ptr<PyramidSlot> slot;
    {
      std::lock_guard lock(mutex_);
      auto& s = pyramids_[key];
      if (!s) s = std::make_shared<PyramidSlot>();
      s->last_use = ++clock_;
      slot = s;
    }
    std::lock_guard lock(slot->mutex);
    if (slot->pyramid) return slot->pyramid;
    auto built = std::make_shared<StatsPyramid>();
    built->tile = Catalog::fine_tile_for(match.a->elements());
    const Checkpoint& ca = *catalog_.at(a).checkpoint;
    const Checkpoint& cb = *catalog_.at(b).checkpoint;
    // Kept in the pair index beside A's index, so a restarted server reads instead of recomputing;
    // a pair index that cannot be written only costs the recomputation next time.
    TM_ASSIGN_OR_RETURN(auto stored, index::PairIndex::open(ca, cb, built->tile));
    TM_ASSIGN_OR_RETURN(built->levels, index::kept_difference_pyramid(stored, false, scheduler_, ca, cb, match, nullptr,
                                                                      0, nullptr));
    (void)stored.save();
    slot->pyramid = built;
    // Drop the least recently used pyramids (never this one) to stay within budget.
    std::lock_guard lock2(mutex_);
    slot->bytes = built->bytes();
    for (;;) {
      uint64_t total = 0, oldest_use = UINT64_MAX;
      std::string oldest;
      for (const auto& [k, s] : pyramids_) {
        total += s->bytes;
        if (s != slot && s->bytes > 0 && s->last_use < oldest_use) oldest_use = s->last_use, oldest = k;
      }
      if (total <= kPyramidBudget || oldest.empty()) break;
      pyramids_.erase(oldest);
    }
    return slot->pyramid;
  }

  /// A quantization error answer, made once per key by `make` (the most recent kMaxQuantAnswers kept).
  Result<json> quant(const std::string& key, const std::function<Result<json>()>& make) {
    std::shared_ptr<QuantSlot> slot;
    {
      std::lock_guard lock(mutex_);
      auto& s = quants_[key];
      if (!s) s = std::make_shared<QuantSlot>();
      s->last_use = ++clock_;
      slot = s;
      while (quants_.size() > kMaxQuantAnswers) {
        auto oldest = std::min_element(quants_.begin(), quants_.end(),
                                       [](const auto& x, const auto& y) { return x.second->last_use < y.second->last_use; });
        quants_.erase(oldest);
      }
    }
    std::lock_guard lock(slot->mutex);
    if (slot->answer) return *slot->answer;
    TM_ASSIGN_OR_RETURN(json answer, make());
    slot->answer = answer;
    return answer;
  }

  TileCache& tiles() { return tiles_; }

 private:
  Catalog& catalog_;
  compute::Scheduler& scheduler_;
  std::mutex mutex_;  // guards the maps below (never held while computing)
  std::map<std::pair<size_t, size_t>, std::shared_ptr<PairState>> pairs_;
  std::map<std::string, std::shared_ptr<PyramidSlot>> pyramids_;
  std::map<std::string, std::shared_ptr<QuantSlot>> quants_;
  uint64_t clock_ = 0;
  TileCache tiles_;
};

namespace {

struct PairTarget {
  size_t a = 0, b = 0;
  std::shared_ptr<PairState> pair;
};

Result<PairTarget> pair_of(const httplib::Request& req, Catalog& catalog, CompareStore& store) {
  PairTarget t;
  TM_ASSIGN_OR_RETURN(t.a, checkpoint_param(req, "a", catalog));
  TM_ASSIGN_OR_RETURN(t.b, checkpoint_param(req, "b", catalog));
  TM_ASSIGN_OR_RETURN(t.pair, store.pair(t.a, t.b));
  return t;
}

/// The matched pair whose A tensor is `name`; NOT_FOUND / INVALID_ARGUMENT saying why there is none.
Result<engine::MatchedTensors> matched(const PairState& p, const Checkpoint& a, const std::string& name) {
  for (const auto& m : p.matching.matched) {
    if (m.a->name == name) return m;
  }
  for (const auto& m : p.matching.shape_mismatched) {
    if (m.a->name == name) {
      return Status::InvalidArgument("'" + name.substr(0, 200) + "' is " + m.a->shape_string() + " in A but '" +
                                     m.b->name.substr(0, 200) + "' is " + m.b->shape_string() + " in B");
    }
  }
  if (a.find(name) == nullptr) return Status::NotFound("no tensor named '" + name.substr(0, 200) + "' in A");
  return Status::NotFound("'" + name.substr(0, 200) + "' has no counterpart in B");
}

/// The colour ranges of a difference: symmetric about zero, +-max|a - b| and +-min(max, 4 rmse).
json difference_range(const engine::TensorComparison& c) {
  double full = c.error.empty() ? c.metrics.max_abs_diff : 0;
  if (!(full > 0) || !std::isfinite(full)) full = 1;
  double robust = c.error.empty() && std::isfinite(c.metrics.rmse) ? std::min(full, 4 * c.metrics.rmse) : full;
  if (!(robust > 0)) robust = full;
  return {{"symmetric", {-full, full}}, {"robust", {-robust, robust}}};
}

json comparison_entry(const engine::TensorComparison& c, const Checkpoint& a, const Checkpoint& b) {
  json j = engine::comparison_json(c);
  j["a_index"] = index_in(a, c.match.a);
  j["b_index"] = index_in(b, c.match.b);
  return j;
}

std::string hex_of(std::span<const std::byte> bytes) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (std::byte v : bytes) {
    s += digits[std::to_integer<unsigned>(v) >> 4];
    s += digits[std::to_integer<unsigned>(v) & 15];
  }
  return s;
}

json floats_json(std::span<const float> v) {
  json a = json::array();
  for (float x : v) a.push_back(json_number(x));
  return a;
}

json anatomy_json(const BlockAnatomy& a) {
  json j = {{"described", a.described}, {"note", a.note}};
  json fields = json::object();
  if (a.d) fields["d"] = json_number(*a.d);
  if (a.m) fields["m"] = json_number(*a.m);
  if (a.dmin) fields["dmin"] = json_number(*a.dmin);
  j["fields"] = fields;
  json subs = json::array();
  for (const auto& s : a.sub_blocks) {
    json e = {{"first", s.first}, {"count", s.count}, {"scale_q", s.scale_q}, {"scale", json_number(s.scale)}};
    if (s.min_q) {
      e["min_q"] = *s.min_q;
      e["min"] = json_number(s.min);
    }
    subs.push_back(e);
  }
  j["sub_blocks"] = subs;
  j["quants"] = a.quants;
  return j;
}

}  // namespace

void ApiContext::register_compare_routes(httplib::Server& http) {
  compare_ = std::make_shared<CompareStore>(*catalog_, scheduler());

  http.Get("/api/diff", [this](const httplib::Request& req, httplib::Response& res) {
    auto target = pair_of(req, *catalog_, *compare_);
    if (!target.ok()) return reply_error(res, target.status());
    const std::string sort = param(req, "sort").value_or("rel_fro");
    const auto& names = engine::diff_metric_names();
    if (std::find(names.begin(), names.end(), sort) == names.end()) {
      return reply_error(res, Status::InvalidArgument("'sort' is not a metric: '" + sort.substr(0, 40) + "'"));
    }
    const Checkpoint& a = *catalog_->at(target->a).checkpoint;
    const Checkpoint& b = *catalog_->at(target->b).checkpoint;
    const PairState& p = *target->pair;  // the matching is immutable once made
    std::vector<const engine::TensorComparison*> order;
    for (const auto& m : p.matching.matched) order.push_back(&compare_->comparison(target->a, target->b, *target->pair, m));
    std::stable_sort(order.begin(), order.end(),
                     [&](const auto* x, const auto* y) { return engine::most_changed_key(*x, sort) > engine::most_changed_key(*y, sort); });
    json j = {{"schema", "tensormorph.diff/1"}, {"a", catalog_->at(target->a).label}, {"b", catalog_->at(target->b).label},
              {"a_id", target->a}, {"b_id", target->b}};
    j["matching"] = engine::matching_json(p.matching);
    j["sort"] = sort;
    j["tensors"] = json::array();
    for (const auto* c : order) j["tensors"].push_back(comparison_entry(*c, a, b));
    reply_json(res, j);
  });

  http.Get("/api/diff/tensor", [this](const httplib::Request& req, httplib::Response& res) {
    auto target = pair_of(req, *catalog_, *compare_);
    if (!target.ok()) return reply_error(res, target.status());
    auto name = param(req, "tensor");
    if (!name) return reply_error(res, Status::InvalidArgument("missing parameter 'tensor'"));
    const Checkpoint& a = *catalog_->at(target->a).checkpoint;
    const Checkpoint& b = *catalog_->at(target->b).checkpoint;
    auto match = matched(*target->pair, a, *name);
    if (!match.ok()) return reply_error(res, match.status());
    const auto& c = compare_->comparison(target->a, target->b, *target->pair, *match);
    json j = comparison_entry(c, a, b);
    const engine::MatrixShape m = engine::as_matrix(*match->a);
    j["rows"] = m.rows;
    j["cols"] = m.cols;
    j["zoom"] = zoom_geometry(m.rows, m.cols).to_json();
    j["range"] = difference_range(c);
    reply_json(res, j);
  });

  http.Get(R"(/api/diff/tile/(\d{1,10})/(\d{1,10})/(\d{1,10})/(\d{1,3})/(\d{1,20})/(\d{1,20})\.png)",
           [this](const httplib::Request& req, httplib::Response& res) {
    auto a_id = parse_uint(req.matches[1], "checkpoint a", UINT32_MAX);
    auto b_id = parse_uint(req.matches[2], "checkpoint b", UINT32_MAX);
    auto tensor = parse_uint(req.matches[3], "tensor", UINT32_MAX);
    auto level = parse_uint(req.matches[4], "level", 255);
    auto x = parse_uint(req.matches[5], "x", UINT64_MAX);
    auto y = parse_uint(req.matches[6], "y", UINT64_MAX);
    for (const auto* r : {&a_id, &b_id, &tensor, &level, &x, &y}) {
      if (!r->ok()) return reply_error(res, r->status());
    }
    for (uint64_t id : {*a_id, *b_id}) {
      if (id >= catalog_->size()) return reply_error(res, Status::NotFound("no checkpoint " + std::to_string(id)));
    }
    const Checkpoint& a = *catalog_->at(*a_id).checkpoint;
    if (*tensor >= a.tensors().size()) return reply_error(res, Status::NotFound("no tensor " + std::to_string(*tensor)));
    auto pair = compare_->pair(*a_id, *b_id);
    if (!pair.ok()) return reply_error(res, pair.status());
    auto match = matched(**pair, a, a.tensors()[*tensor].name);
    if (!match.ok()) return reply_error(res, match.status());
    auto stat = ops::pixel_stat_from_name(param(req, "stat").value_or("mean"));
    if (!stat) return reply_error(res, Status::InvalidArgument("unknown stat"));
    auto lo = double_param(req, "lo", -1), hi = double_param(req, "hi", 1);
    if (!lo.ok() || !hi.ok()) return reply_error(res, lo.ok() ? hi.status() : lo.status());
    const engine::MatrixShape m = engine::as_matrix(*match->a);
    const ZoomGeometry g = zoom_geometry(m.rows, m.cols);
    const auto lvl = static_cast<uint32_t>(*level);
    if (lvl > g.max_level || lvl < g.min_level) {
      return reply_error(res, Status::InvalidArgument("level " + std::to_string(lvl) + " is outside [" +
                                                      std::to_string(g.min_level) + ", " + std::to_string(g.max_level) + "]"));
    }
    if (*x >= g.tiles_x(lvl) || *y >= g.tiles_y(lvl)) {
      return reply_error(res, Status::NotFound("tile (" + std::to_string(*x) + ", " + std::to_string(*y) +
                                               ") is outside level " + std::to_string(lvl)));
    }
    ops::RenderParams p;
    p.stat = *stat;
    p.colormap = ops::ColorMap::kDiverging;  // a difference is always shown centred on zero
    p.lo = *lo;
    p.hi = *hi;
    if (Status ok = ops::check_render_params(p); !ok.ok()) return reply_error(res, ok);
    const std::string key = std::to_string(*a_id) + "/" + std::to_string(*b_id) + "/" + match->a->name + "/" +
                            std::to_string(lvl) + "/" + std::to_string(*x) + "/" + std::to_string(*y) + "/" +
                            std::string(ops::pixel_stat_name(p.stat)) + "/" + cache_number(p.lo) + "/" + cache_number(p.hi);
    std::shared_ptr<const std::string> png = compare_->tiles().get(key);
    std::string source = "cache";
    if (!png) {
      g.cell_of(lvl, p.cell, p.magnify);
      const uint64_t span = g.tile_span(lvl);
      const uint64_t elements = match->a->elements();
      const uint32_t fine_tile = Catalog::fine_tile_for(elements);
      Result<engine::RenderOutcome> outcome = Status::Internal("not rendered");
      if (p.cell <= ops::kMaxRenderCell && (elements <= kValuesOnlyElements || p.cell < fine_tile)) {
        // Deep: the values of a - b over the rows this tile covers.
        const uint64_t r0 = *y * span, r1 = std::min(m.rows, r0 + span);
        auto diff = engine::difference_rows(scheduler(), a, *catalog_->at(*b_id).checkpoint, *match, r0, r1);
        if (!diff.ok()) return reply_error(res, diff.status());
        p.row_begin = 0;
        p.col_begin = *x * span;
        outcome = engine::render_f32_tile(scheduler(), *diff, r1 - r0, m.cols, p,
                                          engine::pair_subject(match->a->name, match->b->name));
        source = "difference values";
      } else {
        auto pyramid = compare_->pyramid(*a_id, *b_id, *match);
        if (!pyramid.ok()) return reply_error(res, pyramid.status());
        const size_t k = static_cast<size_t>(std::countr_zero(p.cell / (*pyramid)->tile));
        if (k >= (*pyramid)->levels.size()) return reply_error(res, Status::Internal("no pyramid level for this cell"));
        const auto& grid = (*pyramid)->levels[k];
        p.source = ops::RenderSource::kTileStats;
        p.cell = 1;
        p.magnify = 1;
        p.row_begin = *y * ops::kRenderTilePixels;
        p.col_begin = *x * ops::kRenderTilePixels;
        outcome = engine::render_stats_tile(scheduler(), grid.tiles, grid.grid.rows, grid.grid.cols, p, 0,
                                            engine::pair_subject(match->a->name, match->b->name));
        source = "difference pyramid";
      }
      if (!outcome.ok()) return reply_error(res, outcome.status());
      if (outcome->needs_consent) {
        return reply_json(res, {{"error", "needs consent"}, {"needs_consent", true}, {"reason", outcome->consent_reason}}, 409);
      }
      auto encoded = encode_png(outcome->rgba, ops::kRenderTilePixels, ops::kRenderTilePixels);
      if (!encoded.ok()) return reply_error(res, encoded.status());
      png = std::make_shared<const std::string>(std::move(encoded).value());
      compare_->tiles().put(key, png);
    }
    const std::string etag = "\"d" + std::to_string(std::hash<std::string>{}(*png)) + "\"";
    res.set_header("ETag", etag);
    res.set_header("Cache-Control", "private, max-age=86400");
    res.set_header("X-Tensormorph-Source", source);
    if (req.get_header_value("If-None-Match") == etag) {
      res.status = 304;
      return;
    }
    res.set_content(*png, "image/png");
  });

  http.Get("/api/quant-error", [this](const httplib::Request& req, httplib::Response& res) {
    auto id = checkpoint_param(req, "ckpt", *catalog_);
    if (!id.ok()) return reply_error(res, id.status());
    auto name = param(req, "tensor");
    if (!name) return reply_error(res, Status::InvalidArgument("missing parameter 'tensor'"));
    const Checkpoint& ckpt = *catalog_->at(*id).checkpoint;
    const TensorInfo* tensor = ckpt.find(*name);
    if (tensor == nullptr) return reply_error(res, Status::NotFound("no tensor named '" + name->substr(0, 200) + "'"));
    auto bins = uint_param(req, "bins", 64, 4096);
    if (!bins.ok()) return reply_error(res, bins.status());
    if (*bins == 0) return reply_error(res, Status::InvalidArgument("'bins' must be at least 1"));
    engine::QuantizationErrorOptions options;
    options.histogram_bins = static_cast<uint32_t>(*bins);
    options.rows = param(req, "rows").value_or("1") != "0";
    options.blocks = param(req, "blocks").value_or("1") != "0";
    const auto reference = param(req, "reference");
    const auto type_name = param(req, "type");
    if (reference.has_value() == type_name.has_value()) {
      return reply_error(res, Status::InvalidArgument("give either 'reference' (a checkpoint id) or 'type' (a ggml type)"));
    }
    const std::string key = std::to_string(*id) + "/" + *name + "/" + (reference ? "r" + *reference : "t" + *type_name) + "/" +
                            std::to_string(*bins) + (options.rows ? "R" : "") + (options.blocks ? "B" : "");
    Result<json> answer = Status::Internal("not measured");
    if (reference) {
      auto ref = checkpoint_param(req, "reference", *catalog_);
      if (!ref.ok()) return reply_error(res, ref.status());
      auto pair = compare_->pair(*id, *ref);
      if (!pair.ok()) return reply_error(res, pair.status());
      auto match = matched(**pair, ckpt, *name);
      if (!match.ok()) return reply_error(res, match.status());
      answer = compare_->quant(key, [&]() -> Result<json> {
        TM_ASSIGN_OR_RETURN(auto e, engine::measured_quantization_error(scheduler(), ckpt, *catalog_->at(*ref).checkpoint,
                                                                        *match, options));
        json j = {{"mode", "measured"}, {"tensor", *name}, {"reference_tensor", match->b->name}, {"reference_id", *ref}};
        j.update(engine::quantization_error_json(e));
        return j;
      });
    } else {
      auto type = dtype_from_name(*type_name);
      if (!type || !engine::is_ggml_quantized(*type)) {
        return reply_error(res, Status::InvalidArgument("'" + type_name->substr(0, 40) + "' is not a ggml quantized type"));
      }
      if (const std::string why = engine::what_if_obstacle(*tensor, *type); !why.empty()) {
        return reply_error(res, Status::InvalidArgument(why));
      }
      answer = compare_->quant(key, [&]() -> Result<json> {
        TM_ASSIGN_OR_RETURN(auto e, engine::what_if_quantization_error(scheduler(), ckpt, *tensor, *type, options));
        json j = {{"mode", "what-if"}, {"tensor", *name}, {"type", std::string(dtype_name(*type))}};
        j.update(engine::quantization_error_json(e));
        return j;
      });
    }
    if (!answer.ok()) return reply_error(res, answer.status());
    json j = *answer;
    const engine::MatrixShape m = engine::as_matrix(*tensor);
    j["rows_count"] = m.rows;
    j["cols"] = m.cols;
    reply_json(res, j);
  });

  http.Get("/api/block", [this](const httplib::Request& req, httplib::Response& res) {
    auto id = checkpoint_param(req, "ckpt", *catalog_);
    if (!id.ok()) return reply_error(res, id.status());
    auto name = param(req, "tensor");
    if (!name) return reply_error(res, Status::InvalidArgument("missing parameter 'tensor'"));
    const Checkpoint& ckpt = *catalog_->at(*id).checkpoint;
    const TensorInfo* tensor = ckpt.find(*name);
    if (tensor == nullptr) return reply_error(res, Status::NotFound("no tensor named '" + name->substr(0, 200) + "'"));
    const auto reference = param(req, "reference");
    const auto type_name = param(req, "type");
    if (reference && type_name) return reply_error(res, Status::InvalidArgument("give 'reference' or 'type', not both"));
    // The quantized type: the stored one, or the what-if type.
    DType type = tensor->dtype;
    if (type_name) {
      auto t = dtype_from_name(*type_name);
      if (!t || !engine::is_ggml_quantized(*t)) {
        return reply_error(res, Status::InvalidArgument("'" + type_name->substr(0, 40) + "' is not a ggml quantized type"));
      }
      if (const std::string why = engine::what_if_obstacle(*tensor, *t); !why.empty()) {
        return reply_error(res, Status::InvalidArgument(why));
      }
      type = *t;
    } else if (!engine::is_ggml_quantized(type)) {
      return reply_error(res, Status::InvalidArgument("'" + name->substr(0, 200) + "' is " + std::string(dtype_name(type)) +
                                                      ", not ggml-quantized: give 'type' for a what-if"));
    }
    const DTypeInfo& info = dtype_info(type);
    const engine::MatrixShape m = engine::as_matrix(*tensor);
    const uint64_t blocks_per_row = m.cols / info.block_elems;
    auto row = uint_param(req, "row", 0, m.rows - 1);
    auto block = uint_param(req, "block", 0, blocks_per_row == 0 ? 0 : blocks_per_row - 1);
    if (!row.ok() || !block.ok()) return reply_error(res, row.ok() ? block.status() : row.status());
    const uint64_t c0 = *block * info.block_elems, c1 = c0 + info.block_elems;
    std::vector<std::byte> raw;
    std::vector<float> ref_values;
    if (type_name) {
      // What-if: the tensor's own values are the reference; ggml's quantizer encodes this block.
      auto values = engine::decode_rows(scheduler(), ckpt, *tensor, *row, *row + 1);
      if (!values.ok()) return reply_error(res, values.status());
      ref_values.assign(values->begin() + static_cast<ptrdiff_t>(c0), values->begin() + static_cast<ptrdiff_t>(c1));
      auto encoded = encode_from_f32(type, ref_values);
      if (!encoded.ok()) return reply_error(res, encoded.status());
      raw = std::move(encoded).value();
    } else {
      auto rows = engine::matrix_rows(ckpt, *tensor, *row, *row + 1);
      if (!rows.ok()) return reply_error(res, rows.status());
      const auto bytes = rows->bytes.subspan(*block * info.block_bytes, info.block_bytes);
      raw.assign(bytes.begin(), bytes.end());
      if (reference) {
        auto ref = checkpoint_param(req, "reference", *catalog_);
        if (!ref.ok()) return reply_error(res, ref.status());
        auto pair = compare_->pair(*id, *ref);
        if (!pair.ok()) return reply_error(res, pair.status());
        auto match = matched(**pair, ckpt, *name);
        if (!match.ok()) return reply_error(res, match.status());
        // B's row paired with this one, in A's order and with the converter's offset applied.
        engine::PairReader reader(ckpt, *catalog_->at(*ref).checkpoint, *match);
        auto band = reader.rows(*row, *row + 1);
        if (!band.ok()) return reply_error(res, band.status());
        std::vector<float> whole(m.cols);
        if (Status s = decode_to_f32(band->right.dtype, band->right.bytes, m.cols, whole.data()); !s.ok()) {
          return reply_error(res, s);
        }
        const float offset = static_cast<float>(band->right.offset);
        for (uint64_t c = c0; c < c1; ++c) ref_values.push_back(offset != 0 ? whole[c] + offset : whole[c]);
      }
    }
    auto anatomy = block_anatomy(type, raw);
    if (!anatomy.ok()) return reply_error(res, anatomy.status());
    std::vector<float> decoded(info.block_elems);
    if (Status s = decode_to_f32(type, raw, info.block_elems, decoded.data()); !s.ok()) return reply_error(res, s);
    json j = {{"tensor", *name}, {"dtype", std::string(dtype_name(type))}, {"mode", type_name ? "what-if" : reference ? "measured" : "stored"},
              {"row", *row}, {"block", *block}, {"cols", {c0, c1}}, {"block_elements", info.block_elems},
              {"block_bytes", info.block_bytes}, {"raw", hex_of(raw)}};
    j.update(anatomy_json(*anatomy));
    j["decoded"] = floats_json(decoded);
    if (!ref_values.empty()) {
      std::vector<float> error(decoded.size());
      for (size_t i = 0; i < decoded.size(); ++i) error[i] = decoded[i] - ref_values[i];
      j["reference"] = floats_json(ref_values);
      j["error"] = floats_json(error);
    }
    reply_json(res, j);
  });
}

}  // namespace tensormorph::server
