// `tensormorph quantiles`: exact order statistics of each tensor's finite values.
#include <cmath>
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "cli/format_util.h"
#include "core/printable.h"
#include "cli/progress.h"
#include "reports/quantiles_report.h"
#include "tensormorph/decode.h"

namespace tensormorph::cli {
namespace {

struct Options {
  std::string path;
  std::vector<std::string> globs;
  std::vector<double> probabilities = {0, 0.001, 0.01, 0.5, 0.99, 0.999, 1};
  std::string method = "linear";
  bool mad = false;
  bool recompute = false;
  std::string consent;  // a rung id, "approximate", or "" (exact within the budgets only)
  bool json = false;
  bool csv = false;
  uint32_t threads = 0;
  ComputeOptions compute;
  OpenOptions open;
};

using Row = reports::QuantilesRow;

/// Types whose values float32 cannot all hold are ranked after rounding to float32 (a monotone
/// map, so each order statistic is the float32 nearest the true one).
bool ranked_rounded(DType dtype) { return ops::exact_summary_supported(dtype); }

std::string percent_label(double p) {
  char text[32];
  std::snprintf(text, sizeof text, "%.6g%%", p * 100);
  return text;
}

double shown(const engine::QuantileValue& v, const std::string& method) {
  return method == "inverted_cdf" ? v.inverted_cdf : v.linear;
}

void print_table(const std::vector<Row>& rows, const Options& opt) {
  constexpr size_t kMaxName = 48;
  size_t w = 4;
  for (const auto& r : rows) w = std::max(w, printable(r.tensor->name, kMaxName).size());
  std::printf("%-*s  %-7s  %9s  %5s  %5s", static_cast<int>(w), "name", "dtype", "finite", "nan", "inf");
  for (double p : opt.probabilities) std::printf("  %11s", percent_label(p).c_str());
  if (opt.mad) std::printf("  %11s", "MAD");
  std::printf("\n");
  bool rounded = false;
  std::string approximate_rung;
  for (const auto& r : rows) {
    const TensorInfo& t = *r.tensor;
    std::string dtype(dtype_name(t.dtype));
    if (ranked_rounded(t.dtype)) {
      dtype += "*";
      rounded = true;
    }
    std::printf("%-*s  %-7s  ", static_cast<int>(w), printable(t.name, kMaxName).c_str(), dtype.c_str());
    if (!r.error.empty()) {
      std::printf("%s\n", printable(r.error, 400).c_str());
      continue;
    }
    if (r.needs_consent) {
      std::printf("needs consent (the ladder is on stderr)\n");
      continue;
    }
    const bool approximate = r.q.rung != engine::kRungExact;
    approximate_rung = approximate ? r.q.rung : approximate_rung;
    std::printf("%9s  %5llu  %5llu", human_count(r.q.finite).c_str(), static_cast<unsigned long long>(r.q.nan),
                static_cast<unsigned long long>(r.q.pos_inf + r.q.neg_inf));
    for (const auto& v : r.q.values) {
      char value[32];
      std::snprintf(value, sizeof value, "%s%.4g", approximate ? "~" : "", shown(v, opt.method));
      std::printf("  %11s", value);
    }
    if (r.q.values.empty()) {
      for (size_t i = 0; i < opt.probabilities.size(); ++i) std::printf("  %11s", "-");
    }
    if (opt.mad) {
      if (r.q.median_absolute_deviation) {
        std::printf("  %11.4g", *r.q.median_absolute_deviation);
      } else {
        std::printf("  %11s", "-");
      }
    }
    std::printf("\n");
  }
  std::printf("quantiles of the finite values (%s)%s\n",
              opt.method == "linear" ? "linear interpolation, numpy's default" : "inverted_cdf: the element of rank ceil(q n)",
              rounded ? "; * ranked after rounding to float32" : "");
  if (!approximate_rung.empty()) {
    std::printf("~ approximate, consented to (rung '%s'); --json gives each value's interval\n", approximate_rung.c_str());
  }
  std::fflush(stdout);
}

void print_csv(const std::vector<Row>& rows) {
  std::cout << "name,dtype,count,finite,nan,pos_inf,neg_inf,probability,inverted_cdf,linear,"
               "median_absolute_deviation,error\n";
  for (const auto& r : rows) {
    const std::string head = csv_field(printable(r.tensor->name, SIZE_MAX)) + "," +
                             std::string(dtype_name(r.tensor->dtype)) + "," + std::to_string(r.tensor->elements());
    if (!r.error.empty() || r.needs_consent) {
      const std::string why = r.needs_consent ? "needs consent: " + r.needs_consent->reason : r.error;
      std::cout << head << ",,,,,,,,," << csv_field(printable(why, SIZE_MAX)) << "\n";
      continue;
    }
    const std::string counts = std::to_string(r.q.finite) + "," + std::to_string(r.q.nan) + "," +
                               std::to_string(r.q.pos_inf) + "," + std::to_string(r.q.neg_inf);
    const std::string mad = r.q.median_absolute_deviation ? format_double(*r.q.median_absolute_deviation) : "";
    for (const auto& v : r.q.values) {
      std::cout << head << "," << counts << "," << format_double(v.probability) << "," << format_double(v.inverted_cdf)
                << "," << format_double(v.linear) << "," << mad << ",\n";
    }
    if (r.q.values.empty()) std::cout << head << "," << counts << ",,,," << mad << ",\n";
  }
}

}  // namespace

Command add_quantiles_command(CLI::App& app) {
  auto opt = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand("quantiles", "Exact quantiles of each tensor's finite values (NaN and Inf counted apart)");
  sub->add_option("path", opt->path, "Checkpoint file, index JSON, or directory")->required();
  sub->add_option("--tensor", opt->globs, "Only tensors whose names match these shell globs");
  sub->add_option("-p,--probabilities", opt->probabilities, "Probabilities in [0, 1], comma-separated")
      ->delimiter(',')
      ->check(CLI::Range(0.0, 1.0));
  sub->add_option("--method", opt->method, "What the table shows: linear (numpy's default) or inverted_cdf")
      ->check(CLI::IsMember({"linear", "inverted_cdf"}));
  sub->add_flag("--mad", opt->mad, "Also the median absolute deviation (four more passes over the data)");
  sub->add_flag("--recompute", opt->recompute, "Compute again even where results are kept beside the index");
  sub->add_option("--consent", opt->consent,
                  "Accept a rung of the exactness ladder when exact quantiles exceed the memory or time budget: exact, "
                  "histogram, sample, or approximate (the cheapest approximate rung)")
      ->check(CLI::IsMember({"exact", "histogram", "sample", "approximate"}));
  auto* json = sub->add_flag("--json", opt->json, "Print JSON (schema tensormorph.quantiles/1): both methods");
  sub->add_flag("--csv", opt->csv, "Print CSV, one line per tensor and probability")->excludes(json);
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
            const reports::QuantilesRequest request{*tensors, opt->probabilities, opt->mad, opt->consent, opt->recompute,
                                                    opt->threads};
            ProgressDisplay progress("quantiles");
            auto report = reports::quantiles_report(session->scheduler(), *ckpt, request, records,
                                                    bytes_progress(progress));
            progress.finish();
            if (!report.ok()) {
              print_error(report.status().message());
              return static_cast<int>(kExitUserError);
            }
            warn_unkept(report->kept);
            const std::vector<Row>& rows = report->rows;
            if (opt->json) {
              const auto j = reports::quantiles_document(*ckpt, request, rows, opt->compute.explain ? &records : nullptr);
              std::cout << json_text(j, 2) << "\n";
            } else if (opt->csv) {
              print_csv(rows);
              if (opt->compute.explain) print_placements(std::cerr, records);
            } else {
              print_table(rows, *opt);
              if (opt->compute.explain) print_placements(std::cout, records);
            }
            note_unmet_preferences(records);
            return finish_with_ladders(*ckpt, rows, opt->consent);
          }};
}

}  // namespace tensormorph::cli
