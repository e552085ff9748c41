#include "core/atomic_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <ctime>

namespace tensormorph {
namespace fs = std::filesystem;

namespace {

std::string errno_text() { return std::strerror(errno); }

std::string temporary_prefix(const fs::path& target) { return "." + target.filename().string() + ".tmp."; }

fs::path directory_of(const fs::path& target) {
  return target.parent_path().empty() ? fs::path(".") : target.parent_path();
}

/// True when `text` is one or more decimal digits; their value in `value`.
bool parse_decimal(std::string_view text, uint64_t& value) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return !text.empty() && ec == std::errc() && end == text.data() + text.size();
}

/// The process id in a temporary's name ".<name>.tmp.<pid>.<n>", or 0 when it is not one.
pid_t writer_pid(std::string_view name, std::string_view prefix) {
  if (name.substr(0, prefix.size()) != prefix) return 0;
  const std::string_view rest = name.substr(prefix.size());
  const size_t dot = rest.find('.');
  uint64_t pid = 0, sequence = 0;
  if (dot == std::string_view::npos || !parse_decimal(rest.substr(0, dot), pid) ||
      !parse_decimal(rest.substr(dot + 1), sequence) || pid == 0 || pid > INT32_MAX) {
    return 0;
  }
  return static_cast<pid_t>(pid);
}

bool process_gone(pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; }

/// Why `target` cannot be created in `dir` (errno from the failed open), in the user's terms: the
/// temporary's name is an implementation detail the user never chose.
Status cannot_create(const fs::path& target, const fs::path& dir) {
  const int error = errno;
  if (error == ENOENT || error == ENOTDIR) {
    if (Status missing = check_output_directory(target); !missing.ok()) return missing;
  }
  return Status::IoError(target.string() + ": cannot write in the directory " + dir.string() + ": " +
                         std::strerror(error));
}

}  // namespace

StaleTemporaries remove_stale_temporaries(const fs::path& target) {
  constexpr time_t kQuietSeconds = 60;
  StaleTemporaries removed;
  const std::string prefix = temporary_prefix(target);
  const fs::path dir = directory_of(target);
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) return removed;
  const time_t now = std::time(nullptr);
  for (const fs::directory_entry& entry : it) {
    const std::string name = entry.path().filename().string();
    const pid_t pid = writer_pid(name, prefix);
    if (pid == 0 || pid == ::getpid()) continue;
    struct stat st {};
    if (::lstat(entry.path().c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) continue;
    if (now - st.st_mtime < kQuietSeconds || !process_gone(pid)) continue;
    if (::unlink(entry.path().c_str()) == 0) {
      removed.files += 1;
      removed.bytes += static_cast<uint64_t>(st.st_size);
    }
  }
  return removed;
}

AtomicOutput::AtomicOutput(fs::path destination, fs::path writing, int fd, bool in_place)
    : destination_(std::move(destination)), writing_(std::move(writing)), fd_(fd), in_place_(in_place) {}

AtomicOutput::AtomicOutput(AtomicOutput&& other) noexcept
    : destination_(std::move(other.destination_)),
      writing_(std::move(other.writing_)),
      fd_(other.fd_),
      in_place_(other.in_place_),
      committed_(other.committed_) {
  other.fd_ = -1;
  other.committed_ = true;  // the moved-from object owns nothing
}

AtomicOutput::~AtomicOutput() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_ && !in_place_) ::unlink(writing_.c_str());
}

Result<AtomicOutput> AtomicOutput::open(const fs::path& target) {
  if (target.filename().empty()) return Status::InvalidArgument(target.string() + ": not a file path");
  fs::path destination = target;
  struct stat st {};
  if (::lstat(target.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    // Replace the file the link names, not the link.
    std::error_code ec;
    destination = fs::weakly_canonical(target, ec);
    if (ec) return Status::IoError(target.string() + ": cannot follow the symbolic link: " + ec.message());
  }
  const bool exists = ::stat(destination.c_str(), &st) == 0;
  if (exists && S_ISDIR(st.st_mode)) return Status::InvalidArgument(target.string() + ": is a directory");
  if (exists && !S_ISREG(st.st_mode)) {
    // A FIFO, a terminal or a device: written as it is. Renaming a file over it would replace it.
    const int fd = ::open(destination.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) return Status::IoError(target.string() + ": cannot open for writing: " + errno_text());
    return AtomicOutput(destination, destination, fd, true);
  }
  static std::atomic<uint64_t> sequence{0};
  const fs::path temporary = directory_of(destination) / (temporary_prefix(destination) + std::to_string(::getpid()) +
                                                          "." + std::to_string(sequence.fetch_add(1)));
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) return cannot_create(target, directory_of(destination));
  return AtomicOutput(destination, temporary, fd, false);
}

Status AtomicOutput::write(std::span<const std::byte> bytes) {
  // Large tensors go to the kernel in pieces so one write() never has to handle gigabytes.
  constexpr size_t kChunkBytes = size_t{64} << 20;
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd_, bytes.data(), std::min(bytes.size(), kChunkBytes));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::IoError(writing_.string() + ": write failed: " + (n < 0 ? errno_text() : "no progress"));
    bytes = bytes.subspan(static_cast<size_t>(n));
  }
  return Status::Ok();
}

Status AtomicOutput::commit() {
  if (fd_ < 0) return Status::Internal(destination_.string() + ": output committed twice");
  if (!in_place_ && ::fsync(fd_) != 0) return Status::IoError(writing_.string() + ": fsync failed: " + errno_text());
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) return Status::IoError(writing_.string() + ": close failed: " + errno_text());
  if (!in_place_ && ::rename(writing_.c_str(), destination_.c_str()) != 0) {
    return Status::IoError(destination_.string() + ": cannot rename " + writing_.string() + " into place: " +
                           errno_text());
  }
  committed_ = true;
  return Status::Ok();
}

Status check_output_directory(const fs::path& target) {
  const fs::path dir = directory_of(target);
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    return Status::IoError(target.string() + ": cannot write: the directory " + dir.string() + " does not exist");
  }
  if (!S_ISDIR(st.st_mode)) {
    return Status::IoError(target.string() + ": cannot write: " + dir.string() + " is not a directory");
  }
  return Status::Ok();
}

Status write_file_atomically(const fs::path& target, std::span<const std::byte> bytes) {
  TM_ASSIGN_OR_RETURN(AtomicOutput out, AtomicOutput::open(target));
  TM_RETURN_IF_ERROR(out.write(bytes));
  return out.commit();
}

}  // namespace tensormorph
