#include "index/file_identity.h"

#include <sys/stat.h>

#include <algorithm>

#include <xxhash.h>

namespace tensormorph::index {

namespace {
constexpr uint64_t kHeadBytes = 1 << 20;
constexpr uint64_t kTailBytes = 64 << 10;
}  // namespace

Result<FileIdentity> identify_file(const MappedFile& file, const std::filesystem::path& index_dir) {
  FileIdentity id;
  // The descriptor the bytes are read through, not the path: a file replaced since it was opened
  // is described as the file that is indexed.
  struct stat st {};
  if (::fstat(file.descriptor(), &st) != 0) return Status::IoError(file.path().string() + ": cannot stat");
  id.size = static_cast<uint64_t>(st.st_size);
  id.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  // Hashed in place through the checkpoint's own mapping: reading the head into a fresh buffer
  // page-faulted a MiB of memory per file, a visible share of indexing a small checkpoint on a
  // virtual machine, and a mapping of its own faulted the same pages in twice.
  const std::span<const std::byte> bytes = file.bytes().first(std::min(id.size, file.size()));
  const uint64_t head = std::min<uint64_t>(bytes.size(), kHeadBytes);
  const uint64_t tail_start = bytes.size() > kTailBytes ? std::max(head, bytes.size() - kTailBytes) : head;
  XXH64_state_t* state = XXH64_createState();
  XXH64_reset(state, 0);
  if (head > 0) XXH64_update(state, bytes.data(), head);
  if (tail_start < bytes.size()) XXH64_update(state, bytes.data() + tail_start, bytes.size() - tail_start);
  id.header_hash = XXH64_digest(state);
  XXH64_freeState(state);
  std::error_code ec;
  auto absolute_file = std::filesystem::absolute(file.path(), ec).lexically_normal();
  auto absolute_dir = std::filesystem::absolute(index_dir, ec).lexically_normal();
  auto relative = absolute_file.lexically_relative(absolute_dir);
  id.path = (!relative.empty() && relative.native().rfind("..", 0) != 0) ? relative.string() : absolute_file.string();
  return id;
}

Result<std::vector<FileIdentity>> identify_checkpoint_files(const Checkpoint& checkpoint,
                                                            const std::filesystem::path& index_path) {
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::absolute(index_path, ec).parent_path();
  std::vector<FileIdentity> files;
  for (uint32_t file = 0; file < checkpoint.files().size(); ++file) {
    TM_ASSIGN_OR_RETURN(const auto map, checkpoint.mapped(file));
    TM_ASSIGN_OR_RETURN(FileIdentity id, identify_file(*map, dir));
    files.push_back(std::move(id));
  }
  return files;
}

nlohmann::json identities_json(std::span<const FileIdentity> files) {
  nlohmann::json a = nlohmann::json::array();
  for (const FileIdentity& f : files) {
    a.push_back({{"path", f.path}, {"size", f.size}, {"mtime_ns", f.mtime_ns}, {"header_xxh64", f.header_hash}});
  }
  return a;
}

}  // namespace tensormorph::index
