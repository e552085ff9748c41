// The WGSL text the kernels are assembled from, shared by the kernel files of this folder.
#pragma once

#include <string>

#include "tensormorph/dtype.h"

namespace tensormorph::webgpu::wgsl {

/// 64-bit integers as vec2<u32>(low, high) and IEEE float64 arithmetic on them (add64, shl64,
/// f64_add, f64_add_pos, f64_of, f64_square_of, f64_of_int, order keys).
const char* float64_source();
/// Loads from `src` at byte addresses (word_at, half_at, byte_at) and float32 arithmetic on bits
/// with the host's NaN results.
const char* loads_source();
/// The uniform `Params` of the tile_stats kernels.
const char* tile_params_source();
/// An invocation's counts and extremes (c_nan, c_pinf, c_ninf, c_zeros, k_min, k_max, k_abs) and
/// its workgroup's atomics (`counts`, `keys`): start_counts(t) before the first barrier,
/// flush_counts() to add the invocation's in.
const char* counters_source();
/// `fn elem(row_byte, col) -> u32`: the float32 bits of one element of `dtype` (empty if none).
std::string element_source(DType dtype);

}  // namespace tensormorph::webgpu::wgsl
