// `tensormorph quantize-error`: what quantization cost. Against a reference checkpoint
// (--reference: a GGUF's quantized tensors against the original they came from), or what a ggml
// type would cost (--type: each tensor quantized in memory by ggml's reference quantizer).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>

#include "cli/commands.h"
#include "cli/format_util.h"
#include "core/printable.h"
#include "cli/progress.h"
#include "reports/quantize_error_report.h"

namespace tensormorph::cli {
namespace {

struct Options {
  std::string path;
  std::string reference;
  std::string types;
  std::string map;
  std::vector<std::string> globs;
  std::vector<std::string> fail_above;
  bool rows = false;
  bool all_ranks = false;
  bool json = false;
  bool csv = false;
  uint32_t threads = 0;
  ComputeOptions compute;
  OpenOptions open;
};

using Entry = reports::QuantizeErrorEntry;

const std::vector<std::string>& metric_names() {
  static const std::vector<std::string> names = {"rmse", "max_abs", "p95_abs", "p99_abs", "rel_rms"};
  return names;
}

double metric(const engine::QuantizationError& e, const std::string& name) {
  if (name == "rmse") return e.metrics.rmse;
  if (name == "max_abs") return e.metrics.max_abs_diff;
  if (name == "p95_abs") return e.p95_abs;
  if (name == "p99_abs") return e.p99_abs;
  return e.metrics.rel_frobenius;
}

std::string cell(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

void print_table(const std::vector<Entry>& entries, const std::map<DType, reports::QuantizeErrorTotal>& totals) {
  std::printf("  %-44s %-7s %-6s %10s %10s %10s %10s %10s %8s\n", "tensor", "type", "from", "rmse", "max_abs", "p95_abs",
              "p99_abs", "rel_rms", "snr_db");
  for (const auto& e : entries) {
    std::printf("  %-44s %-7s", printable(e.tensor, 44).c_str(), std::string(dtype_name(e.type)).c_str());
    if (!e.skipped.empty() || !e.error.empty()) {
      std::printf(" %s: %s\n", e.error.empty() ? "skipped" : "error", printable(e.error.empty() ? e.skipped : e.error, 300).c_str());
      continue;
    }
    const auto& r = e.result;
    std::printf(" %-6s %10s %10s %10s %10s %10s %8s\n", std::string(dtype_name(r.reference)).c_str(),
                cell(r.metrics.rmse).c_str(), cell(r.metrics.max_abs_diff).c_str(), cell(r.p95_abs).c_str(),
                cell(r.p99_abs).c_str(), cell(r.metrics.rel_frobenius).c_str(), cell(r.metrics.snr_db).c_str());
  }
  for (const auto& [type, t] : totals) {
    std::printf("  total %-7s over %llu tensors: rmse %s, max_abs %s, rel_rms %s\n", std::string(dtype_name(type)).c_str(),
                static_cast<unsigned long long>(t.tensors), cell(t.rmse()).c_str(), cell(t.max_abs).c_str(),
                cell(t.rel_rms()).c_str());
  }
  std::fflush(stdout);
}

void print_csv(const std::vector<Entry>& entries) {
  std::cout << "tensor,reference_tensor,type,reference_type,rmse,max_abs,p50_abs,p95_abs,p99_abs,rel_rms,snr_db,mean_error,"
               "status\n";
  for (const auto& e : entries) {
    std::cout << csv_field(e.tensor) << "," << csv_field(e.reference_tensor) << "," << dtype_name(e.type) << ",";
    if (!e.skipped.empty() || !e.error.empty()) {
      std::cout << ",,,,,,,,," << csv_field(e.error.empty() ? "skipped: " + e.skipped : "error: " + e.error) << "\n";
      continue;
    }
    const auto& r = e.result;
    std::cout << dtype_name(r.reference) << "," << format_double(r.metrics.rmse) << "," << format_double(r.metrics.max_abs_diff)
              << "," << format_double(r.p50_abs) << "," << format_double(r.p95_abs) << "," << format_double(r.p99_abs) << ","
              << format_double(r.metrics.rel_frobenius) << "," << format_double(r.metrics.snr_db) << ","
              << format_double(-r.metrics.mean_diff) << ",ok\n";
  }
}

int run(const Options& opt) {
  if (opt.reference.empty() == opt.types.empty()) {
    print_error("quantize-error needs exactly one of --reference REF (measure against an original) or --type T,... (what-if)");
    return kExitUsage;
  }
  std::vector<std::pair<std::string, double>> limits;
  for (const auto& spec : opt.fail_above) {
    const auto eq = spec.find('=');
    const std::string name = spec.substr(0, eq);
    char* end = nullptr;
    const double v = eq == std::string::npos ? 0 : std::strtod(spec.c_str() + eq + 1, &end);
    if (eq == std::string::npos || std::find(metric_names().begin(), metric_names().end(), name) == metric_names().end() ||
        end == spec.c_str() + eq + 1 || *end != '\0') {
      print_error("--fail-above '" + spec + "': expected METRIC=VALUE with METRIC one of rmse, max_abs, p95_abs, p99_abs, rel_rms");
      return kExitUsage;
    }
    limits.emplace_back(name, v);
  }
  std::vector<DType> types;
  if (!opt.types.empty()) {
    auto parsed = reports::parse_quantized_types(opt.types);
    if (!parsed.ok()) {
      print_error(parsed.status().message());
      return kExitUsage;
    }
    types = *parsed;
  }
  auto ckpt = open_or_report(opt.path, opt.open);
  if (!ckpt) return kExitUserError;
  std::unique_ptr<Checkpoint> ref;
  if (!opt.reference.empty() && !(ref = open_or_report(opt.reference, opt.open))) return kExitUserError;
  auto session = open_session_or_report(opt.compute);
  if (!session) return kExitUserError;

  engine::Records records;
  const reports::QuantizeErrorRequest request{ref.get(), types, opt.globs, opt.map, opt.rows, opt.all_ranks, opt.threads};
  ProgressDisplay progress(ref ? "measuring" : "quantizing");
  auto report = reports::quantize_error_report(session->scheduler(), *ckpt, request, records, bytes_progress(progress));
  progress.finish();
  if (!report.ok()) {
    print_error(report.status().message());
    return kExitUserError;
  }
  const std::vector<Entry>& entries = report->entries;
  size_t failed = 0;
  std::vector<std::string> over;
  for (const auto& e : entries) {
    failed += !e.error.empty();
    if (!e.skipped.empty() || !e.error.empty()) continue;
    for (const auto& [name, limit] : limits) {
      if (metric(e.result, name) > limit) {
        over.push_back(quoted_name(e.tensor, 80) + " " + std::string(dtype_name(e.type)) + ": " + name + " " +
                       cell(metric(e.result, name)) + " > " + cell(limit));
        break;
      }
    }
  }

  if (opt.json) {
    auto j = reports::quantize_error_document(*ckpt, request, *report, nullptr);
    if (!limits.empty()) j["gate"] = {{"thresholds", opt.fail_above}, {"exceeded", over}, {"passed", over.empty()}};
    if (opt.compute.explain) j["placements"] = placements_json(records);
    std::cout << json_text(j, 2) << "\n";
  } else if (opt.csv) {
    print_csv(entries);
    if (opt.compute.explain) print_placements(std::cerr, records);
  } else {
    print_table(entries, report->totals);
    if (opt.compute.explain) print_placements(std::cout, records);
  }
  note_unmet_preferences(records);
  if (failed > 0) {
    const auto& first = *std::find_if(entries.begin(), entries.end(), [](const Entry& e) { return !e.error.empty(); });
    print_error(std::to_string(failed) + " measurements failed (first: " + quoted_name(first.tensor, 80) + ": " + first.error + ")");
    return kExitUserError;
  }
  if (!over.empty()) return report_gate_failure(over);
  return kExitOk;
}

}  // namespace

Command add_quantize_error_command(CLI::App& app) {
  auto opt = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand("quantize-error", "What quantization cost: measured against a reference, or what-if for ggml types");
  sub->add_option("path", opt->path, "The checkpoint (quantized with --reference; the original with --type)")->required();
  sub->add_option("--reference", opt->reference, "The original the quantized tensors of PATH came from");
  sub->add_option("--type", opt->types, "What-if: quantize each tensor to these types in memory (Q4_0,Q4_K,Q8_0,...)");
  sub->add_option("--map", opt->map, "With --reference: a file of 'NAME_IN_PATH NAME_IN_REFERENCE' lines");
  sub->add_option("--tensor", opt->globs, "Only tensors whose names match these shell globs");
  sub->add_option("--fail-above", opt->fail_above, "METRIC=VALUE (rmse, max_abs, p95_abs, p99_abs, rel_rms): exit 4 when exceeded");
  sub->add_flag("--rows", opt->rows, "JSON: the error statistics of every row too");
  sub->add_flag("--all-ranks", opt->all_ranks, "What-if: include 1-D tensors (llama.cpp keeps norms unquantized)");
  auto* json = sub->add_flag("--json", opt->json, "Print JSON (schema tensormorph.quantize_error/1)");
  sub->add_flag("--csv", opt->csv, "Print CSV, one line per tensor and type")->excludes(json);
  sub->add_option("--threads", opt->threads, "CPU threads (default: all cores)");
  add_compute_options(sub, opt->compute);
  add_open_options(sub, opt->open);
  return {sub, [opt]() { return run(*opt); }};
}

}  // namespace tensormorph::cli
