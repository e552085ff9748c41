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
/// tm.tile_stats@1, first pass for T >= kLanesTileMin: per (tile, residue of its rows mod T / 32),
/// the halving levels of 32 rows read by 8 lanes each. One kernel serves T = 32, one every larger T.
std::string tile_lanes_kernel(DType dtype, uint32_t tile);
/// tm.tile_stats@1, second pass: per tile, the halving sums over its S partial records (S = T row
/// records after tile_rows_kernel, T / 32 after tile_lanes_kernel); TM_TileStats out.
std::string tile_reduce_kernel();

/// Lanes that share one row in tile_lanes_kernel, and rows one of its workgroups covers.
inline constexpr uint32_t kLanesPerRow = 8;
inline constexpr uint32_t kRowsPerGroup = 32;
/// The smallest tile tile_lanes_kernel takes.
inline constexpr uint32_t kLanesTileMin = 32;
/// tm.histogram@1 with bin edges precomputed on the host as float32 order keys.
std::string histogram_kernel(DType dtype);

/// Words of one row record the first tile_stats pass writes.
inline constexpr uint32_t kRowRecordWords = 12;

}  // namespace tensormorph::webgpu
