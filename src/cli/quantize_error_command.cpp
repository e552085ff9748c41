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
#include "core/quantize/quantize.h"
#include "engine/quantization_error.h"

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

/// One measured (tensor, type).
struct Entry {
  std::string tensor;
  std::string reference_tensor;  // measured mode
  DType type = DType::kF32;
  std::string skipped;  // why it was not measured
  std::string error;
  engine::QuantizationError result;
};

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

Result<std::vector<DType>> parse_types(const std::string& list) {
  std::vector<DType> out;
  std::stringstream in(list);
  for (std::string name; std::getline(in, name, ',');) {
    if (name.empty()) continue;
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::toupper(c); });
    const auto t = dtype_from_name(name);
    if (!t || !engine::is_ggml_quantized(*t) || !dtype_encodable(*t)) {
      std::string known;
      for (int d = 0; d < static_cast<int>(DType::kCount); ++d) {
        const auto dt = static_cast<DType>(d);
        if (engine::is_ggml_quantized(dt) && dtype_encodable(dt)) known += (known.empty() ? "" : ",") + std::string(dtype_name(dt));
      }
      return Status::InvalidArgument("--type '" + name + "' is not a type with a ggml encoder (" + known + ")");
    }
    out.push_back(*t);
  }
  if (out.empty()) return Status::InvalidArgument("--type names no type");
  return out;
}

/// Totals per type over the measured tensors: the error of all their elements together.
struct Total {
  uint64_t tensors = 0, pairs = 0;
  double sum_sq = 0, ref_sq = 0, max_abs = 0;
};

