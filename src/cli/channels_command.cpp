// `tensormorph channels`: the statistics of every row or column of each tensor's matrix view.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <numeric>

#include "cli/commands.h"
#include "cli/format_util.h"
#include "core/printable.h"
#include "engine/matrix_shape.h"
#include "cli/progress.h"
#include "engine/outliers.h"
#include "reports/channels_report.h"

namespace tensormorph::cli {
namespace {

struct Options {
  std::string path;
  std::vector<std::string> globs;
  std::string axis = "rows";
  std::string sort = "absmax";
  size_t limit = 10;
  bool json = false;
  bool csv = false;
  bool recompute = false;
  uint32_t threads = 0;
  ComputeOptions compute;
  OpenOptions open;
};

using Row = reports::ChannelsRow;

double sort_key(const TM_TileStats& s, const std::string& key) {
  if (key == "l2") return engine::channel_l2(s);
  if (key == "nonfinite") return static_cast<double>(s.nan + s.pos_inf + s.neg_inf);
  return s.absmax;
}

/// Channel indices in the order the table shows them (largest first, ties by index).
std::vector<uint64_t> shown_order(const std::vector<TM_TileStats>& channels, const Options& opt) {
  std::vector<uint64_t> order(channels.size());
  std::iota(order.begin(), order.end(), uint64_t{0});
  if (opt.sort != "index") {
    std::stable_sort(order.begin(), order.end(), [&](uint64_t a, uint64_t b) {
      return sort_key(channels[a], opt.sort) > sort_key(channels[b], opt.sort);
    });
  }
  return order;
}

void print_table(const std::vector<Row>& rows, const Options& opt) {
  const char* what = opt.axis == "rows" ? "row" : "col";
  for (const auto& r : rows) {
    std::printf("%s  %s", printable(r.tensor->name, 80).c_str(), std::string(dtype_name(r.tensor->dtype)).c_str());
    if (!r.error.empty()) {
      std::printf("  %s\n", printable(r.error, 400).c_str());
      continue;
    }
    const auto order = shown_order(r.channels, opt);
    const size_t n = std::min(opt.limit, order.size());
    std::printf("  %zu %ss, %zu shown by %s\n", r.channels.size(), what, n, opt.sort.c_str());
    std::printf("  %8s  %11s  %11s  %11s  %11s  %11s  %6s\n", what, "min", "max", "absmax", "mean", "l2", "nonfin");
    for (size_t i = 0; i < n; ++i) {
      const TM_TileStats& s = r.channels[order[i]];
      const uint64_t finite = s.count - s.nan - s.pos_inf - s.neg_inf;
      std::printf("  %8llu  %11.4g  %11.4g  %11.4g  %11.4g  %11.4g  %6llu\n", static_cast<unsigned long long>(order[i]),
                  finite ? static_cast<double>(s.min) : 0.0, finite ? static_cast<double>(s.max) : 0.0,
                  static_cast<double>(s.absmax), finite ? s.sum / static_cast<double>(finite) : 0.0, engine::channel_l2(s),
                  static_cast<unsigned long long>(s.nan + s.pos_inf + s.neg_inf));
    }
  }
  std::fflush(stdout);
}

void print_csv(const std::vector<Row>& rows, const Options& opt) {
  std::cout << "name,dtype,axis,index,count,finite,min,max,absmax,mean,l2,nan,pos_inf,neg_inf,zeros,error\n";
  for (const auto& r : rows) {
    const std::string head = csv_field(printable(r.tensor->name, SIZE_MAX)) + "," +
                             std::string(dtype_name(r.tensor->dtype)) + "," + opt.axis;
    if (!r.error.empty()) {
      std::cout << head << ",,,,,,,,,,,,," << csv_field(printable(r.error, SIZE_MAX)) << "\n";
      continue;
    }
    for (uint64_t i = 0; i < r.channels.size(); ++i) {
      const TM_TileStats& s = r.channels[i];
      const uint64_t finite = s.count - s.nan - s.pos_inf - s.neg_inf;
      std::cout << head << "," << i << "," << s.count << "," << finite << ","
                << (finite ? format_double(s.min) : "") << "," << (finite ? format_double(s.max) : "") << ","
                << format_double(s.absmax) << "," << (finite ? format_double(s.sum / static_cast<double>(finite)) : "")
                << "," << format_double(engine::channel_l2(s)) << "," << s.nan << "," << s.pos_inf << "," << s.neg_inf
                << "," << s.zeros << ",\n";
    }
  }
}

}  // namespace

Command add_channels_command(CLI::App& app) {
  auto opt = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand("channels", "Statistics of every row or column of each tensor (its matrix view)");
  sub->add_option("path", opt->path, "Checkpoint file, index JSON, or directory")->required();
  sub->add_option("--tensor", opt->globs, "Only tensors whose names match these shell globs");
  sub->add_option("--axis", opt->axis, "rows or cols")->check(CLI::IsMember({"rows", "cols"}));
  sub->add_option("--sort", opt->sort, "Table order: absmax, l2, nonfinite (largest first) or index")
      ->check(CLI::IsMember({"absmax", "l2", "nonfinite", "index"}));
  sub->add_option("--limit", opt->limit, "Channels per tensor in the table (default 10; JSON and CSV hold all)");
  sub->add_flag("--recompute", opt->recompute, "Compute again even where results are kept beside the index");
  auto* json = sub->add_flag("--json", opt->json, "Print JSON (schema tensormorph.channels/1): every channel");
  sub->add_flag("--csv", opt->csv, "Print CSV, one line per channel")->excludes(json);
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
            const reports::ChannelsRequest request{*tensors, opt->axis == "rows", opt->recompute, opt->threads};
            ProgressDisplay progress("channels");
            auto report = reports::channels_report(session->scheduler(), *ckpt, request, records,
                                                   bytes_progress(progress));
            progress.finish();
            if (!report.ok()) {
              print_error(report.status().message());
              return static_cast<int>(kExitUserError);
            }
            warn_unkept(report->kept);
            const std::vector<Row>& rows = report->rows;
            if (opt->json) {
              const auto j = reports::channels_document(*ckpt, request, rows, opt->compute.explain ? &records : nullptr);
              std::cout << json_text(j, 2) << "\n";
            } else if (opt->csv) {
              print_csv(rows, *opt);
              if (opt->compute.explain) print_placements(std::cerr, records);
            } else {
              print_table(rows, *opt);
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
