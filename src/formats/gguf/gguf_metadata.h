// GGUF metadata values: the type ids, their names, and parsing one value into JSON.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/gguf/gguf_cursor.h"
#include "tensormorph/status.h"

namespace tensormorph::gguf {

/// GGUF value type ids as stored after each key (and before array elements).
enum class ValueType : uint32_t {
  kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6, kBool = 7,
  kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12,
};

/// The ValueType for a stored id; nullopt for ids GGUF does not define.
std::optional<ValueType> value_type_from_id(uint32_t id);
/// Short name used in MetadataEntry::type: "u8", "f32", "bool", "string", "array" (bare), ...
std::string_view value_type_name(ValueType type);
/// The scalar ValueType named `name` ("u32", "string", ...); nullopt for arrays and unknown names.
std::optional<ValueType> scalar_value_type_from_name(std::string_view name);
/// Bytes a scalar occupies on disk (strings: 8, their length prefix; arrays: 12, type and count).
uint64_t min_encoded_size(ValueType type);

/// A parsed value: its full type name (e.g. "array<array<i32>>") and its JSON form.
struct ParsedValue {
  std::string type;
  nlohmann::ordered_json value;
};

/// Reads one value of type id `type_id` (stored at header byte `type_offset`) for key `key`.
/// Strings that are not valid UTF-8 are stored with each bad byte written as the text "\\xNN" (the
/// same rule as JSON output, see core/printable.h), and a line saying so is appended to `notes`.
Result<ParsedValue> read_value(HeaderCursor& cursor, std::string_view key, uint32_t type_id,
                               uint64_t type_offset, std::vector<std::string>& notes);

/// `text` if it is valid UTF-8, else a copy with each invalid byte written as "\\xNN".
std::string sanitize_utf8(std::string_view text, bool* was_valid);

}  // namespace tensormorph::gguf
