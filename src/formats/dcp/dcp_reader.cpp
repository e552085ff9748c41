// Reading a DCP directory's `.metadata`: the planner's Metadata object, whose state holds
// `state_dict_metadata` (per key a TensorStorageMetadata with properties, size and chunks, or a
// BytesStorageMetadata) and `storage_data` (per MetadataIndex(fqn, offset) a _StorageInfo naming the
// data file, offset and length of the chunk's torch.save archive).
#include "formats/dcp/dcp.h"

#include <algorithm>
#include <map>
#include <unordered_map>

#include "core/printable.h"
#include "formats/chunk_tiling.h"
#include "formats/pytorch/pickle_vm.h"
#include "formats/pytorch/pytorch.h"
#include "formats/pytorch/torch_objects.h"
#include "tensormorph/mapped_file.h"

namespace tensormorph::dcp {
namespace {

namespace fs = std::filesystem;
using pytorch::PickleKind;
using pytorch::PickleValue;

/// The metadata pickle holds structure only; anything larger is not a checkpoint's.
constexpr uint64_t kMaxMetadataBytes = uint64_t{256} << 20;
/// Chunks per tensor checked pairwise for overlaps; beyond, the volume check alone (with no gap
/// and the volumes equal, an overlap would need a gap elsewhere, which bounds checks cannot see).

/// Errors about the metadata name the file, what was being read and the pickle offset.
class MetadataReader {
 public:
  explicit MetadataReader(fs::path path) : path_(std::move(path)) {}

  Status error(const PickleValue* at, const std::string& what) const {
    return Status::FormatError(path_.string() + ": " + what +
                               (at != nullptr ? " (pickle byte " + std::to_string(at->offset) + ")" : ""));
  }

  /// The state an object was built with (dict state), or the dict itself.
  static const PickleValue* fields_of(const PickleValue* value) {
    if (value == nullptr) return nullptr;
    if (value->kind == PickleKind::kDict) return value;
    if (value->kind == PickleKind::kObject && value->state != nullptr && value->state->kind == PickleKind::kDict) {
      return value->state;
    }
    return nullptr;
  }

  static const PickleValue* field(const PickleValue* fields, std::string_view key) {
    return fields != nullptr ? fields->get(key) : nullptr;
  }

  /// An object of class `qualified`, or an error naming what was expected.
  Result<const PickleValue*> object_of(const PickleValue* value, std::string_view qualified, const std::string& what) const {
    const PickleValue* cls = value != nullptr ? value->callable_global() : nullptr;
    if (cls == nullptr || !cls->text.ends_with(qualified)) {
      return error(value, what + " is not a " + std::string(qualified));
    }
    return value;
  }

  /// A torch.Size or a tuple of non-negative integers.
  Result<std::vector<uint64_t>> dims(const PickleValue* value, const std::string& what) const {
    const PickleValue* tuple = value;
    if (value != nullptr && value->kind == PickleKind::kObject) {
      const PickleValue* cls = value->callable_global();
      if (cls == nullptr || cls->text != "torch.Size" || value->args == nullptr || value->args->items.size() != 1) {
        return error(value, what + " is not a torch.Size");
      }
      tuple = value->args->items[0];
    }
    if (tuple == nullptr || (tuple->kind != PickleKind::kTuple && tuple->kind != PickleKind::kList)) {
      return error(value, what + " is not a tuple of sizes");
    }
    std::vector<uint64_t> out;
    for (const PickleValue* item : tuple->items) {
      if (item->kind != PickleKind::kInt || item->integer < 0) return error(item, what + " holds a value that is not a size");
      out.push_back(static_cast<uint64_t>(item->integer));
    }
    return out;
  }

  Result<std::string> text(const PickleValue* value, const std::string& what) const {
    if (value == nullptr || value->kind != PickleKind::kString) return error(value, what + " is not a string");
    return value->text;
  }

  Result<uint64_t> count(const PickleValue* value, const std::string& what) const {
    if (value == nullptr || value->kind != PickleKind::kInt || value->integer < 0) return error(value, what + " is not a byte count");
    return static_cast<uint64_t>(value->integer);
  }

