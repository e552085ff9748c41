// The 16-level non-uniform codebook of ggml's IQ4_NL and IQ4_XS, shared by decoder and encoder.
#pragma once

namespace tensormorph::ggml_tables {

/// ggml's IQ4 codebook, ascending (a non-uniform grid on [-127, 113]). Stored as float because the
/// decoder multiplies by it; every entry is a small integer, so float arithmetic on it is exact
/// and the encoder gets the same results as ggml's int8 table.
inline constexpr float kIq4Book[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

}  // namespace tensormorph::ggml_tables
