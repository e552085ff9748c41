// Opening any supported checkpoint: format detection and dispatch to the readers.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "tensormorph/checkpoint.h"

namespace tensormorph {

/// What a file looks like from its first bytes and name.
enum class DetectedFormat {
  kSafetensors, kSafetensorsIndex, kGguf, kPyTorchZip,
  kPyTorchLegacy,  ///< pre-1.6 torch.save (raw pickle stream)
  kGgmlLegacy,     ///< pre-GGUF ggml/ggjt/ggmf ("lmgg", "tjgg", ...)
  kZipOther, kText, kEmpty, kUnknown,
};

/// Describes a detected format for messages ("a pre-GGUF ggml file (magic 'lmgg')").
std::string describe_format(DetectedFormat format);

/// Sniffs a file's format from its first bytes (and the name for index JSON).
Result<DetectedFormat> detect_format(const std::filesystem::path& path);

/// How to open a checkpoint.
struct OpenOptions {
  /// How tensor-parallel parts assemble where the layer's name does not tell it (Megatron sets; other
  /// formats ignore them): "GLOB=DIM" (parts joined along DIM), "GLOB=gated" (SwiGLU gate and up
  /// halves, dim 0) or "GLOB=replicated" (rank 0's copy), GLOB a shell glob on the assembled name.
  /// The first matching rule wins over the inferred role.
  std::vector<std::string> tensor_parallel_rules;
};

/// Opens a checkpoint: a safetensors/GGUF/PyTorch file, a model.safetensors.index.json, or a
/// directory holding one checkpoint. Errors name the file, tensor and byte offset.
Result<std::unique_ptr<Checkpoint>> open_checkpoint(const std::filesystem::path& path, const OpenOptions& options = {});

}  // namespace tensormorph
