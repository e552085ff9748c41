// The checkpoints a server was given, their indexes (built in the background) and the in-memory
// fine statistics pyramids that feed overview tiles. Requests name checkpoints by number and
// tensors by name: nothing a request says reaches the file system.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "compute/scheduler.h"
#include "index/index_file.h"
#include "engine/pyramid.h"
#include "tensormorph/checkpoint.h"

namespace tensormorph::server {

/// A pyramid of tile statistics for one tensor: level k has tiles of `tile` << k elements.
struct StatsPyramid {
  uint32_t tile = 0;
  std::vector<engine::PyramidLevel> levels;
  /// Bytes it holds.
  uint64_t bytes() const;
};

/// How far the background index build of one checkpoint has come (written by the indexer, read by requests).
struct IndexProgressCounters {
  std::atomic<uint64_t> tensors_done{0};
  std::atomic<uint64_t> tensors_total{0};  ///< tensors that need indexing (current ones are reused)
  std::atomic<uint64_t> bytes_done{0};
  std::atomic<uint64_t> bytes_total{0};    ///< bytes of the tensors that need indexing
};

/// One served checkpoint.
struct ServedCheckpoint {
  std::unique_ptr<Checkpoint> checkpoint;
  std::string label;  ///< what the user passed on the command line
  mutable std::mutex index_mutex;
  std::shared_ptr<const index::IndexContents> index;  ///< null until the background build ends
  std::string index_state = "building";               ///< "building", "ready", "interrupted" or "failed: why"
  IndexProgressCounters index_progress;
  std::map<std::string, size_t, std::less<>> pyramid_of;  ///< tensor name -> index of its pyramid
};

/// The served checkpoints and the statistics caches over them.
class Catalog {
 public:
  /// Takes the opened checkpoints (labels in the same order); `fine_budget_bytes` caps the fine pyramids.
  Catalog(std::vector<std::unique_ptr<Checkpoint>> checkpoints, std::vector<std::string> labels,
          uint64_t fine_budget_bytes);
  ~Catalog();
  Catalog(const Catalog&) = delete;
  Catalog& operator=(const Catalog&) = delete;

  /// Starts indexing every checkpoint on a background thread (through `scheduler`).
  void start_indexing(compute::Scheduler& scheduler);
  /// Waits for the background indexing to end (tests and shutdown).
  void wait_for_index();

  /// The number of checkpoints.
  size_t size() const { return served_.size(); }
  /// Checkpoint `id` (< size()).
  const ServedCheckpoint& at(size_t id) const { return *served_[id]; }
  /// The index of checkpoint `id` and its state ("ready" with a non-null index).
  std::shared_ptr<const index::IndexContents> index_of(size_t id, std::string* state = nullptr) const;
  /// The index pyramid of a tensor, or nullptr when the index lacks it.
  const index::TensorPyramid* indexed(size_t id, const index::IndexContents& contents, const std::string& name) const;

  /// The fine pyramid of a tensor (tile 16 or more, computed once through tm.tile_stats@1).
  Result<std::shared_ptr<const StatsPyramid>> fine_pyramid(compute::Scheduler& scheduler, size_t id,
                                                           const TensorInfo& tensor);
  /// The fine tile size a tensor of `elements` gets (bounds its level 0 to about 2^20 tiles).
  static uint32_t fine_tile_for(uint64_t elements);

 private:
  struct FineEntry {
    std::mutex mutex;  // held while computing, so concurrent requests wait for one computation
    std::shared_ptr<const StatsPyramid> pyramid;
    uint64_t last_use = 0;
  };
  std::vector<std::unique_ptr<ServedCheckpoint>> served_;
  std::mutex fine_mutex_;
  std::map<std::string, std::shared_ptr<FineEntry>> fine_;
  uint64_t fine_budget_;
  uint64_t use_clock_ = 0;
  std::thread indexer_;
  std::atomic<bool> stop_{false};
};

}  // namespace tensormorph::server
