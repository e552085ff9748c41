// PNG encoding of rendered tiles (libspng).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "tensormorph/status.h"

namespace tensormorph::server {

/// Encodes `rgba` (width x height x 4 bytes, row-major) as an 8-bit RGBA PNG, fast compression.
Result<std::string> encode_png(std::span<const uint8_t> rgba, uint32_t width, uint32_t height);

}  // namespace tensormorph::server
