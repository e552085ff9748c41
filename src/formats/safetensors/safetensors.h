// safetensors: single files and sharded sets (model.safetensors.index.json).
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tensormorph/checkpoint.h"

namespace tensormorph::safetensors {

/// Largest JSON header the reference implementation accepts (100 MB).
inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;

/// Opens one .safetensors file, reading and validating its header only.
Result<std::unique_ptr<Checkpoint>> open_file(const std::filesystem::path& path);

/// Opens a sharded set from its index JSON; every shard's header is read and validated.
Result<std::unique_ptr<Checkpoint>> open_index(const std::filesystem::path& index_path);

/// Produces a tensor's bytes when the writer reaches it; they stay valid until the next call.
using ProduceBytes = std::function<std::span<const std::byte>()>;

/// A tensor to be written: the bytes must hold exactly shape × dtype storage size.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<uint64_t> shape;
  std::span<const std::byte> data;  ///< the bytes, unless `produce` is set
  ProduceBytes produce = nullptr;   ///< when set, called once in file order instead of `data` (no copy of all at once)
};

/// Writes a safetensors file atomically (temporary file in the same directory, then rename).
/// Tensors are stored in the given order; `metadata` becomes `__metadata__` (string → string).
Status write_file(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                  std::span<const std::pair<std::string, std::string>> metadata);

}  // namespace tensormorph::safetensors
