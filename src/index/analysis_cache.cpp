#include "index/analysis_cache.h"

#include <fstream>

#include "core/atomic_file.h"
#include "index/index_builder.h"

namespace tensormorph::index {
namespace {

constexpr int kVersion = 1;

nlohmann::json identity_json(const FileIdentity& f) {
  return {{"path", f.path}, {"size", f.size}, {"mtime_ns", f.mtime_ns}, {"header_xxh64", f.header_hash}};
}

}  // namespace

Result<AnalysisCache> AnalysisCache::open(const Checkpoint& checkpoint, const std::filesystem::path& index_path) {
  AnalysisCache cache;
  const std::filesystem::path index = index_path.empty() ? default_index_path(checkpoint) : index_path;
  cache.path_ = index;
  cache.path_ += ".analyses.json";
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::absolute(index, ec).parent_path();
  for (uint32_t file = 0; file < checkpoint.files().size(); ++file) {
    TM_ASSIGN_OR_RETURN(const auto map, checkpoint.mapped(file));
    TM_ASSIGN_OR_RETURN(FileIdentity id, identify_file(*map, dir));
    cache.files_.push_back(std::move(id));
  }
  std::ifstream in(cache.path_);
  if (!in) return cache;
  const nlohmann::json stored = nlohmann::json::parse(in, nullptr, false);
  if (stored.is_discarded() || !stored.is_object() || stored.value("version", 0) != kVersion) return cache;
  nlohmann::json files = nlohmann::json::array();
  for (const auto& f : cache.files_) files.push_back(identity_json(f));
  // Results of other file contents are stale: none of them is used, and the next save drops them.
  if (!stored.contains("files") || stored["files"] != files || !stored.contains("results") ||
      !stored["results"].is_object()) {
    return cache;
  }
  cache.results_ = stored["results"];
  return cache;
}

std::optional<nlohmann::json> AnalysisCache::find(const std::string& tensor, const std::string& key) const {
  const auto t = results_.find(tensor);
  if (t == results_.end() || !t->is_object()) return std::nullopt;
  const auto r = t->find(key);
  if (r == t->end()) return std::nullopt;
  return *r;
}

void AnalysisCache::put(const std::string& tensor, const std::string& key, nlohmann::json value) {
  results_[tensor][key] = std::move(value);
  changed_ = true;
}

Status AnalysisCache::save() {
  if (!changed_) return Status::Ok();
  nlohmann::json files = nlohmann::json::array();
  for (const auto& f : files_) files.push_back(identity_json(f));
  std::string text;
  try {
    text = nlohmann::json{{"version", kVersion}, {"files", files}, {"results", results_}}.dump();
  } catch (const nlohmann::json::exception& e) {  // a tensor name that is not UTF-8
    return Status::InvalidArgument(path_.string() + ": cannot store the results: " + e.what());
  }
  std::error_code ec;
  std::filesystem::create_directories(path_.parent_path(), ec);
  TM_RETURN_IF_ERROR(write_file_atomically(path_, std::as_bytes(std::span(text))));
  changed_ = false;
  return Status::Ok();
}

}  // namespace tensormorph::index
