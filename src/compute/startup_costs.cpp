#include "compute/startup_costs.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/cache_dir.h"

namespace tensormorph::compute {
namespace {

}  // namespace

StartupCosts::StartupCosts(std::filesystem::path file)
    : file_(file.empty() ? user_cache_dir() / "device-startup.json" : std::move(file)) {}

void StartupCosts::load_locked() {
  if (loaded_) return;
  loaded_ = true;
  std::ifstream in(file_);
  if (!in) return;
  std::stringstream text;
  text << in.rdbuf();
  const auto j = nlohmann::json::parse(text.str(), nullptr, false);
  if (!j.is_object()) return;
  for (const auto& [key, value] : j.items()) {
    if (value.is_number() && value.get<double>() > 0) costs_[key] = value.get<double>();
  }
}

double StartupCosts::startup_ns(const std::string& key) {
  std::lock_guard lock(mutex_);
  load_locked();
  auto it = costs_.find(key);
  return it == costs_.end() ? kUnknownStartupNs : it->second;
}

void StartupCosts::record(const std::string& key, double nanoseconds) {
  std::lock_guard lock(mutex_);
  load_locked();
  costs_[key] = nanoseconds;
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : costs_) j[k] = v;
  const std::string text = j.dump(2) + "\n";
  std::error_code ec;
  std::filesystem::create_directories(file_.parent_path(), ec);
  (void)write_file_atomically(file_, std::as_bytes(std::span(text.data(), text.size())));
}

}  // namespace tensormorph::compute
