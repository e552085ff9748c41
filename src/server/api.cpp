// The data routes: statistics, histograms, quantiles, outliers, channels, values, cells and tiles
// (spectra: api_spectrum.cpp).
#include "server/api.h"

#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/dtype_abi.h"
#include "engine/locate.h"
#include "engine/matrix_shape.h"
#include "engine/outliers.h"
#include "engine/quantile_ladder.h"
#include "engine/quantiles.h"
#include "index/analysis_cache.h"
#include "index/channel_store.h"
#include "engine/tensor_ops.h"
#include "server/api_shared.h"
#include "server/http_util.h"

namespace tensormorph::server {
namespace {

using json = nlohmann::ordered_json;

// The statistics of an F64 or 32/64-bit integer tensor in its own domain (tm.exact_summary@1):
// integer extremes as exact JSON integers, F64 extremes as the stored doubles.
json exact_summary_json(const TM_ExactSummary& e, DType dtype) {
  const engine::ExactView v = engine::exact_view(e, dtype);
  json j = summary_json(v.summary, v.mean, v.std);
  if (v.min) j["min"] = *v.min;
  if (v.max) j["max"] = *v.max;
  if (v.absmax) j["absmax"] = *v.absmax;
  return j;
}

// What the display view is, for a coordinate outside it.
std::string view_hint(const engine::DisplayView& view) {
  return "the tensor is shown as " + std::to_string(view.rows) + " x " + std::to_string(view.cols) + " (" + view.rule +
         "): row < " + std::to_string(view.rows) + ", col < " + std::to_string(view.cols);
}

// Runs tm.tile_stats@1 over one block of the matrix: the statistics behind a pixel.
Result<TM_TileStats> block_stats(compute::Scheduler& scheduler, const Checkpoint& ckpt, const TensorInfo& t,
                                 const ops::ViewRange& view, engine::Records& records) {
  const engine::MatrixShape m = engine::as_matrix(t);
  // A strided view gathers the block's rows only (a band, not cached on devices).
  const bool whole = t.contiguous();
  const uint64_t band_begin = whole ? 0 : view.row_begin, band_end = whole ? m.rows : view.row_end;
  TM_ASSIGN_OR_RETURN(auto band, engine::matrix_rows(ckpt, t, band_begin, band_end));
  const uint64_t side = std::max(view.row_end - view.row_begin, view.col_end - view.col_begin);
  const uint32_t tile = static_cast<uint32_t>(std::max<uint64_t>(ops::kMinTile, std::bit_ceil(side)));
  if (tile > ops::kMaxTile) return Status::InvalidArgument("block too large for one tile");
  TM_TileStats out = ops::empty_tile_stats();
  compute::OpRequest req;
  req.op = TM_OP_TILE_STATS;
  req.subject = t.name;
  req.inputs.push_back({to_abi_dtype(t.dtype), {band_end - band_begin, m.cols}, band.bytes,
                        whole ? engine::residency_key(ckpt, t, 0, band.bytes.size()) : 0});
  req.outputs.push_back({TM_DTYPE_U8, {sizeof out}, std::as_writable_bytes(std::span(&out, 1))});
  req.attributes = {{TM_ATTR_ROW_BEGIN, static_cast<int64_t>(view.row_begin - band_begin), 0},
                    {TM_ATTR_ROW_END, static_cast<int64_t>(view.row_end - band_begin), 0},
                    {TM_ATTR_COL_BEGIN, static_cast<int64_t>(view.col_begin), 0}, {TM_ATTR_COL_END, static_cast<int64_t>(view.col_end), 0},
                    {TM_ATTR_TILE, tile, 0}};
  TM_ASSIGN_OR_RETURN(auto placed, scheduler.run(req));
  if (!placed.executed) return placed.refusal;
  records.push_back(placed.record);
  return out;
}

}  // namespace

ApiContext::ApiContext(std::unique_ptr<engine::ComputeSession> session, std::unique_ptr<Catalog> catalog,
                       uint64_t tile_cache_bytes)
    : session_(std::move(session)), catalog_(std::move(catalog)), renderer_(*catalog_, session_->scheduler(), tile_cache_bytes) {
  // The session was opened from the settings file (plus --compute, which the scheduler holds).
  if (auto settings = compute::load_settings(compute::settings_path()); settings.ok()) running_ = *settings;
  running_.constraints = session_->scheduler().constraints();
}

void ApiContext::register_routes(httplib::Server& http) {
  register_tensor_routes(http);

  http.Get("/api/stats", [this](const httplib::Request& req, httplib::Response& res) {
    auto target = target_of(req, res, *catalog_);
    if (!target) return;
    const bool recompute = param(req, "recompute").value_or("0") == "1";
    engine::Records records;
    if (ops::exact_summary_supported(target->tensor->dtype)) {
      // Float32 tile statistics would round these types' values (docs/COMPUTE.md, exact summary).
      auto exact = engine::tensor_exact_summary(scheduler(), *catalog_->at(target->checkpoint).checkpoint,
                                             *target->tensor, &records);
      if (!exact.ok()) return reply_error(res, exact.status());
      json j = exact_summary_json(*exact, target->tensor->dtype);
      j["source"] = "exact";
      j["records"] = records_json(records);
      return reply_json(res, j);
    }
    auto s = recompute ? std::nullopt : indexed_summary(*catalog_, target->checkpoint, *target->tensor);
    const char* source = "index";
    if (!s) {
      auto level = engine::tensor_tile_stats(scheduler(), *catalog_->at(target->checkpoint).checkpoint, *target->tensor,
                                          engine::kDefaultTile, &records);
      if (!level.ok()) return reply_error(res, level.status());
      s = engine::summarize(engine::build_pyramid(std::move(level).value()).back().tiles[0]);
      source = "computed";
    }
    json j = summary_json(*s);
    j["source"] = source;
    j["records"] = records_json(records);
    reply_json(res, j);
  });

  http.Get("/api/histogram", [this](const httplib::Request& req, httplib::Response& res) {
    auto target = target_of(req, res, *catalog_);
    if (!target) return;
    auto bins = uint_param(req, "bins", 64, 4096);
    if (!bins.ok()) return reply_error(res, bins.status());
    auto s = indexed_summary(*catalog_, target->checkpoint, *target->tensor);
    double lo0 = s ? s->min : -1, hi0 = s ? s->max : 1;
    if (!(lo0 < hi0)) lo0 -= 0.5, hi0 += 0.5;
    auto lo = double_param(req, "lo", lo0);
    auto hi = double_param(req, "hi", hi0);
    if (!lo.ok() || !hi.ok()) return reply_error(res, lo.ok() ? hi.status() : lo.status());
    if (*bins == 0 || !(*lo < *hi)) return reply_error(res, Status::InvalidArgument("histogram needs bins >= 1 and lo < hi"));
    engine::Records records;
    auto counts = engine::tensor_histogram(scheduler(), *catalog_->at(target->checkpoint).checkpoint, *target->tensor, *lo,
                                        *hi, *bins, &records);
    if (!counts.ok()) return reply_error(res, counts.status());
    std::vector<uint64_t> c = std::move(counts).value();
    json j = {{TM_ATTR_LO, *lo}, {TM_ATTR_HI, *hi}, {TM_ATTR_BINS, std::vector<uint64_t>(c.begin(), c.end() - 3)},
              {"below", c[*bins]}, {"above", c[*bins + 1]}, {"nan", c[*bins + 2]}, {"records", records_json(records)}};
    reply_json(res, j);
  });

  http.Get("/api/quantiles", [this](const httplib::Request& req, httplib::Response& res) {
    auto target = target_of(req, res, *catalog_);
    if (!target) return;
    engine::QuantileOptions options;
    options.probabilities = {0, 0.001, 0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99, 0.999, 1};
    if (auto text = param(req, "p")) {
      options.probabilities.clear();
      std::stringstream list(*text);
      for (std::string item; std::getline(list, item, ',');) {
        char* end = nullptr;
        const double p = std::strtod(item.c_str(), &end);
        if (item.empty() || *end != '\0' || !(p >= 0 && p <= 1) || options.probabilities.size() >= 64) {
          return reply_error(res, Status::InvalidArgument("'p' takes up to 64 probabilities in [0, 1], comma-separated"));
        }
        options.probabilities.push_back(p);
      }
    }
    options.median_absolute_deviation = param(req, "mad").value_or("0") == "1";
    const Checkpoint& ckpt = *catalog_->at(target->checkpoint).checkpoint;
    // Kept beside the index like the command's: a tensor opened again reads nothing.
    const std::string key = engine::quantiles_cache_key(options);
    auto cache = index::AnalysisCache::open(ckpt);
    if (cache.ok()) {
      if (auto kept = cache->find(target->tensor->name, key); kept && engine::quantiles_from_json(*kept).ok()) {
        json j = *kept;
        j["source"] = "stored";
        j["records"] = json::array();
        return reply_json(res, j);
      }
    }
    engine::Records records;
    // Exact within the budgets, or the rung the caller consented to, or the ladder (409).
    const TensorInfo& tensor = *target->tensor;
    const std::string consent = param(req, "consent").value_or("");
    engine::StoredKnowledge stored;
    const auto contents = catalog_->index_of(target->checkpoint);
    if (const index::TensorPyramid* p = contents ? catalog_->indexed(target->checkpoint, *contents, tensor.name) : nullptr) {
      stored.value_histogram = p->value_histogram;
      stored.summary = engine::summarize(p->levels.back().tiles.front());
    }
    auto plan = engine::plan_quantiles(scheduler(), ckpt, tensor, options, stored);
    if (!plan.ok()) return reply_error(res, plan.status());
    std::string rung = engine::kRungExact;
    if (!plan->exact_within_budget) {
      const auto chosen = engine::consented_rung(*plan, consent);
      if (!chosen) {
        json answer = engine::ladder_plan_json(*plan);
        for (auto& r : answer["ladder"]) r["backend"] = r["runs_on"];
        answer["op"] = "quantiles";
        answer["tensor"] = tensor.name;
        note_consent_request(answer);
        answer["error"] = "needs consent";
        answer["needs_consent"] = true;
        return reply_json(res, answer, 409);
      }
      rung = chosen->id;
    }
    auto q = engine::quantiles_by_rung(scheduler(), ckpt, tensor, options, stored, rung, &records);
    if (!q.ok()) return reply_error(res, q.status());
    json j = engine::quantiles_json(*q, tensor.dtype);
    if (cache.ok() && q->rung == engine::kRungExact) {
      cache->put(tensor.name, key, engine::quantiles_json(*q, tensor.dtype));
      (void)cache->save();  // not kept: computed again next time
    }
    j["source"] = "computed";
    j["records"] = records_json(records);
    reply_json(res, j);
  });

  http.Get("/api/outliers", [this](const httplib::Request& req, httplib::Response& res) {
    auto target = target_of(req, res, *catalog_);
    if (!target) return;
    auto k = uint_param(req, "k", 20, 10000);
    auto magnitude = double_param(req, "magnitude", 6.0);
    auto robust_z = double_param(req, "robust_z", 3.5);
    if (!k.ok() || !magnitude.ok() || !robust_z.ok()) {
      return reply_error(res, !k.ok() ? k.status() : !magnitude.ok() ? magnitude.status() : robust_z.status());
    }
    if (*k == 0) return reply_error(res, Status::InvalidArgument("'k' must be at least 1"));
    const Checkpoint& ckpt = *catalog_->at(target->checkpoint).checkpoint;
    // Kept beside the index like the command's: a tensor opened again reads nothing. Where they
    // cannot be kept (no writable location), they are computed every time.
    auto cache = index::AnalysisCache::open(ckpt);
    if (!cache.ok()) return reply_error(res, cache.status());
    index::ChannelStore store = index::ChannelStore::beside(*cache);
    engine::Records records;
    bool top_stored = false, channels_stored = false;
    auto top = index::kept_top_k(*cache, false, scheduler(), ckpt, *target->tensor, *k, &records, 0, &top_stored);
    if (!top.ok()) return reply_error(res, top.status());
    auto channels = index::kept_channel_stats(store, false, scheduler(), ckpt, *target->tensor, &records, 0,
                                              &channels_stored);
    if (!channels.ok()) return reply_error(res, channels.status());
    (void)cache->save();
    (void)store.save();
    const auto flagged = engine::outlier_channels(*channels, {*magnitude, *robust_z});
    reply_json(res, {{"top_k", engine::extremes_json(*top)}, {"outlier_channels", engine::outlier_channels_json(flagged)},
                     {"rule", {{"magnitude", *magnitude}, {"robust_z", *robust_z}}},
                     {"source", top_stored && channels_stored ? "stored" : "computed"},
                     {"records", records_json(records)}});
  });

  http.Get("/api/channels", [this](const httplib::Request& req, httplib::Response& res) {
    auto target = target_of(req, res, *catalog_);
    if (!target) return;
    const std::string stat = param(req, "stat").value_or("absmax");
    if (stat != "absmax" && stat != "l2") return reply_error(res, Status::InvalidArgument("'stat' is absmax or l2"));
    const Checkpoint& ckpt = *catalog_->at(target->checkpoint).checkpoint;
    auto store = index::ChannelStore::open(ckpt);
    if (!store.ok()) return reply_error(res, store.status());
    engine::Records records;
    bool stored = false;
    auto channels = index::kept_channel_stats(*store, false, scheduler(), ckpt, *target->tensor, &records, 0, &stored);
    if (!channels.ok()) return reply_error(res, channels.status());
    (void)store->save();  // not kept: computed again next time
    auto values = [&](const std::vector<TM_TileStats>& v) {
      std::vector<double> out;
      out.reserve(v.size());
      for (const auto& c : v) out.push_back(stat == "l2" ? engine::channel_l2(c) : static_cast<double>(c.absmax));
      return out;
    };
    reply_json(res, {{"stat", stat}, {"rows", values(channels->rows)}, {"cols", values(channels->cols)},
                     {"source", stored ? "stored" : "computed"}, {"records", records_json(records)}});
  });

  // Value, values and cell take and answer display-view coordinates (engine::display_view).
  http.Get("/api/value", [this](const httplib::Request& req, httplib::Response& res) {
    auto target = target_of(req, res, *catalog_);
    if (!target) return;
    const engine::DisplayView view = engine::display_view(*target->tensor);
    const TensorInfo shown = engine::as_displayed(*target->tensor, view);
    auto row = uint_param(req, "row", 0, UINT64_MAX);
    auto col = uint_param(req, "col", 0, UINT64_MAX);
    if (!row.ok() || !col.ok()) return reply_error(res, row.ok() ? col.status() : row.status());
    if (*row >= view.rows || *col >= view.cols) {
      return reply_error(res, Status::InvalidArgument("(" + std::to_string(*row) + ", " + std::to_string(*col) +
                                                      ") is outside the " + std::to_string(view.rows) + " x " +
                                                      std::to_string(view.cols) + " view"),
                         view_hint(view));
    }
    engine::Records records;
    auto stats = block_stats(scheduler(), *catalog_->at(target->checkpoint).checkpoint, shown,
                             {*row, *row + 1, *col, *col + 1}, records);
    if (!stats.ok()) return reply_error(res, stats.status());
    // One element: its value is the finite max, or what the non-finite counters say.
    const double v = stats->nan ? NAN : stats->pos_inf ? INFINITY : stats->neg_inf ? -INFINITY : stats->max;
    char text[48];
    std::snprintf(text, sizeof text, "%.9g", v);
    const uint64_t index = *row * view.cols + *col;
    const uint64_t matrix_cols = engine::as_matrix(*target->tensor).cols;
    reply_json(res, {{"row", *row}, {"col", *col}, {"index", index},
                     {"coords", engine::coordinates_of(target->tensor->shape, index)},
                     {"matrix_row", index / matrix_cols}, {"matrix_col", index % matrix_cols},
                     {"value", json_number(v)}, {"text", text}, {"records", records_json(records)}});
  });

  // A window of exact values (at most kMaxValueWindow per side), for the text drawn in magnified cells.
  http.Get("/api/values", [this](const httplib::Request& req, httplib::Response& res) {
    constexpr uint64_t kMaxValueWindow = 64;
    auto target = target_of(req, res, *catalog_);
    if (!target) return;
    const engine::DisplayView view = engine::display_view(*target->tensor);
    const TensorInfo shown = engine::as_displayed(*target->tensor, view);
    auto row = uint_param(req, "row", 0, view.rows - 1);
    auto col = uint_param(req, "col", 0, view.cols - 1);
    auto rows = uint_param(req, "rows", 1, kMaxValueWindow);
    auto cols = uint_param(req, "cols", 1, kMaxValueWindow);
    for (const auto* p : {&row, &col}) {
      if (!p->ok()) return reply_error(res, p->status(), view_hint(view));
    }
    for (const auto* p : {&rows, &cols}) {
      if (!p->ok()) return reply_error(res, p->status());
    }
    const uint64_t row_end = std::min(view.rows, *row + *rows), col_end = std::min(view.cols, *col + *cols);
    engine::Records records;
    auto band = engine::decode_rows(scheduler(), *catalog_->at(target->checkpoint).checkpoint, shown, *row, row_end,
                                    &records);
    if (!band.ok()) return reply_error(res, band.status());
    json values = json::array(), texts = json::array();
    char text[48];
    for (uint64_t r = *row; r < row_end; ++r) {
      for (uint64_t c = *col; c < col_end; ++c) {
        const double v = (*band)[(r - *row) * view.cols + c];
        std::snprintf(text, sizeof text, "%.9g", v);
        values.push_back(json_number(v));
        texts.push_back(text);
      }
    }
    reply_json(res, {{"row", *row}, {"col", *col}, {"rows", row_end - *row}, {"cols", col_end - *col},
                     {"values", std::move(values)}, {"text", std::move(texts)}, {"records", records_json(records)}});
  });

  http.Get("/api/cell", [this](const httplib::Request& req, httplib::Response& res) {
    auto target = target_of(req, res, *catalog_);
    if (!target) return;
    const engine::DisplayView view = engine::display_view(*target->tensor);
    const TensorInfo shown = engine::as_displayed(*target->tensor, view);
    const ZoomGeometry g = zoom_geometry(view.rows, view.cols);
    auto level = uint_param(req, "level", g.max_level, g.max_level);
    auto row = uint_param(req, "row", 0, view.rows - 1);
    auto col = uint_param(req, "col", 0, view.cols - 1);
    if (!level.ok()) return reply_error(res, level.status(), "levels run up to " + std::to_string(g.max_level));
    if (!row.ok() || !col.ok()) return reply_error(res, !row.ok() ? row.status() : col.status(), view_hint(view));
    uint64_t cell = 1;
    uint32_t magnify = 1;
    g.cell_of(static_cast<uint32_t>(*level), cell, magnify);
    cell = std::min<uint64_t>(cell, ops::kMaxTile);
    const uint64_t r0 = *row / cell * cell, c0 = *col / cell * cell;
    const ops::ViewRange block{r0, std::min(view.rows, r0 + cell), c0, std::min(view.cols, c0 + cell)};
    engine::Records records;
    auto s = block_stats(scheduler(), *catalog_->at(target->checkpoint).checkpoint, shown, block, records);
    if (!s.ok()) return reply_error(res, s.status());
    json j = summary_json(engine::summarize(*s));
    j["rows"] = {block.row_begin, block.row_end};
    j["cols"] = {block.col_begin, block.col_end};
    j["records"] = records_json(records);
    reply_json(res, j);
  });

  http.Get(R"(/api/tile/(\d{1,10})/(\d{1,10})/(\d{1,3})/(\d{1,20})/(\d{1,20})\.png)",
           [this](const httplib::Request& req, httplib::Response& res) {
    TileRequest t;
    auto ckpt = parse_uint(req.matches[1], "checkpoint", UINT32_MAX);
    auto tensor = parse_uint(req.matches[2], "tensor", UINT32_MAX);
    auto level = parse_uint(req.matches[3], "level", 255);
    auto x = parse_uint(req.matches[4], "x", UINT64_MAX);
    auto y = parse_uint(req.matches[5], "y", UINT64_MAX);
    for (const auto* r : {&ckpt, &tensor, &level, &x, &y}) {
      if (!r->ok()) return reply_error(res, r->status());
    }
    if (*ckpt >= catalog_->size()) return reply_error(res, Status::NotFound("no checkpoint " + std::to_string(*ckpt)));
    const auto tensors = catalog_->at(*ckpt).checkpoint->tensors();
    if (*tensor >= tensors.size()) return reply_error(res, Status::NotFound("no tensor " + std::to_string(*tensor)));
    t.checkpoint = *ckpt;
    t.tensor = &tensors[*tensor];
    t.level = static_cast<uint32_t>(*level);
    t.x = *x;
    t.y = *y;
    auto stat = ops::pixel_stat_from_name(param(req, "stat").value_or("mean"));
    auto cmap = ops::color_map_from_name(param(req, "cmap").value_or("diverging"));
    auto palette = ops::palette_from_name(param(req, "palette").value_or("default"));
    if (!stat || !cmap || !palette) return reply_error(res, Status::InvalidArgument("unknown stat, cmap or palette"));
    t.stat = *stat;
    t.colormap = *cmap;
    t.palette = *palette;
    auto lo = double_param(req, "lo", -1), hi = double_param(req, "hi", 1);
    if (!lo.ok() || !hi.ok()) return reply_error(res, lo.ok() ? hi.status() : lo.status());
    t.lo = *lo;
    t.hi = *hi;
    t.consent = param(req, "consent").value_or("");
    auto tile = renderer_.tile(t);
    if (!tile.ok()) return reply_error(res, tile.status(), tile_hint(t));
    if (!tile->png) {
      json answer = tile->needs_consent;
      answer["tensor"] = t.tensor->name;
      answer["level"] = t.level;
      note_consent_request(answer);
      answer["error"] = "needs consent";
      answer["needs_consent"] = true;
      return reply_json(res, answer, 409);
    }
    const std::string etag = "\"" + std::to_string(std::hash<std::string>{}(*tile->png)) + "\"";
    res.set_header("ETag", etag);
    res.set_header("Cache-Control", "private, max-age=86400");
    res.set_header("X-Tensormorph-Source", tile->source);
    if (req.get_header_value("If-None-Match") == etag) {
      res.status = 304;
      return;
    }
    res.set_content(*tile->png, "image/png");
  });

  register_colormap_routes(http);

  register_compute_routes(http);
  register_compare_routes(http);
  register_metadata_routes(http);
  register_spectrum_routes(http);
}

}  // namespace tensormorph::server
