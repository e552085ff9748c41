// Interpreting the symbolic value tree of a torch.save pickle: tensor rebuild calls become
// TensorInfos over the archive's stored storage entries, named by their path in the tree.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "formats/pytorch/pickle_vm.h"
#include "formats/pytorch/zip_archive.h"
#include "tensormorph/checkpoint.h"

namespace tensormorph::pytorch {

/// One shard of a ShardedTensor that this archive holds.
struct LocalShard {
  std::vector<uint64_t> offsets;  ///< where it starts in the whole tensor
  size_t tensor = 0;              ///< its data: index into TorchTensors::tensors
};

/// A torch.distributed ShardedTensor (what FSDP's local and sharded state dicts hold): the whole
/// tensor's dtype and shape, and the shards of it this archive holds.
struct ShardedTensorRecord {
  std::string name;               ///< its path in the pickle, as a plain tensor's
  DType dtype = DType::kF32;
  std::vector<uint64_t> shape;    ///< the whole tensor's
  std::vector<LocalShard> local;  ///< the shards this archive holds
  uint64_t shards_total = 0;      ///< how many shards its metadata lists over all ranks
};

/// Tensors found in a pickle, plus what was noticed along the way.
struct TorchTensors {
  std::vector<TensorInfo> tensors;  ///< in the order the walk met them (a ShardedTensor's local shards included)
  std::vector<std::string> notes;   ///< globals recorded but not imported, skipped values, ...
  std::vector<ShardedTensorRecord> sharded;  ///< the ShardedTensors met
};

/// Bounds on the walk that names tensors, so a hostile object graph cannot take forever.
struct CollectLimits {
  int max_depth = 200;                 ///< nesting of containers and objects
  uint64_t max_visits = 1ull << 24;    ///< values visited, counting each path to a shared value
  size_t max_tensors = size_t{1} << 20;///< tensors listed (names through shared values included)
};

/// The dtype a `torch.<dtype>` global names ("torch.bfloat16"), or nullopt.
std::optional<DType> dtype_of_torch_global(std::string_view qualified);

/// Walks `tree` from its root and names every tensor by its path ("model.encoder.0.weight").
/// Storages resolve to "<prefix>data/<key>" entries of `zip` (`prefix` is "" or ends with '/');
/// `pickle_name` is the data.pkl entry name used in messages.
Result<TorchTensors> collect_tensors(const PickleTree& tree, const ZipArchive& zip, std::string_view prefix,
                                     std::string_view pickle_name, const CollectLimits& limits = {});

}  // namespace tensormorph::pytorch
