// Reading GGUF headers: fixed header, key/values, tensor infos, then layout validation.
#include <algorithm>
#include <bit>
#include <cstdio>
#include <limits>
#include <unordered_map>

#include "formats/gguf/gguf.h"
#include "formats/gguf/gguf_cursor.h"
#include "formats/gguf/gguf_file_type.h"
#include "core/printable.h"
#include "formats/gguf/gguf_metadata.h"

namespace tensormorph::gguf {
namespace {

constexpr uint32_t kDefaultAlignment = 32;
// ggml stops at 4 dims; a few more are accepted so newer writers are not refused needlessly.
constexpr uint32_t kMaxDims = 8;
// Smallest possible records: key (u64 length, empty) + type + 1-byte value; name + n_dims + type + offset.
constexpr uint64_t kMinKeyValueBytes = 8 + 4 + 1;
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;

// A tensor info record as stored, with the header offsets of its fields for messages.
struct StoredTensorInfo {
  std::string name;
  uint64_t record_offset = 0;
  std::vector<uint64_t> ne;  // GGUF order: fastest-varying first
  DType dtype = DType::kF32;
  uint64_t data_offset_field = 0;
  uint64_t relative_offset = 0;
};

std::string hex32(uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof text, "0x%08X", value);
  return text;
}

std::string printable_magic(std::string_view magic) {
  std::string out;
  for (char c : magic) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7F) {
      out += c;
    } else {
      char text[8];
      std::snprintf(text, sizeof text, "\\x%02X", byte);
      out += text;
    }
  }
  return out;
}

Status unsupported_at(const HeaderCursor& cursor, uint64_t offset, const std::string& message) {
  return Status::Unsupported(cursor.path().string() + ": " + message + " at header byte " +
                             std::to_string(offset));
}

Status check_version(const HeaderCursor& cursor, uint32_t version) {
  constexpr uint64_t kVersionOffset = 4;
  if (version == 2 || version == 3) return Status::Ok();
  const uint32_t swapped = __builtin_bswap32(version);
  if (swapped >= 1 && swapped <= 3) {
    return unsupported_at(cursor, kVersionOffset,
                          "big-endian GGUF (version field " + hex32(version) + " is version " +
                              std::to_string(swapped) + " byte-swapped) is not supported; only little-endian "
                              "GGUF v2 and v3 can be read");
  }
  if (version == 1) {
    return unsupported_at(cursor, kVersionOffset,
                          "GGUF version 1 is not supported (only versions 2 and 3); re-convert the model "
                          "with a current llama.cpp");
  }
  return unsupported_at(cursor, kVersionOffset,
                        "GGUF version " + std::to_string(version) + " is not supported (only versions 2 and 3)");
}

Status check_alignment_entry(const HeaderCursor& cursor, const MetadataEntry& entry, uint64_t offset,
                             uint32_t* alignment) {
  if (entry.type != "u32") {
    return cursor.error_at(offset, "key 'general.alignment' has type " + entry.type + ", expected u32");
  }
  const auto value = entry.value.get<uint32_t>();
  if (value == 0 || !std::has_single_bit(value)) {
    return cursor.error_at(offset, "general.alignment = " + std::to_string(value) +
                                       " is not a non-zero power of two");
  }
  *alignment = value;
  return Status::Ok();
}

