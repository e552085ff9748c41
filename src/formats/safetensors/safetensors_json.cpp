// Strict JSON object parsing with key positions and duplicate-key detection (nlohmann underneath).
#include <algorithm>
#include <exception>
#include <new>
#include <unordered_set>

#include "formats/safetensors/safetensors_internal.h"

namespace tensormorph::safetensors::internal {
namespace {

using Json = nlohmann::json;

struct DuplicateKey {
  std::string key;
  std::string parent;  // enclosing top-level key; empty for a top-level duplicate
  uint64_t offset = 0;
};

// A SAX handler that numbers keys in document order (to pair them with the offsets found by
// object_key_offsets), remembers the first duplicate key (nlohmann's DOM keeps the last) and the
// first syntax error. It builds nothing: nlohmann's callback parser rescans the parent object at
// every object end, which is quadratic in the number of tensors.
class KeyObserver {
 public:
  KeyObserver(const std::vector<size_t>& key_offsets, uint64_t base_offset, KeyPositions& positions)
      : key_offsets_(key_offsets), base_offset_(base_offset), positions_(positions) {}

  bool null() { return true; }
  bool boolean(bool /*value*/) { return true; }
  bool number_integer(Json::number_integer_t /*value*/) { return true; }
  bool number_unsigned(Json::number_unsigned_t /*value*/) { return true; }
  bool number_float(Json::number_float_t /*value*/, const std::string& /*text*/) { return true; }
  bool string(std::string& /*value*/) { return true; }
  bool binary(Json::binary_t& /*value*/) { return true; }
  bool start_object(std::size_t /*elements*/) {
    ++depth_;
    open_objects_.emplace_back();
    return true;
  }
  bool end_object() {
    --depth_;
    if (!open_objects_.empty()) open_objects_.pop_back();
    return true;
  }
  bool start_array(std::size_t /*elements*/) {
    ++depth_;
    return true;
  }
  bool end_array() {
    --depth_;
    return true;
  }
  bool key(std::string& key) {
    const uint64_t offset = base_offset_ + (next_key_ < key_offsets_.size() ? key_offsets_[next_key_] : 0);
    ++next_key_;
    if (!open_objects_.empty() && !open_objects_.back().insert(key).second && !duplicate_) {
      duplicate_ = DuplicateKey{key, depth_ > 1 ? current_top_ : std::string(), offset};
    }
    if (depth_ == 1) {
      current_top_ = key;
      positions_.top.emplace(key, offset);
    } else if (depth_ == 2) {
      positions_.nested[current_top_].emplace(key, offset);
    }
    return true;
  }
  bool parse_error(std::size_t position, const std::string& /*last_token*/, const nlohmann::detail::exception& error) {
    error_position_ = position;
    error_message_ = error.what();
    return false;
  }

  const std::optional<DuplicateKey>& duplicate() const { return duplicate_; }
  size_t error_position() const { return error_position_; }
  const std::string& error_message() const { return error_message_; }

