#include "index/index_description.h"

#include <algorithm>

#include "tensormorph/mapped_file.h"

namespace tensormorph::index {
namespace {

namespace fs = std::filesystem;

// The checkpoint a sidecar's name points at: "<file>.tmindex" beside "<file>", and
// "model.safetensors.index.tmindex" beside "model.safetensors.index.json" (default_index_path).
fs::path named_checkpoint(const fs::path& index_path) {
  if (index_path.extension() != ".tmindex") return {};
  fs::path source = index_path;
  source.replace_extension();
  std::error_code ec;
  if (fs::is_regular_file(source, ec)) return source;
  fs::path json = source;
  json += ".json";
  if (fs::is_regular_file(json, ec)) return json;
  return {};
}

IndexedSource compare_with_disk(const FileIdentity& recorded, const fs::path& index_dir) {
  IndexedSource source;
  source.recorded = recorded;
  source.resolved = fs::path(recorded.path).is_absolute() ? fs::path(recorded.path)
                                                          : (index_dir / recorded.path).lexically_normal();
  auto map = MappedFile::open(source.resolved);
  if (!map.ok()) {
    std::error_code ec;
    source.state = fs::exists(source.resolved, ec) ? "unreadable: " + map.status().message() : "missing";
    return source;
  }
  auto now = identify_file(**map, index_dir);
  if (!now.ok()) {
    source.state = "unreadable: " + now.status().message();
    return source;
  }
  if (now->size != recorded.size) {
    source.state = "changed since it was indexed (size " + std::to_string(recorded.size) + " -> " +
                   std::to_string(now->size) + " bytes)";
  } else if (now->header_hash != recorded.header_hash) {
    source.state = "changed since it was indexed (its header or tail differs)";
  } else if (now->mtime_ns != recorded.mtime_ns) {
    source.state =
        "touched since it was indexed (same size and header, another modification time: indexing reads it again)";
  } else {
    source.current = true;
    source.state = "current";
  }
  return source;
}

}  // namespace

bool IndexDescription::current() const {
  // An entry without a value histogram is counted again by the next build (index_builder.cpp).
  return !sources.empty() && with_histogram == tensors &&
         std::all_of(sources.begin(), sources.end(), [](const IndexedSource& s) { return s.current; });
}

bool is_index_file(const Checkpoint& checkpoint) {
  if (checkpoint.format() != CheckpointFormat::kSafetensors || checkpoint.files().size() != 1) return false;
  return std::any_of(checkpoint.metadata().begin(), checkpoint.metadata().end(),
                     [](const MetadataEntry& m) { return m.key == kIndexMetadataKey; });
}

Result<IndexDescription> describe_index(const fs::path& path) {
  TM_ASSIGN_OR_RETURN(IndexContents contents, read_index(path));
  IndexDescription out;
  out.path = path;
  out.checkpoint = named_checkpoint(path);
  out.tile = contents.tile;
  out.tensors = contents.tensors.size();
  for (const TensorPyramid& p : contents.tensors) out.with_histogram += p.value_histogram.empty() ? 0 : 1;
  std::error_code ec;
  const fs::path index_dir = fs::absolute(path, ec).parent_path();
  for (const FileIdentity& f : contents.files) out.sources.push_back(compare_with_disk(f, index_dir));
  return out;
}

}  // namespace tensormorph::index
