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

ReadPathChooser::Pick ReadPathChooser::next(DType dtype, bool explorer) {
  const ReadPath chosen = preferred(dtype);
  if (!explorer) return {chosen, false};
  Kind& k = kind(dtype);
  const std::lock_guard lock(k.mutex);
  const uint64_t n = k.explorer_items++;
  if (n < kSettle) return {ReadPath::kMapping, false};
  if (!k.warm.load(std::memory_order_relaxed)) {
    return {(n - kSettle) % 2 == 0 ? ReadPath::kMapping : ReadPath::kFile, true};
  }
  if (k.burst_left > 0) return {other(chosen), true};
  if (n < k.next_check) return {chosen, true};
  k.check_gap = std::min(2 * k.check_gap, kMaxRetryGap);
  k.next_check = n + k.check_gap;
  return {other(chosen), true};
}

namespace {

/// A path's estimate from its ring of last timings: their mean without the slowest.
double estimate(const std::array<double, ReadPathChooser::kWindow>& ring, uint64_t timings) {
  const size_t n = std::min<uint64_t>(timings, ReadPathChooser::kWindow);
  double sum = 0, slowest = 0;
  for (size_t j = 0; j < n; ++j) {
    sum += ring[j];
    slowest = std::max(slowest, ring[j]);
  }
  return (sum - slowest) / static_cast<double>(n - 1);
}

/// The factor by which the path not chosen must beat the chosen one's estimate to replace it.
double switch_factor(size_t chosen) { return chosen == 0 ? 1 - ReadPathChooser::kFileMargin : 1.0; }

}  // namespace

void ReadPathChooser::decide(Kind& k) {
  const size_t chosen = k.choice.load(std::memory_order_relaxed);
  const double chosen_estimate = estimate(k.ns_per_byte[chosen], k.timings[chosen]);
  if (estimate(k.ns_per_byte[1 - chosen], k.timings[1 - chosen]) < chosen_estimate * switch_factor(chosen)) {
    k.choice.store(static_cast<uint8_t>(1 - chosen), std::memory_order_relaxed);
    k.next_check = k.explorer_items + kFirstRetry;  // a new choice is checked soon again
    k.check_gap = kFirstRetry;
  }
}

void ReadPathChooser::record(DType dtype, ReadPath path, uint64_t bytes, double nanoseconds) {
  if (bytes == 0 || !(nanoseconds > 0) || !std::isfinite(nanoseconds)) return;
  Kind& k = kind(dtype);
  const std::lock_guard lock(k.mutex);
  const size_t p = index_of(path);
  const double ns_per_byte = nanoseconds / static_cast<double>(bytes);
  k.ns_per_byte[p][k.timings[p]++ % kWindow] = ns_per_byte;
  if (k.timings[0] < kWarmup || k.timings[1] < kWarmup) return;
  if (!k.warm.load(std::memory_order_relaxed)) {
    decide(k);
    k.next_check = k.explorer_items + kFirstRetry;
    k.warm.store(true, std::memory_order_relaxed);
    return;
  }
  const size_t chosen = k.choice.load(std::memory_order_relaxed);
  if (p == chosen) return;
  if (k.burst_left > 0) {
    if (--k.burst_left == 0) decide(k);  // the window now holds the burst's timings only
  } else if (ns_per_byte < estimate(k.ns_per_byte[chosen], k.timings[chosen]) * switch_factor(chosen)) {
    k.burst_left = kWindow - 1;  // a check that looks faster: confirm it over a whole window
  }
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
