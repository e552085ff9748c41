// NumPy .npy output (format version 1.0, little-endian float32, C order).
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>

#include "tensormorph/status.h"

namespace tensormorph::npy {

/// Writes `values` with `shape` (row-major) as a .npy file atomically (temporary file, then rename).
Status write_f32(const std::filesystem::path& path, std::span<const uint64_t> shape, std::span<const float> values);

}  // namespace tensormorph::npy
