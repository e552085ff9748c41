#include "formats/gguf/gguf_metadata.h"

#include <bit>
#include <iterator>

#include "core/printable.h"

namespace tensormorph::gguf {
namespace {

// ggml itself never nests arrays more than once; the limit keeps a lying file from recursing
// deep enough to exhaust the stack.
constexpr int kMaxArrayNesting = 8;

struct TypeRow {
  ValueType type;
  std::string_view name;
  uint64_t encoded_size;
};

constexpr TypeRow kTypes[] = {
    {ValueType::kU8, "u8", 1},       {ValueType::kI8, "i8", 1},         {ValueType::kU16, "u16", 2},
    {ValueType::kI16, "i16", 2},     {ValueType::kU32, "u32", 4},       {ValueType::kI32, "i32", 4},
    {ValueType::kF32, "f32", 4},     {ValueType::kBool, "bool", 1},     {ValueType::kString, "string", 8},
    {ValueType::kArray, "array", 12}, {ValueType::kU64, "u64", 8},      {ValueType::kI64, "i64", 8},
    {ValueType::kF64, "f64", 8},
};

constexpr bool types_are_indexed_by_id() {
  for (uint32_t i = 0; i < std::size(kTypes); ++i) {
    if (static_cast<uint32_t>(kTypes[i].type) != i) return false;
  }
  return true;
}
static_assert(types_are_indexed_by_id(), "kTypes rows must follow the GGUF type ids");

const TypeRow& row_of(ValueType type) { return kTypes[static_cast<uint32_t>(type)]; }

// Reads the value of one key, remembering the key for messages.
class ValueReader {
 public:
  ValueReader(HeaderCursor& cursor, std::string_view key, std::vector<std::string>& notes)
      : cursor_(cursor), key_(key), notes_(notes), what_("value of key " + quoted_name(key)) {}

  Result<ParsedValue> read(uint32_t type_id, uint64_t type_offset) {
    const std::optional<ValueType> type = value_type_from_id(type_id);
    if (!type) return error(type_offset, "unknown value type " + std::to_string(type_id));
    if (*type == ValueType::kArray) return read_array(0);
    TM_ASSIGN_OR_RETURN(nlohmann::ordered_json value, read_scalar(*type));
    return ParsedValue{std::string(value_type_name(*type)), std::move(value)};
  }

 private:
  Status error(uint64_t offset, const std::string& message) const {
    return cursor_.error_at(offset, "key " + quoted_name(key_) + ": " + message);
  }

  Result<nlohmann::ordered_json> read_scalar(ValueType type) {
    const uint64_t offset = cursor_.position();
    switch (type) {
      case ValueType::kU8: {
        TM_ASSIGN_OR_RETURN(uint8_t v, cursor_.read_u8(what_));
        return nlohmann::ordered_json(v);
      }
      case ValueType::kI8: {
        TM_ASSIGN_OR_RETURN(uint8_t v, cursor_.read_u8(what_));
        return nlohmann::ordered_json(static_cast<int8_t>(v));
      }
      case ValueType::kU16: {
        TM_ASSIGN_OR_RETURN(uint16_t v, cursor_.read_u16(what_));
        return nlohmann::ordered_json(v);
      }
      case ValueType::kI16: {
        TM_ASSIGN_OR_RETURN(uint16_t v, cursor_.read_u16(what_));
        return nlohmann::ordered_json(static_cast<int16_t>(v));
      }
      case ValueType::kU32: {
        TM_ASSIGN_OR_RETURN(uint32_t v, cursor_.read_u32(what_));
        return nlohmann::ordered_json(v);
      }
      case ValueType::kI32: {
        TM_ASSIGN_OR_RETURN(uint32_t v, cursor_.read_u32(what_));
        return nlohmann::ordered_json(static_cast<int32_t>(v));
      }
      case ValueType::kU64: {
        TM_ASSIGN_OR_RETURN(uint64_t v, cursor_.read_u64(what_));
        return nlohmann::ordered_json(v);
      }
      case ValueType::kI64: {
        TM_ASSIGN_OR_RETURN(uint64_t v, cursor_.read_u64(what_));
        return nlohmann::ordered_json(static_cast<int64_t>(v));
      }
      case ValueType::kF32: {
        TM_ASSIGN_OR_RETURN(uint32_t v, cursor_.read_u32(what_));
        return nlohmann::ordered_json(static_cast<double>(std::bit_cast<float>(v)));
      }
      case ValueType::kF64: {
        TM_ASSIGN_OR_RETURN(uint64_t v, cursor_.read_u64(what_));
        return nlohmann::ordered_json(std::bit_cast<double>(v));
      }
      case ValueType::kBool: {
        TM_ASSIGN_OR_RETURN(uint8_t v, cursor_.read_u8(what_));
        if (v > 1) return error(offset, "bool value " + std::to_string(v) + " is neither 0 nor 1");
        return nlohmann::ordered_json(v == 1);
      }
      case ValueType::kString: {
        TM_ASSIGN_OR_RETURN(std::string raw, cursor_.read_string(what_));
        bool valid = true;
        std::string text = sanitize_utf8(raw, &valid);
        if (!valid && !noted_bad_utf8_) {
          notes_.push_back("key " + quoted_name(key_) + ": a string at header byte " + std::to_string(offset) +
                           " is not valid UTF-8; invalid bytes are shown as \\xNN");
          noted_bad_utf8_ = true;
        }
        return nlohmann::ordered_json(std::move(text));
      }
      case ValueType::kArray:
        break;
    }
    return Status::Internal("read_scalar called for an array");
  }