 private:
  const std::vector<size_t>& key_offsets_;
  uint64_t base_offset_;
  KeyPositions& positions_;
  size_t next_key_ = 0;
  size_t depth_ = 0;
  std::vector<std::unordered_set<std::string>> open_objects_;
  std::string current_top_;
  std::optional<DuplicateKey> duplicate_;
  size_t error_position_ = 0;
  std::string error_message_;
};

std::string hex_value(unsigned char byte) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  return std::string("0x") + kDigits[byte >> 4] + kDigits[byte & 0xF];
}

Status utf8_error(const std::filesystem::path& path, std::string_view text, uint64_t base_offset, size_t bad) {
  std::string message = path.string() + ": JSON is not valid UTF-8: byte " +
                        hex_value(static_cast<unsigned char>(text[bad])) + " at byte " +
                        std::to_string(base_offset + bad);
  if (auto literal = string_literal_at(text, bad)) {
    size_t content_end = literal->end;
    if (content_end > literal->begin + 1 && text[content_end - 1] == '"') --content_end;
    const std::string_view content = text.substr(literal->begin + 1, content_end - literal->begin - 1);
    const char* role = !literal->is_key ? "string value" : literal->depth == 1 ? "top-level key" : "key";
    message += " in the " + std::string(role) + " " + quote_name(content) + " that starts at byte " +
               std::to_string(base_offset + literal->begin);
  }
  return Status::FormatError(message);
}

std::vector<std::string> keys_by_offset(const std::unordered_map<std::string, uint64_t>& offsets) {
  std::vector<std::pair<uint64_t, const std::string*>> sorted;
  sorted.reserve(offsets.size());
  for (const auto& [key, offset] : offsets) sorted.emplace_back(offset, &key);
  std::sort(sorted.begin(), sorted.end(),
            [](const auto& a, const auto& b) { return a.first != b.first ? a.first < b.first : *a.second < *b.second; });
  std::vector<std::string> keys;
  keys.reserve(sorted.size());
  for (const auto& [offset, key] : sorted) keys.push_back(*key);
  return keys;
}

}  // namespace

uint64_t KeyPositions::of(const std::string& key) const {
  auto it = top.find(key);
  return it == top.end() ? 0 : it->second;
}

uint64_t KeyPositions::of(const std::string& key, const std::string& field) const {
  auto entry = nested.find(key);
  if (entry != nested.end()) {
    auto it = entry->second.find(field);
    if (it != entry->second.end()) return it->second;
  }
  return of(key);
}

std::vector<std::string> KeyPositions::top_keys_in_order() const { return keys_by_offset(top); }

std::vector<std::string> KeyPositions::nested_keys_in_order(const std::string& key) const {
  auto entry = nested.find(key);
  return entry == nested.end() ? std::vector<std::string>{} : keys_by_offset(entry->second);
}

Result<ParsedObject> parse_json_object(const std::filesystem::path& path, std::string_view text,
                                       uint64_t base_offset) {
  if (auto bad = first_invalid_utf8(text)) return utf8_error(path, text, base_offset, *bad);
  // Writers pad headers with trailing spaces (up to megabytes); nlohmann's lexer is slow on them and
  // trailing whitespace cannot change the meaning of the JSON.
  const size_t last = text.find_last_not_of(" \t\r\n");
  text = text.substr(0, last == std::string_view::npos ? 0 : last + 1);
  ParsedObject out;
  try {
    const std::vector<size_t> key_offsets = object_key_offsets(text);
    KeyObserver observer(key_offsets, base_offset, out.positions);
    if (!Json::sax_parse(text.begin(), text.end(), &observer)) {
      std::string what = observer.error_message();
      if (auto bracket = what.find("] "); bracket != std::string::npos) what = what.substr(bracket + 2);
      const uint64_t at = base_offset + (observer.error_position() > 0 ? observer.error_position() - 1 : 0);
      return Status::FormatError(path.string() + ": invalid JSON at byte " + std::to_string(at) + ": " + what);
    }
    if (const auto& duplicate = observer.duplicate()) {
      std::string where = duplicate->parent.empty() ? "" : " inside " + quote_name(duplicate->parent);
      return Status::FormatError(path.string() + ": duplicate key " + quote_name(duplicate->key) + where +
                                 " at byte " + std::to_string(duplicate->offset));
    }
    out.value = Json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& error) {
    return Status::FormatError(path.string() + ": invalid JSON at byte " + std::to_string(base_offset) + ": " +
                               error.what());
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted(path.string() + ": out of memory parsing " + std::to_string(text.size()) +
                                     " bytes of JSON at byte " + std::to_string(base_offset));
  }
  if (!out.value.is_object()) {
    return Status::FormatError(path.string() + ": JSON at byte " + std::to_string(base_offset) +
                               " must be an object, found " + json_type_name(out.value));
  }
  return out;
}

}  // namespace tensormorph::safetensors::internal
