#include "core/cache_dir.h"

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace tensormorph {
namespace {

namespace fs = std::filesystem;

/// The home directory the password database gives this user ("" when it has none).
std::string password_home() {
  const struct passwd* entry = ::getpwuid(::geteuid());
  return entry != nullptr && entry->pw_dir != nullptr ? entry->pw_dir : "";
}

/// True when `dir` is a real directory (not a link) that only this user can enter.
bool private_directory(const fs::path& dir) {
  struct stat st {};
  return ::lstat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::geteuid() &&
         (st.st_mode & 077) == 0;
}

/// A directory under /tmp that only this user can reach: the shared /tmp must never hold an index
/// or a calibration that another user could plant or replace.
fs::path private_temporary_dir() {
  const fs::path fixed = "/tmp/tensormorph-cache-" + std::to_string(::geteuid());
  ::mkdir(fixed.c_str(), 0700);
  if (private_directory(fixed)) return fixed;
  // Taken by someone else, or with the wrong mode: a fresh directory of this process's own.
  std::string pattern = "/tmp/tensormorph-cache-XXXXXX";
  if (::mkdtemp(pattern.data()) != nullptr) return pattern;
  return fixed / "unusable";  // writes there fail, and the index is then computed in memory
}

}  // namespace

fs::path user_cache_dir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) return fs::path(xdg) / "tensormorph";
  const char* home = std::getenv("HOME");
  if (home && *home) return fs::path(home) / ".cache/tensormorph";
  if (const std::string pw = password_home(); !pw.empty() && pw != "/") return fs::path(pw) / ".cache/tensormorph";
  return private_temporary_dir() / "tensormorph";
}

}  // namespace tensormorph
