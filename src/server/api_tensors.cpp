// The routes that list and describe: checkpoints, tensors with their place in the model, one
// tensor with its display view, and locating an element to jump to.
#include <algorithm>
#include <cmath>
#include <map>
#include <cstdio>
#include <filesystem>

#include "engine/locate.h"
#include "engine/matrix_shape.h"
#include "engine/model_layout.h"
#include "server/api.h"
#include "server/api_shared.h"
#include "server/http_util.h"

namespace tensormorph::server {
namespace {

using json = nlohmann::ordered_json;

json progress_json(const IndexProgressCounters& p) {
  return {{"tensors_done", p.tensors_done.load()}, {"tensors_total", p.tensors_total.load()},
          {"bytes_done", p.bytes_done.load()}, {"bytes_total", p.bytes_total.load()}};
}

json layout_json(const std::vector<engine::StackLayout>& stacks) {
  json a = json::array();
  for (const auto& s : stacks) {
    a.push_back({{"stack", s.stack}, {"blocks", s.block_numbers.size()}, {"block_numbers", s.block_numbers},
                 {"roles", s.roles}});
  }
  return a;
}

// One tensor's entry in /api/tensors: what it is, where it is stored, its place and its statistics.
// Built field by field (no initializer lists, whose temporaries dominate on 10,000 tensors).
json tensor_json(size_t index, const TensorInfo& t, const std::string& file_name, const engine::TensorPlace& place,
                 const index::TensorPyramid* pyramid) {
  const engine::MatrixShape m = engine::as_matrix(t);
  json j(json::value_t::object);
  auto& o = j.get_ref<json::object_t&>();
  o.reserve(18);
  o.emplace("index", index);
  o.emplace("name", t.name);
  o.emplace("dtype", dtype_name(t.dtype));
  o.emplace("shape", t.shape);
  o.emplace("rows", m.rows);
  o.emplace("cols", m.cols);
  o.emplace("elements", t.elements());
  o.emplace("bytes", t.nbytes);
  o.emplace("file", t.file);
  o.emplace("file_name", file_name);
  o.emplace("offset", t.offset);
  o.emplace("chunks", t.chunks.size());  // 0: stored whole; else the shards gathered on first read
  o.emplace("stack", place.stack);
  o.emplace("block", place.block ? json(*place.block) : json(nullptr));
  o.emplace("role", place.role);
  o.emplace("role_label", place.role_label);
  o.emplace("section", place.section);
  if (pyramid != nullptr && !pyramid->levels.empty() && !pyramid->levels.back().tiles.empty()) {
    const engine::TensorSummary s = engine::summarize(pyramid->levels.back().tiles[0]);
    o.emplace("stats", stats_json(s, s.mean(), s.stddev()));
  } else {
    o.emplace("stats", nullptr);
  }
  return j;
}

// The listing as columns: every entry field an array over the tensors (the statistics one array
// per statistic, null where a tensor has none yet), and a string field that takes few values a
// dictionary {values, codes}. Transposed from the entries, so the two forms cannot disagree; for
// a 10,000-tensor model it is less than half the size and much quicker for a browser to parse.
json as_columns(const json& entries) {
  json columns = json::object();
  if (entries.empty()) return columns;
  const json* stats_keys = nullptr;
  for (const json& e : entries) {
    if (!e["stats"].is_null()) {
      stats_keys = &e["stats"];
      break;
    }
  }
  for (const auto& field : entries.front().items()) {
    const std::string& key = field.key();
    if (key == "stats") continue;
    json column = json::array();
    column.get_ref<json::array_t&>().reserve(entries.size());
    for (const json& e : entries) column.push_back(e[key]);
    columns[key] = std::move(column);
  }
  json stats = nullptr;
  if (stats_keys != nullptr) {
    stats = json::object();
    for (const auto& stat : stats_keys->items()) {
      json column = json::array();
      column.get_ref<json::array_t&>().reserve(entries.size());
      for (const json& e : entries) column.push_back(e["stats"].is_null() ? json(nullptr) : e["stats"][stat.key()]);
      stats[stat.key()] = std::move(column);
    }
  }
  columns["stats"] = std::move(stats);
  for (auto& field : columns.items()) {
    if (field.key() == "name" || !field.value().is_array()) continue;
    json& column = field.value();
    if (!std::all_of(column.begin(), column.end(), [](const json& v) { return v.is_string(); })) continue;
    std::map<std::string, size_t> code_of;
    json values = json::array(), codes = json::array();
    for (const json& v : column) {
      auto [at, added] = code_of.emplace(v.get<std::string>(), code_of.size());
      if (added) values.push_back(v);
      codes.push_back(at->second);
    }
    if (code_of.size() * 2 > column.size()) continue;
    column = {{"values", std::move(values)}, {"codes", std::move(codes)}};
  }
  return columns;
}

std::string value_text(float v) {
  char text[48];
  std::snprintf(text, sizeof text, "%.9g", static_cast<double>(v));
  return text;
}

std::string kind_of(float v) { return std::isnan(v) ? "NaN" : v == INFINITY ? "+Inf" : v == -INFINITY ? "-Inf" : "value"; }

}  // namespace

void ApiContext::register_tensor_routes(httplib::Server& http) {
  http.Get("/api/checkpoints", [this](const httplib::Request&, httplib::Response& res) {
    json list = json::array();
    for (size_t i = 0; i < catalog_->size(); ++i) {
      const ServedCheckpoint& c = catalog_->at(i);
      std::string state;
      catalog_->index_of(i, &state);
      uint64_t bytes = 0, parameters = 0;
      for (const SourceFile& f : c.checkpoint->files()) bytes += f.size;
      for (const TensorInfo& t : c.checkpoint->tensors()) parameters += t.elements();
      std::error_code ec;
      std::filesystem::path path = std::filesystem::absolute(c.checkpoint->path(), ec);
      if (ec) path = c.checkpoint->path();
      list.push_back({{"id", i}, {"name", c.label}, {"path", path.lexically_normal().string()},
                      {"format", std::string(format_name(c.checkpoint->format()))},
                      {"files", c.checkpoint->files().size()}, {"bytes", bytes},
                      {"tensors", c.checkpoint->tensors().size()}, {"parameters", parameters}, {"index", state},
                      {"index_progress", progress_json(c.index_progress)}});
    }
    reply_json(res, {{"checkpoints", list}});
  });

  // A large model's listing is megabytes of JSON and costs more to build than to send; it changes
  // only when the index does, so the whole answer is kept per checkpoint and index.
  http.Get("/api/tensors", [this](const httplib::Request& req, httplib::Response& res) {
    auto target = target_of(req, res, *catalog_, false);
    if (!target) return;
    const std::string filter = param(req, "q").value_or("");
    const std::string form = param(req, "form").value_or("entries");
    if (form != "entries" && form != "columns") {
      return reply_error(res, Status::InvalidArgument("form must be entries or columns, not '" + form + "'"),
                         "leave form out for one object per tensor; form=columns sends one array per field");
    }
    const std::pair<size_t, bool> kept_as{target->checkpoint, form == "columns"};
    const Checkpoint& ckpt = *catalog_->at(target->checkpoint).checkpoint;
    const auto tensors = ckpt.tensors();
    std::string state;
    const auto contents = catalog_->index_of(target->checkpoint, &state);
    if (filter.empty()) {
      std::lock_guard lock(listing_mutex_);
      auto kept = listings_.find(kept_as);
      if (kept != listings_.end() && kept->second.contents == contents && kept->second.state == state) {
        return reply_packed_json(req, res, *kept->second.answer);
      }
    }
    std::vector<engine::TensorPlace> places;
    places.reserve(tensors.size());
    for (const TensorInfo& t : tensors) places.push_back(engine::place_of(t.name));
    std::vector<std::string> file_names;
    for (const SourceFile& f : ckpt.files()) file_names.push_back(f.path.filename().string());
    json list = json::array();
    list.get_ref<json::array_t&>().reserve(tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      if (!filter.empty() && tensors[i].name.find(filter) == std::string::npos) continue;
      const index::TensorPyramid* pyramid = contents ? catalog_->indexed(target->checkpoint, *contents, tensors[i].name) : nullptr;
      list.push_back(tensor_json(i, tensors[i], file_names[tensors[i].file], places[i], pyramid));
    }
    json listing = {{"checkpoint", target->checkpoint}, {"total", list.size()}, {"index_state", state},
                    {"stacks", layout_json(engine::model_layout(places))}};
    if (kept_as.second) {
      listing["columns"] = as_columns(list);
    } else {
      listing["tensors"] = std::move(list);
    }
    auto answer = std::make_shared<const PackedJson>(pack_json(json_text(listing)));
    if (filter.empty()) {
      std::lock_guard lock(listing_mutex_);
      listings_[kept_as] = Listing{contents, state, answer};
    }
    reply_packed_json(req, res, *answer);
  });

  http.Get("/api/tensor", [this](const httplib::Request& req, httplib::Response& res) {
    auto target = target_of(req, res, *catalog_);
    if (!target) return;
    const Checkpoint& ckpt = *catalog_->at(target->checkpoint).checkpoint;
    const TensorInfo& t = *target->tensor;
    const size_t index = static_cast<size_t>(&t - ckpt.tensors().data());
    const auto contents = catalog_->index_of(target->checkpoint);
    json j = tensor_json(index, t, ckpt.files()[t.file].path.filename().string(), engine::place_of(t.name),
                         contents ? catalog_->indexed(target->checkpoint, *contents, t.name) : nullptr);
    const engine::MatrixShape m = engine::as_matrix(t);
    const engine::DisplayView view = engine::display_view(t);
    j["matrix"] = {{"rows", m.rows}, {"cols", m.cols}};
    j["view"] = {{"rows", view.rows}, {"cols", view.cols}, {"folded", view.folded}, {"rule", view.rule}};
    j["zoom"] = zoom_geometry(view.rows, view.cols).to_json();
    if (auto s = indexed_summary(*catalog_, target->checkpoint, t)) j["summary"] = summary_json(*s);
    reply_json(res, j);
  });

  http.Get("/api/locate", [this](const httplib::Request& req, httplib::Response& res) {
    auto target = target_of(req, res, *catalog_);
    if (!target) return;
    const std::string what = param(req, "what").value_or("");
    if (what != "nonfinite" && what != "absmax") {
      return reply_error(res, Status::InvalidArgument("'what' must be nonfinite or absmax"),
                         "what=nonfinite finds the first NaN or Inf; what=absmax the value of largest magnitude");
    }
    const Checkpoint& ckpt = *catalog_->at(target->checkpoint).checkpoint;
    const TensorInfo& t = *target->tensor;
    engine::Records records;
    engine::KnownTiles known;  // the index's level 0 proves tile rows clean
    const auto contents = catalog_->index_of(target->checkpoint);
    if (const index::TensorPyramid* p = contents ? catalog_->indexed(target->checkpoint, *contents, t.name) : nullptr;
        p != nullptr && !p->levels.empty()) {
      known = {&p->levels.front(), contents->tile};
    }
    auto found = what == "nonfinite" ? engine::first_nonfinite(scheduler(), ckpt, t, known, &records)
                                     : engine::largest_magnitude(scheduler(), ckpt, t, &records);
    if (!found.ok()) return reply_error(res, found.status());
    json j = {{"what", what}, {"found", found->has_value()}};
    if (!*found) {
      for (const char* key : {"index", "coords", "matrix_row", "matrix_col", "view_row", "view_col", "value", "text", "kind"}) {
        j[key] = nullptr;
      }
    } else {
      const engine::LocatedElement& e = **found;
      const engine::MatrixShape m = engine::as_matrix(t);
      const engine::DisplayView view = engine::display_view(t);
      j["index"] = e.index;
      j["coords"] = engine::coordinates_of(t.shape, e.index);
      j["matrix_row"] = e.index / m.cols;
      j["matrix_col"] = e.index % m.cols;
      j["view_row"] = e.index / view.cols;
      j["view_col"] = e.index % view.cols;
      j["value"] = json_number(e.value);
      j["text"] = value_text(e.value);
      j["kind"] = kind_of(e.value);
    }
    j["records"] = records_json(records);
    reply_json(res, j);
  });
}

}  // namespace tensormorph::server
