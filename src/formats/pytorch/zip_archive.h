// A minimal reader of a zip archive's central directory that exposes the exact byte offset of
// each entry's data, so stored (uncompressed) tensor storages can be mapped zero-copy.
#pragma once

#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tensormorph/status.h"

namespace tensormorph::pytorch {

/// Compression method of an entry that is stored as is.
inline constexpr uint16_t kZipMethodStored = 0;
/// Compression method of a raw-deflate entry.
inline constexpr uint16_t kZipMethodDeflated = 8;

/// One file inside the archive, as described by its central directory header.
struct ZipEntry {
  std::string name;                  ///< path inside the archive, e.g. "archive/data/0"
  uint16_t method = 0;               ///< compression method (0 stored, 8 deflate)
  uint16_t flags = 0;                ///< general purpose bit flags
  uint32_t crc32 = 0;                ///< CRC-32 of the uncompressed data
  uint64_t compressed_size = 0;      ///< bytes occupied in the file
  uint64_t uncompressed_size = 0;    ///< bytes after decompression
  uint64_t local_header_offset = 0;  ///< where the entry's local file header starts
  uint64_t central_header_offset = 0;///< where its central directory header starts (for messages)
};

/// The central directory of one zip file. Only the tail, the directory and the local headers of the
/// entries asked for are ever read.
class ZipArchive {
 public:
  /// Reads and validates the end-of-central-directory records (Zip64 too) and the directory.
  static Result<ZipArchive> open(const std::filesystem::path& path);
  /// The same for an archive stored as `size` bytes at byte `base` of a larger file (a torch.save
  /// archive inside a distributed checkpoint's data file); offsets it returns are the file's.
  static Result<ZipArchive> open(const std::filesystem::path& file, uint64_t base, uint64_t size);

  /// The archive's path.
  const std::filesystem::path& path() const { return path_; }
  /// Size of the archive in bytes when it was opened (the whole file's for a file of its own).
  uint64_t file_size() const { return file_size_; }
  /// All entries in directory order.
  std::span<const ZipEntry> entries() const { return entries_; }
  /// The entry with exactly this name, or nullptr.
  const ZipEntry* find(std::string_view name) const;

  /// Absolute offset of the entry's (possibly compressed) data, read from its local header;
  /// fails unless [offset, offset + compressed_size) lies within the file.
  Result<uint64_t> data_offset(const ZipEntry& entry) const;

  /// Reads the entry's uncompressed bytes (stored, or deflate when zlib support is built in),
  /// refusing entries larger than `max_bytes` and checking the CRC-32.
  Result<std::string> read_entry(const ZipEntry& entry, uint64_t max_bytes) const;

 private:
  ZipArchive(std::filesystem::path path, uint64_t base, uint64_t size, std::vector<ZipEntry> entries);
  /// data_offset relative to the archive's first byte.
  Result<uint64_t> local_data_offset(const ZipEntry& entry) const;

  std::filesystem::path path_;
  uint64_t base_ = 0;  // where the archive starts in its file
  uint64_t file_size_ = 0;
  std::vector<ZipEntry> entries_;
  std::unordered_map<std::string, size_t> by_name_;  // first entry of each name
};

/// CRC-32 (the zip / zlib polynomial) of `bytes`.
uint32_t zip_crc32(std::string_view bytes);

}  // namespace tensormorph::pytorch
