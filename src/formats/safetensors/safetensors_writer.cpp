// Writing a .safetensors file atomically: temporary file beside the target, then rename.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <exception>
#include <new>
#include <unordered_set>

#include "formats/safetensors/safetensors.h"
#include "formats/safetensors/safetensors_internal.h"

namespace tensormorph::safetensors {
namespace {

using internal::quote_name;

// Large tensors go to the kernel in pieces so one write() never has to handle gigabytes.
constexpr size_t kWriteChunkBytes = size_t{64} << 20;
// safetensors readers map the data section; 8-byte alignment lets them view F64/I64 data in place.
constexpr size_t kDataAlignment = 8;

// Owns a file descriptor; close() reports errors, the destructor only cleans up.
class UniqueFd {
 public:
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() {
    if (fd_ >= 0) ::close(fd_);
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  int get() const { return fd_; }
  int release_and_close() {
    const int result = ::close(fd_);
    fd_ = -1;
    return result;
  }

 private:
  int fd_;
};

// Removes the temporary file unless the rename succeeded.
class TemporaryFile {
 public:
  explicit TemporaryFile(std::filesystem::path path) : path_(std::move(path)) {}
  ~TemporaryFile() {
    if (!committed_) ::unlink(path_.c_str());
  }
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;
  const std::filesystem::path& path() const { return path_; }
  void commit() { committed_ = true; }

