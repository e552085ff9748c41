// The CPU's render kernel. A pixel's block statistics are tm.tile_stats@1's with T = cell, so cells
// of at least the smallest tile size come from the SIMD tile_stats kernels (threaded) and are then
// coloured; smaller cells and the sampled rung run the reference on bands of pixel rows in
// parallel (every band computes whole blocks). Either way the bytes are the reference's.
#include "backends/cpu/cpu_render.h"

#include <algorithm>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include "backends/cpu/tile_stats/tile_stats.h"
#include "core/dtype_abi.h"
#include "compute/ops/render_tile.h"
#include "tensormorph/decode.h"

namespace tensormorph::cpu {
namespace {

// Input and output host memory of a parsed instance (the CPU's buffers are host memory too, but
// the scheduler never gives a host-visible backend a buffer).
Result<std::span<const std::byte>> input_of(const ops::RenderArgs& a) {
  if (a.input.arg.host_data == nullptr) return Status::InvalidArgument("render_tile: cpu reads host memory only");
  return std::span<const std::byte>(static_cast<const std::byte*>(a.input.arg.host_data) + a.input.arg.byte_offset,
                                    a.input.arg.nbytes);
}

uint64_t bytes_read(const ops::RenderArgs& a) {
  const uint64_t side = ops::kRenderTilePixels / a.params.magnify;
  if (a.params.source == ops::RenderSource::kTileStats) return side * side * sizeof(TM_TileStats);
  const uint64_t rows = std::min(a.rows - std::min(a.rows, a.params.row_begin), side * a.params.cell);
  const uint64_t cols = std::min(a.cols - std::min(a.cols, a.params.col_begin), side * a.params.cell);
  const uint64_t read_rows = a.params.sampled ? (rows + a.params.cell - 1) / a.params.cell : rows;
  auto row_bytes = dtype_storage_bytes(a.input.dtype, cols);
  return row_bytes.ok() ? read_rows * *row_bytes : 0;
}

/// A values tile whose cells are tile_stats tiles: the grid of block statistics over the tile's
/// view, computed by the SIMD kernels, then coloured by the shared ops code.
Status render_through_tile_stats(const ops::MatrixView& matrix, const ops::RenderParams& p, uint32_t max_threads,
                                 Isa isa, ScratchPool& scratch, std::span<uint8_t> rgba) {
  const ops::ViewRange range = ops::render_cell_view(p, matrix.rows, matrix.cols);
  const ops::TileGrid grid = ops::tile_grid(range, static_cast<uint32_t>(p.cell));
  std::vector<TM_TileStats> stats(grid.count());
  TM_RETURN_IF_ERROR(tile_stats(scratch, matrix, range, static_cast<uint32_t>(p.cell), stats, max_threads, isa));
  return ops::render_cell_grid(stats, grid, p, rgba);
}

/// The reference over bands of whole cell rows (a multiple of magnify pixels), so no block is
/// split between bands.
Status render_by_bands(const ops::MatrixView& matrix, const ops::RenderParams& p, uint32_t max_threads,
                       std::span<uint8_t> rgba) {
  const uint32_t band = std::max<uint32_t>(p.magnify, 16);
  const uint32_t bands = ops::kRenderTilePixels / band;
  std::vector<Status> statuses(bands);
  tbb::task_arena arena(max_threads == 0 ? tbb::task_arena::automatic : static_cast<int>(max_threads));
  arena.execute([&] {
    tbb::parallel_for(tbb::blocked_range<uint32_t>(0, bands), [&](const tbb::blocked_range<uint32_t>& r) {
      for (uint32_t b = r.begin(); b < r.end(); ++b) statuses[b] = ops::render_values_rows(matrix, p, b * band, (b + 1) * band, rgba);
    });
  });
  for (const Status& s : statuses) TM_RETURN_IF_ERROR(s);
  return Status::Ok();
}

}  // namespace

void render_support(const TM_OpQuery& q, TM_OpSupport& out) {
  out.level = TM_SUPPORT_NONE;
  out.exactness = std::string_view(q.op) == ops::kOpRenderTileSampled ? TM_EXACT_APPROXIMATE : TM_EXACT_BITWISE;
  const auto dtype = from_abi_dtype(q.input_dtype);
  std::string reason;
  if (!dtype) {
    reason = "unknown dtype id " + std::to_string(static_cast<int>(q.input_dtype));
  } else if (!dtype_decodable(*dtype)) {
    reason = std::string(dtype_name(*dtype)) + " is not decodable yet";
  } else if (q.shape_class == TM_SHAPE_VECTOR) {
    reason = "render_tile takes a matrix or a statistics grid";
  } else {
    out.level = TM_SUPPORT_FULL;
  }
  std::snprintf(out.reason, sizeof out.reason, "%s", reason.c_str());
}

Result<TM_CostEstimate> render_estimate(const TM_OpInstance& op, double bandwidth_gbps) {
  TM_ASSIGN_OR_RETURN(const ops::RenderArgs args, ops::parse_render_tile(op));
  TM_CostEstimate cost{};
  cost.struct_size = sizeof cost;
  cost.bytes_read = bytes_read(args);
  cost.bytes_written = ops::kRenderTileBytes;
  cost.working_bytes = ops::render_working_bytes(args.params, args.rows, args.cols) - ops::kRenderTileBytes;
  // Decoding and binning cost about four times a streaming read; colouring is per pixel.
  cost.compute_ns = 4.0 * static_cast<double>(cost.bytes_read) / bandwidth_gbps + 65536.0 * 2.0;
  return cost;
}

Status render_execute(const TM_OpInstance& op, uint32_t max_threads, Isa isa, ScratchPool& scratch,
                      TM_ExecutionReport& report) {
  TM_ASSIGN_OR_RETURN(const ops::RenderArgs args, ops::parse_render_tile(op));
  TM_ASSIGN_OR_RETURN(const auto input, input_of(args));
  if (args.output.arg.host_out == nullptr) return Status::InvalidArgument("render_tile: cpu writes host memory only");
  auto* out = static_cast<uint8_t*>(args.output.arg.host_out) + args.output.arg.byte_offset;
  const std::span<uint8_t> rgba(out, ops::kRenderTileBytes);
  const auto start = std::chrono::steady_clock::now();
  if (args.params.source == ops::RenderSource::kTileStats) {
    if (reinterpret_cast<uintptr_t>(input.data()) % alignof(TM_TileStats) != 0) {
      return Status::InvalidArgument("render_tile: the statistics grid is misaligned");
    }
    const std::span<const TM_TileStats> grid(reinterpret_cast<const TM_TileStats*>(input.data()), args.rows * args.cols);
    TM_RETURN_IF_ERROR(ops::render_stats_reference(grid, args.rows, args.cols, args.params, rgba));
  } else {
    if (!dtype_decodable(args.input.dtype)) return Status::Unimplemented("render_tile: dtype is not decodable");
    const ops::MatrixView matrix{args.input.dtype, input, args.rows, args.cols};
    if (!args.params.sampled && args.params.cell >= ops::kMinTileStatsCell) {
      TM_RETURN_IF_ERROR(render_through_tile_stats(matrix, args.params, max_threads, isa, scratch, rgba));
    } else {
      TM_RETURN_IF_ERROR(render_by_bands(matrix, args.params, max_threads, rgba));
    }
  }
  report.exactness = args.params.sampled ? TM_EXACT_APPROXIMATE : TM_EXACT_BITWISE;
  report.device_ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  report.bytes_read = bytes_read(args);
  report.bytes_written = ops::kRenderTileBytes;
  return Status::Ok();
}

}  // namespace tensormorph::cpu