Result<std::vector<MetadataEntry>> read_key_values(HeaderCursor& cursor, uint64_t count, uint32_t* alignment,
                                                   std::vector<std::string>& notes) {
  std::vector<MetadataEntry> entries;
  std::unordered_map<std::string, uint64_t> key_offsets;
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t key_offset = cursor.position();
    TM_ASSIGN_OR_RETURN(std::string raw_key, cursor.read_string("key of metadata entry " + std::to_string(i)));
    bool key_valid = true;
    std::string key = sanitize_utf8(raw_key, &key_valid);
    if (!key_valid) {
      notes.push_back("metadata key at header byte " + std::to_string(key_offset) +
                      " is not valid UTF-8; invalid bytes are shown as \\xNN");
    }
    const auto [previous, inserted] = key_offsets.emplace(key, key_offset);
    if (!inserted) {
      return cursor.error_at(key_offset, "duplicate metadata key " + quoted_name(key) + " (first at header byte " +
                                             std::to_string(previous->second) + ")");
    }
    const uint64_t type_offset = cursor.position();
    TM_ASSIGN_OR_RETURN(uint32_t type_id, cursor.read_u32("value type of key " + quoted_name(key)));
    TM_ASSIGN_OR_RETURN(ParsedValue parsed, read_value(cursor, key, type_id, type_offset, notes));
    MetadataEntry entry{std::move(key), std::move(parsed.type), std::move(parsed.value)};
    if (entry.key == "general.alignment") {
      TM_RETURN_IF_ERROR(check_alignment_entry(cursor, entry, key_offset, alignment));
    }
    entries.push_back(std::move(entry));
  }
  return entries;
}

Result<DType> dtype_for_ggml_id(const HeaderCursor& cursor, uint32_t type_id, const std::string& tensor,
                                uint64_t offset) {
  if (std::optional<DType> dtype = dtype_from_ggml_id(type_id)) return *dtype;
  const std::string_view removed = ggml_removed_type_name(type_id);
  if (!removed.empty()) {
    return unsupported_at(cursor, offset,
                          "tensor " + quoted_name(tensor) + ": ggml type " + std::to_string(type_id) + " (" +
                              std::string(removed) + ") was removed from ggml and is not supported; "
                              "re-quantize the model with a current llama.cpp");
  }
  return unsupported_at(cursor, offset,
                        "tensor " + quoted_name(tensor) + ": unknown ggml type id " + std::to_string(type_id));
}

Result<std::vector<StoredTensorInfo>> read_tensor_infos(HeaderCursor& cursor, uint64_t count) {
  std::vector<StoredTensorInfo> infos;
  std::unordered_map<std::string, uint64_t> name_offsets;
  for (uint64_t i = 0; i < count; ++i) {
    StoredTensorInfo info;
    info.record_offset = cursor.position();
    TM_ASSIGN_OR_RETURN(info.name, cursor.read_string("name of tensor " + std::to_string(i)));
    const auto [previous, inserted] = name_offsets.emplace(info.name, info.record_offset);
    if (!inserted) {
      return cursor.error_at(info.record_offset, "duplicate tensor name " + quoted_name(info.name) +
                                                     " (first at header byte " +
                                                     std::to_string(previous->second) + ")");
    }
    const std::string context = "tensor " + quoted_name(info.name);
    const uint64_t dims_offset = cursor.position();
    TM_ASSIGN_OR_RETURN(uint32_t n_dims, cursor.read_u32("n_dims of " + context));
    if (n_dims > kMaxDims) {
      return cursor.error_at(dims_offset, context + ": n_dims = " + std::to_string(n_dims) +
                                              " exceeds the maximum of " + std::to_string(kMaxDims));
    }
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t dim_offset = cursor.position();
      TM_ASSIGN_OR_RETURN(uint64_t dim, cursor.read_u64("dims of " + context));
      if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return cursor.error_at(dim_offset, context + ": ne" + std::to_string(d) + " = " + std::to_string(dim) +
                                               " is negative as ggml's int64");
      }
      info.ne.push_back(dim);
    }
    const uint64_t type_offset = cursor.position();
    TM_ASSIGN_OR_RETURN(uint32_t type_id, cursor.read_u32("type of " + context));
    TM_ASSIGN_OR_RETURN(info.dtype, dtype_for_ggml_id(cursor, type_id, info.name, type_offset));
    info.data_offset_field = cursor.position();
    TM_ASSIGN_OR_RETURN(info.relative_offset, cursor.read_u64("data offset of " + context));
    infos.push_back(std::move(info));
  }
  return infos;
}

std::string ne_string(const std::vector<uint64_t>& ne) {
  std::string out = "[";
  for (size_t i = 0; i < ne.size(); ++i) out += (i ? ", " : "") + std::to_string(ne[i]);
  return out + "]";
}

