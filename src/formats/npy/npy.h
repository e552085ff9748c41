// NumPy .npy output (format version 1.0, little-endian, C order).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string_view>

#include "tensormorph/dtype.h"
#include "tensormorph/status.h"

namespace tensormorph::npy {

/// Writes `data` — row-major elements of the NumPy type `descr` ("<f4", "<i8", "|u1", ...) — with
/// `shape` as a .npy file, atomically (core/atomic_file.h).
Status write_array(const std::filesystem::path& path, std::string_view descr, std::span<const uint64_t> shape,
                   std::span<const std::byte> data);

/// NumPy's name for a stored element type that has one ("<f4"); nullopt for BF16, F8, block types, ...
std::optional<std::string_view> numpy_descr(DType dtype);

/// Writes float32 `values` with `shape` (row-major) as a .npy file (write_array with "<f4").
Status write_f32(const std::filesystem::path& path, std::span<const uint64_t> shape, std::span<const float> values);

}  // namespace tensormorph::npy
