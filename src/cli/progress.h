// Progress display for long commands: a redrawn bar on a terminal, plain lines otherwise.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "reports/report.h"

namespace tensormorph::cli {

/// Shows bytes done, throughput and ETA on stderr.
class ProgressDisplay {
 public:
  /// `label` prefixes every line ("indexing").
  explicit ProgressDisplay(std::string label);
  /// Reports progress; redraws at most every 100 ms (terminal) or 2 s (plain lines), and the
  /// complete state once however often it is reported.
  void update(uint64_t bytes_done, uint64_t bytes_total, const std::string& current, double seconds);
  /// Reports progress over items of unequal cost (matrices of a model): `items_done` of
  /// `items_total` done, `work_done` of `work_total` modelled work (its fraction drives the bar
  /// and the ETA); redraws like update().
  void update_items(uint64_t items_done, uint64_t items_total, double work_done, double work_total,
                    const std::string& current, double seconds);
  /// Ends the display (final redraw and newline on a terminal).
  void finish();

 private:
  std::string label_;
  bool terminal_;
  bool drawn_ = false;
  bool drawn_complete_ = false;
  std::chrono::steady_clock::time_point last_;
  std::string last_line_;

  bool due(bool complete);
  static std::string eta_text(bool complete, bool known, double seconds_left);
  void draw(double fraction, const std::string& amounts, const std::string& eta, const std::string& current, bool complete);
  void emit(const char* line, bool complete);
};

/// A report's progress shown on `display` as bytes done (the analyses whose work is stored bytes).
reports::ProgressFn bytes_progress(ProgressDisplay& display);

}  // namespace tensormorph::cli
