// How the CPU kernels read an input that mirrors a file: through its mapping, or by copying each
// work item's rows into a per-thread buffer with pread first, whichever this machine does faster.
//
// Neither is faster everywhere (docs/PERFORMANCE.md, session 12). On the 2-vCPU development VM one
// thread summed a page-cached file at 10 GB/s through its mapping against 16 GB/s with pread into a
// 1 MiB buffer, and a file written moments before (its page cache in 4 KiB pages) at 1.9 against
// 14: indexing it ran 4x faster with pread. On the H200 machine's 16-core host the mapping was 40%
// faster than pread. So the backend measures instead of assuming.
//
// One thread of each call (the arena's slot 0) explores. Its first kSettle items of a storage type
// take the mapping untimed: at the start of a process they measured 3x slower through the mapping
// than the same items later (0.21-0.28 against 0.06-0.08 ns per byte for BF16 on the development
// VM), which made pread look faster there for the first 30-odd items. Its next items alternate
// between the paths until each has kWarmup timings, and the faster is chosen. After kFirstRetry
// more items one takes the path not chosen, then after twice as many, and so on up to
// kMaxRetryGap: a check that keeps confirming the choice costs less and less (on the development
// VM a pread item beside mapped ones cost 2-5x a mapped one, and a check every 32 items cost
// indexing 10%). A check that measures faster than the chosen path's estimate starts a burst: the
// explorer's next kWindow - 1 items take that path too, and when the window holds only fresh
// timings the choice is made again; a change of choice starts the checks over at kFirstRetry.
// All other items take the chosen path, untimed: a thread reading the mapping beside the
// explorer's pread copies is slowed by them, so its timings would favour pread. Each path's
// estimate is the mean time per byte (kernel included) of its last kWindow items without the
// slowest: the mean is what the total follows (the mapping pays page faults on every other item or
// so), and dropping the slowest keeps one stalled item (up to 20 times the usual time on a shared
// machine) from deciding. Storage types are timed apart. The mapping is the default and needs no
// copy: pread must be kFileMargin faster to take its place (closer than that, noise decides and
// the copy costs more than it saves), and gives it back as soon as the mapping measures faster.
// Timing whole calls instead was tried and was worse: the first calls of a process are not like
// the rest, and one comparison per 16 calls followed the page cache too slowly. The choice never
// changes a result, only where the kernel reads the same bytes from.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "tensormorph/dtype.h"
#include "tensormorph/status.h"

namespace tensormorph::cpu {

/// Where an item's kernel reads its rows.
enum class ReadPath : uint8_t {
  kMapping,  ///< the input's host memory (a file mapping, usually)
  kFile,     ///< a copy made with pread into the thread's staging buffer
};

/// Whether items may copy a file-backed input with pread.
enum class FileReads : uint8_t {
  kMeasure,  ///< whichever path measures faster (production)
  kNever,    ///< always the mapping
  kAlways,   ///< always pread, where an item's rows are one contiguous run of the file
};

/// Chooses each eligible item's ReadPath from the timings of earlier items. Thread-safe.
class ReadPathChooser {
 public:
  /// The path of one item, and whether its time is to be recorded.
  struct Pick {
    ReadPath path;
    bool timed;
  };
  /// Explorer items of a storage type that take the mapping untimed before the timings start.
  static constexpr uint64_t kSettle = 8;
  /// Timings of each path before the faster one may be chosen.
  static constexpr uint32_t kWarmup = 4;
  /// Explorer items from the choice to the first check of the other path; each later gap doubles.
  static constexpr uint64_t kFirstRetry = 32;
  /// The longest gap between checks, in explorer items.
  static constexpr uint64_t kMaxRetryGap = 1024;
  /// pread replaces the mapping when its time per byte is this much lower.
  static constexpr double kFileMargin = 0.25;
  /// Timings per path that the estimate is taken over.
  static constexpr uint32_t kWindow = 4;

  /// The path for the next item of `dtype`; `explorer` for the one thread of a call that explores.
  Pick next(DType dtype, bool explorer);
  /// Records that an item of `dtype` took `nanoseconds` for `bytes` on `path`.
  void record(DType dtype, ReadPath path, uint64_t bytes, double nanoseconds);
  /// The path chosen now for `dtype`: the mapping until both paths are warm.
  ReadPath preferred(DType dtype) const;

  /// The process's chooser.
  static ReadPathChooser& instance();

 private:
  struct Kind {
    std::mutex mutex;                                          ///< guards all but the atomics
    std::array<std::array<double, kWindow>, 2> ns_per_byte{};  ///< each path's last timings, a ring
    std::array<uint64_t, 2> timings{};                         ///< timings recorded per path
    uint64_t explorer_items = 0;                               ///< explorer items handed a path
    uint64_t next_check = 0;                                   ///< the explorer item that checks next
    uint64_t check_gap = kFirstRetry;                          ///< explorer items to the next check
    uint32_t burst_left = 0;                                   ///< timings the running burst still wants
    std::atomic<bool> warm{false};
    std::atomic<uint8_t> choice{0};  ///< index of the chosen path (0: the mapping)
  };
  /// Compares the estimates and sets the choice; with `k.mutex` held and both paths warm.
  static void decide(Kind& k);
  static constexpr size_t kKinds = 64;
  const Kind& kind(DType dtype) const { return kinds_[static_cast<size_t>(dtype) % kKinds]; }
  Kind& kind(DType dtype) { return kinds_[static_cast<size_t>(dtype) % kKinds]; }
  std::array<Kind, kKinds> kinds_;
};

/// Copies `bytes` bytes at `offset` of the open file `descriptor` into `dest`. IO_ERROR naming the
/// offset when the file cannot be read or ends early (it shrank after it was mapped).
Status copy_from_file(int descriptor, uint64_t offset, std::byte* dest, uint64_t bytes);

}  // namespace tensormorph::cpu
