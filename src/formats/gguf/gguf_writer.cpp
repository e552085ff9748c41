// Writing GGUF v3 files: header and tensor infos built in memory, data streamed, then renamed into place.
#include <bit>
#include <limits>
#include <unordered_set>
#include <vector>

#include "core/atomic_file.h"
#include "core/printable.h"
#include "formats/gguf/gguf.h"
#include "formats/gguf/gguf_metadata.h"

namespace tensormorph::gguf {
namespace {

constexpr uint32_t kDefaultAlignment = 32;
constexpr uint32_t kWrittenVersion = 3;
constexpr uint32_t kMaxDims = 8;
constexpr std::string_view kAlignmentKey = "general.alignment";

using Json = nlohmann::ordered_json;

void put_le(std::string& out, uint64_t value, unsigned width) {
  for (unsigned i = 0; i < width; ++i) out += static_cast<char>((value >> (8 * i)) & 0xFF);
}

void put_string(std::string& out, std::string_view text) {
  put_le(out, text.size(), 8);
  out += text;
}

// A short JSON rendering for messages; never throws, even on invalid UTF-8.
std::string describe(const Json& value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  return text.size() > 80 ? text.substr(0, 77) + "..." : text;
}

void pad_to(std::string& out, uint64_t alignment) {
  while (out.size() % alignment != 0) out += '\0';
}

std::string_view array_element_type(std::string_view type) {
  constexpr std::string_view kPrefix = "array<";
  if (type.size() > kPrefix.size() + 1 && type.substr(0, kPrefix.size()) == kPrefix && type.back() == '>') {
    return type.substr(kPrefix.size(), type.size() - kPrefix.size() - 1);
  }
  return {};
}

// Serialises values for one key; messages name the file and key.
class ValueWriter {
 public:
  ValueWriter(const std::filesystem::path& path, std::string_view key) : path_(path), key_(key) {}

  /// The GGUF type id for a type name, or an error for names outside gguf.h's list.
  Result<uint32_t> type_id(std::string_view type) const {
    if (!array_element_type(type).empty()) return static_cast<uint32_t>(ValueType::kArray);
    if (std::optional<ValueType> scalar = scalar_value_type_from_name(type)) return static_cast<uint32_t>(*scalar);
    return invalid("unknown value type '" + std::string(type) + "'");
  }

  /// Appends `value` encoded as `type` (no leading type id).
  Status encode(std::string& out, std::string_view type, const Json& value) const {
    const std::string_view element_type = array_element_type(type);
    if (!element_type.empty()) {
      if (!value.is_array()) return invalid("type " + std::string(type) + " needs a JSON array, got " + describe(value));
      TM_ASSIGN_OR_RETURN(uint32_t element_id, type_id(element_type));
      put_le(out, element_id, 4);
      put_le(out, value.size(), 8);
      for (const Json& element : value) TM_RETURN_IF_ERROR(encode(out, element_type, element));
      return Status::Ok();
    }
    TM_ASSIGN_OR_RETURN(uint32_t id, type_id(type));
    switch (static_cast<ValueType>(id)) {
      case ValueType::kU8: return encode_integer<uint8_t>(out, type, value);
      case ValueType::kI8: return encode_integer<int8_t>(out, type, value);
      case ValueType::kU16: return encode_integer<uint16_t>(out, type, value);
      case ValueType::kI16: return encode_integer<int16_t>(out, type, value);
      case ValueType::kU32: return encode_integer<uint32_t>(out, type, value);
      case ValueType::kI32: return encode_integer<int32_t>(out, type, value);
      case ValueType::kU64: return encode_integer<uint64_t>(out, type, value);
      case ValueType::kI64: return encode_integer<int64_t>(out, type, value);
      case ValueType::kF32:
        if (!value.is_number()) return mismatch(type, value);
        put_le(out, std::bit_cast<uint32_t>(static_cast<float>(value.get<double>())), 4);
        return Status::Ok();
      case ValueType::kF64:
        if (!value.is_number()) return mismatch(type, value);
        put_le(out, std::bit_cast<uint64_t>(value.get<double>()), 8);
        return Status::Ok();
      case ValueType::kBool:
        if (!value.is_boolean()) return mismatch(type, value);
        put_le(out, value.get<bool>() ? 1 : 0, 1);
        return Status::Ok();
      case ValueType::kString:
        if (!value.is_string()) return mismatch(type, value);
        put_string(out, value.get_ref<const std::string&>());
        return Status::Ok();
      case ValueType::kArray:
        break;
    }
    return invalid("unknown value type '" + std::string(type) + "'");
  }

