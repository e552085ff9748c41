// The WGSL kernels of the WebGPU backend, as source text per (operation, input dtype).
//
// WGSL has no float64 and lets implementations flush float32 denormals and assume no NaN or
// infinity, so every kernel works on float32 *bits* with integer arithmetic: classes, order keys
// and extremes are integer comparisons, the halving sums are an IEEE float64 addition (round to
// nearest even) written in 32-bit integers, and the only float instructions are the decoders'
// multiplies and subtractions of finite, normal values, which every Vulkan, Metal and D3D12
// device rounds as IEEE does.
#pragma once

#include <optional>
#include <string>

#include "tensormorph/dtype.h"

namespace tensormorph::webgpu {

/// The input dtypes the kernels decode.
bool kernel_dtype_supported(DType dtype);

/// Element index -> float32 bits: tm.decode@1 (one invocation per element).
std::string decode_kernel(DType dtype);
/// tm.tile_stats@1, first pass: per (row, tile column), the row's halving sums and its counts.
std::string tile_rows_kernel(DType dtype);
/// tm.tile_stats@1, second pass: per tile, the halving sums over its row records; TM_TileStats out.
std::string tile_reduce_kernel();
/// tm.histogram@1 with bin edges precomputed on the host as float32 order keys.
std::string histogram_kernel(DType dtype);

/// Words of one row record the first tile_stats pass writes.
inline constexpr uint32_t kRowRecordWords = 12;

}  // namespace tensormorph::webgpu
