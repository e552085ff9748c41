#include "compute/constraints.h"

namespace tensormorph::compute {
namespace {

std::string join(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : "+") + n;
  return s;
}

void split_names(std::string_view value, std::vector<std::string>& into) {
  size_t start = 0;
  while (start <= value.size()) {
    size_t end = value.find('+', start);
    if (end == std::string_view::npos) end = value.size();
    if (end > start) into.emplace_back(value.substr(start, end - start));
    start = end + 1;
  }
}

}  // namespace

std::string Constraints::to_string() const {
  if (automatic()) return "auto";
  std::string s;
  auto add = [&](const char* key, const std::vector<std::string>& names) {
    if (!names.empty()) s += (s.empty() ? "" : ",") + std::string(key) + "=" + join(names);
  };
  add("prefer", prefer);
  add("never", never);
  add("only", only);
  return s;
}

bool backend_matches(std::string_view backend, std::string_view pattern) {
  if (backend == pattern) return true;
  return backend.size() > pattern.size() && backend.substr(0, pattern.size()) == pattern &&
         backend[pattern.size()] == ':';
}

Result<Constraints> parse_constraints(std::string_view spec) {
  Constraints c;
  if (spec.empty() || spec == "auto") return c;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t end = spec.find(',', start);
    if (end == std::string_view::npos) end = spec.size();
    std::string_view item = spec.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq + 1 == item.size()) {
      return Status::InvalidArgument("compute constraint '" + std::string(item) +
                                     "' is not key=backend (keys: prefer, never, only)");
    }
    std::string_view key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "prefer") split_names(value, c.prefer);
    else if (key == "never") split_names(value, c.never);
    else if (key == "only") split_names(value, c.only);
    else return Status::InvalidArgument("unknown compute constraint '" + std::string(key) + "' (use prefer, never, only)");
  }
  return c;
}

Constraints merge_constraints(const Constraints& base, const Constraints& override_with) {
  Constraints c = base;
  if (!override_with.prefer.empty()) c.prefer = override_with.prefer;
  if (!override_with.never.empty()) c.never = override_with.never;
  if (!override_with.only.empty()) c.only = override_with.only;
  return c;
}

}  // namespace tensormorph::compute
