#include "backends/cpu/cpu_tile_stats_scratch.h"

#include <oneapi/tbb/task_arena.h>

namespace tensormorph::cpu {

float* KernelScratch::decoded(uint64_t count) {
  return decoded_.at_least(count);
}

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
    if (t) total += t->scratch.bytes() + slot_bytes(*t) + t->staging.capacity() * sizeof(StagingLine);
  }
  return total;
}

ThreadState& CallScratch::local() {
  // Arena slots are stable while a task runs, and no two threads of an arena share one.
  auto& state = threads[static_cast<size_t>(tbb::this_task_arena::current_thread_index())];
  if (!state) state = std::make_unique<ThreadState>();
  return *state;
}

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

ScratchPool& ScratchPool::instance() {
  static ScratchPool pool;
  return pool;
}

}  // namespace tensormorph::cpu
