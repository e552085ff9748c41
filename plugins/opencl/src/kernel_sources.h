// OpenCL C sources of the plugin's kernels, compiled at backend creation.
//
// They are built without -cl-fast-relaxed-math, -cl-mad-enable or -cl-denorms-are-zero and
// declare FP_CONTRACT OFF: the bitwise claims rest on plain IEEE round-to-nearest arithmetic.
#pragma once

namespace tm_opencl {

/// Helpers every program starts with: exact half -> float bit conversion, float totalOrder keys.
extern const char* const kCommonKernelSource;

/// Tile statistics in the canonical float64 order; build with -D TM_INPUT_F16=0 or 1.
/// Kernels: row_stats_seq, row_stats_group, tile_stats_seq, tile_stats_group.
extern const char* const kTileStatsKernelSource;

/// Q8_0 -> F32 decoding bit-identical to the CPU reference. Kernel: decode_q8_0.
extern const char* const kDecodeKernelSource;

}  // namespace tm_opencl
