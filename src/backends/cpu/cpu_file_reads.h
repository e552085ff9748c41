// How the CPU kernels read an input that mirrors a file: through its mapping, or by copying each
// work item's rows into a per-thread buffer with pread first, whichever this machine does faster.
//
// Neither is faster everywhere (docs/PERFORMANCE.md, session 12). On the 2-vCPU development VM one
// thread summed a page-cached file at 10 GB/s through its mapping against 16 GB/s with pread into a
// 1 MiB buffer, and a file written moments before (its page cache in 4 KiB pages) at 1.9 against
// 14: indexing it ran 4x faster with pread. On the H200 machine's 16-core host the mapping was 40%
// faster than pread. So the backend measures instead of assuming. One thread of each call explores:
// its items alternate between the paths until each has a few timings, and later every
// kRetryEvery-th of its items takes the path not chosen, so that a change (another file, the page
// cache rebuilt) is noticed. Every other item takes the chosen path: the one with the lower time per
// byte of the whole item, kernel included, per storage type (the median of each path's last kWindow
// items: single items on a shared machine take up to 20 times their usual time), which must beat
// the current choice by kSwitchMargin to replace it. Only the explorer thread grows a
// staging buffer for a path that may lose. The choice never changes a result, only where the kernel
// reads the same bytes from.
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
  /// Timings of each path before the faster one is preferred.
  static constexpr uint32_t kWarmup = 4;
  /// One explorer item in this many takes the path not chosen, to notice when it becomes faster.
  static constexpr uint64_t kRetryEvery = 64;
  /// The path not chosen replaces the choice when its time per byte is this much lower.
  static constexpr double kSwitchMargin = 0.1;
  /// Timings per path that the median is taken over.
  static constexpr uint32_t kWindow = 8;

  /// The path for the next item of `dtype`; `explorer` for the one thread of a call that explores.
  ReadPath next(DType dtype, bool explorer);
  /// Records that an item of `dtype` took `nanoseconds` for `bytes` on `path`.
  void record(DType dtype, ReadPath path, uint64_t bytes, double nanoseconds);
  /// The path chosen now for `dtype`: the mapping until both paths are warm, then the faster one.
  ReadPath preferred(DType dtype) const;

  /// The process's chooser.
  static ReadPathChooser& instance();

 private:
  struct Kind {
    std::mutex mutex;                                          ///< guards the timings
    std::array<std::array<double, kWindow>, 2> ns_per_byte{};  ///< each path's last timings, a ring
    std::array<uint64_t, 2> timings{};                         ///< timings recorded per path
    std::atomic<bool> warm{false};
    std::atomic<uint8_t> choice{0};  ///< index of the chosen path (0: the mapping)
    std::atomic<uint64_t> explorer_items{0};
  };
  static constexpr size_t kKinds = 64;
  const Kind& kind(DType dtype) const { return kinds_[static_cast<size_t>(dtype) % kKinds]; }
  Kind& kind(DType dtype) { return kinds_[static_cast<size_t>(dtype) % kKinds]; }
  std::array<Kind, kKinds> kinds_;
};

/// Copies `bytes` bytes at `offset` of the open file `descriptor` into `dest`. IO_ERROR naming the
/// offset when the file cannot be read or ends early (it shrank after it was mapped).
Status copy_from_file(int descriptor, uint64_t offset, std::byte* dest, uint64_t bytes);

}  // namespace tensormorph::cpu
