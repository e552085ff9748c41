#include "backends/cpu/cpu_file_reads.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace tensormorph::cpu {

namespace {

constexpr size_t index_of(ReadPath path) { return path == ReadPath::kFile ? 1 : 0; }
constexpr ReadPath other(ReadPath path) { return path == ReadPath::kFile ? ReadPath::kMapping : ReadPath::kFile; }

}  // namespace

ReadPath ReadPathChooser::next(DType dtype) {
  Kind& k = kind(dtype);
  const uint64_t n = k.items.fetch_add(1, std::memory_order_relaxed);
  const bool warm = k.paths[0].timings.load(std::memory_order_relaxed) >= kWarmup &&
                    k.paths[1].timings.load(std::memory_order_relaxed) >= kWarmup;
  if (!warm) return n % 2 == 0 ? ReadPath::kMapping : ReadPath::kFile;
  const ReadPath best = preferred(dtype);
  return n % kRetryEvery == kRetryEvery - 1 ? other(best) : best;
}

void ReadPathChooser::record(DType dtype, ReadPath path, uint64_t bytes, double nanoseconds) {
  if (bytes == 0 || !(nanoseconds > 0)) return;
  PathTimes& times = kind(dtype).paths[index_of(path)];
  const double sample = nanoseconds / static_cast<double>(bytes);
  const double old = times.ns_per_byte.load(std::memory_order_relaxed);
  times.ns_per_byte.store(old == 0 ? sample : old + (sample - old) / 8, std::memory_order_relaxed);
  times.timings.fetch_add(1, std::memory_order_relaxed);
}

ReadPath ReadPathChooser::preferred(DType dtype) const {
  const Kind& k = kind(dtype);
  if (k.paths[0].timings.load(std::memory_order_relaxed) < kWarmup ||
      k.paths[1].timings.load(std::memory_order_relaxed) < kWarmup) {
    return ReadPath::kMapping;
  }
  const double mapping = k.paths[index_of(ReadPath::kMapping)].ns_per_byte.load(std::memory_order_relaxed);
  const double file = k.paths[index_of(ReadPath::kFile)].ns_per_byte.load(std::memory_order_relaxed);
  return file < mapping ? ReadPath::kFile : ReadPath::kMapping;
}

ReadPathChooser& ReadPathChooser::instance() {
  static ReadPathChooser chooser;
  return chooser;
}

Status copy_from_file(int descriptor, uint64_t offset, std::byte* dest, uint64_t bytes) {
  uint64_t done = 0;
  while (done < bytes) {
    const ssize_t got = ::pread(descriptor, dest + done, bytes - done, static_cast<off_t>(offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      return Status::IoError("cannot read " + std::to_string(bytes - done) + " bytes at file offset " +
                             std::to_string(offset + done) + ": " + std::strerror(errno));
    }
    if (got == 0) {
      return Status::IoError("the file ends at offset " + std::to_string(offset + done) + ", before the " +
                             std::to_string(bytes) + " bytes at offset " + std::to_string(offset) +
                             " (it shrank after it was opened)");
    }
    done += static_cast<uint64_t>(got);
  }
  return Status::Ok();
}

}  // namespace tensormorph::cpu
