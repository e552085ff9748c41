// Text helpers for safetensors headers: UTF-8 checks, quoting for messages, key positions, dtype names.
#include <array>

#include "formats/safetensors/safetensors_internal.h"

namespace tensormorph::safetensors::internal {
namespace {

// Every dtype name the safetensors format defines; canonical names in dtype.h use the same spellings.
constexpr std::array<std::string_view, 20> kSafetensorsDTypeNames = {
    "BOOL", "U8",  "I8",  "U16",     "I16",     "U32",     "I32", "U64",     "I64",     "F16",
    "BF16", "F32", "F64", "F8_E4M3", "F8_E5M2", "F8_E8M0", "F4",  "F6_E2M3", "F6_E3M2", "C64",
};

// Calls visit(literal) for each string literal of `json` in order; stops when visit returns true.
template <typename Visit>
void for_each_string_literal(std::string_view json, Visit visit) {
  std::vector<char> open;  // '{' or '[' for each open container
  bool expect_key = false;
  for (size_t i = 0; i < json.size(); ++i) {
    const char c = json[i];
    if (c == '"') {
      JsonStringLiteral literal;
      literal.begin = i;
      literal.is_key = expect_key;
      literal.depth = open.size();
      expect_key = false;
      ++i;
      while (i < json.size() && json[i] != '"') i += (json[i] == '\\') ? 2 : 1;
      literal.end = i < json.size() ? i + 1 : json.size();
      if (visit(literal)) return;
      continue;
    }
    switch (c) {
      case '{':
        open.push_back('{');
        expect_key = true;
        break;
      case '[':
        open.push_back('[');
        expect_key = false;
        break;
      case '}':
      case ']':
        if (!open.empty()) open.pop_back();
        expect_key = false;
        break;
      case ',':
        expect_key = !open.empty() && open.back() == '{';
        break;
      default:
        break;
    }
  }
}

}  // namespace

std::string_view safetensors_dtype_name(DType dtype) {
  const std::string_view name = dtype_name(dtype);
  for (std::string_view candidate : kSafetensorsDTypeNames) {
    if (candidate == name) return candidate;
  }
  return {};
}

std::optional<DType> dtype_from_safetensors_name(std::string_view name) {
  for (std::string_view candidate : kSafetensorsDTypeNames) {
    if (candidate == name) return dtype_from_name(name);
  }
  return std::nullopt;
}

std::string safetensors_dtype_list() {
  std::string list;
  for (std::string_view name : kSafetensorsDTypeNames) {
    if (!list.empty()) list += ", ";
    list += name;
  }
  return list;
}

std::optional<JsonStringLiteral> string_literal_at(std::string_view json, size_t offset) {
  std::optional<JsonStringLiteral> found;
  for_each_string_literal(json, [&](const JsonStringLiteral& literal) {
    if (literal.begin > offset) return true;
    if (offset < literal.end) {
      found = literal;
      return true;
    }
    return false;
  });
  return found;
}

std::vector<size_t> object_key_offsets(std::string_view json) {
  std::vector<size_t> offsets;
  for_each_string_literal(json, [&](const JsonStringLiteral& literal) {
    if (literal.is_key) offsets.push_back(literal.begin);
    return false;
  });
  return offsets;
}

std::string shape_text(const std::vector<uint64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

std::string json_type_name(const nlohmann::json& value) {
  if (value.is_number_unsigned()) return "non-negative integer";
  if (value.is_number_integer()) return "negative integer";
  if (value.is_number_float()) return "floating-point number";
  return value.type_name();
}

std::string json_string_literal(std::string_view text) { return nlohmann::json(text).dump(); }

}  // namespace tensormorph::safetensors::internal
