// Per-row and per-column statistics (tm.channel_stats@1) kept beside a checkpoint's index, in
// "<index>.channels": a safetensors file with, for tensor T, "T/rows" and "T/cols" of dtype F64 and
// shape [channels, 10] (the index's ten fields per record), and a "tensormorph.channels" metadata
// entry naming the format version, the source files' identities and the tensors. They are too many
// numbers for the JSON of the other analyses (a vocabulary's embedding has 150k rows) and are read
// back through the mapping, only the tensor asked for. The staleness rule is the index's: a changed
// source file, a damaged or foreign store or another version reads as empty.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "engine/outliers.h"
#include "index/analysis_cache.h"
#include "index/file_identity.h"
#include "tensormorph/checkpoint.h"

namespace tensormorph::index {

/// One checkpoint's stored channel statistics.
class ChannelStore {
 public:
  /// The store beside `index_path` (default_index_path of the checkpoint when empty). Fails only
  /// when the checkpoint's files cannot be identified.
  static Result<ChannelStore> open(const Checkpoint& checkpoint, const std::filesystem::path& index_path = {});
  /// The store beside the index `cache` lies beside, with the file identities it already took
  /// (a face that keeps both asks the files once).
  static ChannelStore beside(const AnalysisCache& cache);

  /// The stored statistics of `tensor` when its matrix view still has the stored channel counts.
  std::optional<engine::ChannelStats> find(const TensorInfo& tensor) const;
  /// Keeps statistics (in memory until save()).
  void put(const TensorInfo& tensor, engine::ChannelStats stats);
  /// Writes the store atomically when something was put, with every stored tensor not replaced.
  Status save();
  /// Where the store lives.
  const std::filesystem::path& path() const { return path_; }

 private:
  /// The store beside `index`, for files of these identities.
  static ChannelStore at(const std::filesystem::path& index, std::vector<FileIdentity> files);

  std::filesystem::path path_;
  std::vector<FileIdentity> files_;
  std::unique_ptr<Checkpoint> stored_;  ///< the current store's file, mapped; null when none holds
  std::map<std::string, nlohmann::json> stored_described_;  ///< name -> description, of stored_
  std::map<std::string, engine::ChannelStats> added_;
  std::map<std::string, nlohmann::json> added_described_;
};

/// The channel statistics of `tensor`: from `store` unless `recompute`, else computed through the
/// scheduler and put into it. `*was_stored` says which.
Result<engine::ChannelStats> kept_channel_stats(ChannelStore& store, bool recompute, compute::Scheduler& scheduler,
                                                const Checkpoint& checkpoint, const TensorInfo& tensor,
                                                engine::Records* records, uint32_t max_threads, bool* was_stored);

}  // namespace tensormorph::index
