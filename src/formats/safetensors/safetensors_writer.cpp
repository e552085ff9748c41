// Writing a .safetensors file atomically: temporary file beside the target, then rename.
#include <algorithm>
#include <array>
#include <cstring>
#include <exception>
#include <new>
#include <unordered_set>

#include "core/atomic_file.h"
#include "formats/safetensors/safetensors.h"
#include "formats/safetensors/safetensors_internal.h"

namespace tensormorph::safetensors {
namespace {

using internal::quote_name;

// safetensors readers map the data section; 8-byte alignment lets them view F64/I64 data in place.
constexpr size_t kDataAlignment = 8;

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

Status write_file_unguarded(const std::filesystem::path& path, std::span<const TensorToWrite> tensors,
                            std::span<const std::pair<std::string, std::string>> metadata) {
  if (path.filename().empty()) return Status::InvalidArgument(path.string() + ": not a file path");
  TM_ASSIGN_OR_RETURN(std::string header, build_header(path, tensors, metadata));

  // Beside the target, renamed over it when complete: readers never see a half-written index.
  TM_ASSIGN_OR_RETURN(AtomicOutput out, AtomicOutput::open(path));
  std::array<std::byte, 8> length{};
  for (size_t i = 0; i < length.size(); ++i) {
    length[i] = static_cast<std::byte>((uint64_t{header.size()} >> (8 * i)) & 0xFF);
  }
  TM_RETURN_IF_ERROR(out.write(length));
  TM_RETURN_IF_ERROR(out.write(as_bytes(header)));
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
    TM_RETURN_IF_ERROR(out.write(data));
  }
  TM_RETURN_IF_ERROR(out.commit());
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
