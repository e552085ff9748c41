// Scratch memory of tm.tile_stats@1 on the CPU, kept from call to call.
//
// Indexing calls tile_stats once per tensor band. Scratch allocated afresh for every call goes
// back to the system when the call ends and is page-faulted in again by the next, a page at a
// time; on a virtual machine a fault costs more than the arithmetic on the page (25-30% of
// indexing an F32 checkpoint on the 2-core VM of docs/PERFORMANCE.md). So finished calls hand
// their scratch to a pool and later calls take it from there.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "backends/cpu/cpu_scratch_buffer.h"
#include "backends/cpu/cpu_tile_stats.h"

namespace tensormorph::cpu {

/// A 64-byte unit of staging memory (rows copied from a file start on a cache line).
struct alignas(64) StagingLine {
  std::byte bytes[64];
};

/// Per-thread state: kernel scratch, the slots of items that own whole tiles, and the buffer that
/// items reading their rows from the file copy them into (grown only by threads that do: on 16
/// threads, touching a 1 MiB buffer for each cost more than indexing a 0.8 GB file takes).
struct ThreadState {
  KernelScratch scratch;
  ScratchBuffer<double> sums, squares;
  std::vector<TilePartial> partials;
  ScratchBuffer<StagingLine> staging;
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

/// Scratch of finished calls for the next ones. Calls running at once take separate sets; a set
/// grown past kMaxBytes is freed instead of kept, and at most kMaxSets are kept.
class ScratchPool {
 public:
  /// A set for one call, with room for `threads` arena slots and no recorded failures.
  std::unique_ptr<CallScratch> take(size_t threads);
  /// Returns a set once its call has finished.
  void give_back(std::unique_ptr<CallScratch> scratch);

  /// The process's pool.
  static ScratchPool& instance();

 private:
  static constexpr size_t kMaxBytes = size_t{64} << 20;
  static constexpr size_t kMaxSets = 4;
  std::mutex mutex_;
  std::vector<std::unique_ptr<CallScratch>> free_;
};

}  // namespace tensormorph::cpu
