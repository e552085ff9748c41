#include "formats/pointer_file.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "core/printable.h"
#include "tensormorph/mapped_file.h"

namespace tensormorph {

namespace fs = std::filesystem;

Result<std::optional<std::string>> read_pointer_file(const fs::path& file, uint64_t max_bytes, std::string_view expected) {
  std::error_code ec;
  if (!fs::is_regular_file(file, ec)) return std::optional<std::string>();
  TM_ASSIGN_OR_RETURN(const uint64_t size, file_size_of(file));
  if (size > max_bytes) {
    return Status::FormatError(file.string() + ": " + std::to_string(size) + " bytes; expected " + std::string(expected));
  }
  TM_ASSIGN_OR_RETURN(std::string text, read_file_range(file, 0, size));
  const auto blank = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  const auto first = std::find_if_not(text.begin(), text.end(), blank);
  const auto last = std::find_if_not(text.rbegin(), text.rend(), blank).base();
  return std::optional<std::string>(first < last ? std::string(first, last) : std::string());
}

Result<std::optional<std::string>> latest_checkpointed_iteration(const fs::path& directory) {
  const fs::path file = directory / "latest_checkpointed_iteration.txt";
  TM_ASSIGN_OR_RETURN(std::optional<std::string> text, read_pointer_file(file, 64, "an iteration number"));
  if (!text || *text == "release") return text;
  if (text->empty() || text->size() > 18 || !std::all_of(text->begin(), text->end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return Status::FormatError(file.string() + ": holds " + quoted_name(*text, 40) + "; expected an iteration number or 'release'");
  }
  return text;
}

std::string iteration_directory_name(const std::string& digits) {
  char name[32];
  std::snprintf(name, sizeof name, "iter_%07llu", static_cast<unsigned long long>(std::stoull(digits)));
  return name;
}

}  // namespace tensormorph
