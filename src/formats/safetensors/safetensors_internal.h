// Pieces shared by the safetensors reader, index reader and writer (not part of the public API).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/printable.h"
#include "tensormorph/checkpoint.h"
#include "tensormorph/dtype.h"
#include "tensormorph/status.h"

namespace tensormorph::safetensors::internal {

/// A validated safetensors header: tensors in file order with absolute offsets.
struct FileHeader {
  uint64_t file_size = 0;               ///< bytes when the header was read
  uint64_t header_bytes = 0;            ///< N, the length of the JSON header
  std::vector<TensorInfo> tensors;      ///< file (data offset) order; TensorInfo::file is the given index
  std::vector<MetadataEntry> metadata;  ///< `__metadata__` entries in header order
};

/// Reads and validates the header of `path` (never its data); tensors get `file_index`.
Result<FileHeader> read_file_header(const std::filesystem::path& path, uint32_t file_index);

/// The format facts of one file's header (its JSON header's size, where its data starts).
std::vector<FormatFact> header_facts(const FileHeader& header, uint32_t file_index);

/// File offsets of a JSON object's keys: each top-level key, and the keys one level below it.
struct KeyPositions {
  /// File offset of the opening quote of a top-level key.
  std::unordered_map<std::string, uint64_t> top;
  /// File offsets of the keys inside each top-level key's object value.
  std::unordered_map<std::string, std::unordered_map<std::string, uint64_t>> nested;

  /// Offset of top-level `key` (0 when unknown).
  uint64_t of(const std::string& key) const;
  /// Offset of `field` inside top-level `key`'s object, falling back to the key's own offset.
  uint64_t of(const std::string& key, const std::string& field) const;
  /// Top-level keys in document order.
  std::vector<std::string> top_keys_in_order() const;
  /// Keys inside top-level `key`'s object value, in document order (empty when it is no object).
  std::vector<std::string> nested_keys_in_order(const std::string& key) const;
};

/// A parsed JSON object with the byte offsets of its keys. The value uses nlohmann::json (sorted
/// std::map objects) because ordered_json inserts in linear time, which is quadratic for large
/// headers; KeyPositions restores document order where it matters.
struct ParsedObject {
  nlohmann::json value;     ///< always an object
  KeyPositions positions;   ///< offsets into the file the text came from
};

/// Parses `text` (found at file offset `base_offset` of `path`) as a JSON object. Rejects invalid
/// UTF-8 (naming the string it occurs in), syntax errors, non-objects and duplicate keys at any depth.
Result<ParsedObject> parse_json_object(const std::filesystem::path& path, std::string_view text,
                                       uint64_t base_offset);

/// The safetensors spelling of `dtype` ("F8_E4M3", "F4"); empty when safetensors cannot store it.
std::string_view safetensors_dtype_name(DType dtype);
/// The dtype of an exact (case-sensitive) safetensors dtype name; nullopt for anything else.
std::optional<DType> dtype_from_safetensors_name(std::string_view name);
/// "BOOL, U8, ..." for messages.
std::string safetensors_dtype_list();

/// `text` in single quotes, escaped and shortened by the rule every reader shares (core/printable.h).
inline std::string quote_name(std::string_view text) { return quoted_name(text); }
using tensormorph::first_invalid_utf8;
/// A string literal in JSON text.
struct JsonStringLiteral {
  size_t begin = 0;     ///< offset of the opening quote
  size_t end = 0;       ///< offset just past the closing quote (or the end of the text)
  bool is_key = false;  ///< an object key rather than a value
  size_t depth = 0;     ///< containers open around it (1 = inside the top-level object)
};
/// The string literal containing byte `offset` of `json`, if any. Never reads outside `json`.
std::optional<JsonStringLiteral> string_literal_at(std::string_view json, size_t offset);
/// Offsets (into `json`) of the opening quote of every object key, in document order.
/// Meaningful only for syntactically valid JSON; never reads outside `json`.
std::vector<size_t> object_key_offsets(std::string_view json);
/// "[4096, 11008]".
std::string shape_text(const std::vector<uint64_t>& shape);
/// JSON type name for messages: "string", "number", "array", ...
std::string json_type_name(const nlohmann::json& value);
/// `text` as a JSON string literal, quotes and escapes included.
std::string json_string_literal(std::string_view text);

}  // namespace tensormorph::safetensors::internal
