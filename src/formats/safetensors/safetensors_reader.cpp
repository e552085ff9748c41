// Reading one .safetensors file: header length, JSON header, and the checks the reference makes.
#include <algorithm>
#include <exception>
#include <new>

#include "formats/safetensors/safetensors.h"
#include "formats/safetensors/safetensors_internal.h"
#include "tensormorph/mapped_file.h"

namespace tensormorph::safetensors {
namespace internal {
namespace {

using Json = nlohmann::json;

constexpr uint64_t kLengthPrefixBytes = 8;
constexpr std::string_view kMetadataKey = "__metadata__";

// One tensor entry as declared, before its span is checked against the others.
struct DeclaredTensor {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<uint64_t> shape;
  uint64_t begin = 0;  // relative to the data section
  uint64_t end = 0;
};

// A JSON integer that fits a u64 ("-0" included, as serde accepts it).
std::optional<uint64_t> as_u64(const Json& value) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer() && value.get<int64_t>() == 0) return uint64_t{0};
  return std::nullopt;
}

// A short description of a JSON value for messages; never dumps a large array or object.
std::string describe(const Json& value) {
  if (value.is_number() || value.is_boolean() || value.is_null()) return json_type_name(value) + " " + value.dump();
  if (value.is_string()) return "string " + quote_name(value.get_ref<const std::string&>());
  return json_type_name(value);
}

std::string span_text(uint64_t begin, uint64_t end) {
  return "[" + std::to_string(begin) + ", " + std::to_string(end) + ")";
}

// Validates header entries of one file; every message names the file, the tensor and a byte offset.
class HeaderValidator {
 public:
  HeaderValidator(const std::filesystem::path& path, uint64_t header_bytes, uint64_t file_size,
                  const KeyPositions& positions)
      : file_(path.string()),
        data_start_(kLengthPrefixBytes + header_bytes),
        data_bytes_(file_size - kLengthPrefixBytes - header_bytes),
        positions_(positions) {}

  Status metadata(const Json& value, std::vector<MetadataEntry>& out) const {
    const std::string key(kMetadataKey);
    if (value.is_null()) return Status::Ok();  // the reference reads null as "no metadata"
    if (!value.is_object()) {
      return Status::FormatError(file_ + ": __metadata__ at byte " + std::to_string(positions_.of(key)) +
                                 " must be an object mapping strings to strings, found " + describe(value));
    }
    const std::vector<std::string> names = positions_.nested_keys_in_order(key);
    if (names.size() != value.size()) {
      return Status::Internal(file_ + ": __metadata__ key positions disagree with the parsed JSON");
    }
    for (const std::string& name : names) {
      auto it = value.find(name);
      if (it == value.end()) return Status::Internal(file_ + ": __metadata__ key lost while parsing");
      if (!it->is_string()) {
        return Status::FormatError(file_ + ": __metadata__ entry " + quote_name(name) + " at byte " +
                                   std::to_string(positions_.of(key, name)) + " must be a string, found " +
                                   describe(*it));
      }
      out.push_back(MetadataEntry{name, "string", it->get<std::string>()});
    }
    return Status::Ok();
  }

  Result<DeclaredTensor> tensor(const std::string& name, const Json& entry) const {
    if (!entry.is_object()) {
      return error(name, "", "entry must be an object with dtype, shape and data_offsets, found " + describe(entry));
    }
    for (auto it = entry.begin(); it != entry.end(); ++it) {
      if (it.key() != "dtype" && it.key() != "shape" && it.key() != "data_offsets") {
        return error(name, it.key(),
                     "unknown field " + quote_name(it.key()) + " (an entry has only dtype, shape and data_offsets)");
      }
    }
    for (const char* field : {"dtype", "shape", "data_offsets"}) {
      if (!entry.contains(field)) return error(name, "", "missing field '" + std::string(field) + "'");
    }
    DeclaredTensor out;
    out.name = name;
    TM_ASSIGN_OR_RETURN(out.dtype, dtype_of(name, entry.at("dtype")));
    TM_ASSIGN_OR_RETURN(out.shape, shape_of(name, entry.at("shape")));
    TM_RETURN_IF_ERROR(offsets_of(name, entry.at("data_offsets"), out));

    auto count = checked_element_count(out.shape);
    if (!count.ok()) return error(name, "shape", count.status().message());
    auto need = dtype_storage_bytes(out.dtype, *count);
    if (!need.ok()) return error(name, "shape", need.status().message() + " (the data must fill whole bytes)");
    if (out.end - out.begin != *need) {
      return error(name, "data_offsets",
                   "data_offsets " + span_text(out.begin, out.end) + " span " + std::to_string(out.end - out.begin) +
                       " bytes but " + std::string(dtype_name(out.dtype)) + " " + shape_text(out.shape) + " needs " +
                       std::to_string(*need) + " bytes");
    }
    if (out.end > data_bytes_) {
      return error(name, "data_offsets",
                   "data_offsets " + span_text(out.begin, out.end) + " end past the data section, which holds " +
                       std::to_string(data_bytes_) + " bytes from byte " + std::to_string(data_start_) +
                       ": the file is truncated or the offsets are wrong");
    }
    return out;
  }

