// Helpers shared by the fuzz targets: the readers take paths, so inputs go through a scratch file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include "tensormorph/checkpoint.h"

namespace tensormorph::fuzz {

/// A per-process scratch directory (under /dev/shm when it exists, so writes stay in memory),
/// removed at exit.
const std::filesystem::path& scratch_dir();

/// Writes `size` bytes to `scratch_dir() / name` (replacing it) and returns the path; aborts when
/// the file cannot be written, since every later result would be meaningless.
std::filesystem::path write_scratch(const std::string& name, const uint8_t* data, size_t size);

/// Touches what an opened checkpoint offers beyond its header, as the commands do: every name
/// and shape, the metadata as JSON, and the decoded values of a few small tensors.
void exercise(const Checkpoint& checkpoint);

}  // namespace tensormorph::fuzz