void print_table(const std::vector<Entry>& entries, const std::map<DType, Total>& totals) {
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
                static_cast<unsigned long long>(t.tensors), cell(t.pairs ? std::sqrt(t.sum_sq / static_cast<double>(t.pairs)) : 0).c_str(),
                cell(t.max_abs).c_str(), cell(t.ref_sq > 0 ? std::sqrt(t.sum_sq / t.ref_sq) : 0).c_str());
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
    auto parsed = parse_types(opt.types);
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

  engine::QuantizationErrorOptions qopt;
  qopt.rows = opt.rows;
  engine::Records records;
  std::vector<Entry> entries;
  if (ref) {
    engine::NameMapping mapping;
    if (!opt.map.empty()) {
      auto read = engine::read_name_mapping(opt.map);
      if (!read.ok()) {
        print_error(read.status().message());
        return kExitUserError;
      }
      mapping = *read;
    }
    auto matched = engine::match_tensors(*ckpt, *ref, mapping);
    if (!matched.ok()) {
      print_error(matched.status().message());
      return kExitUserError;
    }
    std::vector<const TensorInfo*> selected;
    std::map<const TensorInfo*, engine::MatchedTensors> by_tensor;
    for (const auto& m : matched->matched) {
      if (!tensor_selected(*m.a, opt.globs) || !engine::is_ggml_quantized(m.a->dtype)) continue;
      selected.push_back(m.a);
      by_tensor[m.a] = m;
    }
    for (const auto* t : matched->only_a) {
      if (tensor_selected(*t, opt.globs) && engine::is_ggml_quantized(t->dtype)) {
        entries.push_back({t->name, "", t->dtype, "no tensor of the reference matches it", "", {}});
      }
    }
    for (const auto& m : matched->shape_mismatched) {
      if (tensor_selected(*m.a, opt.globs) && engine::is_ggml_quantized(m.a->dtype)) {
        entries.push_back({m.a->name, m.b->name, m.a->dtype, "the reference's shape is " + m.b->shape_string(), "", {}});
      }
    }
    for_each_tensor_with_progress("measuring", selected, [&](const TensorInfo& t) {
      const auto& m = by_tensor.at(&t);
      Entry e{t.name, m.b->name, t.dtype, "", "", {}};
      auto r = engine::measured_quantization_error(session->scheduler(), *ckpt, *ref, m, qopt, &records, opt.threads);
      if (r.ok()) e.result = std::move(r).value(); else e.error = r.status().message();
      entries.push_back(std::move(e));
    });
  } else {
    std::vector<const TensorInfo*> selected;
    for (const auto& t : ckpt->tensors()) {
      if (!tensor_selected(t, opt.globs)) continue;
      const bool source = dtype_info(t.dtype).is_float && !dtype_info(t.dtype).is_quantized;
      if (!source || (!opt.all_ranks && t.shape.size() < 2)) continue;
      selected.push_back(&t);
    }
    for_each_tensor_with_progress("quantizing", selected, [&](const TensorInfo& t) {
      for (const DType type : types) {
        Entry e{t.name, "", type, engine::what_if_obstacle(t, type), "", {}};
        if (e.skipped.empty()) {
          auto r = engine::what_if_quantization_error(session->scheduler(), *ckpt, t, type, qopt, &records, opt.threads);
          if (r.ok()) e.result = std::move(r).value(); else e.error = r.status().message();
        }
        entries.push_back(std::move(e));
      }
    });
  }
  if (entries.empty()) {
    print_error(ref ? "no quantized tensor of " + ckpt->path().string() + " was selected"
                    : "no floating-point tensor of rank 2 or more was selected (--all-ranks includes vectors)");
    return kExitUserError;
  }

  std::map<DType, Total> totals;
  size_t failed = 0;
  std::vector<std::string> over;
  for (const auto& e : entries) {
    failed += !e.error.empty();
    if (!e.skipped.empty() || !e.error.empty()) continue;
    Total& t = totals[e.type];
    ++t.tensors;
    t.pairs += e.result.stats.finite_pairs;
    t.sum_sq += e.result.stats.sum_sq_diff;
    t.ref_sq += e.result.stats.sum_sq_a;
    t.max_abs = std::max(t.max_abs, e.result.stats.max_abs_diff);
    for (const auto& [name, limit] : limits) {
      if (metric(e.result, name) > limit) {
        over.push_back(quoted_name(e.tensor, 80) + " " + std::string(dtype_name(e.type)) + ": " + name + " " +
                       cell(metric(e.result, name)) + " > " + cell(limit));
        break;
      }
    }
  }

  if (opt.json) {
    nlohmann::ordered_json j = {{"schema", "tensormorph.quantize_error/1"}, {"path", ckpt->path().string()}};
    if (ref) j["reference"] = ref->path().string();
    j["tensors"] = nlohmann::ordered_json::array();
    for (const auto& e : entries) {
      nlohmann::ordered_json t = {{"name", e.tensor}, {"type", std::string(dtype_name(e.type))}};
      if (!e.reference_tensor.empty()) t["reference_name"] = e.reference_tensor;
      if (!e.skipped.empty()) t["skipped"] = e.skipped;
      else if (!e.error.empty()) t["error"] = e.error;
      else t.update(engine::quantization_error_json(e.result));
      j["tensors"].push_back(t);
    }
    j["totals"] = nlohmann::ordered_json::array();
    for (const auto& [type, t] : totals) {
      j["totals"].push_back({{"type", std::string(dtype_name(type))}, {"tensors", t.tensors},
                             {"rmse", t.pairs ? std::sqrt(t.sum_sq / static_cast<double>(t.pairs)) : 0.0}, {"max_abs", t.max_abs},
                             {"rel_rms", t.ref_sq > 0 ? std::sqrt(t.sum_sq / t.ref_sq) : 0.0}});
    }
    if (!limits.empty()) j["gate"] = {{"thresholds", opt.fail_above}, {"exceeded", over}, {"passed", over.empty()}};
    if (opt.compute.explain) j["placements"] = placements_json(records);
    std::cout << json_text(j, 2) << "\n";
  } else if (opt.csv) {
    print_csv(entries);
    if (opt.compute.explain) print_placements(std::cerr, records);
  } else {
    print_table(entries, totals);
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
