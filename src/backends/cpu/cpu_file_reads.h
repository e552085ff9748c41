// How the CPU kernels read an input that mirrors a file: through its mapping, or by copying each
// work item's rows into a per-thread buffer with pread first, whichever this machine does faster.
//
// Neither is faster everywhere (docs/PERFORMANCE.md, session 12). On the 2-vCPU development VM one
// thread summed a page-cached file at 10 GB/s through its mapping against 16 GB/s with pread into a
// 1 MiB buffer, and a file written moments before (its page cache in 4 KiB pages) at 1.9 against
// 14: indexing it ran 4x faster with pread. On the H200 machine's 16-core host the mapping was 40%
// faster than pread. So the backend measures instead of assuming: items that may take either path
// alternate until each path has a few timings, then take the faster one (time per byte of the whole
// item, kernel included, per storage type), and every kRetryEvery-th item takes the other path so
// that a change (another file, the page cache rebuilt) is noticed. The choice never changes a
// result, only where the kernel reads the same bytes from.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

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

/// Chooses each eligible item's ReadPath from the timings of earlier items. Thread-safe; the
/// statistics are approximate under concurrent updates (a lost update only delays a switch).
class ReadPathChooser {
 public:
  /// Timings of each path before the faster one is preferred.
  static constexpr uint32_t kWarmup = 4;
  /// One item in this many takes the slower path, to notice when it becomes the faster one.
  static constexpr uint64_t kRetryEvery = 128;

  /// The path for the next item of `dtype`.
  ReadPath next(DType dtype);
  /// Records that an item of `dtype` took `nanoseconds` for `bytes` on `path`.
  void record(DType dtype, ReadPath path, uint64_t bytes, double nanoseconds);
  /// The path preferred now for `dtype` (the one with the lower time per byte; the mapping until
  /// both paths are warm).
  ReadPath preferred(DType dtype) const;

  /// The process's chooser.
  static ReadPathChooser& instance();

 private:
  struct PathTimes {
    std::atomic<double> ns_per_byte{0};  ///< moving average, weight 1/8 per new timing
    std::atomic<uint32_t> timings{0};
  };
  struct Kind {
    std::atomic<uint64_t> items{0};
    std::array<PathTimes, 2> paths;
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
