#include "tensormorph/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace tensormorph {
namespace {

std::string errno_text() { return std::strerror(errno); }

// Closes a file descriptor when the scope ends.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

Result<int> open_regular(const std::filesystem::path& path, uint64_t* size) {
  // O_NONBLOCK: opening a FIFO (or a device) for reading would otherwise wait for a writer
  // forever, before fstat could tell that it is no checkpoint. Regular files ignore the flag.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound(path.string() + ": no such file");
    return Status::IoError(path.string() + ": cannot open: " + errno_text());
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    return Status::IoError(path.string() + ": cannot stat: " + errno_text());
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    const char* kind = S_ISFIFO(st.st_mode) ? "a FIFO"
                       : S_ISDIR(st.st_mode) ? "a directory"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                       : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                                                                    : "a special file";
    return Status::InvalidArgument(path.string() + ": is " + kind + ", not a regular file");
  }
  *size = static_cast<uint64_t>(st.st_size);
  return fd;
}

}  // namespace

Result<std::shared_ptr<const MappedFile>> MappedFile::open(const std::filesystem::path& path) {
  uint64_t size = 0;
  TM_ASSIGN_OR_RETURN(int fd, open_regular(path, &size));
  // The descriptor stays open with the mapping: the host reads what the page cache lacks through it.
  FdCloser closer{fd};
  const void* data = nullptr;
  if (size > 0) {
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return Status::IoError(path.string() + ": cannot map: " + errno_text());
#ifdef MADV_HUGEPAGE
    // Checkpoints are read in long sequential sweeps: with this hint a page-cache miss reads ahead
    // in 2 MiB folios, which are then mapped with one fault each (small pages cost a fault per
    // 64 KiB and a TLB miss per 4 KiB). Purely advisory: failure changes nothing.
    (void)::madvise(p, size, MADV_HUGEPAGE);
#endif
    data = p;
  }
  closer.fd = -1;
  return std::shared_ptr<const MappedFile>(new MappedFile(path, fd, data, size));
}

Result<std::shared_ptr<const MappedFile>> MappedFile::in_memory(const std::filesystem::path& label, uint64_t size,
                                                                const std::function<Status(std::span<std::byte>)>& fill) {
  int fd = ::memfd_create("tensormorph-gathered", MFD_CLOEXEC);
  if (fd < 0) return Status::IoError(label.string() + ": cannot create an in-memory file: " + errno_text());
  FdCloser closer{fd};
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    return Status::ResourceExhausted(label.string() + ": cannot reserve " + std::to_string(size) + " bytes of memory: " + errno_text());
  }
  const void* data = nullptr;
  if (size > 0) {
    void* writable = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (writable == MAP_FAILED) return Status::ResourceExhausted(label.string() + ": cannot map " + std::to_string(size) + " bytes: " + errno_text());
    const Status filled = fill({static_cast<std::byte*>(writable), size});
    ::munmap(writable, size);
    TM_RETURN_IF_ERROR(filled);
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) return Status::IoError(label.string() + ": cannot map: " + errno_text());
    data = p;
  }
  closer.fd = -1;
  return std::shared_ptr<const MappedFile>(new MappedFile(label, fd, data, size));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<void*>(data_), size_);
  ::close(descriptor_);
}

Result<uint64_t> file_size_of(const std::filesystem::path& path) {
  uint64_t size = 0;
  TM_ASSIGN_OR_RETURN(int fd, open_regular(path, &size));
  ::close(fd);
  return size;
}

Result<std::string> read_file_range(const std::filesystem::path& path, uint64_t offset, uint64_t length) {
  uint64_t size = 0;
  TM_ASSIGN_OR_RETURN(int fd, open_regular(path, &size));
  FdCloser closer{fd};
  uint64_t end = 0;
  if (__builtin_add_overflow(offset, length, &end) || end > size) {
    return Status::FormatError(path.string() + ": file is truncated: needs bytes [" + std::to_string(offset) +
                               ", " + std::to_string(offset + length) + ") but has " + std::to_string(size));
  }
  std::string out(length, '\0');
  uint64_t done = 0;
  while (done < length) {
    ssize_t n = ::pread(fd, out.data() + done, length - done, static_cast<off_t>(offset + done));
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::IoError(path.string() + ": read at offset " + std::to_string(offset + done) +
                             " failed: " + errno_text());
    }
    if (n == 0) {
      return Status::FormatError(path.string() + ": file ended at offset " + std::to_string(offset + done) +
                                 " while reading " + std::to_string(length) + " bytes at " +
                                 std::to_string(offset));
    }
    done += static_cast<uint64_t>(n);
  }
  return out;
}

}  // namespace tensormorph
