#include "formats/gguf/gguf_cursor.h"

#include <algorithm>

#include "tensormorph/mapped_file.h"

namespace tensormorph::gguf {
namespace {

// First read covers most small headers; later reads grow with the buffer but stay bounded so
// the read-ahead past the header end (into tensor data) stays small.
constexpr uint64_t kInitialChunk = 64 * 1024;
constexpr uint64_t kMaxGrowth = 4 * 1024 * 1024;

}  // namespace

Result<HeaderCursor> HeaderCursor::open(const std::filesystem::path& path) {
  TM_ASSIGN_OR_RETURN(uint64_t size, file_size_of(path));
  return HeaderCursor(path, size);
}

Status HeaderCursor::error_at(uint64_t offset, std::string_view message) const {
  return Status::FormatError(path_.string() + ": " + std::string(message) + " at header byte " +
                             std::to_string(offset));
}

Status HeaderCursor::ensure(uint64_t length, std::string_view what) {
  if (length > remaining()) {
    return Status::FormatError(path_.string() + ": file is truncated: " + std::string(what) + " needs " +
                               std::to_string(length) + " bytes at header byte " + std::to_string(position_) +
                               " but the file ends at byte " + std::to_string(file_size_));
  }
  const uint64_t needed_end = position_ + length;  // <= file_size_, so no overflow
  const uint64_t have = buffer_.size();
  if (needed_end <= have) return Status::Ok();
  const uint64_t growth = std::clamp<uint64_t>(have, kInitialChunk, kMaxGrowth);
  const uint64_t target_end = std::min(file_size_, std::max(needed_end, have + growth));
  TM_ASSIGN_OR_RETURN(std::string chunk, read_file_range(path_, have, target_end - have));
  buffer_ += chunk;
  return Status::Ok();
}

uint64_t HeaderCursor::read_le(unsigned width) {
  uint64_t value = 0;
  for (unsigned i = 0; i < width; ++i) {
    value |= uint64_t{static_cast<unsigned char>(buffer_[position_ + i])} << (8 * i);
  }
  position_ += width;
  return value;
}

Result<uint8_t> HeaderCursor::read_u8(std::string_view what) {
  TM_RETURN_IF_ERROR(ensure(1, what));
  return static_cast<uint8_t>(read_le(1));
}

Result<uint16_t> HeaderCursor::read_u16(std::string_view what) {
  TM_RETURN_IF_ERROR(ensure(2, what));
  return static_cast<uint16_t>(read_le(2));
}

Result<uint32_t> HeaderCursor::read_u32(std::string_view what) {
  TM_RETURN_IF_ERROR(ensure(4, what));
  return static_cast<uint32_t>(read_le(4));
}

Result<uint64_t> HeaderCursor::read_u64(std::string_view what) {
  TM_RETURN_IF_ERROR(ensure(8, what));
  return read_le(8);
}

Result<std::string> HeaderCursor::read_bytes(uint64_t length, std::string_view what) {
  TM_RETURN_IF_ERROR(ensure(length, what));
  std::string out = buffer_.substr(position_, length);
  position_ += length;
  return out;
}

Result<std::string> HeaderCursor::read_string(std::string_view what) {
  const uint64_t length_offset = position_;
  TM_ASSIGN_OR_RETURN(uint64_t length, read_u64(what));
  if (length > remaining()) {
    return error_at(length_offset, "file is truncated or corrupt: " + std::string(what) + " has string length " +
                                       std::to_string(length) + " but only " + std::to_string(remaining()) +
                                       " bytes are left in the file");
  }
  return read_bytes(length, what);
}

}  // namespace tensormorph::gguf
