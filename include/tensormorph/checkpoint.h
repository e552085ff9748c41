// The Checkpoint abstraction: a set of named tensors over one or more memory-mapped files.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "tensormorph/dtype.h"
#include "tensormorph/mapped_file.h"
#include "tensormorph/status.h"

namespace tensormorph {

/// The on-disk format a checkpoint was read from.
enum class CheckpointFormat { kSafetensors, kGguf, kPyTorch };

/// "safetensors", "gguf" or "pytorch".
std::string_view format_name(CheckpointFormat format);

/// One file that holds tensor data.
struct SourceFile {
  std::filesystem::path path;  ///< as opened (absolute or relative to the working directory)
  uint64_t size = 0;           ///< bytes, as seen when the header was read
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

/// An opened checkpoint. Opening reads headers only; tensor bytes are mapped on first access.
class Checkpoint {
 public:
  /// Assembles a checkpoint; used by the format readers. Tensor names must be unique.
  Checkpoint(CheckpointFormat format, std::filesystem::path path, std::vector<SourceFile> files,
             std::vector<TensorInfo> tensors, std::vector<MetadataEntry> metadata,
             std::vector<std::string> notes);

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
  /// Things the reader noticed but tolerated (e.g. pickle globals recorded, not imported).
  std::span<const std::string> notes() const { return notes_; }

  /// The stored bytes of `tensor`, mapping its file on first use. Fails when the file changed size.
  Result<std::span<const std::byte>> tensor_bytes(const TensorInfo& tensor) const;
  /// Decodes the whole tensor to float32 in row-major order (gathers strided views).
  Result<std::vector<float>> decode_f32(const TensorInfo& tensor) const;
  /// The mapping of files()[file], made on first use and shared with tensor_bytes. Fails when
  /// the file changed size since the checkpoint was opened.
  Result<std::shared_ptr<const MappedFile>> mapped(uint32_t file) const;

 private:

  CheckpointFormat format_;
  std::filesystem::path path_;
  std::vector<SourceFile> files_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string_view, size_t> by_name_;
  std::vector<MetadataEntry> metadata_;
  std::vector<std::string> notes_;
  mutable std::mutex map_mutex_;
  mutable std::vector<std::shared_ptr<const MappedFile>> maps_;
};

}  // namespace tensormorph
