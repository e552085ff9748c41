// Showing bytes that come from a file (tensor names, metadata, header text) in messages, tables
// and JSON without letting them act on a terminal or break an encoder: one rule for every reader
// and every command.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace tensormorph {

/// `text` made safe for a terminal and a log line: valid UTF-8 is kept, a backslash becomes "\\",
/// newline, tab and carriage return become "\n", "\t", "\r", every other control character (C0,
/// DEL, and the C1 range U+0080..U+009F, whose 8-bit forms terminals also obey), the Unicode
/// bidirectional overrides and isolates, and every byte that is not part of well-formed UTF-8
/// become "\xNN" per byte. At most `max_bytes` bytes of `text` are shown (never splitting a
/// character); the rest is counted in a suffix "… (+N bytes)". Reversible: "\xNN" is always the
/// byte NN, since a literal backslash is doubled.
std::string printable(std::string_view text, size_t max_bytes = 200);

/// printable(text, max_bytes) in single quotes, for naming a tensor or key inside a message.
std::string quoted_name(std::string_view text, size_t max_bytes = 200);

/// `text` with each byte that is not part of well-formed UTF-8 (RFC 3629: no overlong forms, no
/// surrogates, nothing above U+10FFFF) replaced by the four characters "\xNN"; everything else,
/// control characters included, unchanged. Returns `text` itself when it is already valid.
std::string escape_invalid_utf8(std::string_view text);

/// Offset of the first byte of `text` that is not part of well-formed UTF-8, or nullopt.
std::optional<size_t> first_invalid_utf8(std::string_view text);

/// Length of the well-formed UTF-8 sequence starting at `text[i]` (1 to 4), or 0 when the bytes
/// there are ill-formed; `i` must be less than `text.size()`.
size_t utf8_sequence_length(std::string_view text, size_t i);

}  // namespace tensormorph
