#include "cli/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "cli/format_util.h"
#include "core/printable.h"

namespace tensormorph::cli {

ProgressDisplay::ProgressDisplay(std::string label)
    : label_(std::move(label)), terminal_(::isatty(STDERR_FILENO) == 1), last_() {}

void ProgressDisplay::update(uint64_t bytes_done, uint64_t bytes_total, const std::string& current, double seconds) {
  const bool complete = bytes_total > 0 && bytes_done >= bytes_total;
  if (!due(complete)) return;
  const double fraction = bytes_total ? static_cast<double>(bytes_done) / static_cast<double>(bytes_total) : 1.0;
  const double gbps = seconds > 0 ? static_cast<double>(bytes_done) / seconds / 1e9 : 0.0;
  // The first moments' rate says little (open, first page faults): no ETA until it means something.
  const bool rate_known = gbps > 0 && seconds >= 0.5 && fraction >= 0.01;
  char amounts[96];
  std::snprintf(amounts, sizeof amounts, "%s / %s  %.2f GB/s", human_bytes(bytes_done).c_str(), human_bytes(bytes_total).c_str(), gbps);
  draw(fraction, amounts, eta_text(complete, rate_known, rate_known ? static_cast<double>(bytes_total - bytes_done) / (gbps * 1e9) : 0), current,
       complete);
}

void ProgressDisplay::update_items(uint64_t items_done, uint64_t items_total, double work_done, double work_total,
                                   const std::string& current, double seconds) {
  const bool complete = items_total > 0 && items_done >= items_total;
  if (!due(complete)) return;
  const double fraction = complete || work_total <= 0 ? (complete ? 1.0 : 0.0) : std::min(1.0, work_done / work_total);
  char amounts[64];
  std::snprintf(amounts, sizeof amounts, "%llu / %llu", static_cast<unsigned long long>(items_done),
                static_cast<unsigned long long>(items_total));
  const bool rate_known = seconds >= 0.5 && fraction >= 0.01;
  draw(fraction, amounts, eta_text(complete, rate_known, rate_known ? seconds * (1 - fraction) / fraction : 0), current, complete);
}

std::string ProgressDisplay::eta_text(bool complete, bool known, double seconds_left) {
  char eta[32] = "ETA   --";
  if (complete) std::snprintf(eta, sizeof eta, "ETA 0s");
  else if (known) std::snprintf(eta, sizeof eta, "ETA %.0fs", seconds_left);
  return eta;
}

void ProgressDisplay::draw(double fraction, const std::string& amounts, const std::string& eta, const std::string& current,
                           bool complete) {
  // Tensor names come from the file: escape them so they cannot move the cursor or recolour the terminal.
  std::string shown = printable(current, terminal_ ? 40 : 200);
  char line[1024];
  if (terminal_) {
    if (shown.size() < 40) shown.resize(40, ' ');
    constexpr int kWidth = 28;
    std::string bar(static_cast<size_t>(fraction * kWidth), '#');
    bar.resize(kWidth, '.');
    std::snprintf(line, sizeof line, "\r%s [%s] %5.1f%%  %s  %s  %s", label_.c_str(), bar.c_str(), 100 * fraction,
                  amounts.c_str(), eta.c_str(), shown.c_str());
  } else {
    std::snprintf(line, sizeof line, "%s: %.1f%%  %s  %s  %s\n", label_.c_str(), 100 * fraction, amounts.c_str(), eta.c_str(),
                  shown.c_str());
  }
  emit(line, complete);
}

bool ProgressDisplay::due(bool complete) {
  const auto now = std::chrono::steady_clock::now();
  const auto interval = terminal_ ? std::chrono::milliseconds(100) : std::chrono::milliseconds(2000);
  // Callers report the end more than once (the last chunk, then the summary): 100% is drawn once.
  if (complete && drawn_complete_) return false;
  if (drawn_ && now - last_ < interval && !complete) return false;
  last_ = now;
  return true;
}

void ProgressDisplay::emit(const char* line, bool complete) {
  if (!terminal_ && line == last_line_) return;
  last_line_ = line;
  std::fputs(line, stderr);
  std::fflush(stderr);
  drawn_ = true;
  drawn_complete_ = complete;
}

void ProgressDisplay::finish() {
  if (terminal_ && drawn_) std::fputs("\n", stderr);
  drawn_ = false;
  drawn_complete_ = false;
}

reports::ProgressFn bytes_progress(ProgressDisplay& display) {
  return [&display](const reports::AnalysisProgress& p) {
    display.update(static_cast<uint64_t>(p.work_done), static_cast<uint64_t>(p.work_total), p.current, p.seconds);
    return true;
  };
}

}  // namespace tensormorph::cli
