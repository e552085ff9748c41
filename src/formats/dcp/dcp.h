// PyTorch Distributed Checkpoint (DCP) directories: `.metadata` (a pickle of the planner's
// Metadata, read by the restricted pickle machine, never executed) and `__<rank>_<n>.distcp` data
// files holding one torch.save archive per stored chunk. Each tensor is presented whole, with its
// global shape: a tensor stored in one chunk is mapped in place, one stored in several lists them
// as TensorInfo::chunks, which the checkpoint gathers on first read.
#pragma once

#include <filesystem>
#include <memory>

#include "tensormorph/checkpoint.h"

namespace tensormorph::dcp {

/// True when `directory` holds a `.metadata` file (what DCP writes beside its data files).
bool is_dcp_directory(const std::filesystem::path& directory);

/// Reads `.metadata` and every chunk's archive header, and checks that each tensor's chunks lie
/// within its shape, agree with it in dtype and extent, and tile it without gaps or overlaps.
Result<std::unique_ptr<Checkpoint>> open_directory(const std::filesystem::path& directory);

}  // namespace tensormorph::dcp
