// Building and refreshing a checkpoint's index: every byte read once, stale entries rebuilt,
// current ones reused, progress snapshotted atomically so an interrupted run resumes.
#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "compute/scheduler.h"
#include "index/index_file.h"
#include "tensormorph/checkpoint.h"

namespace tensormorph::index {

/// Progress of a running index build.
struct IndexProgress {
  uint64_t bytes_done = 0;
  uint64_t bytes_total = 0;   ///< bytes of the tensors that need indexing (reused ones excluded)
  size_t tensors_done = 0;
  size_t tensors_total = 0;   ///< tensors that need indexing
  std::string current;        ///< tensor being indexed
  double seconds = 0;
};

/// How to build.
struct IndexOptions {
  uint32_t tile = 256;                       ///< power of two, 8..4096
  uint32_t threads = 0;                      ///< 0: all cores
  std::filesystem::path location;            ///< index file; empty: default_index_path()
  double snapshot_seconds = 5;               ///< write completed work at least this often
  const std::atomic<bool>* interrupted = nullptr;  ///< set (e.g. by SIGINT) to stop after the current tensor
  std::function<void(const IndexProgress&)> progress;
  std::vector<compute::PlacementRecord>* records = nullptr;  ///< receives every placement record
};

/// What a build did.
struct IndexReport {
  std::filesystem::path index_path;
  size_t tensors_total = 0, tensors_reused = 0, tensors_indexed = 0;
  uint64_t bytes_indexed = 0;
  double seconds = 0;
  bool interrupted = false;
  bool written = false;                              ///< false when everything was current
  std::map<std::string, uint64_t> ops_per_backend;   ///< where each operation ran
  std::vector<std::string> skipped;                  ///< tensors not indexed, with why
};

/// The sidecar path next to the checkpoint ("<file>.tmindex"), or a path in the cache directory
/// ($XDG_CACHE_HOME/tensormorph) when the checkpoint's directory is not writable.
std::filesystem::path default_index_path(const Checkpoint& checkpoint);

/// Brings the index of `checkpoint` up to date and returns its contents in `out`.
Result<IndexReport> update_index(compute::Scheduler& scheduler, const Checkpoint& checkpoint,
                                 const IndexOptions& options, IndexContents* out);

}  // namespace tensormorph::index
