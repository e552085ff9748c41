#include "core/cache_dir.h"

#include <cstdlib>

namespace tensormorph {

std::filesystem::path user_cache_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  const char* home = std::getenv("HOME");
  const std::filesystem::path cache =
      xdg && *xdg ? std::filesystem::path(xdg) : std::filesystem::path(home && *home ? home : "/tmp") / ".cache";
  return cache / "tensormorph";
}

}  // namespace tensormorph
