#include "backends/cuda/gpu_calibration.h"

#include <array>
#include <charconv>
#include <chrono>
#include <cmath>
#include <fstream>
#include <span>
#include <system_error>
#include <utility>
#include <vector>

#include "core/atomic_file.h"
#include "core/cache_dir.h"

namespace tensormorph::gpu {
namespace {

/// The first line of every calibration file; a new layout changes the number.
constexpr std::string_view kHeader = "tensormorph gpu link calibration 1";
/// A calibration file is a few hundred bytes; anything much larger is not one.
constexpr std::streamsize kMaxFileBytes = 4096;
/// Rates above this (GB/s) are no measurement of any link or memory.
constexpr double kMaxGbps = 1e7;

/// One field of the identity line: a newline or the separator cannot forge another field or line.
std::string field(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c == '\n' || c == '\r' || c == '|') c = ' ';
  }
  return out;
}

std::string identity_line(const DeviceIdentity& d) {
  return "device " + field(d.uuid) + " | " + field(d.name) + " | pci " + field(d.pci) + " | memory " +
         std::to_string(d.memory_bytes) + " | driver " + std::to_string(d.driver_version) + " | runtime " +
         std::to_string(d.runtime_version) + " | module " + field(d.module_version) + " | settings " +
         field(d.settings);
}

/// The rate fields in file order.
std::array<std::pair<std::string_view, double LinkRates::*>, 6> rate_fields() {
  return {{{"h2d_pinned", &LinkRates::h2d_pinned},
           {"h2d_pageable", &LinkRates::h2d_pageable},
           {"h2d_staged", &LinkRates::h2d_staged},
           {"d2h_pinned", &LinkRates::d2h_pinned},
           {"d2h_pageable", &LinkRates::d2h_pageable},
           {"device_read", &LinkRates::device_read}}};
}

/// Shortest text that reads back as exactly `v` (no locale involved).
std::string number_text(double v) {
  std::array<char, 64> buffer{};
  const auto result = std::to_chars(buffer.data(), buffer.data() + buffer.size(), v);
  return std::string(buffer.data(), result.ptr);
}

/// The value of a "key value" line when its key is `key` and the whole value parses.
template <typename T>
std::optional<T> keyed_value(std::string_view line, std::string_view key) {
  if (line.size() <= key.size() + 1 || line.substr(0, key.size()) != key || line[key.size()] != ' ') {
    return std::nullopt;
  }
  const std::string_view text = line.substr(key.size() + 1);
  T value{};
  const auto result = std::from_chars(text.data(), text.data() + text.size(), value);
  if (result.ec != std::errc() || result.ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace

std::filesystem::path link_calibration_dir(std::string_view vendor) {
  return user_cache_dir() / (std::string(vendor) + "-calibration");
}

std::filesystem::path link_calibration_path(const std::filesystem::path& dir, const DeviceIdentity& device) {
  std::string name;
  for (const char c : device.uuid) {
    const bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    if (hex || c == '-') name += c;
  }
  if (name.empty()) name = "unidentified";
  return dir / name;
}

std::optional<LinkRates> remembered_link_rates(const std::filesystem::path& path, const DeviceIdentity& device,
                                               int64_t now_unix) {
  // Only a regular file is read: a FIFO planted there would block the start forever.
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string text(static_cast<size_t>(kMaxFileBytes) + 1, '\0');
  in.read(text.data(), kMaxFileBytes + 1);
  const std::streamsize got = in.gcount();
  if (got <= 0 || got > kMaxFileBytes) return std::nullopt;
  text.resize(static_cast<size_t>(got));
  std::vector<std::string_view> lines;
  for (size_t start = 0; start < text.size();) {
    const size_t end = text.find('\n', start);
    if (end == std::string::npos) return std::nullopt;  // every line ends: a cut-off file is refused
    lines.push_back(std::string_view(text).substr(start, end - start));
    start = end + 1;
  }
  const auto fields = rate_fields();
  if (lines.size() != 2 + fields.size() + 1) return std::nullopt;
  if (lines[0] != kHeader || lines[1] != identity_line(device)) return std::nullopt;
  LinkRates rates;
  for (size_t i = 0; i < fields.size(); ++i) {
    const auto value = keyed_value<double>(lines[2 + i], fields[i].first);
    if (!value || !std::isfinite(*value) || *value <= 0 || *value > kMaxGbps) return std::nullopt;
    rates.*fields[i].second = *value;
  }
  const auto measured = keyed_value<int64_t>(lines.back(), "measured_unix");
  if (!measured || *measured > now_unix || now_unix - *measured >= kLinkCalibrationLifetimeSeconds) {
    return std::nullopt;
  }
  rates.measured = true;
  return rates;
}

Status remember_link_rates(const std::filesystem::path& path, const DeviceIdentity& device, const LinkRates& rates,
                           int64_t now_unix) {
  for (const auto& [name, member] : rate_fields()) {
    const double v = rates.*member;
    if (!std::isfinite(v) || v <= 0 || v > kMaxGbps) {
      return Status::InvalidArgument("link calibration: " + std::string(name) + " is not a rate to remember");
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(path.parent_path(), ec);
  if (ec) return Status::IoError("cannot create " + path.parent_path().string() + ": " + ec.message());
  // Something other than a regular file there (a FIFO, a device) would be written in place.
  if (const auto status = std::filesystem::status(path, ec); std::filesystem::exists(status) &&
                                                            !std::filesystem::is_regular_file(status)) {
    return Status::InvalidArgument(path.string() + " is not a regular file: not replaced");
  }
  (void)remove_stale_temporaries(path);  // an interrupted writer's leftovers
  std::string text = std::string(kHeader) + "\n" + identity_line(device) + "\n";
  for (const auto& [name, member] : rate_fields()) text += std::string(name) + " " + number_text(rates.*member) + "\n";
  text += "measured_unix " + std::to_string(now_unix) + "\n";
  return write_file_atomically(path, std::as_bytes(std::span(text.data(), text.size())));
}

int64_t unix_now_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace tensormorph::gpu
