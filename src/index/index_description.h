// Describing an index file found on its own (`tensormorph info x.tmindex`): which checkpoint it
// indexes, what it holds, and whether each source file is still as it was indexed.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "index/index_file.h"
#include "tensormorph/checkpoint.h"

namespace tensormorph::index {

/// One source file an index records, compared with the file on disk now.
struct IndexedSource {
  FileIdentity recorded;          ///< as the index records it
  std::filesystem::path resolved; ///< where it is looked for (relative paths are below the index's directory)
  bool current = false;           ///< size, modification time and header hash all unchanged
  std::string state;              ///< "current", "missing", "changed since it was indexed (size 10 -> 12)", ...
};

/// What an index file is.
struct IndexDescription {
  std::filesystem::path path;        ///< the index file
  std::filesystem::path checkpoint;  ///< the checkpoint its name says it indexes ("" when the name does not say)
  uint32_t tile = 0;
  size_t tensors = 0;                ///< tensors it holds pyramids of
  size_t with_histogram = 0;         ///< of those, tensors with a value histogram
  std::vector<IndexedSource> sources;
  /// True when every source file is current and every tensor has its value histogram: the index
  /// answers for the checkpoint as it is, and the next build reads nothing.
  bool current() const;
};

/// True when `checkpoint` (opened as safetensors) is a Tensormorph index rather than a model.
bool is_index_file(const Checkpoint& checkpoint);

/// Reads the index at `path` and checks every source file it records against the disk.
Result<IndexDescription> describe_index(const std::filesystem::path& path);

}  // namespace tensormorph::index
