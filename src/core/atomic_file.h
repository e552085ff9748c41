// Writing an output file so that a reader never sees it half-written and nothing the user had is
// lost: a regular file is replaced by renaming a finished temporary over it; a destination that is
// not a regular file (a FIFO, /dev/stdout, a device) is written in place, never renamed over; a
// symbolic link is followed, so the file it names is replaced and the link stays.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>

#include "tensormorph/status.h"

namespace tensormorph {

/// Temporary files removed because the process that wrote them is gone.
struct StaleTemporaries {
  uint64_t files = 0;
  uint64_t bytes = 0;
};

/// Removes the temporaries an interrupted writer of `target` left beside it: files named
/// ".<name>.tmp.<pid>.<n>" that belong to this user, whose process <pid> no longer exists, and
/// that have not been written to for a minute (a live writer on another host sharing the
/// directory keeps writing). Failures to remove are ignored: this only reclaims space.
StaleTemporaries remove_stale_temporaries(const std::filesystem::path& target);

/// One output being written; see the file comment. Not copyable; moving keeps the obligation to
/// remove an uncommitted temporary.
class AtomicOutput {
 public:
  /// Opens the output for `target` (following a symbolic link). INVALID_ARGUMENT for a directory;
  /// IO_ERROR naming the path when it cannot be created or opened.
  static Result<AtomicOutput> open(const std::filesystem::path& target);
  AtomicOutput(AtomicOutput&& other) noexcept;
  AtomicOutput& operator=(AtomicOutput&&) = delete;
  AtomicOutput(const AtomicOutput&) = delete;
  AtomicOutput& operator=(const AtomicOutput&) = delete;
  /// Removes the temporary unless commit() succeeded.
  ~AtomicOutput();

  /// Appends `bytes`; IO_ERROR naming the file on a failed or short write (e.g. a full disk).
  Status write(std::span<const std::byte> bytes);
  /// Flushes to stable storage and puts the file in place (renames the temporary over the
  /// destination, or closes a destination written in place).
  Status commit();
  /// The file the bytes go to now (the temporary, or the destination itself).
  const std::filesystem::path& writing_path() const { return writing_; }

 private:
  AtomicOutput(std::filesystem::path destination, std::filesystem::path writing, int fd, bool in_place);
  std::filesystem::path destination_;
  std::filesystem::path writing_;
  int fd_ = -1;
  bool in_place_ = false;
  bool committed_ = false;
};

/// OK when the directory `target` would be written in exists; otherwise IO_ERROR naming that
/// directory (a command checks this before long work, so a mistyped -o fails at once).
Status check_output_directory(const std::filesystem::path& target);

/// Writes `bytes` to `target` through an AtomicOutput.
Status write_file_atomically(const std::filesystem::path& target, std::span<const std::byte> bytes);

}  // namespace tensormorph
