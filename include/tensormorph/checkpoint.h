// The Checkpoint abstraction: a set of named tensors over one or more memory-mapped files.
#pragma once

#include <cstdint>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tensormorph/dtype.h"
#include "tensormorph/mapped_file.h"
#include "tensormorph/status.h"

namespace tensormorph {

/// The on-disk format a checkpoint was read from.
enum class CheckpointFormat { kSafetensors, kGguf, kPyTorch, kPyTorchDcp, kPyTorchSharded, kMegatron, kDeepSpeed };

/// "safetensors", "gguf", "pytorch", "pytorch-dcp" (a Distributed Checkpoint directory),
/// "pytorch-sharded" (per-rank torch.save archives of ShardedTensors), "megatron-tp" (a Megatron-LM tensor-parallel set) or "deepspeed-zero" (a DeepSpeed ZeRO checkpoint).
std::string_view format_name(CheckpointFormat format);

/// One file that holds tensor data.
struct SourceFile {
  std::filesystem::path path;  ///< as opened (absolute or relative to the working directory)
  uint64_t size = 0;           ///< bytes, as seen when the header was read
};

/// One stored block of a tensor saved in pieces (a distributed checkpoint's shards).
struct TensorChunk {
  std::vector<uint64_t> start;   ///< first index in each dimension of the whole tensor
  std::vector<uint64_t> sizes;   ///< extent in each dimension
  uint32_t file = 0;             ///< index into Checkpoint::files()
  uint64_t offset = 0;           ///< absolute byte offset of the block's first element
  uint64_t nbytes = 0;           ///< bytes its storage spans from `offset`
  std::vector<int64_t> strides;  ///< element strides; empty = contiguous row-major
};

/// One named tensor. Shapes are row-major (slowest-varying dim first) for every format;
/// GGUF's fastest-first dims are reversed on read.
struct TensorInfo {
  std::string name;                ///< unique within the checkpoint
  DType dtype = DType::kF32;       ///< storage element type
  std::vector<uint64_t> shape;     ///< row-major dims; empty = scalar
  uint32_t file = 0;               ///< index into Checkpoint::files()
  uint64_t offset = 0;             ///< absolute byte offset of the first stored byte within the file
  uint64_t nbytes = 0;             ///< bytes the tensor's storage spans from `offset`
  std::vector<int64_t> strides;    ///< element strides (PyTorch views); empty = contiguous row-major
  /// Empty when the tensor is stored whole at file/offset. Otherwise the blocks that tile it
  /// (file/offset then name the first, nbytes is the whole tensor's), gathered in row-major order
  /// on first read.
  std::vector<TensorChunk> chunks;

  /// Number of elements (product of shape; shapes are validated on open, so this cannot overflow).
  uint64_t elements() const;
  /// True when elements are stored densely in row-major order.
  bool contiguous() const;
  /// "[4096, 11008]".
  std::string shape_string() const;
};

/// A metadata record: safetensors `__metadata__` strings, GGUF key/values, PyTorch archive facts.
struct MetadataEntry {
  std::string key;               ///< e.g. "general.architecture"
  std::string type;              ///< format-level type: "string", "u32", "array<f32>", ...
  nlohmann::ordered_json value;  ///< the value (arrays nest)
};

/// A fact about how a checkpoint is stored, recorded by its reader (GGUF version, alignment, data
/// offset and file type; a safetensors file's header size; a PyTorch archive's pickle entry).
struct FormatFact {
  std::string key;               ///< stable name: "gguf.version", "safetensors.header_bytes", ...
  nlohmann::ordered_json value;  ///< a number, or a string ("MOSTLY_Q4_K_M (15)")
  std::optional<uint32_t> file;  ///< index into Checkpoint::files() when the fact is about one file

  /// {"key", "value"[, "file"]}: the form `info --json` and the viewer's /api/metadata give.
  nlohmann::ordered_json to_json() const;
};

/// Where a tensor's stored bytes are: a mapping and the offset of its first byte in it.
struct TensorStorage {
  std::shared_ptr<const MappedFile> map;  ///< a checkpoint file, or the gathered chunks of a tensor
  uint64_t offset = 0;                    ///< of the tensor's first byte within map
};

/// An opened checkpoint. Opening reads headers only; tensor bytes are mapped on first access.
class Checkpoint {
 public:
  /// Assembles a checkpoint; used by the format readers. Tensor names must be unique.
  Checkpoint(CheckpointFormat format, std::filesystem::path path, std::vector<SourceFile> files,
             std::vector<TensorInfo> tensors, std::vector<MetadataEntry> metadata,
             std::vector<std::string> notes, std::vector<FormatFact> facts = {});

