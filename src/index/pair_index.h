// The index of a pair of checkpoints: each matched tensor's difference pyramid (tile statistics of
// a - b, engine::difference_tile_stats), in the single-checkpoint index's own file format, beside
// A's index as "<A's index>.diff-<16 hex digits>-t<tile>.tmindex" (the digits hash B's files'
// identities; one file per tile size).
// Its staleness rule is the index's, over the files of both sides: when any file of A or of B
// changed, the pair index reads as empty and is rebuilt.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <vector>

#include "engine/checkpoint_diff.h"
#include "index/file_identity.h"
#include "index/index_file.h"

namespace tensormorph::index {

/// The stored difference pyramids of one pair of checkpoints.
class PairIndex {
 public:
  /// The pair index of (a, b) beside a's default index. Fails only when a file cannot be identified.
  static Result<PairIndex> open(const Checkpoint& a, const Checkpoint& b, uint32_t tile = engine::kDefaultTile);

  /// The stored pyramid of A's tensor `a_tensor` when its matrix view has the stored shape.
  std::optional<std::vector<engine::PyramidLevel>> find(const TensorInfo& a_tensor) const;
  /// Keeps a pyramid (in memory until save()).
  void put(const TensorInfo& a_tensor, std::vector<engine::PyramidLevel> levels);
  /// Writes the pair index atomically when something was put (with every pyramid still current).
  Status save();
  /// Where the pair index lives.
  const std::filesystem::path& path() const { return path_; }
  /// Tile size of its pyramids.
  uint32_t tile() const { return tile_; }

 private:
  std::filesystem::path path_;
  uint32_t tile_ = engine::kDefaultTile;
  std::vector<FileIdentity> files_;       // A's files, then B's
  std::map<std::string, TensorPyramid> pyramids_;
  bool changed_ = false;
};

/// The difference pyramid of `match` (every level, level 0 first): from `index` unless
/// `recompute`, else computed through the scheduler and put into it. `*was_stored` says which.
Result<std::vector<engine::PyramidLevel>> kept_difference_pyramid(PairIndex& index, bool recompute,
                                                                  compute::Scheduler& scheduler, const Checkpoint& a,
                                                                  const Checkpoint& b,
                                                                  const engine::MatchedTensors& match,
                                                                  engine::Records* records, uint32_t max_threads,
                                                                  bool* was_stored);

}  // namespace tensormorph::index
