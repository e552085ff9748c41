// DeepSpeed ZeRO checkpoints (stages 1, 2 and 3): a `global_stepN` directory of torch.save archives,
// the model states (parameter shapes per optimizer group, buffers, frozen parameters) and one
// optimizer-states archive per data-parallel rank holding that rank's flat fp32 partitions. The
// fp32 master parameters are presented whole with their real shapes, cut from the partitions as
// DeepSpeed's zero_to_fp32 reassembles them (see docs/FORMATS.md); optimizer moments are not.
#pragma once

#include <filesystem>
#include <memory>
#include <span>
#include <string>

#include "tensormorph/checkpoint.h"

namespace tensormorph::deepspeed {

/// True when `directory` holds ZeRO model and optimizer states, or a `latest` file beside them.
bool is_zero_directory(const std::filesystem::path& directory);

/// Opens the checkpoint in `directory`, or in the tag directory its `latest` file names. With model
/// parallelism, `rules` (OpenOptions::tensor_parallel_rules) say how tensors join where the layer's
/// name does not tell it.
Result<std::unique_ptr<Checkpoint>> open_directory(const std::filesystem::path& directory, std::span<const std::string> rules = {});

}  // namespace tensormorph::deepspeed
