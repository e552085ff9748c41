// Host threads that copy ordinary (pageable) memory into staging memory a device reads (pinned
// slots, mapped buffers) for the GPU backends' uploads. One core's memcpy is several times slower
// than a PCIe 5 link, so the bytes of each slot are split into pieces that a crew of threads
// copies at once, and chunks are posted ahead so the crew fills the next slots while the copy
// engine drains the earlier ones. Plain C++: the caller does every device call.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "tensormorph/status.h"

namespace tensormorph {

/// How the crew copies a piece.
enum class FillCopy {
  kMemcpy,  ///< the C library's memcpy
  kStream,  ///< stores that bypass the cache (x86-64; memcpy elsewhere): the copy engine reads
            ///< the slot from memory anyway, and the destination is not read before it is written
};

/// A fixed crew of copying threads and the chunks posted to it, copied in posting order.
/// One caller at a time (the backend's lock serialises uploads).
class CopyCrew {
 public:
  /// Chunks posted and not yet waited for, at most.
  static constexpr uint32_t kMaxPending = 16;
  /// Threads worth copying with, the caller included: three quarters of the CPUs (a quarter stays
  /// with the host's own work; an upload is a short burst bound by memory, not by cores), at most
  /// 12: on a shared host fewer cores' copies fall short of a PCIe 5 link.
  static uint32_t default_copiers();

  /// Starts `helpers` threads (fewer when the system refuses more; the caller copies too).
  explicit CopyCrew(uint32_t helpers, FillCopy copy = FillCopy::kMemcpy);
  /// Stops and joins the threads.
  ~CopyCrew();
  CopyCrew(const CopyCrew&) = delete;
  CopyCrew& operator=(const CopyCrew&) = delete;

  /// Threads that actually started.
  uint32_t helpers() const { return static_cast<uint32_t>(threads_.size()); }
  /// Hands out the next chunk: `bytes` from `src` to `dst`. INTERNAL when kMaxPending chunks are
  /// already pending (a caller's bug, never a silent overwrite).
  Status post(const uint8_t* src, uint8_t* dst, uint64_t bytes);
  /// Returns once the oldest pending chunk is copied; the caller copies its pieces meanwhile, then
  /// polls rather than sleeps (it is blocked anyway, and waking a sleeping thread can take longer
  /// than the copy engine needs for a chunk). INTERNAL when nothing is pending.
  Status wait_oldest();
  /// Drops the work not yet handed out and returns once no thread is copying: after it, no thread
  /// reads any posted source or writes any posted slot. Numbering starts again.
  void reset();

 private:
  /// One posted chunk.
  struct Chunk {
    const uint8_t* src = nullptr;
    uint8_t* dst = nullptr;
    uint64_t bytes = 0;
    uint64_t piece = 0;    // bytes one thread takes at a time
    uint64_t claimed = 0;  // bytes handed out
    uint64_t copied = 0;   // bytes copied
  };
  /// A range handed to one thread.
  struct Piece {
    uint64_t chunk = 0;
    const uint8_t* src = nullptr;
    uint8_t* dst = nullptr;
    uint64_t bytes = 0;
  };

  void run();
  /// Polls (lock held on entry and return, released meanwhile) until `ready` holds or a bounded
  /// time passed; true when it holds.
  template <typename Ready>
  bool spin(std::unique_lock<std::mutex>& lock, Ready&& ready);
  /// Copies one piece (lock not held).
  void copy(const Piece& piece) const;
  /// Hands out the next piece of chunk `claim_` (lock held; one must be claimable).
  Piece claim();
  /// Records a copied piece and wakes the waiter when it finishes a chunk (lock held).
  void finish(const Piece& piece);
  bool claimable() const { return claim_ < posted_; }
  Chunk& chunk(uint64_t index) { return chunks_[index % kMaxPending]; }

  std::mutex mutex_;
  std::condition_variable work_;  // threads wait here for pieces
  std::condition_variable done_;  // the caller waits here for chunks and for quiet
  Chunk chunks_[kMaxPending];
  uint64_t posted_ = 0;  // chunks posted since the last reset
  uint64_t waited_ = 0;  // chunks waited for
  uint64_t claim_ = 0;   // the oldest chunk with bytes not yet handed out
  uint32_t busy_ = 0;    // threads copying right now
  uint32_t copiers_ = 1; // threads that may copy at once (helpers and the caller)
  bool stop_ = false;
  FillCopy copy_ = FillCopy::kMemcpy;
  std::atomic<uint64_t> progress_{0};  // advanced by every finished chunk
  std::vector<std::thread> threads_;
};

}  // namespace tensormorph
