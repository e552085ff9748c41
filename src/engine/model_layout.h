// Where a tensor sits in its model, read from its name alone: the stack of repeated blocks it
// belongs to ("model.layers", "blk", "encoder.block"), its block number and its role in the block,
// with a short canonical label for the role that is the same across naming conventions (Hugging
// Face llama/mistral/qwen2/gemma/phi3, llama.cpp's GGUF names, GPT-2, BERT, Mixtral and other
// mixtures of experts, T5). The viewer lays a checkpoint out as a grid of blocks by roles.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tensormorph::engine {

/// The place of one tensor.
struct TensorPlace {
  /// The name components before the first all-digit one, joined with '.'; "" when there is none
  /// (or for a PyTorch Sequential's "0.weight").
  std::string stack;
  /// The first all-digit component, when one is followed by more of the name.
  std::optional<uint64_t> block;
  /// The components after the block number ("self_attn.q_proj.weight"); the whole name outside blocks.
  std::string role;
  /// A short label of the role for column headers: q, k, v, o, qkv, gate, up, down, gate_up,
  /// attn_norm, ffn_norm, router, cross_q..cross_o, cross_norm (a mixture's experts prefixed "eN ";
  /// " bias" or another parameter's name appended); otherwise the role without a trailing ".weight".
  std::string role_label;
  /// "block" inside a block; outside: "embedding", "head", "final norm" or "other".
  std::string section;
};

/// The place of the tensor named `name`.
TensorPlace place_of(std::string_view name);

/// One stack of blocks in a checkpoint.
struct StackLayout {
  std::string stack;
  /// The distinct block numbers, in numeric order (0, 1, 2, ..., 10, 11).
  std::vector<uint64_t> block_numbers;
  /// The distinct roles of its blocks: the canonical ones in the order attn_norm, q, k, v, qkv, o,
  /// cross attention, ffn_norm, router, gate, up, gate_up, down (weights before biases, experts
  /// after the dense ones by expert number), then the others in order of first appearance.
  std::vector<std::string> roles;
};

/// The stacks of a checkpoint's tensors (`places[i]` is place_of(tensors[i].name)), in order of
/// first appearance.
std::vector<StackLayout> model_layout(std::span<const TensorPlace> places);

}  // namespace tensormorph::engine
