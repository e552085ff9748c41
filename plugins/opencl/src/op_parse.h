// Turning an operation instance from the host into a job this plugin can run. The plugin kit
// checks the instance against the operation's definition (INVALID_ARGUMENT, with the kit's
// messages); this adds what is particular to this backend: the dtypes and variants it runs
// (UNIMPLEMENTED otherwise), its own buffers, and host address ranges.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "backend.h"
#include "errors.h"
#include "support.h"
#include "tensormorph/c/plugin.h"

namespace tm_opencl {

/// The operations this plugin runs.
enum class OpKind { kTileStats, kDecode, kRenderValues, kRenderStats };

/// Where an input tensor's bytes are: host memory, a buffer of this backend, or nowhere (no bytes).
struct InputSource {
  const std::byte* host = nullptr;  ///< first byte in host memory (host_data + byte_offset), or null
  TM_Buffer* buffer = nullptr;      ///< the resident buffer, or null
  uint64_t byte_offset = 0;         ///< offset into `buffer`
  uint64_t nbytes = 0;              ///< bytes of the tensor
};

/// A validated tm.tile_stats@1 call.
struct TileStatsJob {
  InputSource input;                       ///< the 2-D tensor
  TM_DType dtype = TM_DTYPE_F32;           ///< F32 or F16
  uint32_t element_bytes = 4;              ///< 4 or 2
  uint64_t rows = 0;                       ///< tensor rows
  uint64_t cols = 0;                       ///< tensor columns (the row pitch)
  uint64_t row_begin = 0, row_end = 0;     ///< the view's rows [row_begin, row_end)
  uint64_t col_begin = 0, col_end = 0;     ///< the view's columns [col_begin, col_end)
  uint32_t tile = 0;                       ///< T, a power of two in [8, 4096]
  uint64_t tiles_down = 0;                 ///< tile rows of the view
  uint64_t tiles_across = 0;               ///< tile columns of the view
  std::byte* out = nullptr;                ///< tiles_down * tiles_across TM_TileStats, any alignment
};

/// A validated tm.decode@1 call.
struct DecodeJob {
  InputSource input;        ///< Q8_0 blocks
  uint64_t elements = 0;    ///< a multiple of 32
  std::byte* out = nullptr; ///< `elements` floats, any alignment
};

/// A validated tm.render_tile@1 call this plugin takes.
struct RenderJob {
  InputSource input;                      ///< the matrix (values) or the U8[rows, cols, sizeof(TM_TileStats)] grid
  uint64_t rows = 0, cols = 0;            ///< of the matrix or of the grid
  uint64_t row_begin = 0, col_begin = 0;  ///< statistics: the grid cell shown at pixel (0, 0)
  uint32_t magnify = 1;                   ///< statistics: pixels per grid cell side
  int64_t stat = TM_PIXEL_STAT_MEAN;      ///< a TM_PIXEL_STAT_* value
  int64_t colormap = TM_COLORMAP_DIVERGING;  ///< a TM_COLORMAP_* value
  double lo = 0.0, hi = 0.0;              ///< the colour range
  TileStatsJob blocks;  ///< values: tm.tile_stats@1 with T = cell over the view the tile covers (out unset)
  std::byte* out = nullptr;               ///< 256 x 256 RGBA pixels, row-major
};

/// A validated operation instance.
struct ParsedOp {
  OpKind kind = OpKind::kTileStats;  ///< which job below is filled
  std::string op;                    ///< the operation id
  Capability capability;             ///< what this backend achieves for it
  uint64_t output_nbytes = 0;        ///< bytes execute writes to output 0 (all outputs have a determined size)
  TileStatsJob tile_stats;           ///< when kind == kTileStats
  DecodeJob decode;                  ///< when kind == kDecode
  RenderJob render;                  ///< when kind is kRenderValues or kRenderStats
};

/// Validates every argument of `instance`: INVALID_ARGUMENT for malformed calls, UNIMPLEMENTED for
/// well-formed calls this backend does not support.
Result<ParsedOp> parse_op(const TM_Backend& backend, const TM_OpInstance* instance);

}  // namespace tm_opencl
