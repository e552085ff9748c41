#include "core/printable.h"


namespace tensormorph {
namespace {

void append_hex_byte(std::string& out, unsigned char byte) {
  static constexpr char kDigits[] = "0123456789ABCDEF";
  out += "\\x";
  out += kDigits[byte >> 4];
  out += kDigits[byte & 0x0F];
}

// Code points that change how a terminal or a text view shows what follows them even though they
// are valid UTF-8: C1 controls (U+0080..U+009F) and the bidirectional embeddings, overrides and
// isolates (U+202A..U+202E, U+2066..U+2069), which can make a name read as a different one.
bool is_unsafe_code_point(std::string_view sequence) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(sequence[k]); };
  if (sequence.size() == 2) return byte(0) == 0xC2 && byte(1) <= 0x9F;
  if (sequence.size() == 3 && byte(0) == 0xE2) {
    if (byte(1) == 0x80 && byte(2) >= 0xAA && byte(2) <= 0xAE) return true;
    if (byte(1) == 0x81 && byte(2) >= 0xA6 && byte(2) <= 0xA9) return true;
  }
  return false;
}

}  // namespace

size_t utf8_sequence_length(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  if (lead < 0x80) return 1;
  size_t length = 0;
  unsigned char second_min = 0x80;
  unsigned char second_max = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    length = 2;
  } else if (lead == 0xE0) {
    length = 3;
    second_min = 0xA0;  // no overlong forms
  } else if (lead == 0xED) {
    length = 3;
    second_max = 0x9F;  // no UTF-16 surrogates
  } else if (lead >= 0xE1 && lead <= 0xEF) {
    length = 3;
  } else if (lead == 0xF0) {
    length = 4;
    second_min = 0x90;
  } else if (lead >= 0xF1 && lead <= 0xF3) {
    length = 4;
  } else if (lead == 0xF4) {
    length = 4;
    second_max = 0x8F;  // nothing above U+10FFFF
  } else {
    return 0;
  }
  if (length > text.size() - i) return 0;
  if (byte(i + 1) < second_min || byte(i + 1) > second_max) return 0;
  for (size_t k = 2; k < length; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
  }
  return length;
}

std::optional<size_t> first_invalid_utf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    if (static_cast<unsigned char>(text[i]) < 0x80) {
      ++i;
      continue;
    }
    const size_t length = utf8_sequence_length(text, i);
    if (length == 0) return i;
    i += length;
  }
  return std::nullopt;
}

std::string escape_invalid_utf8(std::string_view text) {
  std::optional<size_t> bad = first_invalid_utf8(text);
  if (!bad) return std::string(text);
  std::string out(text.substr(0, *bad));
  out.reserve(text.size() + 16);
  size_t i = *bad;
  while (i < text.size()) {
    const size_t length = utf8_sequence_length(text, i);
    if (length == 0) {
      append_hex_byte(out, static_cast<unsigned char>(text[i]));
      ++i;
    } else {
      out.append(text.substr(i, length));
      i += length;
    }
  }
  return out;
}

std::string printable(std::string_view text, size_t max_bytes) {
  std::string out;
  out.reserve(text.size() < max_bytes ? text.size() + 8 : max_bytes + 32);
  size_t i = 0;
  while (i < text.size()) {
    const auto byte = static_cast<unsigned char>(text[i]);
    size_t length = utf8_sequence_length(text, i);
    if (i + (length == 0 ? 1 : length) > max_bytes) break;
    if (length == 0) {
      append_hex_byte(out, byte);
      length = 1;
    } else if (byte == '\\') {
      out += "\\\\";
    } else if (byte == '\n') {
      out += "\\n";
    } else if (byte == '\t') {
      out += "\\t";
    } else if (byte == '\r') {
      out += "\\r";
    } else if (byte < 0x20 || byte == 0x7F) {
      append_hex_byte(out, byte);
    } else if (length > 1 && is_unsafe_code_point(text.substr(i, length))) {
      for (size_t k = 0; k < length; ++k) append_hex_byte(out, static_cast<unsigned char>(text[i + k]));
    } else {
      out.append(text.substr(i, length));
    }
    i += length;
  }
  if (i < text.size()) out += "\xE2\x80\xA6 (+" + std::to_string(text.size() - i) + " bytes)";
  return out;
}

std::string quoted_name(std::string_view text, size_t max_bytes) { return "'" + printable(text, max_bytes) + "'"; }

}  // namespace tensormorph
