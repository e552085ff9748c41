// PyTorch checkpoints (torch.save zip format) read through a restricted pickle VM that never
// executes or imports anything.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <vector>

#include "formats/pytorch/pickle_vm.h"
#include "formats/pytorch/torch_objects.h"
#include "tensormorph/checkpoint.h"

namespace tensormorph::pytorch {

/// Opens a torch.save zip archive (.pt/.pth/.bin or no extension, any directory prefix inside).
/// The legacy pre-1.6 (non-zip) format is refused with a clear message.
Result<std::unique_ptr<Checkpoint>> open_file(const std::filesystem::path& path);

/// An archive opened with its ShardedTensors described (torch_objects.h).
struct ShardedArchive {
  std::unique_ptr<Checkpoint> checkpoint;     ///< as open_file gives it
  std::vector<ShardedTensorRecord> sharded;   ///< its ShardedTensors; their shards' data are checkpoint tensors
};

/// open_file, keeping what the archive's ShardedTensors say about the whole tensors.
Result<ShardedArchive> open_sharded_archive(const std::filesystem::path& path);

/// A set of torch.save archives, one per rank, whose ShardedTensors (FSDP's local or sharded state
/// dicts saved per rank) are presented whole, assembled from every archive's shards; nullopt when
/// no archive holds a ShardedTensor. `archives` are the directory's torch.save files.
Result<std::optional<std::unique_ptr<Checkpoint>>> open_sharded_set(const std::filesystem::path& directory,
                                                                    std::vector<std::filesystem::path> archives);

/// The value tree of a torch.save archive's data.pkl (for the values around its tensors).
Result<PickleTree> read_archive_pickle(const std::filesystem::path& path);

/// The one tensor of a torch.save archive stored as `size` bytes at byte `base` of `path` (what a
/// distributed checkpoint's data files hold per chunk); its offset is the file's, its file index 0.
Result<TensorInfo> read_embedded_tensor(const std::filesystem::path& path, uint64_t base, uint64_t size);

}  // namespace tensormorph::pytorch
