// tm.tile_stats@1: the view is cut into chunks of whole tiles that fit the staging budget; each
// chunk runs a row kernel (one partial per row of each tile) and a tile kernel (one result per
// tile), both in the canonical order (see tile_stats_kernels.cpp).
#include <algorithm>
#include <bit>
#include <cstring>
#include <vector>

#include "exec.h"

namespace tm_opencl {
namespace {

constexpr uint64_t kStatsWords = 7;  // nan, pos_inf, neg_inf, zeros, min key, max key, absmax bits
constexpr uint64_t kPartialBytes = 2 * sizeof(double) + kStatsWords * sizeof(uint32_t);
// Keeps region sizes in the kernels' uint arithmetic.
constexpr uint64_t kMaxRegionSpan = uint64_t{1} << 30;

/// Tiles per chunk, down and across.
struct ChunkShape {
  uint64_t down = 1;
  uint64_t across = 1;
};

Result<ChunkShape> plan_chunks(const TM_Backend& backend, const TileStatsJob& job, uint64_t memory_budget) {
  const uint64_t tile = job.tile;
  const uint64_t staged_input = job.input.host != nullptr ? tile * tile * job.element_bytes : 0;
  const uint64_t per_tile = staged_input + tile * kPartialBytes + kPartialBytes;
  if (memory_budget != 0 && per_tile > memory_budget) {
    return resource_exhausted("opencl: tm.tile_stats@1: one " + std::to_string(tile) + "x" + std::to_string(tile) +
                              " tile needs " + std::to_string(per_tile) +
                              " bytes of device memory, over the policy's memory budget of " +
                              std::to_string(memory_budget));
  }
  // The staging size is our own soft limit: a chunk always holds at least one tile.
  const uint64_t tiles_per_chunk = std::max<uint64_t>(1, chunk_memory_limit(backend, memory_budget) / per_tile);
  ChunkShape shape;
  shape.across = std::min({job.tiles_across, tiles_per_chunk, kMaxRegionSpan / tile});
  shape.down = std::min({job.tiles_down, std::max<uint64_t>(1, tiles_per_chunk / shape.across), kMaxRegionSpan / tile});
  return shape;
}

/// Device buffers reused by every chunk.
struct ChunkBuffers {
  ClMem staging;                               ///< the chunk's input region (host inputs only)
  ClMem row_sum, row_sq, row_stats;            ///< one partial per (tile column, region row)
  ClMem tile_sum, tile_sq, tile_stats;         ///< one result per tile of the chunk
  std::vector<double> host_sum, host_sq;       ///< tile results read back
  std::vector<uint32_t> host_stats;
};

Result<ChunkBuffers> allocate_chunk_buffers(const TM_Backend& backend, const TileStatsJob& job, const ChunkShape& shape) {
  ChunkBuffers buffers;
  const uint64_t region_rows = shape.down * job.tile;
  const uint64_t partials = region_rows * shape.across;
  const uint64_t tiles = shape.down * shape.across;
  if (job.input.host != nullptr) {
    TMCL_ASSIGN_OR_RETURN(buffers.staging, make_device_buffer(backend, partials * job.tile * job.element_bytes,
                                                              CL_MEM_READ_ONLY));
  }
  TMCL_ASSIGN_OR_RETURN(buffers.row_sum, make_device_buffer(backend, partials * sizeof(double), CL_MEM_READ_WRITE));
  TMCL_ASSIGN_OR_RETURN(buffers.row_sq, make_device_buffer(backend, partials * sizeof(double), CL_MEM_READ_WRITE));
  TMCL_ASSIGN_OR_RETURN(buffers.row_stats,
                        make_device_buffer(backend, partials * kStatsWords * sizeof(uint32_t), CL_MEM_READ_WRITE));
  TMCL_ASSIGN_OR_RETURN(buffers.tile_sum, make_device_buffer(backend, tiles * sizeof(double), CL_MEM_WRITE_ONLY));
  TMCL_ASSIGN_OR_RETURN(buffers.tile_sq, make_device_buffer(backend, tiles * sizeof(double), CL_MEM_WRITE_ONLY));
  TMCL_ASSIGN_OR_RETURN(buffers.tile_stats,
                        make_device_buffer(backend, tiles * kStatsWords * sizeof(uint32_t), CL_MEM_WRITE_ONLY));
  buffers.host_sum.resize(tiles);
  buffers.host_sq.resize(tiles);
  buffers.host_stats.resize(tiles * kStatsWords);
  return buffers;
}

float float_from_order_key(uint32_t key_word) {
  const auto key = static_cast<int32_t>(key_word);
  const uint32_t bits = key < 0 ? (key_word ^ 0x7fffffffu) : key_word;
  return std::bit_cast<float>(bits);
}

/// One chunk: tiles [tile_down0, +down) x [tile_across0, +across) of the view.
struct Chunk {
  uint64_t tile_down0 = 0, tile_across0 = 0;
  uint64_t down = 0, across = 0;
};

Status run_chunk(TM_Backend& backend, const TileStatsJob& job, const Chunk& chunk, ChunkBuffers& buffers,
                 CommandTimes& times) {
  const TileStatsKernels& kernels = job.dtype == TM_DTYPE_F16 ? backend.tile_stats_f16 : backend.tile_stats_f32;
  const uint64_t tile = job.tile;
  const uint64_t row0 = job.row_begin + chunk.tile_down0 * tile;
  const uint64_t col0 = job.col_begin + chunk.tile_across0 * tile;
  const auto region_rows = static_cast<uint32_t>(std::min(chunk.down * tile, job.row_end - row0));
  const auto region_cols = static_cast<uint32_t>(std::min(chunk.across * tile, job.col_end - col0));
  cl_command_queue queue = backend.queue.get();

  const ClMem* source = &buffers.staging;
  cl_ulong source_base = 0;  // in elements
  cl_ulong row_pitch = region_cols;
  if (job.input.host != nullptr) {
    const size_t element = job.element_bytes;
    const size_t buffer_origin[3] = {0, 0, 0};
    const size_t host_origin[3] = {static_cast<size_t>(col0) * element, static_cast<size_t>(row0), 0};
    const size_t region[3] = {static_cast<size_t>(region_cols) * element, region_rows, 1};
    TMCL_CL_CHECK(clEnqueueWriteBufferRect(queue, buffers.staging.get(), CL_FALSE, buffer_origin, host_origin, region,
                                           region[0], 0, static_cast<size_t>(job.cols) * element, 0, job.input.host, 0,
                                           nullptr, times.next()),
                  "clEnqueueWriteBufferRect");
  } else {
    source = &job.input.buffer->mem;
    source_base = job.input.byte_offset / job.element_bytes + row0 * job.cols + col0;
    row_pitch = job.cols;
  }

  const bool group = backend.use_group_reduction;
  const size_t lanes = group ? std::min<size_t>(backend.group_lanes, job.tile) : 0;
  const auto tile_u32 = static_cast<cl_uint>(tile);
  const auto across = static_cast<cl_uint>(chunk.across);
  const auto down = static_cast<cl_uint>(chunk.down);
  const size_t partials = static_cast<size_t>(region_rows) * across;
  const ClKernel& row_kernel = group ? kernels.row_group : kernels.row_seq;
  const LocalBytes local_sums{lanes * sizeof(double)};
  const LocalBytes local_stats{lanes * kStatsWords * sizeof(uint32_t)};
  if (group) {
    TMCL_RETURN_IF_ERROR(set_kernel_args(row_kernel.get(), "row_stats_group", *source, source_base, row_pitch,
                                         region_rows, region_cols, tile_u32, across, buffers.row_sum, buffers.row_sq,
                                         buffers.row_stats, local_sums, local_sums, local_stats));
  } else {
    TMCL_RETURN_IF_ERROR(set_kernel_args(row_kernel.get(), "row_stats_seq", *source, source_base, row_pitch,
                                         region_rows, region_cols, tile_u32, across, buffers.row_sum, buffers.row_sq,
                                         buffers.row_stats));
  }
  TMCL_RETURN_IF_ERROR(enqueue_kernel(backend, row_kernel, "row_stats", group ? partials * lanes : partials, lanes, times));

  const size_t tiles = static_cast<size_t>(down) * across;
  const ClKernel& tile_kernel = group ? kernels.tile_group : kernels.tile_seq;
  if (group) {
    TMCL_RETURN_IF_ERROR(set_kernel_args(tile_kernel.get(), "tile_stats_group", buffers.row_sum, buffers.row_sq,
                                         buffers.row_stats, region_rows, tile_u32, down, across, buffers.tile_sum,
                                         buffers.tile_sq, buffers.tile_stats, local_sums, local_sums, local_stats));
  } else {
    TMCL_RETURN_IF_ERROR(set_kernel_args(tile_kernel.get(), "tile_stats_seq", buffers.row_sum, buffers.row_sq,
                                         buffers.row_stats, region_rows, tile_u32, down, across, buffers.tile_sum,
                                         buffers.tile_sq, buffers.tile_stats));
  }
  TMCL_RETURN_IF_ERROR(enqueue_kernel(backend, tile_kernel, "tile_stats", group ? tiles * lanes : tiles, lanes, times));

  TMCL_CL_CHECK(clEnqueueReadBuffer(queue, buffers.tile_sum.get(), CL_FALSE, 0, tiles * sizeof(double),
                                    buffers.host_sum.data(), 0, nullptr, times.next()),
                "clEnqueueReadBuffer(tile sums)");
  TMCL_CL_CHECK(clEnqueueReadBuffer(queue, buffers.tile_sq.get(), CL_FALSE, 0, tiles * sizeof(double),
                                    buffers.host_sq.data(), 0, nullptr, times.next()),
                "clEnqueueReadBuffer(tile sums of squares)");
  TMCL_CL_CHECK(clEnqueueReadBuffer(queue, buffers.tile_stats.get(), CL_TRUE, 0, tiles * kStatsWords * sizeof(uint32_t),
                                    buffers.host_stats.data(), 0, nullptr, times.next()),
                "clEnqueueReadBuffer(tile counts)");

  for (uint64_t i = 0; i < chunk.down; ++i) {
    for (uint64_t j = 0; j < chunk.across; ++j) {
      const uint64_t index = i * chunk.across + j;
      const uint32_t* words = &buffers.host_stats[index * kStatsWords];
      const uint64_t tile_row0 = row0 + i * tile;
      const uint64_t tile_col0 = col0 + j * tile;
      TM_TileStats stats{};
      stats.count = std::min(tile, job.row_end - tile_row0) * std::min(tile, job.col_end - tile_col0);
      stats.nan = words[0];
      stats.pos_inf = words[1];
      stats.neg_inf = words[2];
      stats.zeros = words[3];
      stats.sum = buffers.host_sum[index];
      stats.sum_sq = buffers.host_sq[index];
      stats.min = float_from_order_key(words[4]);
      stats.max = float_from_order_key(words[5]);
      stats.absmax = std::bit_cast<float>(words[6]);
      stats.reserved = 0;
      const uint64_t out_index = (chunk.tile_down0 + i) * job.tiles_across + chunk.tile_across0 + j;
      std::memcpy(job.out + out_index * sizeof(TM_TileStats), &stats, sizeof stats);
    }
  }
  return {};
}

}  // namespace

Result<RunStats> run_tile_stats(TM_Backend& backend, const TileStatsJob& job, uint64_t memory_budget) {
  RunStats stats;
  if (job.tiles_down == 0 || job.tiles_across == 0) return stats;
  TMCL_ASSIGN_OR_RETURN(const ChunkShape shape, plan_chunks(backend, job, memory_budget));
  TMCL_ASSIGN_OR_RETURN(ChunkBuffers buffers, allocate_chunk_buffers(backend, job, shape));
  CommandTimes times;
  for (uint64_t down0 = 0; down0 < job.tiles_down; down0 += shape.down) {
    for (uint64_t across0 = 0; across0 < job.tiles_across; across0 += shape.across) {
      Chunk chunk;
      chunk.tile_down0 = down0;
      chunk.tile_across0 = across0;
      chunk.down = std::min(shape.down, job.tiles_down - down0);
      chunk.across = std::min(shape.across, job.tiles_across - across0);
      Status status = run_chunk(backend, job, chunk, buffers, times);
      if (!status.ok()) {
        // Commands already queued may still read the caller's memory or our vectors: drain first.
        clFinish(backend.queue.get());
        return status.take_failure();
      }
    }
  }
  TMCL_CL_CHECK(clFinish(backend.queue.get()), "clFinish");
  stats.device_ns = times.total_ns();
  stats.bytes_read = (job.row_end - job.row_begin) * (job.col_end - job.col_begin) * job.element_bytes;
  stats.bytes_written = job.tiles_down * job.tiles_across * sizeof(TM_TileStats);
  return stats;
}

}  // namespace tm_opencl
