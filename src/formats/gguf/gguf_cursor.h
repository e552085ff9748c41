// Sequential little-endian reads over a GGUF header, fetched from the file in growing chunks.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "tensormorph/status.h"

namespace tensormorph::gguf {

/// Reads a GGUF header front to back without mapping the file or touching more than the header
/// (plus at most one read-ahead chunk). Every read is checked against the file size first, so a
/// lying length or count fails with a message instead of reading out of bounds.
class HeaderCursor {
 public:
  /// Prepares to read `path` from byte 0; fails when the file cannot be opened.
  static Result<HeaderCursor> open(const std::filesystem::path& path);

  /// Current byte offset from the start of the file.
  uint64_t position() const { return position_; }
  /// Bytes between the current position and the end of the file.
  uint64_t remaining() const { return file_size_ - position_; }
  /// Size of the file when it was opened.
  uint64_t file_size() const { return file_size_; }
  /// The file being read.
  const std::filesystem::path& path() const { return path_; }

  /// Little-endian unsigned integers; `what` names the field for the truncation message.
  Result<uint8_t> read_u8(std::string_view what);
  Result<uint16_t> read_u16(std::string_view what);
  Result<uint32_t> read_u32(std::string_view what);
  Result<uint64_t> read_u64(std::string_view what);
  /// A GGUF string: u64 byte length, then the bytes (not validated as UTF-8 here).
  Result<std::string> read_string(std::string_view what);
  /// Raw bytes.
  Result<std::string> read_bytes(uint64_t length, std::string_view what);

  /// FORMAT_ERROR "<path>: <message> at header byte <offset>".
  Status error_at(uint64_t offset, std::string_view message) const;

 private:
  HeaderCursor(std::filesystem::path path, uint64_t file_size) : path_(std::move(path)), file_size_(file_size) {}
  // Makes bytes [position_, position_ + length) available in buffer_, or explains why not.
  Status ensure(uint64_t length, std::string_view what);
  uint64_t read_le(unsigned width);

  std::filesystem::path path_;
  uint64_t file_size_ = 0;
  std::string buffer_;  // bytes [0, buffer_.size()) of the file
  uint64_t position_ = 0;
};

}  // namespace tensormorph::gguf
