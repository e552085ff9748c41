// `tensormorph spectrum`: singular values of every matrix and the spectral metrics built on them.
#include <cmath>
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "cli/format_util.h"
#include "cli/progress.h"
#include "core/printable.h"
#include "reports/spectrum_report.h"

namespace tensormorph::cli {
namespace {

struct Options {
  std::string path;
  std::vector<std::string> globs;
  uint64_t top = 0;  // values listed per tensor (0: none in the table, all in JSON); the randomized rung's k
  std::string consent;
  bool recompute = false;
  bool json = false;
  bool csv = false;
  uint32_t threads = 0;
  ComputeOptions compute;
  OpenOptions open;
};

using Row = reports::SpectrumRow;

std::string number(double v, const char* format = "%.4g") {
  if (!std::isfinite(v)) return "-";
  char text[32];
  std::snprintf(text, sizeof text, format, v);
  return text;
}

void print_table(const std::vector<Row>& rows, uint64_t top) {
  constexpr size_t kMaxName = 48;
  size_t w = 4;
  for (const auto& r : rows) w = std::max(w, printable(r.tensor->name, kMaxName).size());
  std::printf("%-*s  %-13s  %-10s  %10s  %10s  %9s  %9s  %6s  %6s\n", static_cast<int>(w), "name", "matrix", "rung",
              "sigma_1", "frobenius", "stable_rk", "effect_rk", "spikes", "alpha");
  bool approximate = false;
  for (const auto& r : rows) {
    const TensorInfo& t = *r.tensor;
    std::printf("%-*s  ", static_cast<int>(w), printable(t.name, kMaxName).c_str());
    if (!r.error.empty()) {
      std::printf("%s\n", printable(r.error, 400).c_str());
      continue;
    }
    if (r.needs_consent) {
      std::printf("needs consent (the ladder is on stderr)\n");
      continue;
    }
    const engine::Spectrum& s = r.spectrum;
    approximate = approximate || s.rung != engine::kSpectrumRungExact;
    const std::string matrix = std::to_string(s.rows) + "x" + std::to_string(s.cols);
    if (r.metrics) {
      const auto& m = *r.metrics;
      std::printf("%-13s  %-10s  %10s  %10s  %9s  %9s  %6llu  %6s\n", matrix.c_str(), s.rung.c_str(),
                  number(m.spectral_norm).c_str(), number(m.frobenius_norm).c_str(), number(m.stable_rank, "%.2f").c_str(),
                  number(m.effective_rank, "%.1f").c_str(), static_cast<unsigned long long>(m.mp_spikes),
                  m.power_law.fitted ? number(m.power_law.alpha, "%.2f").c_str() : "-");
    } else {
      std::printf("%-13s  %-10s  %10s  %10s  %9s  %9s  %6s  %6s\n", matrix.c_str(), s.rung.c_str(),
                  number(s.values.empty() ? NAN : s.values.front()).c_str(), "-", "-", "-", "-", "-");
    }
    if (top > 0) {
      std::printf("%*s  sigma:", static_cast<int>(w), "");
      for (size_t i = 0; i < std::min<size_t>(top, s.values.size()); ++i) std::printf(" %s", number(s.values[i]).c_str());
      std::printf("\n");
    }
  }
  std::printf("singular values in float64 of each tensor seen as a matrix; alpha: power-law exponent of the ESD's tail "
              "(WeightWatcher's fit); spikes: eigenvalues above the Marchenko-Pastur bulk edge%s\n",
              approximate ? "; a rung other than exact was consented to (--json gives its bound)" : "");
  std::fflush(stdout);
}

void print_csv(const std::vector<Row>& rows) {
  std::cout << "name,dtype,rows,cols,rung,spectral_norm,frobenius_norm,stable_rank,effective_rank,rank,mp_spikes,"
               "mp_bulk_edge,alpha,alpha_xmin,alpha_ks_distance,alpha_tail_size,weighted_alpha,error\n";
  for (const auto& r : rows) {
    std::cout << csv_field(printable(r.tensor->name, SIZE_MAX)) << "," << dtype_name(r.tensor->dtype) << ",";
    if (!r.error.empty() || r.needs_consent) {
      const std::string why = r.needs_consent ? "needs consent: " + r.needs_consent->reason : r.error;
      std::cout << ",,,,,,,,,,,,,,," << csv_field(printable(why, SIZE_MAX)) << "\n";
      continue;
    }
    const engine::Spectrum& s = r.spectrum;
    std::cout << s.rows << "," << s.cols << "," << s.rung << ",";
    if (r.metrics) {
      const auto& m = *r.metrics;
      const auto& pl = m.power_law;
      std::cout << format_double(m.spectral_norm) << "," << format_double(m.frobenius_norm) << ","
                << format_double(m.stable_rank) << "," << format_double(m.effective_rank) << "," << m.rank << ","
                << m.mp_spikes << "," << format_double(m.mp_bulk_edge) << ","
                << (pl.fitted ? format_double(pl.alpha) : "") << "," << (pl.fitted ? format_double(pl.xmin) : "") << ","
                << (pl.fitted ? format_double(pl.ks_distance) : "") << "," << (pl.fitted ? std::to_string(pl.tail_size) : "")
                << "," << (pl.fitted ? format_double(m.weighted_alpha) : "") << ",\n";
    } else {
      std::cout << (s.values.empty() ? "" : format_double(s.values.front())) << ",,,,,,,,,,,,\n";
    }
  }
}

}  // namespace

Command add_spectrum_command(CLI::App& app) {
  auto opt = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand("spectrum", "Singular values of every matrix and the spectral metrics built on them");
  sub->add_option("path", opt->path, "Checkpoint file, index JSON, or directory")->required();
  sub->add_option("--tensor", opt->globs, "Only tensors whose names match these shell globs (default: every matrix)");
  sub->add_option("--top", opt->top,
                  "List the K largest singular values per tensor (JSON lists all by default); the randomized rung "
                  "computes K (default 64)");
  sub->add_option("--consent", opt->consent,
                  "Accept a rung of the exactness ladder when the exact spectrum exceeds the memory or time budget: "
                  "exact, gram, randomized, sample, or approximate (the cheapest below exact)")
      ->check(CLI::IsMember({"exact", "gram", "randomized", "sample", "approximate"}));
  sub->add_flag("--recompute", opt->recompute, "Compute again even where results are kept beside the index");
  auto* json = sub->add_flag("--json", opt->json, "Print JSON (schema tensormorph.spectrum/1)");
  sub->add_flag("--csv", opt->csv, "Print CSV, one line per tensor")->excludes(json);
  sub->add_option("--threads", opt->threads, "CPU threads (default: all cores)");
  add_compute_options(sub, opt->compute);
  add_open_options(sub, opt->open);
  return {sub, [opt]() {
            auto ckpt = open_or_report(opt->path, opt->open);
            if (!ckpt) return static_cast<int>(kExitUserError);
            auto selected = select_tensors_or_report(*ckpt, opt->globs);
            if (!selected) return static_cast<int>(kExitUserError);
            // Vectors and scalars have no spectrum beyond their norm: only matrices, unless named.
            reports::SpectrumRequest request{reports::spectrum_tensors(*selected, !opt->globs.empty()), opt->top,
                                             opt->consent, opt->recompute, opt->threads};
            auto session = open_session_or_report(opt->compute);
            if (!session) return static_cast<int>(kExitUserError);
            engine::Records records;
            ProgressDisplay progress("spectrum");
            auto report = reports::spectrum_report(session->scheduler(), *ckpt, request, records,
                                                   [&](const reports::AnalysisProgress& p) {
                                                     progress.update_items(p.items_done, p.items_total, p.work_done,
                                                                           p.work_total, p.current, p.seconds);
                                                     return true;
                                                   });
            progress.finish();
            if (!report.ok()) {
              print_error(report.status().message());
              return static_cast<int>(kExitUserError);
            }
            warn_unkept(report->kept);
            const std::vector<Row>& rows = report->rows;
            if (opt->json) {
              const auto j = reports::spectrum_document(*ckpt, rows, opt->top, opt->compute.explain ? &records : nullptr);
              std::cout << json_text(j, 2) << "\n";
            } else if (opt->csv) {
              print_csv(rows);
              if (opt->compute.explain) print_placements(std::cerr, records);
            } else {
              print_table(rows, opt->top);
              if (opt->compute.explain) print_placements(std::cout, records);
            }
            note_unmet_preferences(records);
            return finish_with_ladders(*ckpt, rows, opt->consent);
          }};
}

}  // namespace tensormorph::cli
