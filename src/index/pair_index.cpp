#include "index/pair_index.h"

#include <cinttypes>
#include <cstdio>

#include <xxhash.h>

#include "engine/matrix_shape.h"
#include "index/index_builder.h"

namespace tensormorph::index {

Result<PairIndex> PairIndex::open(const Checkpoint& a, const Checkpoint& b, uint32_t tile) {
  PairIndex index;
  index.tile_ = tile;
  const std::filesystem::path a_index = default_index_path(a);
  TM_ASSIGN_OR_RETURN(index.files_, identify_checkpoint_files(a, a_index));
  TM_ASSIGN_OR_RETURN(auto b_files, identify_checkpoint_files(b, a_index));
  const std::string b_text = identities_json(b_files).dump();
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016" PRIx64, static_cast<uint64_t>(XXH64(b_text.data(), b_text.size(), 0)));
  index.files_.insert(index.files_.end(), b_files.begin(), b_files.end());
  index.path_ = a_index;
  index.path_ += std::string(".diff-") + hex + "-t" + std::to_string(tile) + ".tmindex";
  auto stored = read_index(index.path_);
  // Missing, damaged, of another tile size or of other file contents: empty, rebuilt on save.
  if (!stored.ok() || stored->tile != tile || stored->files != index.files_) return index;
  for (auto& t : stored->tensors) {
    std::string name = t.name;
    index.pyramids_.emplace(std::move(name), std::move(t));
  }
  return index;
}

std::optional<std::vector<engine::PyramidLevel>> PairIndex::find(const TensorInfo& a_tensor) const {
  const auto it = pyramids_.find(a_tensor.name);
  if (it == pyramids_.end()) return std::nullopt;
  const engine::MatrixShape m = engine::as_matrix(a_tensor);
  if (it->second.rows != m.rows || it->second.cols != m.cols || it->second.levels.empty()) return std::nullopt;
  return it->second.levels;
}

void PairIndex::put(const TensorInfo& a_tensor, std::vector<engine::PyramidLevel> levels) {
  TensorPyramid p;
  p.name = a_tensor.name;
  p.dtype = DType::kF32;  // the difference is float32 whatever the sides store
  p.shape = a_tensor.shape;
  const engine::MatrixShape m = engine::as_matrix(a_tensor);
  p.rows = m.rows;
  p.cols = m.cols;
  p.file = a_tensor.file;
  p.levels = std::move(levels);
  pyramids_[a_tensor.name] = std::move(p);
  changed_ = true;
}

Status PairIndex::save() {
  if (!changed_) return Status::Ok();
  IndexContents contents;
  contents.tile = tile_;
  contents.files = files_;
  for (const auto& [name, p] : pyramids_) contents.tensors.push_back(p);
  std::error_code ec;
  std::filesystem::create_directories(path_.parent_path(), ec);
  TM_RETURN_IF_ERROR(write_index(path_, contents));
  changed_ = false;
  return Status::Ok();
}

Result<std::vector<engine::PyramidLevel>> kept_difference_pyramid(PairIndex& index, bool recompute,
                                                                  compute::Scheduler& scheduler, const Checkpoint& a,
                                                                  const Checkpoint& b,
                                                                  const engine::MatchedTensors& match,
                                                                  engine::Records* records, uint32_t max_threads,
                                                                  bool* was_stored) {
  if (!recompute) {
    if (auto stored = index.find(*match.a)) {
      if (was_stored) *was_stored = true;
      return std::move(*stored);
    }
  }
  if (was_stored) *was_stored = false;
  TM_ASSIGN_OR_RETURN(auto level0,
                      engine::difference_tile_stats(scheduler, a, b, match, index.tile(), records, max_threads));
  auto levels = engine::build_pyramid(std::move(level0));
  index.put(*match.a, levels);
  return levels;
}

}  // namespace tensormorph::index
