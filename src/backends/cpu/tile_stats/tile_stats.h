// tm.tile_stats@1 on the CPU: work items over oneTBB, SIMD row kernels per instruction set.
// The first part is the entry point; the rest is the contract between the work splitting
// (tile_stats.cpp) and the item kernels (kernels.h, compiled per instruction set).
#pragma once

#include <climits>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <type_traits>
#include <vector>

#include "backends/cpu/cpu_dispatch.h"
#include "compute/ops/reference.h"
#include "tensormorph/c/plugin.h"
#include "tensormorph/status.h"

namespace tensormorph::cpu {

struct CallScratch;

/// Scratch memory of finished tile_stats calls, for the next calls of the same backend instance.
/// Indexing calls tile_stats once per tensor band: scratch allocated afresh each time would go
/// back to the system after the call and be page-faulted in again by the next, a page at a time,
/// which on a virtual machine costs more than the arithmetic on the page. Calls running at once
/// take separate sets; a set grown past kMaxBytes is freed instead of kept, and at most kMaxSets
/// are kept. Thread-safe.
class ScratchPool {
 public:
  /// An empty pool: sets are made by the first calls.
  ScratchPool();
  /// Frees the kept sets; no call may be running.
  ~ScratchPool();
  ScratchPool(const ScratchPool&) = delete;
  ScratchPool& operator=(const ScratchPool&) = delete;

  /// A set for one call, with room for `threads` arena slots and no recorded failures.
  std::unique_ptr<CallScratch> take(size_t threads);
  /// Returns a set once its call has finished.
  void give_back(std::unique_ptr<CallScratch> scratch);

 private:
  static constexpr size_t kMaxBytes = size_t{64} << 20;
  static constexpr size_t kMaxSets = 4;
  std::mutex mutex_;
  std::vector<std::unique_ptr<CallScratch>> free_;
};

/// Work-splitting knobs; the defaults suit production, tests shrink them to exercise every path.
struct TileStatsTuning {
  uint64_t target_item_bytes = 0;  ///< storage bytes per work item (0: from the input size)
};

/// tm.tile_stats@1: validates like the reference, then computes `out` (one per tile, row-major)
/// with at most `max_threads` threads (0: all) and the kernels of `isa`, bit-identical to
/// tile_stats_reference. Scratch comes from, and goes back to, `pool`.
Status tile_stats(ScratchPool& pool, const ops::MatrixView& matrix, const ops::ViewRange& range, uint32_t tile,
                  std::span<TM_TileStats> out, uint32_t max_threads, Isa isa, TileStatsTuning tuning = {});

// ---- Between the work splitting and the kernels ---------------------------------------------

/// An array whose contents the caller always writes before reading: growing it neither copies the
/// old elements nor zero-fills the new ones, as std::vector::resize would for slot arrays that
/// the kernels overwrite anyway.
template <typename T>
class ScratchBuffer {
  static_assert(std::is_trivially_default_constructible_v<T> && std::is_trivially_destructible_v<T>);

 public:
  /// At least `count` elements of unspecified value, valid until the next call that grows it.
  T* at_least(size_t count) {
    if (count > capacity_) {
      data_.reset();  // before the new allocation: the old contents are not kept
      data_.reset(new T[count]);  // default-initialised: no fill
      capacity_ = count;
    }
    return data_.get();
  }
  /// The elements, or nullptr before the first at_least.
  T* data() const { return data_.get(); }
  /// Elements held.
  size_t capacity() const { return capacity_; }

 private:
  std::unique_ptr<T[]> data_;
  size_t capacity_ = 0;
};

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

}  // namespace tensormorph::cpu