  // Sorts `tensors` into file order and checks that they tile the data section exactly.
  Status spans(std::vector<DeclaredTensor>& tensors) const {
    std::stable_sort(tensors.begin(), tensors.end(), [](const DeclaredTensor& a, const DeclaredTensor& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    uint64_t covered = 0;
    const DeclaredTensor* previous = nullptr;
    for (const DeclaredTensor& tensor : tensors) {
      if (tensor.begin < covered) {
        return error(tensor.name, "data_offsets",
                     "data_offsets " + span_text(tensor.begin, tensor.end) + " overlap tensor " +
                         quote_name(previous->name) + " at " + span_text(previous->begin, previous->end));
      }
      if (tensor.begin > covered) {
        const std::string after =
            previous ? "tensor " + quote_name(previous->name) + " which ends at " + std::to_string(covered)
                     : "the start of the data section";
        return error(tensor.name, "data_offsets",
                     "data_offsets " + span_text(tensor.begin, tensor.end) + " leave a hole of " +
                         std::to_string(tensor.begin - covered) + " bytes after " + after +
                         " (tensors must cover the data section contiguously)");
      }
      covered = tensor.end;
      previous = &tensor;
    }
    if (covered != data_bytes_) {
      const std::string last = previous ? " after tensor " + quote_name(previous->name) : "";
      return Status::FormatError(file_ + ": the data section at byte " + std::to_string(data_start_) + " holds " +
                                 std::to_string(data_bytes_) + " bytes but the tensors cover " +
                                 std::to_string(covered) + ": " + std::to_string(data_bytes_ - covered) +
                                 " unclaimed bytes from byte " + std::to_string(data_start_ + covered) + last);
    }
    return Status::Ok();
  }

 private:
  Status error(const std::string& name, const std::string& field, const std::string& what) const {
    const uint64_t at = field.empty() ? positions_.of(name) : positions_.of(name, field);
    return Status::FormatError(file_ + ": tensor " + quote_name(name) + " at byte " + std::to_string(at) + ": " +
                               what);
  }

  Result<DType> dtype_of(const std::string& name, const Json& value) const {
    if (!value.is_string()) return error(name, "dtype", "dtype must be a string, found " + describe(value));
    const auto& text = value.get_ref<const std::string&>();
    auto dtype = dtype_from_safetensors_name(text);
    if (!dtype) {
      return error(name, "dtype", "unknown dtype " + quote_name(text) + " (safetensors dtypes: " +
                                      safetensors_dtype_list() + ")");
    }
    return *dtype;
  }

  Result<std::vector<uint64_t>> shape_of(const std::string& name, const Json& value) const {
    if (!value.is_array()) return error(name, "shape", "shape must be an array, found " + describe(value));
    std::vector<uint64_t> shape;
    shape.reserve(value.size());
    for (const Json& dim : value) {
      auto parsed = as_u64(dim);
      if (!parsed) {
        return error(name, "shape", "shape must hold non-negative integers below 2^64; dimension " +
                                        std::to_string(shape.size()) + " is " + describe(dim));
      }
      shape.push_back(*parsed);
    }
    return shape;
  }

  Status offsets_of(const std::string& name, const Json& value, DeclaredTensor& out) const {
    std::optional<uint64_t> begin;
    std::optional<uint64_t> end;
    if (value.is_array() && value.size() == 2) {
      begin = as_u64(value[0]);
      end = as_u64(value[1]);
    }
    if (!begin || !end) {
      return error(name, "data_offsets",
                   "data_offsets must be [begin, end] with two non-negative integers, found " +
                       (value.is_array() && value.size() <= 4 ? printable(value.dump()) : describe(value)));
    }
    if (*begin > *end) {
      return error(name, "data_offsets", "data_offsets [" + std::to_string(*begin) + ", " + std::to_string(*end) +
                                             "] begin after they end");
    }
    out.begin = *begin;
    out.end = *end;
    return Status::Ok();
  }

  std::string file_;
  uint64_t data_start_;
  uint64_t data_bytes_;
  const KeyPositions& positions_;
};

// Reads the 8-byte prefix and the JSON text, with the size checks of the reference implementation.
Result<std::string> read_header_text(const std::filesystem::path& path, uint64_t file_size) {
  const std::string file = path.string();
  if (file_size < kLengthPrefixBytes) {
    return Status::FormatError(file + ": file is " + std::to_string(file_size) +
                               " bytes, too short for the 8-byte little-endian header length that starts a "
                               "safetensors file");
  }
  TM_ASSIGN_OR_RETURN(std::string prefix, read_file_range(path, 0, kLengthPrefixBytes));
  uint64_t header_bytes = 0;
  for (size_t i = kLengthPrefixBytes; i-- > 0;) {
    header_bytes = (header_bytes << 8) | static_cast<unsigned char>(prefix[i]);
  }
  if (header_bytes > kMaxHeaderBytes) {
    return Status::FormatError(file + ": header length " + std::to_string(header_bytes) +
                               " at byte 0 exceeds the limit of " + std::to_string(kMaxHeaderBytes) + " bytes");
  }
  if (header_bytes > file_size - kLengthPrefixBytes) {
    return Status::FormatError(file + ": header length " + std::to_string(header_bytes) +
                               " at byte 0 runs past the end of the file: only " +
                               std::to_string(file_size - kLengthPrefixBytes) +
                               " bytes follow the length (file truncated?)");
  }
  if (header_bytes == 0) {
    return Status::FormatError(file + ": header length at byte 0 is 0; the header must be a JSON object");
  }
  TM_ASSIGN_OR_RETURN(std::string text, read_file_range(path, kLengthPrefixBytes, header_bytes));
  if (text.front() != '{') {
    static constexpr char kDigits[] = "0123456789ABCDEF";
    const auto first = static_cast<unsigned char>(text.front());
    return Status::FormatError(file + ": JSON header at byte 8 must start with '{', found byte 0x" +
                               std::string{kDigits[first >> 4], kDigits[first & 0xF]});
  }
  return text;
}

Result<FileHeader> read_file_header_unguarded(const std::filesystem::path& path, uint32_t file_index) {
  FileHeader out;
  TM_ASSIGN_OR_RETURN(out.file_size, file_size_of(path));
  TM_ASSIGN_OR_RETURN(std::string text, read_header_text(path, out.file_size));
  out.header_bytes = text.size();
  TM_ASSIGN_OR_RETURN(ParsedObject parsed, parse_json_object(path, text, kLengthPrefixBytes));
  text = std::string();  // the parsed form is all that is needed from here on

  const HeaderValidator validator(path, out.header_bytes, out.file_size, parsed.positions);
  std::vector<DeclaredTensor> declared;
  declared.reserve(parsed.value.size());
  if (parsed.positions.top.size() != parsed.value.size()) {
    return Status::Internal(path.string() + ": header key positions disagree with the parsed JSON");
  }
  for (const std::string& key : parsed.positions.top_keys_in_order()) {
    auto it = parsed.value.find(key);
    if (it == parsed.value.end()) {
      return Status::Internal(path.string() + ": header key " + quote_name(key) + " lost while parsing");
    }
    if (key == kMetadataKey) {
      TM_RETURN_IF_ERROR(validator.metadata(*it, out.metadata));
      continue;
    }
    TM_ASSIGN_OR_RETURN(DeclaredTensor tensor, validator.tensor(key, *it));
    declared.push_back(std::move(tensor));
  }
  TM_RETURN_IF_ERROR(validator.spans(declared));

  const uint64_t data_start = kLengthPrefixBytes + out.header_bytes;
  out.tensors.reserve(declared.size());
  for (DeclaredTensor& tensor : declared) {
    TensorInfo info;
    info.name = std::move(tensor.name);
    info.dtype = tensor.dtype;
    info.shape = std::move(tensor.shape);
    info.file = file_index;
    info.offset = data_start + tensor.begin;  // cannot overflow: end <= data section, inside the file
    info.nbytes = tensor.end - tensor.begin;
    out.tensors.push_back(std::move(info));
  }
  return out;
}

}  // namespace

Result<FileHeader> read_file_header(const std::filesystem::path& path, uint32_t file_index) {
  try {
    return read_file_header_unguarded(path, file_index);
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted(path.string() + ": out of memory reading the safetensors header");
  } catch (const std::exception& error) {
    return Status::Internal(path.string() + ": unexpected error reading the safetensors header: " + error.what());
  }
}

std::vector<FormatFact> header_facts(const FileHeader& header, uint32_t file_index) {
  return {{"safetensors.header_bytes", header.header_bytes, file_index},
          {"safetensors.data_offset", kLengthPrefixBytes + header.header_bytes, file_index}};
}

}  // namespace internal

Result<std::unique_ptr<Checkpoint>> open_file(const std::filesystem::path& path) {
  TM_ASSIGN_OR_RETURN(internal::FileHeader header, internal::read_file_header(path, 0));
  std::vector<SourceFile> files{SourceFile{path, header.file_size}};
  return std::make_unique<Checkpoint>(CheckpointFormat::kSafetensors, path, std::move(files),
                                      std::move(header.tensors), std::move(header.metadata),
                                      std::vector<std::string>{}, internal::header_facts(header, 0));
}

}  // namespace tensormorph::safetensors
