// Work splitting and finishing for tm.tile_stats@1 on the CPU.
//
// The view is cut into items of about target_item_bytes of storage. An item covers some rows of
// one tile band over several tile columns: for tiles walked row by row (T > kTileByTileMax) as
// many columns as fit, so that an item reads long contiguous runs of memory (items one tile wide
// would read 1 KiB runs at a stride of a whole row, which streams from DRAM far slower).
// When an item holds all rows of its tiles, the thread that ran it finishes them; otherwise the
// row sums land in shared slot arrays and the tiles are finished after all items ran. Either
// way each sum is the canonical halving tree, so the thread count and the visiting order never
// change a bit.
#include "backends/cpu/tile_stats/tile_stats.h"

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <bit>
#include <cmath>

#include "backends/cpu/tile_stats/simd.h"
#include "tensormorph/decode.h"

namespace tensormorph::cpu {

/// Per-thread state: kernel scratch, and the slots of items that own whole tiles.
struct ThreadState {
  KernelScratch scratch;
  ScratchBuffer<double> sums, squares;
  std::vector<TilePartial> partials;
};

/// Items split tiles by rows: slot arrays and partials shared by all items of a tile.
struct SharedSlots {
  ScratchBuffer<double> sums, squares;  ///< [tile index][tile]
  std::vector<TilePartial> partials;  ///< [row chunk][tile index]
};

/// Everything one call uses: the shared slots and a ThreadState per slot of its task arena.
/// Reused buffers are not cleared: every slot a tile finishes with is written by the item that
/// owns its row, and partials are reset by each call.
struct CallScratch {
  SharedSlots shared;
  std::vector<std::unique_ptr<ThreadState>> threads;  ///< by tbb::this_task_arena::current_thread_index()