 private:
  fs::path path_;
};

/// Where one chunk's archive lies, keyed by tensor name and chunk offsets.
struct StorageRecord {
  std::string relative_path;
  uint64_t offset = 0;
  uint64_t length = 0;
};

std::string chunk_key(const std::string& name, const std::vector<uint64_t>& start) {
  std::string key = name + '\0';
  for (uint64_t s : start) key += std::to_string(s) + ',';
  return key;
}

/// A data file name as the metadata gives it: a plain name inside the directory, never a path out.
bool is_plain_file_name(std::string_view name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string_view::npos &&
         name.find('\0') == std::string_view::npos;
}

Result<std::unordered_map<std::string, StorageRecord>> read_storage_data(const MetadataReader& r, const PickleValue* storage) {
  if (storage == nullptr || storage->kind != PickleKind::kDict) return r.error(storage, "storage_data is not a dict");
  std::unordered_map<std::string, StorageRecord> records;
  for (const auto& [key, value] : storage->entries) {
    TM_ASSIGN_OR_RETURN(const PickleValue* index, r.object_of(key, "MetadataIndex", "a storage_data key"));
    const PickleValue* index_fields = MetadataReader::fields_of(index);
    TM_ASSIGN_OR_RETURN(std::string fqn, r.text(MetadataReader::field(index_fields, "fqn"), "a storage_data key's fqn"));
    std::vector<uint64_t> start;
    if (const PickleValue* offset = MetadataReader::field(index_fields, "offset"); offset != nullptr && offset->kind != PickleKind::kNone) {
      TM_ASSIGN_OR_RETURN(start, r.dims(offset, "the offset of " + quoted_name(fqn) + "'s storage key"));
    }
    TM_ASSIGN_OR_RETURN(const PickleValue* info, r.object_of(value, "_StorageInfo", "the storage of " + quoted_name(fqn)));
    const PickleValue* fields = MetadataReader::fields_of(info);
    StorageRecord record;
    TM_ASSIGN_OR_RETURN(record.relative_path, r.text(MetadataReader::field(fields, "relative_path"), quoted_name(fqn) + "'s relative_path"));
    TM_ASSIGN_OR_RETURN(record.offset, r.count(MetadataReader::field(fields, "offset"), quoted_name(fqn) + "'s storage offset"));
    TM_ASSIGN_OR_RETURN(record.length, r.count(MetadataReader::field(fields, "length"), quoted_name(fqn) + "'s storage length"));
    if (!is_plain_file_name(record.relative_path)) {
      return r.error(value, quoted_name(fqn) + " is stored in " + quoted_name(record.relative_path) +
                                ", which is not a file name inside the checkpoint directory");
    }
    records[chunk_key(fqn, start)] = std::move(record);
  }
  return records;
}

}  // namespace

bool is_dcp_directory(const fs::path& directory) {
  std::error_code ec;
  return fs::is_regular_file(directory / ".metadata", ec);
}

Result<std::unique_ptr<Checkpoint>> open_directory(const fs::path& directory) {
  const fs::path metadata_path = directory / ".metadata";
  TM_ASSIGN_OR_RETURN(uint64_t size, file_size_of(metadata_path));
  if (size > kMaxMetadataBytes) {
    return Status::Unsupported(metadata_path.string() + ": " + std::to_string(size) + " bytes, more than the " +
                               std::to_string(kMaxMetadataBytes) + " a checkpoint's metadata may take");
  }
  TM_ASSIGN_OR_RETURN(std::string bytes, read_file_range(metadata_path, 0, size));
  TM_ASSIGN_OR_RETURN(pytorch::PickleTree tree, pytorch::run_pickle(bytes, metadata_path.string()));
  const MetadataReader r(metadata_path);
  TM_ASSIGN_OR_RETURN(const PickleValue* root, r.object_of(tree.root(), "checkpoint.metadata.Metadata", "the pickle's value"));
  const PickleValue* fields = MetadataReader::fields_of(root);
  const PickleValue* state_dict = MetadataReader::field(fields, "state_dict_metadata");
  if (state_dict == nullptr || state_dict->kind != PickleKind::kDict) return r.error(root, "state_dict_metadata is not a dict");
  TM_ASSIGN_OR_RETURN(auto records, read_storage_data(r, MetadataReader::field(fields, "storage_data")));

  std::vector<SourceFile> files;
  std::vector<TensorInfo> tensors;
  std::vector<std::string> notes;
  std::map<std::string, uint32_t> file_index;
  for (const auto& [key, value] : state_dict->entries) {
    TM_ASSIGN_OR_RETURN(std::string name, r.text(key, "a state_dict_metadata key"));
    const PickleValue* cls = value->callable_global();
    if (cls != nullptr && cls->text.ends_with("BytesStorageMetadata")) {
      notes.push_back(quoted_name(name) + " is a pickled Python value, not a tensor; not listed");
      continue;
    }
    TM_ASSIGN_OR_RETURN(const PickleValue* meta, r.object_of(value, "TensorStorageMetadata", quoted_name(name) + "'s metadata"));
    const PickleValue* meta_fields = MetadataReader::fields_of(meta);
    TensorInfo tensor;
    tensor.name = name;
    TM_ASSIGN_OR_RETURN(tensor.shape, r.dims(MetadataReader::field(meta_fields, "size"), quoted_name(name) + "'s size"));
    // TensorProperties is built from a tuple (dtype first) or, in other versions, a dict.
    const PickleValue* properties = MetadataReader::field(meta_fields, "properties");
    const PickleValue* dtype = nullptr;
    if (properties != nullptr && properties->state != nullptr && properties->state->kind == PickleKind::kTuple &&
        !properties->state->items.empty()) {
      dtype = properties->state->items[0];
    } else {
      dtype = MetadataReader::field(MetadataReader::fields_of(properties), "dtype");
    }
    const auto parsed = dtype != nullptr && dtype->kind == PickleKind::kGlobal ? pytorch::dtype_of_torch_global(dtype->text) : std::nullopt;
    if (!parsed) {
      return r.error(dtype != nullptr ? dtype : properties, quoted_name(name) + "'s dtype " +
                                                              (dtype != nullptr ? quoted_name(dtype->text) + " " : std::string()) +
                                                              "is not one Tensormorph reads");
    }
    tensor.dtype = *parsed;
    const PickleValue* chunks = MetadataReader::field(meta_fields, "chunks");
    if (chunks == nullptr || chunks->kind != PickleKind::kList) return r.error(meta, quoted_name(name) + "'s chunks are not a list");
    for (const PickleValue* item : chunks->items) {
      TM_ASSIGN_OR_RETURN(const PickleValue* chunk_meta, r.object_of(item, "ChunkStorageMetadata", "a chunk of " + quoted_name(name)));
      const PickleValue* chunk_fields = MetadataReader::fields_of(chunk_meta);
      TensorChunk chunk;
      TM_ASSIGN_OR_RETURN(chunk.start, r.dims(MetadataReader::field(chunk_fields, "offsets"), "a chunk offset of " + quoted_name(name)));
      TM_ASSIGN_OR_RETURN(chunk.sizes, r.dims(MetadataReader::field(chunk_fields, "sizes"), "a chunk size of " + quoted_name(name)));
      const auto record = records.find(chunk_key(name, chunk.start));
      if (record == records.end()) {
        return r.error(item, "the chunk of " + quoted_name(name) + " at " + dims_text(chunk.start) + " has no storage record");
      }
      const StorageRecord& where = record->second;
      auto [slot, added] = file_index.try_emplace(where.relative_path, static_cast<uint32_t>(files.size()));
      const fs::path file = directory / where.relative_path;
      if (added) {
        auto file_size = file_size_of(file);
        if (!file_size.ok()) {
          return Status::NotFound(metadata_path.string() + ": the chunk of " + quoted_name(name) + " at " + dims_text(chunk.start) +
                                  " is stored in " + quoted_name(where.relative_path) + ", which cannot be read: " +
                                  file_size.status().message());
        }
        files.push_back({file, *file_size});
      }
      auto stored = pytorch::read_embedded_tensor(file, where.offset, where.length);
      if (!stored.ok()) {
        return Status(stored.status().code(), "tensor " + quoted_name(name) + ", chunk at " + dims_text(chunk.start) + ": " +
                                                  stored.status().message());
      }
      if (stored->dtype != tensor.dtype || stored->shape != chunk.sizes) {
        return Status::FormatError(file.string() + ": tensor " + quoted_name(name) + ", chunk at " + dims_text(chunk.start) +
                                   " (archive at byte " + std::to_string(where.offset) + "): stores " +
                                   std::string(dtype_name(stored->dtype)) + " " + dims_text(stored->shape) +
                                   " where the metadata says " + std::string(dtype_name(tensor.dtype)) + " " + dims_text(chunk.sizes));
      }
      chunk.file = slot->second;
      chunk.offset = stored->offset;
      chunk.nbytes = stored->nbytes;
      chunk.strides = std::move(stored->strides);
      tensor.chunks.push_back(std::move(chunk));
    }
    TM_RETURN_IF_ERROR(check_chunk_tiling(metadata_path.string(), tensor));
    TM_ASSIGN_OR_RETURN(tensor.nbytes, dtype_storage_bytes(tensor.dtype, tensor.elements()));
    const TensorChunk& first = tensor.chunks.empty() ? TensorChunk{} : tensor.chunks.front();
    tensor.file = first.file;
    tensor.offset = first.offset;
    const bool whole = tensor.chunks.size() == 1 && first.sizes == tensor.shape;
    if (whole) {  // stored in one piece: mapped in place, as a PyTorch archive's tensor is
      tensor.nbytes = first.nbytes;
      tensor.strides = first.strides;
      tensor.chunks.clear();
    } else if (tensor.chunks.empty()) {
      tensor.nbytes = 0;  // no elements (check_tiling saw to it)
    }
    tensors.push_back(std::move(tensor));
  }
  if (files.empty()) return Status::FormatError(metadata_path.string() + ": lists no tensor stored in a data file");
  std::vector<FormatFact> facts = {{"dcp.metadata_bytes", size, std::nullopt},
                                   {"dcp.data_files", files.size(), std::nullopt}};
  uint64_t chunked = 0;
  for (const TensorInfo& t : tensors) chunked += t.chunks.empty() ? 0 : 1;
  facts.push_back({"dcp.tensors_in_chunks", chunked, std::nullopt});
  return std::make_unique<Checkpoint>(CheckpointFormat::kPyTorchDcp, directory, std::move(files), std::move(tensors),
                                      std::vector<MetadataEntry>{}, std::move(notes), std::move(facts));
}

}  // namespace tensormorph::dcp
