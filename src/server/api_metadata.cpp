// The viewer's metadata routes: a checkpoint's format facts and metadata entries, long arrays (a
// GGUF vocabulary of 150,000 tokens) shown as a preview and paged or searched on request.
#include <algorithm>
#include <cctype>

#include <httplib.h>

#include "server/api.h"
#include "server/http_util.h"

namespace tensormorph::server {

using json = nlohmann::ordered_json;

namespace {

/// Arrays longer than this come as their length and a preview of this many items.
constexpr size_t kPreviewItems = 16;
/// The most items one /api/metadata/array answer holds.
constexpr uint64_t kMaxArrayItems = 1000;
/// Items one /api/metadata/array answer holds when no limit is given.
constexpr uint64_t kDefaultArrayItems = 100;

std::string folded(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

/// Case-insensitive (ASCII) search of a folded needle in a string value, or in the JSON text of
/// any other value (so a number in an array can be found too).
bool value_matches(const json& value, const std::string& needle) {
  if (value.is_string()) return folded(value.get_ref<const std::string&>()).find(needle) != std::string::npos;
  if (value.is_array() || value.is_object()) return false;
  return value.dump().find(needle) != std::string::npos;
}

Result<size_t> checkpoint_id(const httplib::Request& req, Catalog& catalog) {
  TM_ASSIGN_OR_RETURN(const uint64_t id, uint_param(req, "ckpt", 0, UINT32_MAX));
  if (id >= catalog.size()) return Status::NotFound("no checkpoint " + std::to_string(id));
  return static_cast<size_t>(id);
}

json entry_json(const MetadataEntry& m) {
  json e = {{"key", m.key}, {"type", m.type}};
  if (!m.value.is_array()) {
    e["value"] = m.value;
    return e;
  }
  e["length"] = m.value.size();
  if (m.value.size() <= kPreviewItems) {
    e["value"] = m.value;
    return e;
  }
  json preview = json::array();
  for (size_t i = 0; i < kPreviewItems; ++i) preview.push_back(m.value[i]);
  e["preview"] = std::move(preview);
  return e;
}

/// GET /api/metadata?ckpt=I[&q=TEXT]
json metadata_json(const Checkpoint& ckpt, const std::string& needle) {
  json facts = json::array();
  for (const FormatFact& fact : format_facts(ckpt)) facts.push_back(fact.to_json());
  json entries = json::array();
  for (const MetadataEntry& m : ckpt.metadata()) {
    if (needle.empty() || folded(m.key).find(needle) != std::string::npos || value_matches(m.value, needle)) {
      entries.push_back(entry_json(m));
      continue;
    }
    if (!m.value.is_array()) continue;
    // An array whose items match: listed with how many do, for /api/metadata/array?q= to page.
    const auto matches = std::count_if(m.value.begin(), m.value.end(),
                                       [&](const json& item) { return value_matches(item, needle); });
    if (matches == 0) continue;
    json e = entry_json(m);
    e["matches"] = matches;
    entries.push_back(std::move(e));
  }
  return {{"format", std::string(format_name(ckpt.format()))}, {"facts", std::move(facts)},
          {"entries", std::move(entries)}};
}

/// GET /api/metadata/array?ckpt&key&offset&limit[&q]
Result<json> array_json(const httplib::Request& req, const Checkpoint& ckpt) {
  const auto key = param(req, "key");
  if (!key) return Status::InvalidArgument("missing parameter 'key'");
  const auto entry = std::find_if(ckpt.metadata().begin(), ckpt.metadata().end(),
                                  [&](const MetadataEntry& m) { return m.key == *key; });
  if (entry == ckpt.metadata().end()) return Status::NotFound("no metadata key '" + key->substr(0, 200) + "'");
  if (!entry->value.is_array()) {
    return Status::InvalidArgument("metadata key '" + key->substr(0, 200) + "' holds a " + entry->type +
                                   ", not an array");
  }
  TM_ASSIGN_OR_RETURN(const uint64_t offset, uint_param(req, "offset", 0, UINT64_MAX));
  TM_ASSIGN_OR_RETURN(const uint64_t limit, uint_param(req, "limit", kDefaultArrayItems, kMaxArrayItems));
  const std::string needle = folded(param(req, "q").value_or(""));
  const json& items = entry->value;
  json page = json::array();
  uint64_t matching = 0;  // items that match q (every item without q), counted to the end
  for (size_t i = 0; i < items.size(); ++i) {
    if (!needle.empty() && !value_matches(items[i], needle)) continue;
    if (matching >= offset && matching - offset < limit) page.push_back({{"i", i}, {"value", items[i]}});
    ++matching;
    if (needle.empty() && page.size() == limit) break;  // without q the count is the length
  }
  json out = {{"key", entry->key}, {"length", items.size()}, {"offset", offset}};
  if (!needle.empty()) out["matches"] = matching;
  out["items"] = std::move(page);
  return out;
}

}  // namespace

void ApiContext::register_metadata_routes(httplib::Server& http) {
  http.Get("/api/metadata", [this](const httplib::Request& req, httplib::Response& res) {
    auto id = checkpoint_id(req, *catalog_);
    if (!id.ok()) return reply_error(res, id.status());
    reply_json(res, metadata_json(*catalog_->at(*id).checkpoint, folded(param(req, "q").value_or(""))));
  });

  http.Get("/api/metadata/array", [this](const httplib::Request& req, httplib::Response& res) {
    auto id = checkpoint_id(req, *catalog_);
    if (!id.ok()) return reply_error(res, id.status());
    auto answer = array_json(req, *catalog_->at(*id).checkpoint);
    if (!answer.ok()) return reply_error(res, answer.status());
    reply_json(res, *answer);
  });
}

}  // namespace tensormorph::server
