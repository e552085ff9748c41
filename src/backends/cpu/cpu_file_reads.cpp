#include "backends/cpu/cpu_file_reads.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <string>

namespace tensormorph::cpu {

namespace {

constexpr size_t index_of(ReadPath path) { return path == ReadPath::kFile ? 1 : 0; }
constexpr ReadPath other(ReadPath path) { return path == ReadPath::kFile ? ReadPath::kMapping : ReadPath::kFile; }

}  // namespace

ReadPath ReadPathChooser::next(DType dtype, bool explorer) {
  const ReadPath chosen = preferred(dtype);
  if (!explorer) return chosen;
  Kind& k = kind(dtype);
  const uint64_t n = k.explorer_items.fetch_add(1, std::memory_order_relaxed);
  if (!k.warm.load(std::memory_order_relaxed)) return n % 2 == 0 ? ReadPath::kMapping : ReadPath::kFile;
  return n % kRetryEvery == kRetryEvery - 1 ? other(chosen) : chosen;
}

void ReadPathChooser::record(DType dtype, ReadPath path, uint64_t bytes, double nanoseconds) {
  if (bytes == 0 || !(nanoseconds > 0) || !std::isfinite(nanoseconds)) return;
  Kind& k = kind(dtype);
  const std::lock_guard lock(k.mutex);
  const size_t p = index_of(path);
  k.ns_per_byte[p][k.timings[p]++ % kWindow] = nanoseconds / static_cast<double>(bytes);
  if (k.timings[0] < kWarmup || k.timings[1] < kWarmup) return;
  const auto estimate = [&](size_t i) {  // the mean without the slowest
    const size_t n = std::min<uint64_t>(k.timings[i], kWindow);
    double sum = 0, slowest = 0;
    for (size_t j = 0; j < n; ++j) {
      sum += k.ns_per_byte[i][j];
      slowest = std::max(slowest, k.ns_per_byte[i][j]);
    }
    return (sum - slowest) / static_cast<double>(n - 1);
  };
  const size_t chosen = k.choice.load(std::memory_order_relaxed);
  const double margin = chosen == 0 ? kFileMargin : 0.0;
  if (estimate(1 - chosen) < estimate(chosen) * (1 - margin)) {
    k.choice.store(static_cast<uint8_t>(1 - chosen), std::memory_order_relaxed);
  }
  k.warm.store(true, std::memory_order_relaxed);
}

ReadPath ReadPathChooser::preferred(DType dtype) const {
  const Kind& k = kind(dtype);
  if (!k.warm.load(std::memory_order_relaxed)) return ReadPath::kMapping;
  return k.choice.load(std::memory_order_relaxed) == 0 ? ReadPath::kMapping : ReadPath::kFile;
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