 private:
  std::filesystem::path path_;
  bool committed_ = false;
};

std::string errno_text() { return std::strerror(errno); }

Status write_all(int fd, std::span<const std::byte> bytes, const std::filesystem::path& path) {
  while (!bytes.empty()) {
    const size_t chunk = std::min(bytes.size(), kWriteChunkBytes);
    const ssize_t written = ::write(fd, bytes.data(), chunk);
    if (written < 0) {
      if (errno == EINTR) continue;
      return Status::IoError(path.string() + ": write failed: " + errno_text());
    }
    bytes = bytes.subspan(static_cast<size_t>(written));
  }
  return Status::Ok();
}

std::span<const std::byte> as_bytes(std::string_view text) { return std::as_bytes(std::span(text)); }

// Builds the padded JSON header, checking every tensor against its declared shape and dtype. The text
// is assembled directly: a JSON object type would cost a lookup per key (quadratic for ordered_json).
Result<std::string> build_header(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                                 std::span<const std::pair<std::string, std::string>> metadata) {
  using internal::json_string_literal;
  const std::string file = path.string();
  std::string text = "{";
  if (!metadata.empty()) {
    std::unordered_set<std::string_view> keys;
    text += "\"__metadata__\":{";
    for (const auto& [key, value] : metadata) {
      if (internal::first_invalid_utf8(key) || internal::first_invalid_utf8(value)) {
        return Status::InvalidArgument(file + ": metadata " + quote_name(key) + " is not valid UTF-8");
      }
      if (!keys.insert(key).second) {
        return Status::InvalidArgument(file + ": duplicate metadata key " + quote_name(key));
      }
      if (keys.size() > 1) text += ',';
      text += json_string_literal(key) + ":" + json_string_literal(value);
    }
    text += "}";
  }
  uint64_t offset = 0;
  std::unordered_set<std::string_view> names;
  for (const TensorToWrite& tensor : tensors) {
    const std::string name = "tensor " + quote_name(tensor.name);
    if (internal::first_invalid_utf8(tensor.name)) {
      return Status::InvalidArgument(file + ": " + name + ": the name is not valid UTF-8");
    }
    if (tensor.name == "__metadata__" || !names.insert(tensor.name).second) {
      return Status::InvalidArgument(file + ": " + name + ": the name is reserved or used twice");
    }
    const std::string_view dtype = internal::safetensors_dtype_name(tensor.dtype);
    if (dtype.empty()) {
      return Status::InvalidArgument(file + ": " + name + ": safetensors cannot store " +
                                     std::string(dtype_name(tensor.dtype)));
    }
    auto count = checked_element_count(tensor.shape);
    if (!count.ok()) return Status::InvalidArgument(file + ": " + name + ": " + count.status().message());
    auto need = dtype_storage_bytes(tensor.dtype, *count);
    if (!need.ok()) return Status::InvalidArgument(file + ": " + name + ": " + need.status().message());
    if (!tensor.produce && tensor.data.size() != *need) {
      return Status::InvalidArgument(file + ": " + name + ": " + std::string(dtype) + " " +
                                     internal::shape_text(tensor.shape) + " needs " + std::to_string(*need) +
                                     " bytes but " + std::to_string(tensor.data.size()) + " were given");
    }
    uint64_t end = 0;
    if (__builtin_add_overflow(offset, *need, &end)) {
      return Status::InvalidArgument(file + ": " + name + ": the data section would exceed 2^64 bytes");
    }
    if (text.size() > 1) text += ',';
    text += json_string_literal(tensor.name) + ":{\"dtype\":\"" + std::string(dtype) + "\",\"shape\":[";
    for (size_t i = 0; i < tensor.shape.size(); ++i) {
      if (i > 0) text += ',';
      text += std::to_string(tensor.shape[i]);
    }
    text += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(end) + "]}";
    offset = end;
  }
  text += "}";
  text.append((kDataAlignment - text.size() % kDataAlignment) % kDataAlignment, ' ');
  if (text.size() > kMaxHeaderBytes) {
    return Status::InvalidArgument(file + ": the JSON header would be " + std::to_string(text.size()) +
                                   " bytes, over the " + std::to_string(kMaxHeaderBytes) + "-byte limit readers accept");
  }
  return text;
}

std::filesystem::path temporary_path_for(const std::filesystem::path& path) {
  static std::atomic<uint64_t> counter{0};
  std::filesystem::path name = "." + path.filename().string() + ".tmp." + std::to_string(::getpid()) + "." +
                               std::to_string(counter.fetch_add(1));
  return path.parent_path() / name;
}

Status write_file_unguarded(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                            std::span<const std::pair<std::string, std::string>> metadata) {
  if (path.filename().empty()) return Status::InvalidArgument(path.string() + ": not a file path");
  TM_ASSIGN_OR_RETURN(std::string header, build_header(path, tensors, metadata));

  const std::filesystem::path temporary_path = temporary_path_for(path);
  UniqueFd fd(::open(temporary_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (fd.get() < 0) {
    return Status::IoError(path.string() + ": cannot create temporary file " + temporary_path.string() + ": " +
                           errno_text());
  }
  TemporaryFile temporary(temporary_path);  // created by us from here on, so ours to remove
  std::array<std::byte, 8> length{};
  for (size_t i = 0; i < length.size(); ++i) {
    length[i] = static_cast<std::byte>((uint64_t{header.size()} >> (8 * i)) & 0xFF);
  }
  TM_RETURN_IF_ERROR(write_all(fd.get(), length, temporary.path()));
  TM_RETURN_IF_ERROR(write_all(fd.get(), as_bytes(header), temporary.path()));
  for (const TensorToWrite& tensor : tensors) {
    std::span<const std::byte> data = tensor.data;
    if (tensor.produce) {
      data = tensor.produce();
      // build_header checked the shape; the producer must match it.
      const uint64_t need = dtype_storage_bytes(tensor.dtype, checked_element_count(tensor.shape).value()).value();
      if (data.size() != need) {
        return Status::Internal(path.string() + ": tensor " + quote_name(tensor.name) + ": produced " +
                                std::to_string(data.size()) + " bytes, its shape needs " + std::to_string(need));
      }
    }
    TM_RETURN_IF_ERROR(write_all(fd.get(), data, temporary.path()));
  }
  if (::fsync(fd.get()) != 0) return Status::IoError(temporary.path().string() + ": fsync failed: " + errno_text());
  if (fd.release_and_close() != 0) {
    return Status::IoError(temporary.path().string() + ": close failed: " + errno_text());
  }
  if (::rename(temporary.path().c_str(), path.c_str()) != 0) {
    return Status::IoError(path.string() + ": cannot rename " + temporary.path().string() + " into place: " +
                           errno_text());
  }
  temporary.commit();
  return Status::Ok();
}

}  // namespace

Status write_file(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                  std::span<const std::pair<std::string, std::string>> metadata) {
  try {
    return write_file_unguarded(path, tensors, metadata);
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted(path.string() + ": out of memory building the safetensors header");
  } catch (const std::exception& error) {
    return Status::Internal(path.string() + ": unexpected error writing safetensors: " + error.what());
  }
}

}  // namespace tensormorph::safetensors
