#include "cli/format_util.h"

#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/printable.h"

namespace tensormorph::cli {
namespace {

// A copy of `j` whose keys and string values are valid UTF-8.
nlohmann::ordered_json with_valid_utf8(const nlohmann::ordered_json& j) {
  if (j.is_string()) return escape_invalid_utf8(j.get_ref<const std::string&>());
  if (j.is_array()) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const auto& item : j) out.push_back(with_valid_utf8(item));
    return out;
  }
  if (j.is_object()) {
    nlohmann::ordered_json out = nlohmann::ordered_json::object();
    for (const auto& [key, value] : j.items()) out[escape_invalid_utf8(key)] = with_valid_utf8(value);
    return out;
  }
  return j;
}

}  // namespace

std::string human_bytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024.0 && unit < 5) {
    value /= 1024.0;
    ++unit;
  }
  char buf[32];
  if (unit == 0) std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
  else std::snprintf(buf, sizeof buf, "%.2f %s", value, kUnits[unit]);
  return buf;
}

std::string human_count(uint64_t count) {
  static const char* kUnits[] = {"", "K", "M", "B", "T"};
  double value = static_cast<double>(count);
  int unit = 0;
  while (value >= 1000.0 && unit < 4) {
    value /= 1000.0;
    ++unit;
  }
  char buf[32];
  if (unit == 0) std::snprintf(buf, sizeof buf, "%llu", static_cast<unsigned long long>(count));
  else std::snprintf(buf, sizeof buf, "%.2f%s", value, kUnits[unit]);
  return buf;
}

std::string grouped_count(uint64_t count) {
  const std::string digits = std::to_string(count);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string format_double(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, value);
  return ec == std::errc() ? std::string(buf, end) : std::string("?");
}

std::string json_text(const nlohmann::ordered_json& j, int indent) {
  // Nearly every document is valid UTF-8: dump it as it is and copy only when the encoder refuses.
  try {
    return j.dump(indent);
  } catch (const nlohmann::json::type_error&) {
  }
  return with_valid_utf8(j).dump(indent);
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\n\r") == std::string::npos) return text;
  std::string q = "\"";
  for (char c : text) q += (c == '"') ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

}  // namespace tensormorph::cli
