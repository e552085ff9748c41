// GGUF v2/v3 (llama.cpp / ggml): metadata key/values, tensor infos, aligned data section.
#pragma once

#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tensormorph/checkpoint.h"

namespace tensormorph::gguf {

/// Opens a GGUF file, reading and validating its header (metadata and tensor infos) only.
/// Shapes are presented row-major: GGUF dims [ne0, ne1, ...] become [..., ne1, ne0].
/// (2-D [ne0, ne1] becomes [ne1, ne0]; 1-D stays [ne0]; a zero dim gives an empty tensor with nbytes 0.)
Result<std::unique_ptr<Checkpoint>> open_file(const std::filesystem::path& path);

/// A key/value to write. Supported types: "string", "u8".."i64", "f32", "f64", "bool",
/// and "array<T>" of those, with `value` holding the matching JSON.
struct KeyValueToWrite {
  std::string key;
  std::string type;
  nlohmann::ordered_json value;
};

/// A tensor to write; `shape` is row-major (it is reversed into GGUF's ne order on disk).
struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<uint64_t> shape;
  std::span<const std::byte> data;
};

/// Writes a GGUF v3 file atomically with the given alignment (a power of two).
Status write_file(const std::filesystem::path& path, std::span<const KeyValueToWrite> kvs,
                  std::span<const TensorToWrite> tensors, uint32_t alignment = 32);

/// The Hugging Face row that GGUF row `gguf_row` of a permuted weight (`rows` rows in `heads`
/// heads) holds: llama.cpp's converter regroups llama-family q_proj/k_proj rows so that, within a
/// head of d rows, row j * d/2 + i lands at 2i + j.
inline uint64_t gguf_row_source(uint64_t gguf_row, uint64_t rows, uint32_t heads) {
  const uint64_t d = rows / heads;
  const uint64_t head = gguf_row / d, r = gguf_row % d;
  return head * d + (r % 2) * (d / 2) + r / 2;
}

}  // namespace tensormorph::gguf
