// The identity of an indexed source file: what makes an index entry current or stale.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include "tensormorph/status.h"

namespace tensormorph::index {

/// Size, modification time and a hash of the header region of one source file.
struct FileIdentity {
  std::string path;          ///< as recorded in the index (relative to the index's directory when possible)
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint64_t header_hash = 0;  ///< xxh64 of the first 1 MiB and the last 64 KiB (every format's header lives there)

  /// True when every field matches.
  bool operator==(const FileIdentity&) const = default;
};

/// Reads the identity of `file`, recording its path relative to `index_dir` when it lies below it.
Result<FileIdentity> identify_file(const std::filesystem::path& file, const std::filesystem::path& index_dir);

}  // namespace tensormorph::index
