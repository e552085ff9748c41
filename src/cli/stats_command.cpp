// `tensormorph stats`: exact per-tensor statistics, computed in float64 from decoded values.
#include <fnmatch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>

#include "cli/commands.h"
#include "cli/format_util.h"
#include "ops/pyramid.h"
#include "tensormorph/decode.h"

namespace tensormorph::cli {
namespace {

struct Options {
  std::string path;
  std::vector<std::string> globs;
  bool json = false;
  bool csv = false;
  std::string sort = "file";
  uint32_t tile = ops::kDefaultTile;
  uint32_t threads = 0;
  ComputeOptions compute;
};

// Summary of one tensor. NaN and ±Inf are counted, never folded into min/max/mean.
struct TensorStats {
  const TensorInfo* tensor = nullptr;
  std::string error;  // non-empty when the tensor could not be decoded
  uint64_t count = 0, nan = 0, pos_inf = 0, neg_inf = 0, zeros = 0, finite = 0;
  double min = 0, max = 0, absmax = 0, mean = 0, std = 0;
};

TensorStats from_index(const TensorInfo& t, const IndexedCheckpoint& indexed) {
  TensorStats s;
  s.tensor = &t;
  s.count = t.elements();
  const index::TensorPyramid* pyramid = nullptr;
  for (const auto& p : indexed.contents.tensors) {
    if (p.name == t.name) pyramid = &p;
  }
  if (pyramid == nullptr) {
    s.error = dtype_decodable(t.dtype) ? "not indexed" : std::string(dtype_not_decodable_reason(t.dtype));
    for (const auto& why : indexed.report.skipped) {
      if (why.rfind(t.name + ": ", 0) == 0) s.error = why.substr(t.name.size() + 2);
    }
    return s;
  }
  const ops::TensorSummary sum = ops::summarize(pyramid->levels.back().tiles[0]);
  s.nan = sum.nan;
  s.pos_inf = sum.pos_inf;
  s.neg_inf = sum.neg_inf;
  s.zeros = sum.zeros;
  s.finite = sum.finite;
  s.min = sum.min;
  s.max = sum.max;
  s.absmax = sum.absmax;
  s.mean = sum.mean();
  s.std = sum.stddev();
  return s;
}

bool selected(const TensorInfo& t, const std::vector<std::string>& globs) {
  if (globs.empty()) return true;
  return std::any_of(globs.begin(), globs.end(),
                     [&](const std::string& g) { return fnmatch(g.c_str(), t.name.c_str(), 0) == 0; });
}

double sort_value(const TensorStats& s, const std::string& key) {
  if (key == "absmax") return s.absmax;
  if (key == "std") return s.std;
  if (key == "mean") return s.mean;
  if (key == "min") return s.min;
  if (key == "max") return s.max;
  if (key == "nan") return static_cast<double>(s.nan);
  if (key == "inf") return static_cast<double>(s.pos_inf + s.neg_inf);
  if (key == "zeros" || key == "sparsity") return s.count ? static_cast<double>(s.zeros) / static_cast<double>(s.count) : 0;
  if (key == "count" || key == "params") return static_cast<double>(s.count);
  return 0;
}

nlohmann::ordered_json row_json(const TensorStats& s) {
  const TensorInfo& t = *s.tensor;
  nlohmann::ordered_json j = {{"name", t.name}, {"dtype", std::string(dtype_name(t.dtype))}, {"shape", t.shape},
                              {"count", s.count}};
  if (dtype_info(t.dtype).is_quantized) j["storage_type"] = std::string(dtype_name(t.dtype));
  if (!s.error.empty()) {
    j["error"] = s.error;
    return j;
  }
  auto num = [](double v) { return std::isfinite(v) ? nlohmann::ordered_json(v) : nlohmann::ordered_json(nullptr); };
  j["finite"] = s.finite;
  j["mean"] = num(s.mean);
  j["std"] = num(s.std);
  j["min"] = num(s.min);
  j["max"] = num(s.max);
  j["absmax"] = num(s.absmax);
  j["nan"] = s.nan;
  j["pos_inf"] = s.pos_inf;
  j["neg_inf"] = s.neg_inf;
  j["zeros"] = s.zeros;
  j["sparsity"] = s.count ? static_cast<double>(s.zeros) / static_cast<double>(s.count) : 0.0;
  return j;
}

void print_table(const std::vector<TensorStats>& rows) {
  size_t w = 4;
  for (const auto& s : rows) w = std::max(w, s.tensor->name.size());
  w = std::min<size_t>(w, 56);
  std::printf("%-*s  %-7s  %10s  %11s  %11s  %11s  %11s  %11s  %5s  %5s  %8s\n", static_cast<int>(w), "name", "dtype",
              "count", "mean", "std", "min", "max", "absmax", "nan", "inf", "zeros");
  for (const auto& s : rows) {
    const TensorInfo& t = *s.tensor;
    if (!s.error.empty()) {
      std::printf("%-*s  %-7s  %10s  %s\n", static_cast<int>(w), t.name.c_str(),
                  std::string(dtype_name(t.dtype)).c_str(), human_count(s.count).c_str(), s.error.c_str());
      continue;
    }
    double sparsity = s.count ? 100.0 * static_cast<double>(s.zeros) / static_cast<double>(s.count) : 0.0;
    std::printf("%-*s  %-7s  %10s  %11.4g  %11.4g  %11.4g  %11.4g  %11.4g  %5llu  %5llu  %7.2f%%\n",
                static_cast<int>(w), t.name.c_str(), std::string(dtype_name(t.dtype)).c_str(),
                human_count(s.count).c_str(), s.mean, s.std, s.min, s.max, s.absmax,
                static_cast<unsigned long long>(s.nan), static_cast<unsigned long long>(s.pos_inf + s.neg_inf),
                sparsity);
  }
  std::fflush(stdout);
}

void print_csv(const std::vector<TensorStats>& rows) {
  std::cout << "name,dtype,count,finite,mean,std,min,max,absmax,nan,pos_inf,neg_inf,zeros,error\n";
  for (const auto& s : rows) {
    std::string name = s.tensor->name;
    if (name.find_first_of(",\"\n") != std::string::npos) {
      std::string q = "\"";
      for (char c : name) q += (c == '"') ? std::string("\"\"") : std::string(1, c);
      name = q + "\"";
    }
    std::cout << name << "," << dtype_name(s.tensor->dtype) << "," << s.count << "," << s.finite << ","
              << format_double(s.mean) << "," << format_double(s.std) << "," << format_double(s.min) << ","
              << format_double(s.max) << "," << format_double(s.absmax) << "," << s.nan << "," << s.pos_inf << ","
              << s.neg_inf << "," << s.zeros << "," << (s.error.empty() ? "" : "\"" + s.error + "\"") << "\n";
  }
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
  return {sub, [opt]() {
            auto ckpt = open_or_report(opt->path);
            if (!ckpt) return static_cast<int>(kExitUserError);
            auto session = open_session_or_report(opt->compute);
            if (!session) return static_cast<int>(kExitUserError);
            ops::Records records;
            auto indexed = ensure_index(*session, *ckpt, {opt->tile, opt->threads, "", &records});
            if (!indexed.ok()) {
              print_error(indexed.status().message());
              return static_cast<int>(kExitUserError);
            }
            std::vector<TensorStats> rows;
            for (const TensorInfo& t : ckpt->tensors()) {
              if (selected(t, opt->globs)) rows.push_back(from_index(t, *indexed));
            }
            if (rows.empty() && !opt->globs.empty()) {
              print_error(ckpt->path().string() + ": no tensor matches the given --tensor patterns");
              return static_cast<int>(kExitUserError);
            }
            if (opt->sort == "name") {
              std::stable_sort(rows.begin(), rows.end(),
                               [](const auto& a, const auto& b) { return a.tensor->name < b.tensor->name; });
            } else if (opt->sort != "file") {
              std::stable_sort(rows.begin(), rows.end(), [&](const auto& a, const auto& b) {
                return sort_value(a, opt->sort) > sort_value(b, opt->sort);
              });
            }
            if (opt->json) {
              nlohmann::ordered_json j = {{"schema", "tensormorph.stats/1"}, {"path", ckpt->path().string()}};
              j["tensors"] = nlohmann::ordered_json::array();
              for (const auto& s : rows) j["tensors"].push_back(row_json(s));
              if (opt->compute.explain) j["placements"] = placements_json(records);
              std::cout << j.dump(2) << "\n";
            } else if (opt->csv) {
              print_csv(rows);
              if (opt->compute.explain) print_placements(std::cerr, records);
            } else {
              print_table(rows);
              if (opt->compute.explain) print_placements(std::cout, records);
            }
            bool any_error = std::any_of(rows.begin(), rows.end(), [](const auto& s) { return !s.error.empty(); });
            return static_cast<int>(any_error && rows.size() == 1 ? kExitUserError : kExitOk);
          }};
}

}  // namespace tensormorph::cli