  /// Bytes held by all buffers.
  size_t bytes() const;
  /// The state of the calling thread, created on its first use.
  ThreadState& local();
};

namespace {

/// How the view is cut into items.
struct Plan {
  ops::TileGrid grid;
  uint32_t tiles_per_item = 1;  ///< tile columns per item
  uint32_t row_chunks = 1;      ///< items per tile band and column group (1: items own whole tiles)
  uint32_t chunk_rows = 0;      ///< rows per chunk (tile / row_chunks)
  uint64_t column_items = 0;    ///< column groups across a band
  uint64_t bands_per_item = 1;  ///< tile bands per item (more than one only for narrow views)
  uint64_t band_items() const { return (grid.rows + bands_per_item - 1) / bands_per_item; }
  uint64_t items() const { return band_items() * column_items * row_chunks; }
};

Plan make_plan(const ops::MatrixView& matrix, const ops::ViewRange& range, uint32_t tile, uint32_t threads,
               TileStatsTuning tuning) {
  Plan plan;
  plan.grid = ops::tile_grid(range, tile);
  const DTypeInfo& info = dtype_info(matrix.dtype);
  const double bytes_per_elem = static_cast<double>(info.block_bytes) / info.block_elems;
  const double view_bytes = static_cast<double>(range.row_end - range.row_begin) *
                            static_cast<double>(range.col_end - range.col_begin) * bytes_per_elem;
  double target = static_cast<double>(tuning.target_item_bytes);
  if (target <= 0) target = std::clamp(view_bytes / (8.0 * std::max(1u, threads)), 64.0 * 1024, 1024.0 * 1024);
  const auto columns = static_cast<double>(plan.grid.cols);
  // A band holds fewer rows than the tile when the whole view does (a 1-D tensor is one row), and
  // a tile row fewer columns when the view is narrower than the tile (a 3x3 convolution's [n, 3]
  // view): the item sizes count what is there, or a one-row view would be split into hundreds
  // of row chunks (each tile's slots and partials allocated per chunk) and a narrow one into
  // items of a few bytes.
  const uint64_t band_rows = std::min<uint64_t>(tile, range.row_end - range.row_begin);
  const uint64_t segment_cols = std::min<uint64_t>(tile, range.col_end - range.col_begin);
  uint64_t rows_wanted = tile;
  if (tile > kTileByTileMax) {
    // Row by row: whole rows of the view (or as many tile columns as the target holds), then as
    // many rows as fill the target.
    const double tile_row_bytes = static_cast<double>(segment_cols) * bytes_per_elem;
    plan.tiles_per_item = static_cast<uint32_t>(std::clamp(std::floor(target / tile_row_bytes), 1.0, columns));
    rows_wanted = static_cast<uint64_t>(std::max(1.0, std::floor(target / (plan.tiles_per_item * tile_row_bytes))));
  } else {
    const double tile_bytes = static_cast<double>(tile) * tile * bytes_per_elem;
    if (tile_bytes <= target) {
      plan.tiles_per_item = static_cast<uint32_t>(std::clamp(std::floor(target / tile_bytes), 1.0, columns));
    } else {
      rows_wanted = static_cast<uint64_t>(std::max(1.0, std::floor(target / (static_cast<double>(tile) * bytes_per_elem))));
    }
  }
  if (rows_wanted < band_rows) {
    plan.row_chunks = static_cast<uint32_t>(std::min<uint64_t>(tile, std::bit_ceil((band_rows + rows_wanted - 1) / rows_wanted)));
  }
  plan.chunk_rows = tile / plan.row_chunks;
  plan.column_items = (plan.grid.cols + plan.tiles_per_item - 1) / plan.tiles_per_item;
  // Items that take a whole band and still want more rows (a narrow view: a band of a [n, 1]
  // column is 1 KiB) take several bands.
  if (plan.row_chunks == 1 && plan.column_items == 1) plan.bands_per_item = std::max<uint64_t>(1, rows_wanted / tile);
  return plan;
}

ItemKernel pick_kernel(const TileStatsKernels& kernels, DType dtype) {
  switch (dtype) {
    case DType::kF32: return kernels.f32;
    case DType::kBF16: return kernels.bf16;
    case DType::kF16: return kernels.f16;
    case DType::kQ8_0: return kernels.q8_0;
    case DType::kQ4_K: return kernels.q4_k;
    default: return kernels.generic;
  }
}

/// halving_sum over `tile` slots of which only the first `valid` may be non-zero: the tree over
/// the first bit_ceil(valid) slots, plus +0.0 when zero slots were left out (see row_segment).
double halving_prefix(HalvingKernel halving, double* slots, uint64_t valid, uint32_t tile) {
  const uint64_t used = std::bit_ceil(std::max<uint64_t>(valid, 1));
  std::fill(slots + valid, slots + used, 0.0);
  const double sum = halving(slots, used);
  return used < tile ? sum + 0.0 : sum;
}

/// Everything an item or a finishing step needs.
struct Job {
  const ops::MatrixView& matrix;
  const ops::ViewRange& range;
  uint32_t tile;
  std::span<TM_TileStats> out;
  Plan plan;
  ItemKernel kernel;
  HalvingKernel halving;
  uint64_t row_bytes;
};

/// The statistics of tile (ti, tj) from its merged partial and its row slots.
TM_TileStats finish_tile(const Job& job, uint64_t ti, uint64_t tj, const TilePartial& partial, double* sums,
                         double* squares) {
  const uint64_t row_begin = job.range.row_begin + ti * job.tile;
  const uint64_t col_begin = job.range.col_begin + tj * job.tile;
  const uint64_t rows = std::min<uint64_t>(job.tile, job.range.row_end - row_begin);
  const uint64_t cols = std::min<uint64_t>(job.tile, job.range.col_end - col_begin);
  if (partial.max_key >= simd::kKeyPosInf || partial.min_key <= simd::kKeyNegInf) {
    // A NaN or infinity: the fast path's sums are void; redo this tile the plain way.
    TM_TileStats slow = ops::empty_tile_stats();
    const ops::ViewRange rect{row_begin, row_begin + rows, col_begin, col_begin + cols};
    (void)ops::tile_stats_reference(job.matrix, rect, job.tile, std::span<TM_TileStats>(&slow, 1));
    return slow;
  }
  TM_TileStats s = ops::empty_tile_stats();
  s.count = rows * cols;
  s.zeros = partial.zeros;
  s.min = simd::float_from_key(partial.min_key);
  s.max = simd::float_from_key(partial.max_key);
  s.absmax = std::max(std::fabs(s.min), std::fabs(s.max));
  s.sum = halving_prefix(job.halving, sums, rows, job.tile);
  s.sum_sq = halving_prefix(job.halving, squares, rows, job.tile);
  return s;
}

ItemSpec item_base(const Job& job) {
  const DTypeInfo& info = dtype_info(job.matrix.dtype);
  ItemSpec item;
  item.data = job.matrix.bytes.data();
  item.row_bytes = job.row_bytes;
  item.block_elems = info.block_elems;
  item.block_bytes = info.block_bytes;
  item.dtype = job.matrix.dtype;
  item.tile = job.tile;
  return item;
}

/// Items own whole tiles: run band `ti`, tile columns from `tj`, and finish them.
void run_whole_tiles(const Job& job, uint64_t ti, uint64_t tj, ThreadState& state) {
  ItemSpec item = item_base(job);
  item.band_row_begin = job.range.row_begin + ti * job.tile;
  item.row_begin = item.band_row_begin;
  item.row_end = std::min<uint64_t>(item.band_row_begin + job.tile, job.range.row_end);
  item.tiles = static_cast<uint32_t>(std::min<uint64_t>(job.plan.tiles_per_item, job.plan.grid.cols - tj));
  item.col_begin = job.range.col_begin + tj * job.tile;
  item.col_end = std::min<uint64_t>(item.col_begin + uint64_t{item.tiles} * job.tile, job.range.col_end);
  // Slots for the band's rows only (a one-row view would otherwise zero tile x tiles slots).
  item.slot_stride = static_cast<uint32_t>(std::bit_ceil(item.row_end - item.band_row_begin));
  const size_t slots = size_t{item.tiles} * item.slot_stride;
  state.partials.assign(item.tiles, TilePartial{});
  item.row_sums = state.sums.at_least(slots);
  item.row_squares = state.squares.at_least(slots);
  item.partials = state.partials.data();
  job.kernel(item, state.scratch);
  for (uint32_t t = 0; t < item.tiles; ++t) {
    job.out[ti * job.plan.grid.cols + tj + t] =
        finish_tile(job, ti, tj + t, state.partials[t], item.row_sums + size_t{t} * item.slot_stride,
                    item.row_squares + size_t{t} * item.slot_stride);
  }
}

/// Rows of chunk `chunk` of band `ti`, tile columns from `tj`; leaves the tiles to finish_shared_tile.
void run_row_chunk(const Job& job, uint64_t ti, uint32_t chunk, uint64_t tj, SharedSlots& shared, ThreadState& state) {
  ItemSpec item = item_base(job);
  item.band_row_begin = job.range.row_begin + ti * job.tile;
  item.row_begin = item.band_row_begin + uint64_t{chunk} * job.plan.chunk_rows;
  item.row_end = std::min<uint64_t>(item.row_begin + job.plan.chunk_rows, job.range.row_end);
  if (item.row_begin >= item.row_end) return;  // past the ragged last band
  item.tiles = static_cast<uint32_t>(std::min<uint64_t>(job.plan.tiles_per_item, job.plan.grid.cols - tj));
  item.col_begin = job.range.col_begin + tj * job.tile;
  item.col_end = std::min<uint64_t>(item.col_begin + uint64_t{item.tiles} * job.tile, job.range.col_end);
  const uint64_t tile_index = ti * job.plan.grid.cols + tj;
  item.row_sums = shared.sums.data() + tile_index * job.tile;
  item.row_squares = shared.squares.data() + tile_index * job.tile;
  item.slot_stride = job.tile;
  item.partials = shared.partials.data() + chunk * job.plan.grid.count() + tile_index;
  job.kernel(item, state.scratch);
}

void finish_shared_tile(const Job& job, uint64_t tile_index, SharedSlots& shared) {
  TilePartial merged;
  for (uint32_t c = 0; c < job.plan.row_chunks; ++c) {
    const TilePartial& p = shared.partials[c * job.plan.grid.count() + tile_index];
    merged.min_key = std::min(merged.min_key, p.min_key);
    merged.max_key = std::max(merged.max_key, p.max_key);
    merged.zeros += p.zeros;
  }
  job.out[tile_index] = finish_tile(job, tile_index / job.plan.grid.cols, tile_index % job.plan.grid.cols, merged,
                                    shared.sums.data() + tile_index * job.tile,
                                    shared.squares.data() + tile_index * job.tile);
}

}  // namespace

Status tile_stats(ScratchPool& pool, const ops::MatrixView& matrix, const ops::ViewRange& range, uint32_t tile,
                  std::span<TM_TileStats> out, uint32_t max_threads, Isa isa, TileStatsTuning tuning) {
  TM_RETURN_IF_ERROR(ops::check_tile_stats_args(matrix, range, tile, out.size()));
  if (!dtype_decodable(matrix.dtype)) return Status::Unsupported(std::string(dtype_not_decodable_reason(matrix.dtype)));
  if (!isa_supported(isa)) {
    return Status::InvalidArgument("this CPU cannot run the " + std::string(isa_name(isa)) + " kernels");
  }
  if (out.empty()) return Status::Ok();
  TM_ASSIGN_OR_RETURN(const uint64_t row_bytes, ops::matrix_row_bytes(matrix.dtype, matrix.cols));

  tbb::task_arena arena(max_threads == 0 ? tbb::task_arena::automatic : static_cast<int>(max_threads));
  arena.initialize();
  const auto threads = static_cast<uint32_t>(arena.max_concurrency());
  const Job job{matrix, range, tile, out, make_plan(matrix, range, tile, threads, tuning),
                pick_kernel(tile_stats_kernels(isa), matrix.dtype), tile_stats_kernels(isa).halving, row_bytes};
  std::unique_ptr<CallScratch> scratch = pool.take(threads);
  const uint64_t items = job.plan.items();

  if (job.plan.row_chunks == 1) {
    arena.execute([&] {
      tbb::parallel_for(tbb::blocked_range<uint64_t>(0, items), [&](const tbb::blocked_range<uint64_t>& r) {
        ThreadState& state = scratch->local();
        for (uint64_t i = r.begin(); i != r.end(); ++i) {
          const uint64_t first_band = i / job.plan.column_items * job.plan.bands_per_item;
          const uint64_t last_band = std::min(first_band + job.plan.bands_per_item, job.plan.grid.rows);
          for (uint64_t ti = first_band; ti < last_band; ++ti) {
            run_whole_tiles(job, ti, (i % job.plan.column_items) * job.plan.tiles_per_item, state);
          }
        }
      });
    });
  } else {
    // Reused slots need no clearing (see CallScratch); the partials start empty.
    SharedSlots& shared = scratch->shared;
    const uint64_t tiles = job.plan.grid.count();
    shared.sums.at_least(tiles * tile);
    shared.squares.at_least(tiles * tile);
    shared.partials.assign(tiles * job.plan.row_chunks, TilePartial{});
    arena.execute([&] {
      tbb::parallel_for(tbb::blocked_range<uint64_t>(0, items), [&](const tbb::blocked_range<uint64_t>& r) {
        ThreadState& state = scratch->local();
        for (uint64_t i = r.begin(); i != r.end(); ++i) {
          // Items in memory order: band, row chunk, column group.
          const uint64_t column_item = i % job.plan.column_items;
          const uint64_t band_chunk = i / job.plan.column_items;
          run_row_chunk(job, band_chunk / job.plan.row_chunks, static_cast<uint32_t>(band_chunk % job.plan.row_chunks),
                        column_item * job.plan.tiles_per_item, shared, state);
        }
      });
      tbb::parallel_for(tbb::blocked_range<uint64_t>(0, tiles), [&](const tbb::blocked_range<uint64_t>& r) {
        for (uint64_t t = r.begin(); t != r.end(); ++t) finish_shared_tile(job, t, shared);
      });
    });
  }
  Status status = Status::Ok();
  for (const auto& state : scratch->threads) {
    if (state && !state->scratch.status().ok() && status.ok()) status = state->scratch.status();
  }
  pool.give_back(std::move(scratch));
  return status;
}

// ---- Scratch ---------------------------------------------------------------------------------

float* KernelScratch::decoded(uint64_t count) { return decoded_.at_least(count); }

double* KernelScratch::tree(uint32_t tile) {
  const size_t need = size_t{tile} / 2 + 16;  // two quarter-size vector arrays (row_segment)
  return tree_.at_least(need);
}

std::byte* KernelScratch::lane_stats(uint64_t bytes) {
  const uint64_t units = (bytes + sizeof(LaneUnit) - 1) / sizeof(LaneUnit);
  return lanes_.at_least(units)->bytes;
}

void KernelScratch::fail(Status status) {
  if (status_.ok()) status_ = std::move(status);
}

size_t KernelScratch::bytes() const {
  return decoded_.capacity() * sizeof(float) + tree_.capacity() * sizeof(double) + lanes_.capacity() * sizeof(LaneUnit);
}

namespace {

/// Bytes of the slot arrays and partials of a SharedSlots or a ThreadState (the same three members).
template <typename Slots>
size_t slot_bytes(const Slots& s) {
  return (s.sums.capacity() + s.squares.capacity()) * sizeof(double) + s.partials.capacity() * sizeof(TilePartial);
}

}  // namespace

size_t CallScratch::bytes() const {
  size_t total = slot_bytes(shared);
  for (const auto& t : threads) {
    if (t) total += t->scratch.bytes() + slot_bytes(*t);
  }
  return total;
}

ThreadState& CallScratch::local() {
  // Arena slots are stable while a task runs, and no two threads of an arena share one.
  auto& state = threads[static_cast<size_t>(tbb::this_task_arena::current_thread_index())];
  if (!state) state = std::make_unique<ThreadState>();
  return *state;
}

ScratchPool::ScratchPool() = default;
ScratchPool::~ScratchPool() = default;

std::unique_ptr<CallScratch> ScratchPool::take(size_t threads) {
  std::unique_ptr<CallScratch> scratch;
  {
    const std::lock_guard lock(mutex_);
    if (!free_.empty()) {
      scratch = std::move(free_.back());
      free_.pop_back();
    }
  }
  if (!scratch) scratch = std::make_unique<CallScratch>();
  if (scratch->threads.size() < threads) scratch->threads.resize(threads);
  for (auto& state : scratch->threads) {
    if (state) state->scratch.clear_status();
  }
  return scratch;
}

void ScratchPool::give_back(std::unique_ptr<CallScratch> scratch) {
  if (scratch->bytes() > kMaxBytes) return;
  const std::lock_guard lock(mutex_);
  if (free_.size() < kMaxSets) free_.push_back(std::move(scratch));
}

}  // namespace tensormorph::cpu
