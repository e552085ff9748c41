// ggml's lattice tables for the IQ1/IQ2/IQ3 types. They are constants of the storage format
// (ggml's ggml-common.h publishes them), so a decoder that should match ggml bit for bit must
// carry them unchanged. Each grid entry packs 8 (u64) or 4 (u32) byte-sized magnitudes, element 0
// in the lowest byte; the IQ1 grid's bytes are int8 values in {-1, 0, 1}.
#pragma once

#include <cstdint>

namespace tensormorph::decode_internal {

/// IQ2/IQ3 sign patterns: 7 stored sign bits widened to 8 (bit 7 restores even parity).
extern const uint8_t kIq2XsSigns[128];
/// IQ2_XXS grid: 256 entries of 8 magnitudes.
extern const uint64_t kIq2XxsGrid[256];
/// IQ2_XS grid: 512 entries of 8 magnitudes.
extern const uint64_t kIq2XsGrid[512];
/// IQ2_S grid: 1024 entries of 8 magnitudes.
extern const uint64_t kIq2SGrid[1024];
/// IQ3_XXS grid: 256 entries of 4 magnitudes.
extern const uint32_t kIq3XxsGrid[256];
/// IQ3_S grid: 512 entries of 4 magnitudes.
extern const uint32_t kIq3SGrid[512];
/// IQ1_S and IQ1_M grid: 2048 entries of 8 int8 values.
extern const uint64_t kIq1SGrid[2048];

/// The offset IQ1_S and IQ1_M add to every grid value (ggml's IQ1S_DELTA; IQ1M_DELTA is equal).
inline constexpr float kIq1Delta = 0.125f;

}  // namespace tensormorph::decode_internal
