// Building and refreshing a checkpoint's index: every byte read once, stale entries rebuilt,
// current ones reused, progress snapshotted atomically so an interrupted run resumes.
#pragma once

#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "compute/scheduler.h"
#include "core/atomic_file.h"
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
  /// Re-read every tensor, even those whose file identity matches, and compare with the index:
  /// catches edits the identity cannot see (same size, modification time restored, outside the
  /// hashed head and tail).
  bool verify = false;
};

/// A tensor the index does not hold, and why.
struct SkippedTensor {
  /// What kept it out.
  enum class Kind {
    kNotDecodable,   ///< its dtype cannot be decoded
    kUnstorableName, ///< its statistics can be computed, but the index cannot store its name
    kFailed,         ///< reading or computing it failed (e.g. a truncated shard)
  };
  std::string name;
  Kind kind = Kind::kFailed;
  std::string reason;
};

/// What a build did.
struct IndexReport {
  std::filesystem::path index_path;
  size_t tensors_total = 0, tensors_reused = 0, tensors_indexed = 0;
  uint64_t bytes_indexed = 0;
  double seconds = 0;
  bool interrupted = false;
  bool written = false;                              ///< false when everything was current
  std::string not_kept;                              ///< why the index could not be written ("" when it was)
  size_t tensors_verified = 0;                       ///< with verify: tensors re-read that the index held
  std::vector<std::string> verify_mismatches;        ///< with verify: those whose statistics had changed
  StaleTemporaries stale_removed;                    ///< temporaries of interrupted runs that were removed
  std::map<std::string, uint64_t> ops_per_backend;   ///< where each operation ran
  std::vector<SkippedTensor> skipped;                ///< tensors not indexed, with why
};

/// The sidecar path next to the checkpoint ("<file>.tmindex"), or a path in the cache directory
/// ($XDG_CACHE_HOME/tensormorph) when the checkpoint's directory is not writable.
std::filesystem::path default_index_path(const Checkpoint& checkpoint);

/// Brings the index of `checkpoint` up to date and returns its contents in `out`. When the index
/// cannot be written (no writable location, a full disk), the contents are still computed and
/// returned, and `not_kept` says why nothing was saved.
Result<IndexReport> update_index(compute::Scheduler& scheduler, const Checkpoint& checkpoint,
                                 const IndexOptions& options, IndexContents* out);

/// The entries of a checkpoint's index that are current (their source file's identity unchanged).
struct CurrentEntries {
  IndexContents contents;
  std::map<std::string, const TensorPyramid*, std::less<>> by_name;  ///< into contents
};

/// Reads the index at `location` (default_index_path when empty) without building anything: only
/// current entries are listed; no index, or a damaged one, gives none.
Result<std::unique_ptr<CurrentEntries>> read_current_entries(const Checkpoint& checkpoint,
                                                             const std::filesystem::path& location = {});

}  // namespace tensormorph::index
