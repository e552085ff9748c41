// A directory of torch.save archives, one per rank, holding torch.distributed ShardedTensors: what
// FSDP's local state dict (each rank's shard of a flat parameter) and sharded state dict (each
// rank's rows of every parameter) give when every rank saves its own with torch.save. Each
// ShardedTensor is presented whole, its blocks the ranks' local shards in place.
#include <string.h>  // strverscmp (GNU)

#include <algorithm>
#include <map>

#include "core/printable.h"
#include "formats/chunk_tiling.h"
#include "formats/pytorch/pytorch.h"

namespace tensormorph::pytorch {
namespace {

namespace fs = std::filesystem;

/// File names in the order people number ranks: "rank2.pt" before "rank10.pt" (glibc's version order).
bool natural_less(const fs::path& a, const fs::path& b) {
  return strverscmp(a.filename().c_str(), b.filename().c_str()) < 0;
}

/// A whole tensor being assembled, and where its first description came from.
struct Whole {
  TensorInfo tensor;
  uint64_t shards_total = 0;
  std::string first_file;
};

}  // namespace

Result<std::optional<std::unique_ptr<Checkpoint>>> open_sharded_set(const fs::path& directory, std::vector<fs::path> archives) {
  std::sort(archives.begin(), archives.end(), natural_less);
  std::vector<ShardedArchive> opened;
  bool any_sharded = false;
  for (const fs::path& path : archives) {
    TM_ASSIGN_OR_RETURN(ShardedArchive archive, open_sharded_archive(path));
    any_sharded = any_sharded || !archive.sharded.empty();
    opened.push_back(std::move(archive));
  }
  if (!any_sharded) return std::optional<std::unique_ptr<Checkpoint>>();

  std::vector<SourceFile> files;
  std::vector<std::string> order;       // whole tensors' names, first met first
  std::map<std::string, Whole> wholes;
  std::vector<TensorInfo> tensors;
  std::map<std::string, const TensorInfo*> plain;  // name -> the first archive's copy
  uint64_t plain_copies = 0;
  std::vector<std::string> differing;
  for (uint32_t f = 0; f < opened.size(); ++f) {
    const Checkpoint& archive = *opened[f].checkpoint;
    const std::string file_name = archive.files()[0].path.filename().string();
    files.push_back(archive.files()[0]);
    std::vector<bool> is_shard(archive.tensors().size(), false);
    for (const ShardedTensorRecord& record : opened[f].sharded) {
      auto [it, inserted] = wholes.try_emplace(record.name);
      Whole& whole = it->second;
      if (inserted) {
        order.push_back(record.name);
        whole.tensor.name = record.name;
        whole.tensor.dtype = record.dtype;
        whole.tensor.shape = record.shape;
        whole.shards_total = record.shards_total;
        whole.first_file = file_name;
      } else if (whole.tensor.dtype != record.dtype || whole.tensor.shape != record.shape || whole.shards_total != record.shards_total) {
        return Status::FormatError(archive.files()[0].path.string() + ": ShardedTensor " + quoted_name(record.name) + " is " +
                                   std::string(dtype_name(record.dtype)) + " " + dims_text(record.shape) + " of " +
                                   std::to_string(record.shards_total) + " shards, but " + whole.first_file + " says " +
                                   std::string(dtype_name(whole.tensor.dtype)) + " " + dims_text(whole.tensor.shape) + " of " +
                                   std::to_string(whole.shards_total));
      }
      for (const LocalShard& local : record.local) {
        const TensorInfo& data = archive.tensors()[local.tensor];
        is_shard[local.tensor] = true;
        TensorChunk chunk;
        chunk.start = local.offsets;
        chunk.sizes = data.shape;
        chunk.file = f;
        chunk.offset = data.offset;
        chunk.nbytes = data.nbytes;
        chunk.strides = data.strides;
        whole.tensor.chunks.push_back(std::move(chunk));
      }
    }
    for (size_t i = 0; i < archive.tensors().size(); ++i) {
      if (is_shard[i]) continue;
      const TensorInfo& t = archive.tensors()[i];
      const auto [it, inserted] = plain.try_emplace(t.name, &t);
      if (inserted) {
        TensorInfo copy = t;
        copy.file = f;
        tensors.push_back(std::move(copy));
      } else if (it->second->dtype == t.dtype && it->second->shape == t.shape) {
        ++plain_copies;
      } else {
        differing.push_back(t.name);
        TensorInfo copy = t;
        copy.name = file_name + "/" + t.name;
        copy.file = f;
        tensors.push_back(std::move(copy));
      }
    }
  }

  for (const std::string& name : order) {
    Whole& whole = wholes[name];
    TensorInfo& t = whole.tensor;
    if (t.chunks.size() != whole.shards_total) {
      return Status::NotFound(directory.string() + ": ShardedTensor " + quoted_name(name) + " " + dims_text(t.shape) + " has " +
                              std::to_string(whole.shards_total) + " shards, but the " + std::to_string(opened.size()) +
                              " archives here hold " + std::to_string(t.chunks.size()) + " of them: a rank's file is missing");
    }
    TM_RETURN_IF_ERROR(check_chunk_tiling(directory.string(), t));
    TM_ASSIGN_OR_RETURN(t.nbytes, dtype_storage_bytes(t.dtype, t.elements()));
    if (!t.chunks.empty()) {
      t.file = t.chunks[0].file;
      t.offset = t.chunks[0].offset;
    }
    // One shard holding the whole tensor contiguously is the tensor in place.
    if (t.chunks.size() == 1 && t.chunks[0].strides.empty()) t.chunks.clear();
    tensors.push_back(std::move(t));
  }
  std::vector<std::string> notes = {std::to_string(order.size()) + " ShardedTensors assembled from the shards of " +
                                    std::to_string(opened.size()) + " per-rank archives (" + files.front().path.filename().string() +
                                    (opened.size() > 1 ? " .. " + files.back().path.filename().string() : "") + ")"};
  if (plain_copies > 0) {
    notes.push_back(std::to_string(plain_copies) + (plain_copies == 1 ? " copy of a tensor that is" : " copies of tensors that are") +
                    " not sharded (buffers, replicated values) in later archives not listed: each is listed from the first archive "
                    "that holds it");
  }
  if (!differing.empty()) {
    notes.push_back("listed per archive (<file>/<name>): " + quoted_name(differing[0]) + (differing.size() > 1 ? " and " +
                    std::to_string(differing.size() - 1) + " more" : "") + ", whose dtype or shape differs from the first archive's");
  }
  std::vector<FormatFact> facts = {{"pytorch_sharded.archives", opened.size(), std::nullopt},
                                   {"pytorch_sharded.sharded_tensors", order.size(), std::nullopt},
                                   {"pytorch_sharded.plain_tensors", plain.size(), std::nullopt}};
  return std::optional<std::unique_ptr<Checkpoint>>(std::make_unique<Checkpoint>(
      CheckpointFormat::kPyTorchSharded, directory, std::move(files), std::move(tensors), std::vector<MetadataEntry>{}, std::move(notes),
      std::move(facts)));
}

}  // namespace tensormorph::pytorch
