#include "index/analysis_cache.h"

#include <fstream>

#include "core/atomic_file.h"
#include "index/index_builder.h"

namespace tensormorph::index {
namespace {

constexpr int kVersion = 1;

}  // namespace

Result<AnalysisCache> AnalysisCache::open(const Checkpoint& checkpoint, const std::filesystem::path& index_path) {
  AnalysisCache cache;
  cache.index_path_ = index_path.empty() ? default_index_path(checkpoint) : index_path;
  cache.path_ = cache.index_path_;
  cache.path_ += ".analyses.json";
  TM_ASSIGN_OR_RETURN(cache.files_, identify_checkpoint_files(checkpoint, cache.index_path_));
  std::ifstream in(cache.path_);
  if (!in) return cache;
  const nlohmann::json stored = nlohmann::json::parse(in, nullptr, false);
  if (stored.is_discarded() || !stored.is_object() || stored.value("version", 0) != kVersion) return cache;
  const nlohmann::json files = identities_json(cache.files_);
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
  const nlohmann::json files = identities_json(files_);
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

Result<std::vector<engine::ExtremeValue>> kept_top_k(AnalysisCache& cache, bool recompute, compute::Scheduler& scheduler,
                                                     const Checkpoint& checkpoint, const TensorInfo& tensor, uint64_t k,
                                                     engine::Records* records, uint32_t max_threads, bool* was_stored) {
  const std::string key = "top_k/1 k=" + std::to_string(k);
  if (!recompute) {
    if (auto kept = cache.find(tensor.name, key)) {
      if (auto extremes = engine::extremes_from_json(*kept)) {
        if (was_stored != nullptr) *was_stored = true;
        return std::move(*extremes);
      }
    }
  }
  if (was_stored != nullptr) *was_stored = false;
  TM_ASSIGN_OR_RETURN(auto extremes, engine::tensor_top_k(scheduler, checkpoint, tensor, k, records, max_threads));
  cache.put(tensor.name, key, engine::extremes_json(extremes));
  return extremes;
}

}  // namespace tensormorph::index
