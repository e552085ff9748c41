// Read-only memory-mapped files and small positional reads for header parsing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>

#include "tensormorph/status.h"

namespace tensormorph {

/// A whole file mapped read-only. Immutable once created, so it is shared by every view into it.
class MappedFile {
 public:
  /// Maps `path` read-only; an empty file maps to an empty span.
  static Result<std::shared_ptr<const MappedFile>> open(const std::filesystem::path& path);
  /// An anonymous in-memory file of `size` bytes that `fill` writes once, then mapped read-only
  /// like any file (with a descriptor the host reads through). `label` stands for its path in messages.
  static Result<std::shared_ptr<const MappedFile>> in_memory(const std::filesystem::path& label, uint64_t size,
                                                             const std::function<Status(std::span<std::byte>)>& fill);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  /// The mapped bytes.
  std::span<const std::byte> bytes() const { return {static_cast<const std::byte*>(data_), size_}; }
  /// Size of the file when it was mapped.
  uint64_t size() const { return size_; }
  /// The path it was opened with.
  const std::filesystem::path& path() const { return path_; }
  /// The read-only descriptor it was mapped from, open as long as this object (the host's reads of
  /// pages the page cache lacks go through it, or through a description of the same file opened from it).
  int descriptor() const { return descriptor_; }

 private:
  MappedFile(std::filesystem::path path, int descriptor, const void* data, uint64_t size)
      : path_(std::move(path)), descriptor_(descriptor), data_(data), size_(size) {}
  std::filesystem::path path_;
  int descriptor_;
  const void* data_;
  uint64_t size_;
};

/// Size of a regular file in bytes (IO_ERROR names the path when it cannot be read).
Result<uint64_t> file_size_of(const std::filesystem::path& path);

/// Reads exactly `length` bytes at `offset`; a short file is a FORMAT_ERROR naming path and offset.
Result<std::string> read_file_range(const std::filesystem::path& path, uint64_t offset, uint64_t length);

}  // namespace tensormorph
