// NumPy .npy output (format version 1.0, little-endian, C order).
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string_view>

#include "tensormorph/status.h"

namespace tensormorph::npy {

/// Writes `data` — row-major elements of the NumPy type `descr` ("<f4", "<i8", "|u1", ...) — with
/// `shape` as a .npy file, atomically (core/atomic_file.h).
Status write_array(const std::filesystem::path& path, std::string_view descr, std::span<const uint64_t> shape,
                   std::span<const std::byte> data);

/// Writes float32 `values` with `shape` (row-major) as a .npy file (write_array with "<f4").
Status write_f32(const std::filesystem::path& path, std::span<const uint64_t> shape, std::span<const float> values);

}  // namespace tensormorph::npy
