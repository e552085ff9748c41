// Megatron-LM tensor-parallel checkpoints: one torch.save archive per tensor-parallel rank
// (`mp_rank_XX/model_optim_rng.pt`), each holding that rank's part of every parallel layer. The
// model's tensors are presented whole, assembled along the dimension Megatron's layers split (see
// docs/FORMATS.md for the rule by layer role); what cannot be inferred is listed per rank.
#pragma once

#include <filesystem>
#include <memory>
#include <span>
#include <string>

#include "tensormorph/checkpoint.h"

namespace tensormorph::megatron {

/// True when `directory` holds `mp_rank_XX` directories, or a `latest_checkpointed_iteration.txt`.
bool is_tensor_parallel_directory(const std::filesystem::path& directory);

/// Opens the set: `directory` holds the `mp_rank_XX` directories, or names the latest iteration's
/// directory in its `latest_checkpointed_iteration.txt`. `rules` ("GLOB=DIM", "GLOB=gated",
/// "GLOB=replicated"; OpenOptions::tensor_parallel_rules) say how tensors assemble where the
/// layer's name does not tell it; a malformed rule is INVALID_ARGUMENT.
Result<std::unique_ptr<Checkpoint>> open_directory(const std::filesystem::path& directory,
                                                   std::span<const std::string> rules = {});

}  // namespace tensormorph::megatron
