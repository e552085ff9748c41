// The built-in demo checkpoint: a small transformer-shaped model with realistic weight statistics.
#pragma once

#include <filesystem>
#include <vector>

#include "tensormorph/status.h"

namespace tensormorph::demo {

/// What write_demo_checkpoint produced.
struct DemoFiles {
  std::filesystem::path index;                  ///< model.safetensors.index.json (BF16/F32 shards)
  std::vector<std::filesystem::path> shards;    ///< the safetensors shards
  std::filesystem::path gguf;                   ///< the quantized GGUF twin
};

/// Writes the deterministic demo checkpoint into `dir` (created if missing): a sharded safetensors
/// set and a GGUF twin with quantized types. The same bytes on every machine.
Result<DemoFiles> write_demo_checkpoint(const std::filesystem::path& dir);

}  // namespace tensormorph::demo