  Result<ParsedValue> read_array(int depth) {
    const uint64_t type_offset = cursor_.position();
    if (depth >= kMaxArrayNesting) {
      return error(type_offset, "arrays nested more than " + std::to_string(kMaxArrayNesting) + " deep");
    }
    TM_ASSIGN_OR_RETURN(uint32_t element_id, cursor_.read_u32(what_));
    const std::optional<ValueType> element_type = value_type_from_id(element_id);
    if (!element_type) return error(type_offset, "unknown array element type " + std::to_string(element_id));
    const uint64_t count_offset = cursor_.position();
    TM_ASSIGN_OR_RETURN(uint64_t count, cursor_.read_u64(what_));
    const uint64_t element_size = min_encoded_size(*element_type);
    if (count > cursor_.remaining() / element_size) {
      return error(count_offset, "array count " + std::to_string(count) + " of " +
                                     std::string(value_type_name(*element_type)) + " cannot fit in the " +
                                     std::to_string(cursor_.remaining()) + " bytes left in the file");
    }
    ParsedValue out{"", nlohmann::ordered_json::array()};
    if (*element_type != ValueType::kArray) {
      for (uint64_t i = 0; i < count; ++i) {
        TM_ASSIGN_OR_RETURN(nlohmann::ordered_json element, read_scalar(*element_type));
        out.value.push_back(std::move(element));
      }
      out.type = "array<" + std::string(value_type_name(*element_type)) + ">";
      return out;
    }
    // Each inner array declares its own element type; the name is precise only when they agree.
    std::string inner_type;
    bool inner_types_agree = true;
    for (uint64_t i = 0; i < count; ++i) {
      TM_ASSIGN_OR_RETURN(ParsedValue inner, read_array(depth + 1));
      if (i == 0) {
        inner_type = inner.type;
      } else if (inner.type != inner_type) {
        inner_types_agree = false;
      }
      out.value.push_back(std::move(inner.value));
    }
    out.type = (count > 0 && inner_types_agree) ? "array<" + inner_type + ">" : "array<array>";
    return out;
  }

  HeaderCursor& cursor_;
  std::string_view key_;
  std::vector<std::string>& notes_;
  std::string what_;
  bool noted_bad_utf8_ = false;
};

}  // namespace

std::optional<ValueType> value_type_from_id(uint32_t id) {
  if (id > static_cast<uint32_t>(ValueType::kF64)) return std::nullopt;
  return static_cast<ValueType>(id);
}

std::string_view value_type_name(ValueType type) { return row_of(type).name; }

std::optional<ValueType> scalar_value_type_from_name(std::string_view name) {
  for (const TypeRow& row : kTypes) {
    if (row.name == name && row.type != ValueType::kArray) return row.type;
  }
  return std::nullopt;
}

uint64_t min_encoded_size(ValueType type) { return row_of(type).encoded_size; }

Result<ParsedValue> read_value(HeaderCursor& cursor, std::string_view key, uint32_t type_id,
                               uint64_t type_offset, std::vector<std::string>& notes) {
  return ValueReader(cursor, key, notes).read(type_id, type_offset);
}

std::string sanitize_utf8(std::string_view text, bool* was_valid) {
  *was_valid = !first_invalid_utf8(text).has_value();
  return *was_valid ? std::string(text) : escape_invalid_utf8(text);
}

}  // namespace tensormorph::gguf