 private:
  template <typename T>
  Status encode_integer(std::string& out, std::string_view type, const Json& value) const {
    if (!value.is_number_integer()) return mismatch(type, value);
    bool fits = false;
    uint64_t bits = 0;
    if (value.is_number_unsigned()) {
      const auto v = value.get<uint64_t>();
      fits = v <= static_cast<uint64_t>(std::numeric_limits<T>::max());
      bits = v;
    } else {
      const auto v = value.get<int64_t>();
      fits = v >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
             (v < 0 || static_cast<uint64_t>(v) <= static_cast<uint64_t>(std::numeric_limits<T>::max()));
      bits = static_cast<uint64_t>(v);
    }
    if (!fits) return invalid("value " + describe(value) + " does not fit type " + std::string(type));
    put_le(out, bits, sizeof(T));
    return Status::Ok();
  }

  Status mismatch(std::string_view type, const Json& value) const {
    return invalid("value " + describe(value) + " is not a " + std::string(type));
  }

  Status invalid(const std::string& message) const {
    return Status::InvalidArgument(path_.string() + ": key " + quoted_name(key_) + ": " + message);
  }

  const std::filesystem::path& path_;
  std::string_view key_;
};

Status append_key_values(std::string& out, const std::filesystem::path& path, std::span<const KeyValueToWrite> kvs,
                         uint32_t alignment, uint64_t* count) {
  std::unordered_set<std::string_view> keys;
  for (const KeyValueToWrite& kv : kvs) {
    if (!keys.insert(kv.key).second) {
      return Status::InvalidArgument(path.string() + ": duplicate metadata key " + quoted_name(kv.key));
    }
    if (kv.key == kAlignmentKey && (kv.type != "u32" || !kv.value.is_number_integer() ||
                                    kv.value.get<int64_t>() != static_cast<int64_t>(alignment))) {
      return Status::InvalidArgument(path.string() + ": key 'general.alignment' must be a u32 equal to the "
                                     "alignment argument " + std::to_string(alignment));
    }
    ValueWriter writer(path, kv.key);
    TM_ASSIGN_OR_RETURN(uint32_t type_id, writer.type_id(kv.type));
    put_string(out, kv.key);
    put_le(out, type_id, 4);
    TM_RETURN_IF_ERROR(writer.encode(out, kv.type, kv.value));
  }
  *count = kvs.size();
  if (alignment != kDefaultAlignment && !keys.contains(kAlignmentKey)) {
    put_string(out, kAlignmentKey);
    put_le(out, static_cast<uint32_t>(ValueType::kU32), 4);
    put_le(out, alignment, 4);
    ++*count;
  }
  return Status::Ok();
}

// Appends one tensor info record; returns the tensor's padded size in the data section.
Result<uint64_t> append_tensor_info(std::string& out, const std::filesystem::path& path, const TensorToWrite& tensor,
                                    uint64_t offset, uint32_t alignment) {
  const std::string context = path.string() + ": tensor " + quoted_name(tensor.name) + ": ";
  const DTypeInfo& type = dtype_info(tensor.dtype);
  if (type.ggml_type_id < 0) {
    return Status::InvalidArgument(context + std::string(type.name) + " has no ggml type id");
  }
  if (tensor.shape.size() > kMaxDims) {
    return Status::InvalidArgument(context + "more than " + std::to_string(kMaxDims) + " dims");
  }
  if (!tensor.shape.empty() && tensor.shape.back() % type.block_elems != 0) {
    return Status::InvalidArgument(context + "last dim " + std::to_string(tensor.shape.back()) +
                                   " is not a multiple of the " + std::string(type.name) + " block size " +
                                   std::to_string(type.block_elems));
  }
  Result<uint64_t> elements = checked_element_count(tensor.shape);
  if (!elements.ok()) return Status::InvalidArgument(context + elements.status().message());
  Result<uint64_t> nbytes = dtype_storage_bytes(tensor.dtype, *elements);
  if (!nbytes.ok()) return Status::InvalidArgument(context + nbytes.status().message());
  if (tensor.data.size() != *nbytes) {
    return Status::InvalidArgument(context + "has " + std::to_string(tensor.data.size()) + " bytes of data but " +
                                   std::to_string(*elements) + " " + std::string(type.name) + " elements need " +
                                   std::to_string(*nbytes));
  }
  put_string(out, tensor.name);
  put_le(out, tensor.shape.size(), 4);
  for (auto dim = tensor.shape.rbegin(); dim != tensor.shape.rend(); ++dim) put_le(out, *dim, 8);
  put_le(out, static_cast<uint32_t>(type.ggml_type_id), 4);
  put_le(out, offset, 8);
  uint64_t padded = 0;
  if (__builtin_add_overflow(*nbytes, alignment - 1, &padded)) {
    return Status::InvalidArgument(context + "data size overflows 64 bits");
  }
  return padded / alignment * alignment;
}

}  // namespace

Status write_file(const std::filesystem::path& path, std::span<const KeyValueToWrite> kvs,
                  std::span<const TensorToWrite> tensors, uint32_t alignment) {
  if (alignment == 0 || !std::has_single_bit(alignment)) {
    return Status::InvalidArgument(path.string() + ": alignment " + std::to_string(alignment) +
                                   " is not a non-zero power of two");
  }
  std::string key_values;
  uint64_t kv_count = 0;
  TM_RETURN_IF_ERROR(append_key_values(key_values, path, kvs, alignment, &kv_count));

  std::string tensor_infos;
  std::unordered_set<std::string_view> names;
  uint64_t data_size = 0;
  for (const TensorToWrite& tensor : tensors) {
    if (!names.insert(tensor.name).second) {
      return Status::InvalidArgument(path.string() + ": duplicate tensor name " + quoted_name(tensor.name));
    }
    TM_ASSIGN_OR_RETURN(uint64_t padded, append_tensor_info(tensor_infos, path, tensor, data_size, alignment));
    if (__builtin_add_overflow(data_size, padded, &data_size)) {
      return Status::InvalidArgument(path.string() + ": total tensor data overflows 64 bits");
    }
  }

  std::string header = "GGUF";
  put_le(header, kWrittenVersion, 4);
  put_le(header, tensors.size(), 8);
  put_le(header, kv_count, 8);
  header += key_values;
  header += tensor_infos;
  pad_to(header, alignment);

  // Written beside the target and renamed over it, so readers never see a half-written file.
  TM_ASSIGN_OR_RETURN(AtomicOutput out, AtomicOutput::open(path));
  TM_RETURN_IF_ERROR(out.write(std::as_bytes(std::span(header))));
  const std::vector<std::byte> padding(alignment, std::byte{0});
  for (const TensorToWrite& tensor : tensors) {
    TM_RETURN_IF_ERROR(out.write(tensor.data));
    const uint64_t tail = tensor.data.size() % alignment;
    if (tail != 0) TM_RETURN_IF_ERROR(out.write(std::span(padding).first(alignment - tail)));
  }
  TM_RETURN_IF_ERROR(out.commit());
  return Status::Ok();
}

}  // namespace tensormorph::gguf
