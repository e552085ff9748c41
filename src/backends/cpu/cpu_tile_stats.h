// tm.tile_stats@1 on the CPU: work items over oneTBB, SIMD row kernels per instruction set.
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>
#include <span>

#include "backends/cpu/cpu_dispatch.h"
#include "backends/cpu/cpu_file_reads.h"
#include "backends/cpu/cpu_scratch_buffer.h"
#include "compute/ops/reference.h"
#include "tensormorph/c/plugin.h"
#include "tensormorph/mapped_file.h"
#include "tensormorph/status.h"

namespace tensormorph::cpu {

/// Finite-value statistics of some rows of one tile, merged exactly in any order.
struct TilePartial {
  int32_t min_key = INT32_MAX;  ///< smallest order key seen (simd::order_key)
  int32_t max_key = INT32_MIN;  ///< largest order key seen
  uint64_t zeros = 0;           ///< values equal to zero
};

/// One unit of parallel work: rows [row_begin, row_end) of one tile band, over `tiles`
/// consecutive tile columns starting at column col_begin.
struct ItemSpec {
  const std::byte* data = nullptr;  ///< the whole matrix
  uint64_t row_bytes = 0;
  uint32_t block_elems = 1;
  uint32_t block_bytes = 1;
  DType dtype = DType::kF32;
  uint64_t row_begin = 0;
  uint64_t row_end = 0;
  uint64_t band_row_begin = 0;  ///< first row of the band (row slot 0)
  uint64_t col_begin = 0;
  uint64_t col_end = 0;         ///< clipped to the view
  uint32_t tile = 0;
  uint32_t tiles = 0;
  double* row_sums = nullptr;     ///< [tiles][slot_stride] row-slot sums, indexed by row - band_row_begin
  double* row_squares = nullptr;  ///< same layout, sums of squares
  uint32_t slot_stride = 0;       ///< slots per tile in row_sums: a power of two >= the band's rows
  TilePartial* partials = nullptr;  ///< [tiles]
};

/// Per-thread buffers reused across items.
class KernelScratch {
 public:
  /// At least `count` floats for decoded rows.
  float* decoded(uint64_t count);
  /// The halving tree's buffer for tiles of `tile` columns.
  double* tree(uint32_t tile);
  /// At least `bytes` bytes for per-tile lane statistics, aligned for any vector.
  std::byte* lane_stats(uint64_t bytes);
  /// Records the first failure of a generic decode (it should not happen after validation).
  void fail(Status status);
  /// The first recorded failure.
  const Status& status() const { return status_; }
  /// Forgets the recorded failure (the buffers stay for reuse).
  void clear_status() { status_ = Status::Ok(); }
  /// Bytes held by the buffers.
  size_t bytes() const;

 private:
  ScratchBuffer<float> decoded_;
  ScratchBuffer<double> tree_;
  /// A 64-byte unit of lane-statistics storage (the widest vector's alignment).
  struct alignas(64) LaneUnit {
    std::byte bytes[64];
  };
  ScratchBuffer<LaneUnit> lanes_;
  Status status_;
};

/// Tiles of at most this size are walked tile by tile (statistics stay in registers across the
/// tile's rows); larger ones row by row (one pass over each row, statistics kept in scratch).
inline constexpr uint32_t kTileByTileMax = 64;

/// Runs one item.
using ItemKernel = void (*)(const ItemSpec& item, KernelScratch& scratch);
/// ops::halving_sum over `count` (a power of two) slots, in place.
using HalvingKernel = double (*)(double* slots, uint64_t count);

/// The item kernels of one instruction set, by storage kind.
struct TileStatsKernels {
  ItemKernel f32;
  ItemKernel bf16;
  ItemKernel f16;
  ItemKernel q8_0;
  ItemKernel q4_k;
  ItemKernel generic;  ///< any other decodable dtype, through decode_to_f32
  HalvingKernel halving;  ///< the tile-level halving over row slots
};

/// The kernels compiled for `isa` (which must be supported by this CPU).
const TileStatsKernels& tile_stats_kernels(Isa isa);

/// Items of at least this many bytes whose rows are one run of the file may copy it with pread
/// (smaller ones read the mapping: a system call would cost more than it could save).
inline constexpr uint64_t kMinFileReadBytes = uint64_t{64} << 10;

/// Items that take the pread path copy and process their rows in pieces of at most this many bytes
/// (at least one row): the copy is still in L2 when the kernel reads it, and a thread's buffer is
/// a quarter of an item. With whole 1 MiB items the buffer's first touch alone (256 page faults,
/// 3 ms on the development VM) cost 5-10% of indexing a 0.8 GB file.
inline constexpr uint64_t kFilePieceBytes = uint64_t{256} << 10;

/// Work-splitting knobs; the defaults suit production, tests shrink them to exercise every path.
struct TileStatsTuning {
  uint64_t target_item_bytes = 0;  ///< storage bytes per work item (0: from the input size)
  FileReads file_reads = FileReads::kMeasure;  ///< whether items of a file-backed matrix use pread
  uint64_t min_file_read_bytes = kMinFileReadBytes;  ///< smaller items always read the mapping
  uint64_t file_piece_bytes = kFilePieceBytes;  ///< bytes per pread copy (whole rows, at least one)
};

/// tm.tile_stats@1: validates like the reference, then computes `out` (one per tile, row-major)
/// with at most `max_threads` threads (0: all), bit-identical to tile_stats_reference. `file`,
/// when it names a descriptor, holds matrix.bytes at its offset (see cpu_file_reads.h).
Status tile_stats(const ops::MatrixView& matrix, const ops::ViewRange& range, uint32_t tile,
                  std::span<TM_TileStats> out, uint32_t max_threads, Isa isa, TileStatsTuning tuning = {},
                  FileRegion file = {});

}  // namespace tensormorph::cpu
