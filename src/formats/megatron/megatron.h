// Megatron-LM tensor-parallel checkpoints: one torch.save archive per tensor-parallel rank
// (`mp_rank_XX/model_optim_rng.pt`), each holding that rank's part of every parallel layer. The
// model's tensors are presented whole, assembled along the dimension Megatron's layers split (see
// docs/FORMATS.md for the rule by layer role); what cannot be inferred is listed per rank.
#pragma once

#include <filesystem>
#include <memory>

#include "tensormorph/checkpoint.h"

namespace tensormorph::megatron {

/// True when `directory` holds `mp_rank_XX` directories, or a `latest_checkpointed_iteration.txt`.
bool is_tensor_parallel_directory(const std::filesystem::path& directory);

/// Opens the set: `directory` holds the `mp_rank_XX` directories, or names the latest iteration's
/// directory in its `latest_checkpointed_iteration.txt`.
Result<std::unique_ptr<Checkpoint>> open_directory(const std::filesystem::path& directory);

}  // namespace tensormorph::megatron