// Turns a stored record into a TensorInfo, checking its shape, size and place in the file.
Result<TensorInfo> place_tensor(const HeaderCursor& cursor, const StoredTensorInfo& stored, uint64_t data_start,
                                uint32_t alignment) {
  const std::string context = "tensor " + quoted_name(stored.name);
  const DTypeInfo& type = dtype_info(stored.dtype);
  const uint64_t shape_offset = stored.record_offset + 8 + stored.name.size();
  if (!stored.ne.empty() && stored.ne[0] % type.block_elems != 0) {
    return cursor.error_at(shape_offset, context + ": ne0 = " + std::to_string(stored.ne[0]) +
                                             " is not a multiple of the " + std::string(type.name) +
                                             " block size " + std::to_string(type.block_elems) +
                                             " (a row may not split a block)");
  }
  Result<uint64_t> elements = checked_element_count(stored.ne);
  if (!elements.ok()) return cursor.error_at(shape_offset, context + ": " + elements.status().message());
  Result<uint64_t> nbytes = dtype_storage_bytes(stored.dtype, *elements);
  if (!nbytes.ok()) return cursor.error_at(shape_offset, context + ": " + nbytes.status().message());

  const std::string offset_text = "data offset " + std::to_string(stored.relative_offset);
  uint64_t start = 0;
  if (__builtin_add_overflow(data_start, stored.relative_offset, &start)) {
    return cursor.error_at(stored.data_offset_field,
                           context + ": " + offset_text + " wraps around when added to the data section start " +
                               std::to_string(data_start));
  }
  if (stored.relative_offset % alignment != 0) {
    return cursor.error_at(stored.data_offset_field, context + ": " + offset_text +
                                                         " is not a multiple of the alignment " +
                                                         std::to_string(alignment));
  }
  uint64_t end = 0;
  if (__builtin_add_overflow(start, *nbytes, &end)) {
    return cursor.error_at(stored.data_offset_field, context + ": " + std::to_string(*nbytes) + " bytes at file offset " +
                                                         std::to_string(start) + " wrap around 64 bits");
  }
  if (end > cursor.file_size()) {
    return cursor.error_at(stored.data_offset_field,
                           context + ": data [" + std::to_string(start) + ", " + std::to_string(end) + ") for " +
                               std::string(type.name) + " ne " + ne_string(stored.ne) +
                               " extends past the end of the file (" + std::to_string(cursor.file_size()) +
                               " bytes)");
  }
  TensorInfo tensor;
  tensor.name = stored.name;
  tensor.dtype = stored.dtype;
  tensor.shape.assign(stored.ne.rbegin(), stored.ne.rend());
  tensor.file = 0;
  tensor.offset = start;
  tensor.nbytes = *nbytes;
  return tensor;
}

Status check_no_overlap(const HeaderCursor& cursor, const std::vector<StoredTensorInfo>& stored,
                        const std::vector<TensorInfo>& tensors) {
  std::vector<size_t> order;
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (tensors[i].nbytes > 0) order.push_back(i);  // empty tensors occupy no bytes
  }
  std::stable_sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return tensors[a].offset < tensors[b].offset; });
  // Sorted by start, so a tensor overlaps an earlier one iff it starts before the furthest end so far.
  size_t furthest = order.empty() ? 0 : order[0];
  for (size_t k = 1; k < order.size(); ++k) {
    const TensorInfo& current = tensors[order[k]];
    const TensorInfo& previous = tensors[furthest];
    const uint64_t previous_end = previous.offset + previous.nbytes;
    if (current.offset < previous_end) {
      return cursor.error_at(stored[order[k]].data_offset_field,
                             "tensor " + quoted_name(current.name) + ": data [" + std::to_string(current.offset) + ", " +
                                 std::to_string(current.offset + current.nbytes) + ") overlaps tensor " +
                                 quoted_name(previous.name) + " at [" + std::to_string(previous.offset) + ", " +
                                 std::to_string(previous_end) + ")");
    }
    if (current.offset + current.nbytes > previous_end) furthest = order[k];
  }
  return Status::Ok();
}

