// `tensormorph stats`: exact per-tensor statistics, from the index or in the tensor's own domain.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <optional>
#include <string_view>
#include <unordered_map>

#include "cli/commands.h"
#include "cli/format_util.h"
#include "core/printable.h"
#include "reports/report.h"
#include "reports/stats_report.h"

namespace tensormorph::cli {
namespace {

struct Options {
  std::string path;
  std::vector<std::string> globs;
  bool json = false;
  bool csv = false;
  std::string sort = "file";
  uint32_t tile = engine::kDefaultTile;
  uint32_t threads = 0;
  ComputeOptions compute;
  OpenOptions open;
};

using TensorStats = reports::StatsRow;
using reports::non_finite;

// "model.layers.2.mlp.down_proj.weight (1 NaN, 1 +Inf)".
std::string non_finite_text(const TensorStats& s) {
  std::string counts;
  auto add = [&](uint64_t n, const char* what) {
    if (n > 0) counts += (counts.empty() ? "" : ", ") + grouped_count(n) + " " + what;
  };
  add(s.nan, "NaN");
  add(s.pos_inf, "+Inf");
  add(s.neg_inf, "-Inf");
  return printable(s.tensor->name) + " (" + counts + ")";
}

// One line under the table: how many tensors hold NaN or Inf, naming the first few.
std::string non_finite_summary(const std::vector<TensorStats>& rows) {
  constexpr size_t kNamed = 5;
  std::vector<const TensorStats*> holding;
  for (const auto& s : rows) {
    if (s.error.empty() && non_finite(s) > 0) holding.push_back(&s);
  }
  if (holding.empty()) return "no NaN or Inf in any of the " + std::to_string(rows.size()) + " tensors";
  std::string line = std::to_string(holding.size()) + " of " + std::to_string(rows.size()) +
                     (holding.size() == 1 ? " tensors holds" : " tensors hold") + " NaN/Inf (listed first): ";
  for (size_t i = 0; i < holding.size() && i < kNamed; ++i) line += (i ? ", " : "") + non_finite_text(*holding[i]);
  if (holding.size() > kNamed) line += ", and " + std::to_string(holding.size() - kNamed) + " more";
  return line;
}

// An extreme for the table: an exact integer in full, a float to 4 significant digits.
std::string extreme_text(const std::optional<nlohmann::ordered_json>& exact, double value) {
  if (exact) return exact->dump();
  char text[32];
  std::snprintf(text, sizeof text, "%.4g", value);
  return text;
}

void print_table(const std::vector<TensorStats>& rows) {
  constexpr size_t kMaxName = 56;
  std::vector<std::string> names;
  names.reserve(rows.size());
  size_t w = 4;
  // Counts are exact, digits grouped: the columns are as wide as the largest count.
  int count_w = 5, nan_w = 3, inf_w = 3, zeros_w = 5;
  auto widen = [](int& width, uint64_t value) {
    width = std::max(width, static_cast<int>(grouped_count(value).size()));
  };
  for (const auto& s : rows) {
    names.push_back(printable(s.tensor->name, kMaxName));
    w = std::max(w, names.back().size());
    widen(count_w, s.count);
    widen(nan_w, s.nan);
    widen(inf_w, s.pos_inf + s.neg_inf);
    widen(zeros_w, s.zeros);
  }
  w = std::min(w, kMaxName);
  std::printf("%-*s  %-7s  %*s  %11s  %11s  %11s  %11s  %11s  %*s  %*s  %*s\n", static_cast<int>(w), "name", "dtype",
              count_w, "count", "mean", "std", "min", "max", "absmax", nan_w, "nan", inf_w, "inf", zeros_w, "zeros");
  for (size_t i = 0; i < rows.size(); ++i) {
    const TensorStats& s = rows[i];
    const TensorInfo& t = *s.tensor;
    if (!s.error.empty()) {
      std::printf("%-*s  %-7s  %*s  %s\n", static_cast<int>(w), names[i].c_str(),
                  std::string(dtype_name(t.dtype)).c_str(), count_w, grouped_count(s.count).c_str(),
                  printable(s.error, 400).c_str());
      continue;
    }
    std::printf("%-*s  %-7s  %*s  %11.4g  %11.4g  %11s  %11s  %11s  %*s  %*s  %*s\n", static_cast<int>(w),
                names[i].c_str(), std::string(dtype_name(t.dtype)).c_str(), count_w, grouped_count(s.count).c_str(),
                s.mean, s.std, extreme_text(s.exact_min, s.min).c_str(), extreme_text(s.exact_max, s.max).c_str(),
                extreme_text(s.exact_absmax, s.absmax).c_str(), nan_w, grouped_count(s.nan).c_str(), inf_w,
                grouped_count(s.pos_inf + s.neg_inf).c_str(), zeros_w, grouped_count(s.zeros).c_str());
  }
  std::printf("\n%s\n", non_finite_summary(rows).c_str());
  std::fflush(stdout);
}

void print_csv(const std::vector<TensorStats>& rows) {
  std::cout << "name,dtype,count,finite,mean,std,min,max,absmax,nan,pos_inf,neg_inf,zeros,error\n";
  auto extreme = [](const std::optional<nlohmann::ordered_json>& exact, double v) {
    return exact ? exact->dump() : format_double(v);
  };
  for (const auto& s : rows) {
    // Names are shown escaped (reversibly: see printable.h), never as raw terminal bytes.
    std::cout << csv_field(printable(s.tensor->name, SIZE_MAX)) << "," << dtype_name(s.tensor->dtype) << ","
              << s.count << "," << s.finite << "," << format_double(s.mean) << "," << format_double(s.std) << ","
              << extreme(s.exact_min, s.min) << "," << extreme(s.exact_max, s.max) << ","
              << extreme(s.exact_absmax, s.absmax) << "," << s.nan << "," << s.pos_inf << "," << s.neg_inf << ","
              << s.zeros << "," << (s.error.empty() ? "" : csv_field(printable(s.error, SIZE_MAX))) << "\n";
  }
}

// --explain: the placements, and how many tensors needed none because the index held them.
void explain(std::ostream& out, const engine::Records& records, size_t from_index, size_t total,
             const index::IndexReport& report) {
  if (records.empty()) {
    out << "\nplacements: none: all " << total << " tensors from the index (no operation ran)\n";
    return;
  }
  print_placements(out, records);
  if (from_index == 0) return;
  out << "(" << from_index << " of " << total << " tensors from the index: "
      << (report.tensors_indexed > 0 ? "the operations above built or refreshed it)\n"
                                     : "no operation ran for them)\n");
}

}  // namespace

Command add_stats_command(CLI::App& app) {
  auto opt = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand("stats", "Exact per-tensor statistics from the index (built on demand)");
  sub->add_option("path", opt->path, "Checkpoint file, index JSON, or directory")->required();
  sub->add_option("--tensor", opt->globs, "Only tensors whose names match these shell globs");
  auto* json = sub->add_flag("--json", opt->json, "Print JSON (schema tensormorph.stats/1)");
  sub->add_flag("--csv", opt->csv, "Print CSV")->excludes(json);
  sub->add_option("--sort", opt->sort, "Sort by: file, name, absmax, std, mean, min, max, nan, inf, sparsity, count")
      ->check(CLI::IsMember({"file", "name", "absmax", "std", "mean", "min", "max", "nan", "inf", "zeros",
                             "sparsity", "count", "params"}));
  sub->add_option("--tile", opt->tile, "Tile size of the index it reads or builds (a power of two, 8..4096)")
      ->check(CLI::Range(8u, 4096u));
  sub->add_option("--threads", opt->threads, "Threads when the index must be built (default: all cores)");
  add_compute_options(sub, opt->compute);
  add_open_options(sub, opt->open);
  return {sub, [opt]() {
            auto ckpt = open_or_report(opt->path, opt->open);
            if (!ckpt) return static_cast<int>(kExitUserError);
            // Patterns that match nothing fail before the index is built or read.
            const auto selected = select_tensors_or_report(*ckpt, opt->globs);
            if (!selected) return static_cast<int>(kExitUserError);
            auto session = open_session_or_report(opt->compute);
            if (!session) return static_cast<int>(kExitUserError);
            engine::Records records;
            auto indexed = ensure_index(*session, *ckpt, {opt->tile, opt->threads, "", &records});
            if (!indexed.ok()) {
              print_error(indexed.status().message());
              return static_cast<int>(kExitUserError);
            }
            note_index(indexed->report);
            if (!indexed->report.not_kept.empty()) {
              std::cerr << "tensormorph: warning: the index could not be kept (" << indexed->report.not_kept
                        << "): statistics were computed in memory and will be computed again next time\n";
            }
            reports::StatsSource source(session->scheduler(), *ckpt, indexed->contents, indexed->report, opt->tile, records);
            std::vector<TensorStats> rows;
            for (const TensorInfo* t : *selected) rows.push_back(source.stats_of(*t));
            if (opt->sort == "name") {
              std::stable_sort(rows.begin(), rows.end(),
                               [](const auto& a, const auto& b) { return a.tensor->name < b.tensor->name; });
            } else if (opt->sort != "file") {
              std::stable_sort(rows.begin(), rows.end(), [&](const auto& a, const auto& b) {
                return reports::stats_sort_value(a, opt->sort) > reports::stats_sort_value(b, opt->sort);
              });
            }
            // Whatever the sort, the table lists tensors holding NaN or Inf first: no order may bury
            // them. JSON and CSV keep the order asked for (scripts rely on it); JSON names them.
            if (!opt->json && !opt->csv) {
              std::stable_partition(rows.begin(), rows.end(),
                                    [](const TensorStats& s) { return s.error.empty() && non_finite(s) > 0; });
            }
            if (opt->json) {
              const auto j = reports::stats_document(*ckpt, rows, opt->compute.explain ? &records : nullptr,
                                                     source.from_index());
              std::cout << json_text(j, 2) << "\n";
            } else if (opt->csv) {
              print_csv(rows);
              if (opt->compute.explain) explain(std::cerr, records, source.from_index(), rows.size(), indexed->report);
            } else {
              print_table(rows);
              if (opt->compute.explain) explain(std::cout, records, source.from_index(), rows.size(), indexed->report);
            }
            note_unmet_preferences(records);
            // Every requested tensor has its numbers, or the run failed: a script must not take a
            // table of errors for a result.
            std::vector<const TensorStats*> failed;
            for (const auto& s : rows) {
              if (!s.error.empty()) failed.push_back(&s);
            }
            if (failed.empty()) return static_cast<int>(kExitOk);
            std::string which;
            constexpr size_t kListed = 5;
            for (size_t i = 0; i < failed.size() && i < kListed; ++i) {
              which += (i ? "; " : "") + quoted_name(failed[i]->tensor->name, 80) + ": " + failed[i]->error;
            }
            if (failed.size() > kListed) which += "; and " + std::to_string(failed.size() - kListed) + " more";
            print_error(ckpt->path().string() + ": " + std::to_string(failed.size()) + " of " +
                        std::to_string(rows.size()) + " requested tensors could not be computed: " + which);
            return static_cast<int>(kExitUserError);
          }};
}

}  // namespace tensormorph::cli