  /// Format it was read from.
  CheckpointFormat format() const { return format_; }
  /// Path the user opened (file, index file or directory).
  const std::filesystem::path& path() const { return path_; }
  /// Files holding tensor data (one per shard).
  std::span<const SourceFile> files() const { return files_; }
  /// Tensors in file order.
  std::span<const TensorInfo> tensors() const { return tensors_; }
  /// Finds a tensor by exact name; nullptr when absent.
  const TensorInfo* find(std::string_view name) const;
  /// Format-level metadata in file order.
  std::span<const MetadataEntry> metadata() const { return metadata_; }
  /// How the reader found the checkpoint stored (see format_facts for the complete list).
  std::span<const FormatFact> facts() const { return facts_; }
  /// Things the reader noticed but tolerated (e.g. pickle globals recorded, not imported).
  std::span<const std::string> notes() const { return notes_; }

  /// The stored bytes of `tensor`, mapping its file on first use. Fails when the file changed size.
  /// A tensor stored in chunks is gathered and then kept while the checkpoint is open (prefer
  /// storage(), which lets it go with its last user).
  Result<std::span<const std::byte>> tensor_bytes(const TensorInfo& tensor) const;
  /// The mapping that holds `tensor`'s bytes: its file's, or, for a tensor stored in chunks, an
  /// anonymous in-memory file its chunks are gathered into, shared while anyone holds it (and
  /// kept for the last two gathered).
  Result<TensorStorage> storage(const TensorInfo& tensor) const;
  /// Decodes the whole tensor to float32 in row-major order (gathers strided views).
  Result<std::vector<float>> decode_f32(const TensorInfo& tensor) const;
  /// The mapping of files()[file], made on first use and shared with tensor_bytes. Fails when
  /// the file changed size since the checkpoint was opened.
  Result<std::shared_ptr<const MappedFile>> mapped(uint32_t file) const;

 private:
  /// Copies the chunks of `tensor` into `out` (its row-major bytes).
  Status gather_chunks(const TensorInfo& tensor, std::span<std::byte> out) const;

  CheckpointFormat format_;
  std::filesystem::path path_;
  std::vector<SourceFile> files_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string_view, size_t> by_name_;
  std::vector<MetadataEntry> metadata_;
  std::vector<std::string> notes_;
  std::vector<FormatFact> facts_;
  mutable std::mutex map_mutex_;
  mutable std::vector<std::shared_ptr<const MappedFile>> maps_;
  mutable std::mutex gather_mutex_;  // held while gathering, so concurrent readers gather once
  mutable std::unordered_map<std::string, std::weak_ptr<const MappedFile>> gathered_;  // by tensor name
  mutable std::unordered_map<std::string, std::shared_ptr<const MappedFile>> pinned_;  // handed out as spans
  static constexpr size_t kRecentGathered = 2;
  mutable std::deque<std::shared_ptr<const MappedFile>> recent_;  // the last gathered, kept without readers
};

/// Stored size per element of a set of tensors.
struct WeightBits {
  uint64_t elements = 0;  ///< elements of the tensors counted
  uint64_t bytes = 0;     ///< bytes they occupy as stored
  /// 8 * bytes / elements (0 without elements): 16 for BF16, 4.5 for Q4_K.
  double bits_per_weight() const;
};

/// Bits per weight of a checkpoint: every tensor together and each dtype apart.
struct BitsPerWeight {
  WeightBits total;                                   ///< every tensor
  std::vector<std::pair<DType, WeightBits>> by_dtype; ///< one entry per dtype present, in dtype order
};

/// Adds up every tensor's stored bytes and elements.
BitsPerWeight bits_per_weight(const Checkpoint& checkpoint);

/// Everything `info` and the viewer show about how `checkpoint` is stored, in one list: each file
/// ("file.path", "file.bytes"), the reader's facts, then "bits_per_weight" and one
/// "bits_per_weight.<DTYPE>" per dtype.
std::vector<FormatFact> format_facts(const Checkpoint& checkpoint);

}  // namespace tensormorph
