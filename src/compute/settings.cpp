#include "compute/settings.h"

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"

namespace tensormorph::compute {
namespace {

namespace fs = std::filesystem;

Result<uint64_t> parse_bytes(const std::string& text) {
  // Accepts plain bytes or a K/M/G/T suffix (binary units).
  if (text.empty()) return Status::InvalidArgument("empty size");
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (...) {
    return Status::InvalidArgument("'" + text + "' is not a size (e.g. 512M, 8G)");
  }
  std::string unit = text.substr(used);
  double scale = 1;
  if (unit == "" || unit == "B") scale = 1;
  else if (unit == "K" || unit == "KiB") scale = 1024.0;
  else if (unit == "M" || unit == "MiB") scale = 1024.0 * 1024;
  else if (unit == "G" || unit == "GiB") scale = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "TiB") scale = 1024.0 * 1024 * 1024 * 1024;
  else return Status::InvalidArgument("'" + text + "': unknown size unit '" + unit + "' (use K, M, G, T)");
  if (value < 0) return Status::InvalidArgument("'" + text + "': size must not be negative");
  return static_cast<uint64_t>(value * scale);
}

Result<double> parse_seconds(const std::string& text) {
  if (text == "off") return 0.0;
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (...) {
    return Status::InvalidArgument("'" + text + "' is not a time (e.g. 30s, 500ms, 2m, off)");
  }
  const std::string unit = text.substr(used);
  double scale = 0;
  if (unit == "" || unit == "s") scale = 1;
  else if (unit == "ms") scale = 1e-3;
  else if (unit == "m" || unit == "min") scale = 60;
  else if (unit == "h") scale = 3600;
  else return Status::InvalidArgument("'" + text + "': unknown time unit '" + unit + "' (use ms, s, m, h)");
  if (!(value >= 0) || !std::isfinite(value)) return Status::InvalidArgument("'" + text + "': a time must be 0 or more");
  return value * scale;
}

std::string seconds_text(double seconds) {
  if (seconds <= 0) return "off";
  std::ostringstream out;
  out << seconds << "s";
  return out.str();
}

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::stringstream ss(text);
  std::string part;
  while (std::getline(ss, part, sep)) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

}  // namespace

fs::path settings_path() {
  if (const char* explicit_path = std::getenv("TENSORMORPH_CONFIG"); explicit_path && *explicit_path) {
    return explicit_path;
  }
  if (const char* xdg = std::getenv("XDG_CONFIG_HOME"); xdg && *xdg) return fs::path(xdg) / "tensormorph/settings.json";
  const char* home = std::getenv("HOME");
  return fs::path(home && *home ? home : ".") / ".config/tensormorph/settings.json";
}

Result<Settings> load_settings(const fs::path& path) {
  Settings s;
  std::error_code ec;
  if (!fs::exists(path, ec)) return s;
  // A FIFO or device would block or never end; settings are a small regular file.
  if (!fs::is_regular_file(path, ec)) return Status::InvalidArgument(path.string() + ": settings file is not a regular file");
  std::ifstream in(path);
  if (!in) return Status::IoError(path.string() + ": cannot read settings");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
    if (j.contains("compute")) {
      const auto& c = j["compute"];
      s.constraints.prefer = c.value("prefer", std::vector<std::string>{});
      s.constraints.never = c.value("never", std::vector<std::string>{});
      s.constraints.only = c.value("only", std::vector<std::string>{});
      s.memory_budget_bytes = c.value("memory_budget_bytes", uint64_t{0});
      s.time_budget_seconds = c.value("time_budget_seconds", 0.0);
      if (!(s.time_budget_seconds >= 0) || !std::isfinite(s.time_budget_seconds)) {
        return Status::FormatError(path.string() + ": compute.time_budget_seconds must be 0 or more");
      }
      s.device_cache_bytes = c.value("device_cache_bytes", s.device_cache_bytes);
      s.split = c.value("split", s.split);
    }
    if (j.contains("plugins")) s.plugin_path = j["plugins"].value("path", std::vector<std::string>{});
  } catch (const nlohmann::json::exception& e) {
    return Status::FormatError(path.string() + ": malformed settings file: " + e.what() +
                               " (fix or delete it; defaults apply without it)");
  }
  return s;
}

Status save_settings(const fs::path& path, const Settings& s) {
  nlohmann::ordered_json j;
  j["compute"] = {{"prefer", s.constraints.prefer},
                  {"never", s.constraints.never},
                  {"only", s.constraints.only},
                  {"memory_budget_bytes", s.memory_budget_bytes},
                  {"time_budget_seconds", s.time_budget_seconds},
                  {"device_cache_bytes", s.device_cache_bytes},
                  {"split", s.split}};
  j["plugins"] = {{"path", s.plugin_path}};
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec) return Status::IoError(path.parent_path().string() + ": cannot create: " + ec.message());
  const std::string text = j.dump(2) + "\n";
  TM_RETURN_IF_ERROR(write_file_atomically(path, std::as_bytes(std::span(text))));
  return Status::Ok();
}

Result<std::string> get_setting(const Settings& s, const std::string& key) {
  if (key == "compute") return s.constraints.to_string();
  if (key == "compute.memory_budget") return std::to_string(s.memory_budget_bytes);
  if (key == "compute.time_budget") return seconds_text(s.time_budget_seconds);
  if (key == "compute.device_cache") return std::to_string(s.device_cache_bytes);
  if (key == "compute.split") return std::string(s.split ? "auto" : "off");
  if (key == "plugins.path") {
    std::string joined;
    for (const auto& p : s.plugin_path) joined += (joined.empty() ? "" : ":") + p;
    return joined;
  }
  return Status::InvalidArgument("unknown setting '" + key +
                                 "' (known: compute, compute.memory_budget, compute.time_budget, compute.device_cache, "
                                 "compute.split, plugins.path)");
}

Status set_setting(Settings& s, const std::string& key, const std::string& value) {
  if (key == "compute") {
    TM_ASSIGN_OR_RETURN(s.constraints, parse_constraints(value));
    return Status::Ok();
  }
  if (key == "compute.memory_budget") {
    TM_ASSIGN_OR_RETURN(s.memory_budget_bytes, parse_bytes(value));
    return Status::Ok();
  }
  if (key == "compute.time_budget") {
    TM_ASSIGN_OR_RETURN(s.time_budget_seconds, parse_seconds(value));
    return Status::Ok();
  }
  if (key == "compute.device_cache") {
    TM_ASSIGN_OR_RETURN(s.device_cache_bytes, parse_bytes(value));
    return Status::Ok();
  }
  if (key == "compute.split") {
    if (value != "auto" && value != "off") {
      return Status::InvalidArgument("compute.split is auto (split an operation across backends when the model says "
                                     "it pays) or off, not '" + value + "'");
    }
    s.split = value == "auto";
    return Status::Ok();
  }
  if (key == "plugins.path") {
    s.plugin_path = split(value, ':');
    return Status::Ok();
  }
  return get_setting(s, key).status();
}

}  // namespace tensormorph::compute
