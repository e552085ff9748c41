// `tensormorph diff A B`: what changed between two checkpoints, tensor by tensor, most changed
// first; with --fail-above, a gate for conversions and fine-tunes in CI.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "cli/format_util.h"
#include "cli/progress.h"
#include "core/printable.h"
#include "reports/diff_report.h"

namespace tensormorph::cli {
namespace {

struct Threshold {
  std::string metric;
  double limit = 0;
};

struct Options {
  std::string a, b;
  std::vector<std::string> globs;
  std::string sort = "rel_fro";
  std::string map;
  std::vector<std::string> fail_above;
  bool fail_on_unmatched = false;
  size_t limit = 0;
  bool json = false;
  bool csv = false;
  uint32_t threads = 0;
  ComputeOptions compute;
  OpenOptions open;
};


Result<std::vector<Threshold>> parse_thresholds(const std::vector<std::string>& specs) {
  std::vector<Threshold> out;
  const auto& names = engine::diff_metric_names();
  for (const auto& spec : specs) {
    const auto eq = spec.find('=');
    Threshold t;
    t.metric = spec.substr(0, eq);
    if (eq == std::string::npos || std::find(names.begin(), names.end(), t.metric) == names.end()) {
      std::string known;
      for (const auto& n : names) known += (known.empty() ? "" : ", ") + n;
      return Status::InvalidArgument("--fail-above '" + spec + "': expected METRIC=VALUE with METRIC one of " + known);
    }
    try {
      size_t used = 0;
      t.limit = std::stod(spec.substr(eq + 1), &used);
      if (used != spec.size() - eq - 1) throw std::invalid_argument("trailing");
    } catch (const std::exception&) {
      return Status::InvalidArgument("--fail-above '" + spec + "': '" + spec.substr(eq + 1) + "' is not a number");
    }
    out.push_back(t);
  }
  return out;
}

/// True when `c` exceeds `t` (for cosine and snr_db: falls below it). NaN never passes a gate.
bool exceeds(const engine::TensorComparison& c, const Threshold& t) {
  if (!c.error.empty()) return true;
  const double v = engine::diff_metric(c, t.metric);
  if (std::isnan(v)) return !c.metrics.identical;
  return engine::smaller_is_more_changed(t.metric) ? v < t.limit : v > t.limit;
}

std::string cell(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

void print_table(const engine::TensorMatching& matching, const std::vector<const engine::TensorComparison*>& order,
                 const Options& opt) {
  std::printf("%zu matched (%s), %zu shape mismatched, %zu only in A, %zu only in B\n", matching.matched.size(),
              matching.naming.c_str(), matching.shape_mismatched.size(), matching.only_a.size(), matching.only_b.size());
  const size_t shown = opt.limit == 0 ? order.size() : std::min(opt.limit, order.size());
  size_t identical = 0;
  for (const auto* c : order) identical += c->error.empty() && c->metrics.identical;
  std::printf("%zu identical bit for bit; most changed first by %s%s\n", identical, opt.sort.c_str(),
              shown < order.size() ? (", " + std::to_string(shown) + " shown").c_str() : "");
  std::printf("  %-44s %-6s %-6s %10s %10s %10s %10s %9s %12s\n", "tensor", "A", "B", "rel_fro", "max_abs", "rmse",
              "cosine", "snr_db", "differing");
  for (size_t i = 0; i < shown; ++i) {
    const auto& c = *order[i];
    const std::string name = printable(c.match.a->name, 44);
    std::printf("  %-44s %-6s %-6s", name.c_str(), std::string(dtype_name(c.match.a->dtype)).c_str(),
                std::string(dtype_name(c.match.b->dtype)).c_str());
    if (!c.error.empty()) {
      std::printf(" %s\n", printable(c.error, 300).c_str());
      continue;
    }
    std::printf(" %10s %10s %10s %10s %9s %12llu", cell(c.metrics.rel_frobenius).c_str(),
                cell(c.metrics.max_abs_diff).c_str(), cell(c.metrics.rmse).c_str(), cell(c.metrics.cosine).c_str(),
                cell(c.metrics.snr_db).c_str(), static_cast<unsigned long long>(c.stats.differing));
    if (c.match.a->name != c.match.b->name) std::printf("  = %s", printable(c.match.b->name, 60).c_str());
    if (!c.match.transform.identity()) std::printf("  [%s]", c.match.transform.describe().c_str());
    std::printf("\n");
  }
  for (const auto& m : matching.shape_mismatched) {
    std::printf("  shape differs: %s %s vs %s %s\n", printable(m.a->name, 60).c_str(), m.a->shape_string().c_str(),
                printable(m.b->name, 60).c_str(), m.b->shape_string().c_str());
  }
  for (const auto* t : matching.only_a) std::printf("  only in A: %s\n", printable(t->name, 80).c_str());
  for (const auto* t : matching.only_b) std::printf("  only in B: %s\n", printable(t->name, 80).c_str());
  std::fflush(stdout);
}

void print_csv(const std::vector<const engine::TensorComparison*>& order, const engine::TensorMatching& matching) {
  std::cout << "a,b,a_dtype,b_dtype,status";
  for (const auto& n : engine::diff_metric_names()) std::cout << "," << n;
  std::cout << ",max_abs_index,transform,error\n";
  for (const auto* c : order) {
    std::cout << csv_field(c->match.a->name) << "," << csv_field(c->match.b->name) << ","
              << dtype_name(c->match.a->dtype) << "," << dtype_name(c->match.b->dtype) << ","
              << (!c->error.empty() ? "error" : c->metrics.identical ? "identical" : "differs");
    for (const auto& n : engine::diff_metric_names()) {
      std::cout << "," << (c->error.empty() ? format_double(engine::diff_metric(*c, n)) : "");
    }
    std::cout << "," << (c->error.empty() && c->stats.max_abs_index != UINT64_MAX ? std::to_string(c->stats.max_abs_index) : "")
              << "," << csv_field(c->match.transform.describe()) << "," << csv_field(c->error) << "\n";
  }
  for (const auto& m : matching.shape_mismatched) {
    std::cout << csv_field(m.a->name) << "," << csv_field(m.b->name) << "," << dtype_name(m.a->dtype) << ","
              << dtype_name(m.b->dtype) << ",shape_mismatch" << std::string(engine::diff_metric_names().size() + 3, ',') << "\n";
  }
  for (const auto* t : matching.only_a) {
    std::cout << csv_field(t->name) << ",," << dtype_name(t->dtype) << ",,only_a"
              << std::string(engine::diff_metric_names().size() + 3, ',') << "\n";
  }
  for (const auto* t : matching.only_b) {
    std::cout << "," << csv_field(t->name) << ",," << dtype_name(t->dtype) << ",only_b"
              << std::string(engine::diff_metric_names().size() + 3, ',') << "\n";
  }
}

int run_diff(const Options& opt) {
  auto thresholds = parse_thresholds(opt.fail_above);
  if (!thresholds.ok()) {
    print_error(thresholds.status().message());
    return kExitUsage;
  }
  const auto& names = engine::diff_metric_names();
  if (std::find(names.begin(), names.end(), opt.sort) == names.end()) {
    print_error("--sort '" + opt.sort + "' is not a metric");
    return kExitUsage;
  }
  auto a = open_or_report(opt.a, opt.open);
  if (!a) return kExitUserError;
  auto b = open_or_report(opt.b, opt.open);
  if (!b) return kExitUserError;
  auto session = open_session_or_report(opt.compute);
  if (!session) return kExitUserError;
  engine::Records records;
  const reports::DiffRequest request{opt.globs, opt.sort, opt.map, opt.threads};
  ProgressDisplay progress("comparing");
  auto report = reports::diff_report(session->scheduler(), *a, *b, request, records, bytes_progress(progress));
  progress.finish();
  if (!report.ok()) {
    print_error(report.status().message());
    return kExitUserError;
  }
  const engine::TensorMatching& matching = report->matching;
  std::vector<const engine::TensorComparison*> order;
  for (const auto& c : report->comparisons) order.push_back(&c);

  size_t over = 0, failed = 0;
  std::vector<std::string> gate_failures;
  for (const auto* c : order) {
    failed += !c->error.empty();
    for (const auto& t : *thresholds) {
      if (exceeds(*c, t)) {
        ++over;
        gate_failures.push_back(quoted_name(c->match.a->name, 80) + ": " + t.metric + " " +
                                (c->error.empty() ? cell(engine::diff_metric(*c, t.metric)) : "not computed") +
                                (engine::smaller_is_more_changed(t.metric) ? " < " : " > ") + cell(t.limit));
        break;
      }
    }
  }
  const size_t unmatched = matching.only_a.size() + matching.only_b.size() + matching.shape_mismatched.size();

  if (opt.json) {
    auto j = reports::diff_document(*a, *b, request, *report, nullptr);
    if (!thresholds->empty()) {
      j["gate"] = {{"thresholds", opt.fail_above}, {"exceeded", gate_failures},
                   {"passed", gate_failures.empty() && !(opt.fail_on_unmatched && unmatched > 0)}};
    }
    if (opt.compute.explain) j["placements"] = placements_json(records);
    std::cout << json_text(j, 2) << "\n";
  } else if (opt.csv) {
    print_csv(order, matching);
    if (opt.compute.explain) print_placements(std::cerr, records);
  } else {
    print_table(matching, order, opt);
    if (opt.compute.explain) print_placements(std::cout, records);
  }
  note_unmet_preferences(records);

  if (failed > 0) {
    const auto* first = *std::find_if(order.begin(), order.end(), [](const auto* c) { return !c->error.empty(); });
    print_error(std::to_string(failed) + " of " + std::to_string(order.size()) + " matched tensors could not be compared (first: " +
                quoted_name(first->match.a->name, 80) + ": " + first->error + ")");
    return kExitUserError;
  }
  if (over > 0) return report_gate_failure(gate_failures);
  if (opt.fail_on_unmatched && unmatched > 0) {
    std::cerr << "tensormorph: gate failed: " << unmatched << " tensor" << (unmatched == 1 ? "" : "s")
              << " without a counterpart of the same shape\n";
    return kExitGateFailed;
  }
  return kExitOk;
}

}  // namespace

Command add_diff_command(CLI::App& app) {
  auto opt = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand("diff", "What changed between two checkpoints, tensor by tensor, most changed first");
  sub->add_option("a", opt->a, "The first checkpoint (the reference: relative metrics divide by its norms)")->required();
  sub->add_option("b", opt->b, "The second checkpoint")->required();
  sub->add_option("--tensor", opt->globs, "Only tensors whose names (on either side) match these shell globs");
  std::string metrics;
  for (const auto& n : engine::diff_metric_names()) metrics += (metrics.empty() ? "" : ", ") + n;
  sub->add_option("--sort", opt->sort, "Order the table by this metric, most changed first: " + metrics);
  sub->add_option("--map", opt->map, "A file of 'NAME_IN_A NAME_IN_B' lines pairing tensors by hand");
  sub->add_option("--fail-above", opt->fail_above,
                  "METRIC=VALUE: exit 4 when any tensor exceeds it (cosine and snr_db: falls below it); repeatable");
  sub->add_flag("--fail-on-unmatched", opt->fail_on_unmatched,
                "Exit 4 when a tensor exists on one side only or its shapes differ");
  sub->add_option("--limit", opt->limit, "Rows in the table (default all; JSON and CSV hold all)");
  auto* json = sub->add_flag("--json", opt->json, "Print JSON (schema tensormorph.diff/1)");
  sub->add_flag("--csv", opt->csv, "Print CSV, one line per tensor")->excludes(json);
  sub->add_option("--threads", opt->threads, "CPU threads (default: all cores)");
  add_compute_options(sub, opt->compute);
  add_open_options(sub, opt->open);
  return {sub, [opt]() { return run_diff(*opt); }};
}

}  // namespace tensormorph::cli
