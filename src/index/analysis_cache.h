// Results of analyses (quantiles, ...) kept beside a checkpoint's index, in "<index>.analyses.json",
// under the staleness rule of the index: they hold while every source file's identity (size,
// modification time, hash of the head and tail) is the one recorded with them. Asking twice reads
// nothing; a changed file, a damaged or foreign cache, or another format version reads as empty.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/outliers.h"
#include "index/file_identity.h"
#include "tensormorph/checkpoint.h"

namespace tensormorph::index {

/// One checkpoint's stored analysis results.
class AnalysisCache {
 public:
  /// The cache beside `index_path` (default_index_path of the checkpoint when empty). Fails only
  /// when the checkpoint's files cannot be identified.
  static Result<AnalysisCache> open(const Checkpoint& checkpoint, const std::filesystem::path& index_path = {});

  /// The stored result of `key` (e.g. "quantiles/1 p=0.5 mad=0") for tensor `tensor`, if any.
  std::optional<nlohmann::json> find(const std::string& tensor, const std::string& key) const;
  /// Keeps a result (in memory until save()).
  void put(const std::string& tensor, const std::string& key, nlohmann::json value);
  /// Writes the cache atomically when something was put; an error says why it was not kept
  /// (nothing is lost: the results are computed again next time).
  Status save();
  /// Where the cache lives.
  const std::filesystem::path& path() const { return path_; }
  /// The index the cache lies beside.
  const std::filesystem::path& index_path() const { return index_path_; }
  /// The identities of the checkpoint's files, as the cache records them.
  const std::vector<FileIdentity>& files() const { return files_; }

 private:
  std::filesystem::path index_path_;
  std::filesystem::path path_;
  std::vector<FileIdentity> files_;
  nlohmann::json results_ = nlohmann::json::object();  // tensor -> key -> result
  bool changed_ = false;
};

/// The k elements of largest magnitude of `tensor` (engine::tensor_top_k): from `cache` unless
/// `recompute`, else computed through the scheduler and put into it. `*was_stored` says which.
Result<std::vector<engine::ExtremeValue>> kept_top_k(AnalysisCache& cache, bool recompute, compute::Scheduler& scheduler,
                                                     const Checkpoint& checkpoint, const TensorInfo& tensor, uint64_t k,
                                                     engine::Records* records, uint32_t max_threads, bool* was_stored);

}  // namespace tensormorph::index
