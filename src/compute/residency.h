// Which input data is resident in which backend's memory: an LRU cache of device buffers.
#pragma once

#include <atomic>
#include <cstdint>
#include <list>
#include <mutex>
#include <string>
#include <vector>

#include "compute/backend.h"

namespace tensormorph::compute {

/// Device copies of host data, keyed by (data key, backend), evicted least-recently-used under a
/// per-backend byte budget. The host tracks residency; backends only hold buffers. A lookup names
/// the size it needs too: a copy of another size is other data under the same key (a tensor's
/// first band and the whole tensor, say) and is never handed out for it.
class ResidencyCache {
 public:
  /// `budget_bytes` caps each backend's cached bytes (further capped at half its memory).
  explicit ResidencyCache(uint64_t budget_bytes) : budget_(budget_bytes) {}
  ~ResidencyCache();
  ResidencyCache(const ResidencyCache&) = delete;
  ResidencyCache& operator=(const ResidencyCache&) = delete;

  /// The cached buffer of `key` on `backend` holding `bytes`, or nullptr; a hit refreshes its recency.
  TM_Buffer* find(uint64_t key, const Backend& backend, uint64_t bytes);
  /// True when `key` is resident on `backend` as a copy of `bytes` (no recency change).
  bool resident(uint64_t key, const Backend& backend, uint64_t bytes) const;
  /// Takes ownership of `buffer` holding `key`; evicts older entries to stay under budget.
  /// Returns false (and keeps nothing) when the buffer alone exceeds the budget.
  bool insert(uint64_t key, const Backend& backend, TM_Buffer* buffer, uint64_t bytes);
  /// Drops everything held on `backend` (after DEVICE_LOST, or on request).
  void drop_backend(const Backend& backend);
  /// Bytes cached on `backend`.
  uint64_t bytes_on(const Backend& backend) const;
  /// Per-backend cap in bytes.
  uint64_t budget_for(const Backend& backend) const;
  /// Replaces the per-backend budget and evicts least-recently-used entries now to fit it.
  void set_budget(uint64_t budget_bytes);

 private:
  /// Evicts `backend`'s least recently used entries until it holds at most `keep_bytes`; mutex_ held.
  void evict_locked(const Backend& backend, uint64_t keep_bytes);

  struct Entry {
    uint64_t key;
    const Backend* backend;
    TM_Buffer* buffer;
    uint64_t bytes;
  };
  mutable std::mutex mutex_;
  std::list<Entry> lru_;  // front = most recent
  std::atomic<uint64_t> budget_;
};

}  // namespace tensormorph::compute
