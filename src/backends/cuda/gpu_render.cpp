// tm.render_tile@1 on the GPU, for values tiles whose cells are tile_stats tiles (cell >= 8): the
// blocks' statistics come from this backend's tile_stats kernels (bitwise the CPU's), the small
// grid comes back to the host and is coloured by the shared ops code, so the pixels are the
// CPU's bit for bit. Smaller cells, the sampled rung and statistics grids are not declared here
// and fall back to another backend (estimate refuses them).
#include "backends/cuda/gpu_render.h"

#include <algorithm>
#include <string>
#include <vector>

#include "backends/cuda/gpu_exec.h"

namespace tensormorph::gpu {

Status render_instance_supported(const ops::RenderArgs& args) {
  if (args.params.source != ops::RenderSource::kValues) {
    return Status::Unimplemented(TM_GPU_VENDOR ": render_tile colours statistics grids on the host only (cpu)");
  }
  if (args.params.sampled) return Status::Unimplemented(TM_GPU_VENDOR ": the sampled render rung is not implemented");
  if (args.params.cell < ops::kMinTileStatsCell) {
    return Status::Unimplemented(std::string(TM_GPU_VENDOR ": render_tile needs cells of at least ") +
                                 std::to_string(ops::kMinTileStatsCell) + " elements (tile_stats tiles), not " +
                                 std::to_string(args.params.cell));
  }
  if (!kernel_dtype(args.input.dtype)) {
    return Status::Unimplemented(std::string(TM_GPU_VENDOR " does not implement ") +
                                 std::string(dtype_name(args.input.dtype)));
  }
  return Status::Ok();
}

uint64_t render_bytes_read(const ops::RenderArgs& args) {
  const ops::ViewRange view = ops::render_cell_view(args.params, args.rows, args.cols);
  const auto row_bytes = ops::matrix_row_bytes(args.input.dtype, args.cols);
  return row_bytes.ok() ? (view.row_end - view.row_begin) * *row_bytes : 0;
}

Result<RunReport> run_render(GpuBackend& b, const ops::RenderArgs& args, uint64_t memory_budget) {
  TM_RETURN_IF_ERROR(render_instance_supported(args));
  const ops::ViewRange view = ops::render_cell_view(args.params, args.rows, args.cols);
  const auto tile = static_cast<uint32_t>(args.params.cell);
  std::vector<TM_TileStats> stats;
  ops::TileStatsArgs blocks;
  blocks.input = args.input;
  blocks.rows = args.rows;
  blocks.cols = args.cols;
  blocks.range = view;
  blocks.tile = tile;
  blocks.grid = ops::tile_grid(view, tile);
  stats.resize(blocks.grid.count());
  blocks.output.dtype = DType::kU8;
  blocks.output.elems = stats.size() * sizeof(TM_TileStats);
  blocks.output.arg.struct_size = sizeof blocks.output.arg;
  blocks.output.arg.rank = 1;
  blocks.output.arg.shape[0] = blocks.output.elems;
  blocks.output.arg.nbytes = blocks.output.elems;
  blocks.output.arg.host_out = stats.data();
  TM_ASSIGN_OR_RETURN(RunReport run, run_tile_stats(b, blocks, memory_budget));

  TM_ASSIGN_OR_RETURN(const OutputRef out, output_of(b, args.output));
  std::vector<uint8_t> rgba(ops::kRenderTileBytes);
  TM_RETURN_IF_ERROR(ops::render_cell_grid(stats, blocks.grid, args.params, rgba));
  if (out.device) {
    TM_RETURN_IF_ERROR(b.copy_to_device(out.device, rgba.data(), rgba.size()));
  } else {
    std::copy(rgba.begin(), rgba.end(), out.host);
  }
  run.bytes_written = ops::kRenderTileBytes;
  return run;
}

}  // namespace tensormorph::gpu
