// Which tensor of one checkpoint is which tensor of another: by name, across GGUF's names and the
// Hugging Face names llama.cpp's converter renamed them from, with what the converter did to the
// values on the way (the row order of llama-family Q/K weights, Gemma's norm +1), so that a
// comparison undoes those instead of reporting them as differences. Nothing is dropped: every
// tensor ends up matched, matched by name with another shape, or on one side only.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "formats/gguf/gguf.h"
#include "tensormorph/checkpoint.h"
#include "tensormorph/status.h"

namespace tensormorph::engine {

/// What llama.cpp's converter did to a tensor's values between the Hugging Face and GGUF sides.
struct ConverterTransform {
  /// Non-zero: the GGUF side's rows are the Hugging Face rows regrouped within each of this many
  /// heads (convert_hf_to_gguf's `permute` of llama-family q_proj/k_proj weights); gguf_row_source
  /// says which row each came from.
  uint32_t permuted_heads = 0;
  /// The GGUF side holds the Hugging Face value plus this (Gemma's RMS norm weights: +1).
  double gguf_offset = 0;
  /// Which side is the GGUF one: 0 (A) or 1 (B); meaningful when a transform is set.
  int gguf_side = 0;

  /// True when the converter changed nothing.
  bool identity() const { return permuted_heads == 0 && gguf_offset == 0; }
  /// "rows regrouped in 32 heads (llama.cpp's Q/K permutation)", "+1 (Gemma norm)", or "".
  std::string describe() const;
};

/// Two tensors that stand for the same weight.
struct MatchedTensors {
  const TensorInfo* a = nullptr;
  const TensorInfo* b = nullptr;
  ConverterTransform transform;
  bool from_user_map = false;  ///< named by --map rather than found
};

/// The result of matching two checkpoints' tensors.
struct TensorMatching {
  std::vector<MatchedTensors> matched;          ///< in A's order
  std::vector<MatchedTensors> shape_mismatched;  ///< matched by name, shapes differ after mapping
  std::vector<const TensorInfo*> only_a;         ///< in A's order
  std::vector<const TensorInfo*> only_b;         ///< in B's order
  std::string naming;  ///< how names were related: "same names", "gguf (llama) <-> hugging face", ...
};

/// Pairs of tensor names a user supplies (A's name, B's name).
using NameMapping = std::vector<std::pair<std::string, std::string>>;

/// Reads a mapping file: one pair a line, "NAME_IN_A NAME_IN_B" separated by whitespace, blank
/// lines and lines starting with '#' ignored. Errors name the file and line.
Result<NameMapping> read_name_mapping(const std::filesystem::path& path);

/// The Hugging Face name llama.cpp's converter renamed to GGUF tensor `gguf_name` for GGUF
/// architecture `architecture` ("llama", "qwen2", "gemma", "gemma2", "gemma3", "phi3"), or "" when
/// the name is not one it produces for that architecture.
std::string hugging_face_name(std::string_view architecture, std::string_view gguf_name);

/// Matches the tensors of `a` and `b`: the user's pairs first (each name must exist on its side),
/// then equal names, or, where exactly one side is GGUF, GGUF names through hugging_face_name
/// (with the architecture from the GGUF's general.architecture).
Result<TensorMatching> match_tensors(const Checkpoint& a, const Checkpoint& b, const NameMapping& user = {});

/// The converter's row regrouping (formats/gguf), where the engine applies it.
using gguf::gguf_row_source;

}  // namespace tensormorph::engine