// general.file_type decoded ("MOSTLY_Q4_K_M (15)"); nullopt when absent or not an integer.
std::optional<std::string> file_type_of(const std::vector<MetadataEntry>& metadata) {
  for (const MetadataEntry& m : metadata) {
    if (m.key != "general.file_type") continue;
    const nlohmann::ordered_json& v = m.value;
    const bool fits = v.is_number_unsigned() ? v.get<uint64_t>() <= UINT32_MAX
                                             : v.is_number_integer() && v.get<int64_t>() >= 0 &&
                                                   v.get<int64_t>() <= static_cast<int64_t>(UINT32_MAX);
    if (!fits) return "not a file type (" + m.type + ")";
    return file_type_text(v.get<uint32_t>());
  }
  return std::nullopt;
}

}  // namespace

Result<std::unique_ptr<Checkpoint>> open_file(const std::filesystem::path& path) {
  TM_ASSIGN_OR_RETURN(HeaderCursor cursor, HeaderCursor::open(path));
  TM_ASSIGN_OR_RETURN(std::string magic, cursor.read_bytes(4, "magic"));
  if (magic != "GGUF") {
    return cursor.error_at(0, "not a GGUF file: magic is '" + printable_magic(magic) + "', expected 'GGUF'");
  }
  TM_ASSIGN_OR_RETURN(uint32_t version, cursor.read_u32("version"));
  TM_RETURN_IF_ERROR(check_version(cursor, version));
  const uint64_t tensor_count_offset = cursor.position();
  TM_ASSIGN_OR_RETURN(uint64_t tensor_count, cursor.read_u64("tensor count"));
  const uint64_t kv_count_offset = cursor.position();
  TM_ASSIGN_OR_RETURN(uint64_t kv_count, cursor.read_u64("metadata key/value count"));
  if (kv_count > cursor.remaining() / kMinKeyValueBytes) {
    return cursor.error_at(kv_count_offset, "metadata key/value count " + std::to_string(kv_count) +
                                                " cannot fit in the " + std::to_string(cursor.remaining()) +
                                                " bytes left in the file");
  }

  std::vector<std::string> notes;
  uint32_t alignment = kDefaultAlignment;
  TM_ASSIGN_OR_RETURN(std::vector<MetadataEntry> metadata, read_key_values(cursor, kv_count, &alignment, notes));
  if (tensor_count > cursor.remaining() / kMinTensorInfoBytes) {
    return cursor.error_at(tensor_count_offset, "tensor count " + std::to_string(tensor_count) +
                                                    " cannot fit in the " + std::to_string(cursor.remaining()) +
                                                    " bytes left after the metadata");
  }
  TM_ASSIGN_OR_RETURN(std::vector<StoredTensorInfo> stored, read_tensor_infos(cursor, tensor_count));

  const uint64_t header_end = cursor.position();
  // header_end <= file size, so rounding up cannot overflow 64 bits.
  const uint64_t data_start = (header_end + alignment - 1) / alignment * alignment;
  std::vector<TensorInfo> tensors;
  tensors.reserve(stored.size());
  for (const StoredTensorInfo& info : stored) {
    TM_ASSIGN_OR_RETURN(TensorInfo tensor, place_tensor(cursor, info, data_start, alignment));
    tensors.push_back(std::move(tensor));
  }
  TM_RETURN_IF_ERROR(check_no_overlap(cursor, stored, tensors));

  std::vector<FormatFact> facts = {{"gguf.version", version, std::nullopt},
                                   {"gguf.alignment", alignment, std::nullopt},
                                   {"gguf.data_offset", data_start, std::nullopt}};
  if (const auto file_type = file_type_of(metadata)) facts.push_back({"gguf.file_type", *file_type, std::nullopt});
  std::vector<SourceFile> files{SourceFile{path, cursor.file_size()}};
  return std::make_unique<Checkpoint>(CheckpointFormat::kGguf, path, std::move(files), std::move(tensors),
                                      std::move(metadata), std::move(notes), std::move(facts));
}

}  // namespace tensormorph::gguf
