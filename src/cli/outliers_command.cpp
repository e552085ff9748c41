// `tensormorph outliers`: where each tensor's extreme values are (the k of largest magnitude).
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "cli/format_util.h"
#include "core/printable.h"
#include "cli/progress.h"
#include "engine/matrix_shape.h"
#include "reports/outliers_report.h"

namespace tensormorph::cli {
namespace {

struct Options {
  std::string path;
  std::vector<std::string> globs;
  uint64_t k = 10;
  engine::OutlierRule rule;
  bool json = false;
  bool csv = false;
  bool recompute = false;
  uint32_t threads = 0;
  ComputeOptions compute;
  OpenOptions open;
};

using Row = reports::OutliersRow;

void print_table(const std::vector<Row>& rows, uint64_t k) {
  for (const auto& r : rows) {
    const engine::MatrixShape m = engine::as_matrix(*r.tensor);
    std::printf("%s  %s [%llu x %llu]", printable(r.tensor->name, 80).c_str(), std::string(dtype_name(r.tensor->dtype)).c_str(),
                static_cast<unsigned long long>(m.rows), static_cast<unsigned long long>(m.cols));
    if (!r.error.empty()) {
      std::printf("  %s\n", printable(r.error, 400).c_str());
      continue;
    }
    std::printf("  the %zu of largest |value|%s\n", r.extremes.size(),
                r.extremes.size() < k ? " (every finite element)" : "");
    std::printf("  %6s  %10s  %10s  %14s\n", "rank", "row", "col", "value");
    for (size_t i = 0; i < r.extremes.size(); ++i) {
      const auto& e = r.extremes[i];
      std::printf("  %6zu  %10llu  %10llu  %14.7g\n", i + 1, static_cast<unsigned long long>(e.row),
                  static_cast<unsigned long long>(e.col), static_cast<double>(e.value));
    }
    std::printf("  outlier channels: %zu\n", r.channels.size());
    constexpr size_t kShown = 20;
    for (size_t i = 0; i < r.channels.size() && i < kShown; ++i) {
      const auto& c = r.channels[i];
      std::printf("  %4s %8llu  absmax %11.4g  l2 %11.4g  robust z %7.2f  %s%s\n", c.is_row ? "row" : "col",
                  static_cast<unsigned long long>(c.index), c.absmax, c.l2, c.z, c.by_magnitude ? "[magnitude]" : "",
                  c.by_norm ? "[norm]" : "");
    }
    if (r.channels.size() > kShown) std::printf("  ... %zu more (see --json)\n", r.channels.size() - kShown);
  }
  std::fflush(stdout);
}

void print_csv(const std::vector<Row>& rows) {
  std::cout << "name,dtype,rank,index,row,col,value,error\n";
  for (const auto& r : rows) {
    const std::string head = csv_field(printable(r.tensor->name, SIZE_MAX)) + "," + std::string(dtype_name(r.tensor->dtype));
    if (!r.error.empty()) {
      std::cout << head << ",,,,,," << csv_field(printable(r.error, SIZE_MAX)) << "\n";
      continue;
    }
    for (size_t i = 0; i < r.extremes.size(); ++i) {
      const auto& e = r.extremes[i];
      std::cout << head << "," << i + 1 << "," << e.index << "," << e.row << "," << e.col << ","
                << format_double(e.value) << ",\n";
    }
  }
}

}  // namespace

Command add_outliers_command(CLI::App& app) {
  auto opt = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand("outliers", "Where each tensor's extreme values are: the k of largest magnitude "
                                                 "and the outlier rows and columns");
  sub->add_option("path", opt->path, "Checkpoint file, index JSON, or directory")->required();
  sub->add_option("--tensor", opt->globs, "Only tensors whose names match these shell globs");
  sub->add_option("--magnitude", opt->rule.magnitude,
                  "A channel holding |x| at least this is an outlier (default 6, LLM.int8's outlier features)");
  sub->add_option("--robust-z", opt->rule.robust_z,
                  "A channel whose L2 norm's modified z-score is at least this is an outlier (default 3.5)");
  sub->add_flag("--recompute", opt->recompute, "Compute again even where results are kept beside the index");
  sub->add_option("-k,--top", opt->k, "How many values per tensor (default 10)")->check(CLI::Range(uint64_t{1}, uint64_t{TM_TOP_K_MAX}));
  auto* json = sub->add_flag("--json", opt->json, "Print JSON (schema tensormorph.outliers/1)");
  sub->add_flag("--csv", opt->csv, "Print CSV, one line per value")->excludes(json);
  sub->add_option("--threads", opt->threads, "CPU threads (default: all cores)");
  add_compute_options(sub, opt->compute);
  add_open_options(sub, opt->open);
  return {sub, [opt]() {
            auto ckpt = open_or_report(opt->path, opt->open);
            if (!ckpt) return static_cast<int>(kExitUserError);
            const auto tensors = select_tensors_or_report(*ckpt, opt->globs);
            if (!tensors) return static_cast<int>(kExitUserError);
            auto session = open_session_or_report(opt->compute);
            if (!session) return static_cast<int>(kExitUserError);
            engine::Records records;
            const reports::OutliersRequest request{*tensors, opt->k, opt->rule, opt->recompute, opt->threads};
            ProgressDisplay progress("outliers");
            auto report = reports::outliers_report(session->scheduler(), *ckpt, request, records,
                                                   bytes_progress(progress));
            progress.finish();
            if (!report.ok()) {
              print_error(report.status().message());
              return static_cast<int>(kExitUserError);
            }
            warn_unkept(report->kept);
            const std::vector<Row>& rows = report->rows;
            if (opt->json) {
              const auto j = reports::outliers_document(*ckpt, request, rows, opt->compute.explain ? &records : nullptr);
              std::cout << json_text(j, 2) << "\n";
            } else if (opt->csv) {
              print_csv(rows);
              if (opt->compute.explain) print_placements(std::cerr, records);
            } else {
              print_table(rows, opt->k);
              if (opt->compute.explain) print_placements(std::cout, records);
            }
            note_unmet_preferences(records);
            size_t failed = 0;
            std::string first;
            for (const auto& r : rows) {
              if (!r.error.empty() && failed++ == 0) first = quoted_name(r.tensor->name, 80) + ": " + r.error;
            }
            return exit_after_failures(*ckpt, rows.size(), failed, first);
          }};
}

}  // namespace tensormorph::cli
