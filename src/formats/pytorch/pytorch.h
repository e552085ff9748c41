// PyTorch checkpoints (torch.save zip format) read through a restricted pickle VM that never
// executes or imports anything.
#pragma once

#include <filesystem>
#include <memory>

#include "tensormorph/checkpoint.h"

namespace tensormorph::pytorch {

/// Opens a torch.save zip archive (.pt/.pth/.bin or no extension, any directory prefix inside).
/// The legacy pre-1.6 (non-zip) format is refused with a clear message.
Result<std::unique_ptr<Checkpoint>> open_file(const std::filesystem::path& path);

}  // namespace tensormorph::pytorch
