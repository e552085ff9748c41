// tm.render_tile@1. From values, a tile's blocks are tm.tile_stats@1 tiles with T = cell over the
// view the tile covers, so the device computes them with the tile_stats kernels, in the canonical
// order. Colouring runs on the host with the kit's tm_kit_pixel_colour, the function the CPU
// reference calls: its float64 arithmetic and log10 are then the reference's own, which a device
// libm would not promise.
#include <algorithm>
#include <cstring>
#include <vector>

#include "exec.h"

namespace tm_opencl {
namespace {

constexpr uint32_t kPixels = TM_RENDER_TILE_PIXELS;
constexpr uint64_t kTileBytes = uint64_t{kPixels} * kPixels * 4;

/// Writes the colour of statistics `s` to the RGBA pixel at `pixel`.
void colour_pixel(const RenderJob& job, const TM_TileStats& s, std::byte* pixel) {
  unsigned char rgba[4];
  tm_kit_pixel_colour(&s, job.stat, job.colormap, job.lo, job.hi, rgba);
  std::memcpy(pixel, rgba, sizeof rgba);
}

/// Colours the tile from a row-major `down` x `across` grid of shown cells, each `magnify` pixels
/// on a side from pixel (0, 0); pixels past the grid are transparent.
void colour_tile(const RenderJob& job, const std::vector<TM_TileStats>& shown, uint64_t down, uint64_t across,
                 uint32_t magnify) {
  for (uint32_t y = 0; y < kPixels; ++y) {
    std::byte* row = job.out + static_cast<size_t>(y) * kPixels * 4;
    const uint64_t gy = y / magnify;
    for (uint32_t x = 0; x < kPixels; ++x) {
      const uint64_t gx = x / magnify;
      if (gy < down && gx < across) {
        colour_pixel(job, shown[gy * across + gx], row + static_cast<size_t>(x) * 4);
      } else {
        std::memset(row + static_cast<size_t>(x) * 4, 0, 4);
      }
    }
  }
}

}  // namespace

Result<RunStats> run_render_values(TM_Backend& backend, const RenderJob& job, uint64_t memory_budget) {
  TileStatsJob blocks = job.blocks;
  std::vector<TM_TileStats> shown(blocks.tiles_down * blocks.tiles_across);
  blocks.out = reinterpret_cast<std::byte*>(shown.data());
  TMCL_ASSIGN_OR_RETURN(RunStats stats, run_tile_stats(backend, blocks, memory_budget));
  colour_tile(job, shown, blocks.tiles_down, blocks.tiles_across, 1);
  stats.bytes_written = kTileBytes;
  return stats;
}

Result<RunStats> run_render_stats(TM_Backend& backend, const RenderJob& job) {
  // The grid cells the pixels show: rows [row_begin, +down) x columns [col_begin, +across).
  const uint64_t cells = kPixels / job.magnify;
  const uint64_t down = std::min(cells, job.rows - job.row_begin);
  const uint64_t across = std::min(cells, job.cols - job.col_begin);
  const uint64_t row_bytes = job.cols * sizeof(TM_TileStats);
  const uint64_t span_bytes = across * sizeof(TM_TileStats);
  const uint64_t first_byte = job.col_begin * sizeof(TM_TileStats);
  std::vector<TM_TileStats> shown(down * across);
  RunStats stats;
  if (shown.empty()) {
    // Nothing shown: every pixel is transparent.
  } else if (job.input.host != nullptr) {
    for (uint64_t r = 0; r < down; ++r) {
      std::memcpy(&shown[r * across], job.input.host + (job.row_begin + r) * row_bytes + first_byte, span_bytes);
    }
  } else {
    CommandTimes times;
    for (uint64_t r = 0; r < down; ++r) {
      const uint64_t offset = job.input.byte_offset + (job.row_begin + r) * row_bytes + first_byte;
      const cl_int error = clEnqueueReadBuffer(backend.queue.get(), job.input.buffer->mem.get(), CL_FALSE,
                                               static_cast<size_t>(offset), static_cast<size_t>(span_bytes),
                                               &shown[r * across], 0, nullptr, times.next());
      if (error != CL_SUCCESS) {
        clFinish(backend.queue.get());  // reads already queued still write into `shown`
        return cl_failure(error, "clEnqueueReadBuffer(statistics grid row)");
      }
    }
    TMCL_CL_CHECK(clFinish(backend.queue.get()), "clFinish");
    stats.device_ns = times.total_ns();
  }
  colour_tile(job, shown, down, across, job.magnify);
  stats.bytes_read = shown.size() * sizeof(TM_TileStats);
  stats.bytes_written = kTileBytes;
  return stats;
}

}  // namespace tm_opencl
