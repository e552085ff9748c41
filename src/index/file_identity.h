// The identity of an indexed source file: what makes an index entry current or stale.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tensormorph/checkpoint.h"
#include "tensormorph/mapped_file.h"
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

/// The identity of the mapped `file` (size and time from its open descriptor, the hash from its
/// mapping), recording its path relative to `index_dir` when it lies below it.
Result<FileIdentity> identify_file(const MappedFile& file, const std::filesystem::path& index_dir);

/// The identities of every file of `checkpoint`, paths relative to the directory of `index_path`,
/// the index file whose sidecars record them.
Result<std::vector<FileIdentity>> identify_checkpoint_files(const Checkpoint& checkpoint,
                                                            const std::filesystem::path& index_path);

/// The identities as the sidecars record them: [{path, size, mtime_ns, header_xxh64}].
nlohmann::json identities_json(std::span<const FileIdentity> files);

}  // namespace tensormorph::index
