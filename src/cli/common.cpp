#include <algorithm>
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "cli/name_suggestions.h"
#include "core/printable.h"
#include "tensormorph/open.h"

namespace tensormorph::cli {

std::optional<std::vector<const TensorInfo*>> select_tensors_or_report(const Checkpoint& ckpt,
                                                                       const std::vector<std::string>& globs) {
  std::vector<const TensorInfo*> tensors;
  for (const TensorInfo& t : ckpt.tensors()) {
    if (reports::name_selected(t.name, globs)) tensors.push_back(&t);
  }
  if (tensors.empty() && !globs.empty()) {
    std::string patterns, close;
    std::vector<std::string> suggested;
    for (const std::string& g : globs) {
      patterns += (patterns.empty() ? "" : ", ") + quoted_name(g);
      for (std::string& name : closest_tensor_names(ckpt, g)) {
        if (suggested.size() < 5 && std::find(suggested.begin(), suggested.end(), name) == suggested.end()) {
          suggested.push_back(std::move(name));
        }
      }
    }
    print_error(ckpt.path().string() + ": no tensor matches the given --tensor patterns (" + patterns + ")" +
                close_names_text(suggested, ckpt.tensors().size()));
    return std::nullopt;
  }
  return tensors;
}

int exit_after_failures(const Checkpoint& ckpt, size_t requested, size_t failed, const std::string& first_failure) {
  if (failed == 0) return kExitOk;
  print_error(ckpt.path().string() + ": " + std::to_string(failed) + " of " + std::to_string(requested) +
              " requested tensors could not be computed (first: " + first_failure + ")");
  return kExitUserError;
}

int report_gate_failure(const std::vector<std::string>& offenders) {
  std::cerr << "tensormorph: gate failed: " << offenders.size() << (offenders.size() == 1 ? " tensor" : " tensors")
            << " above the limit";
  for (size_t i = 0; i < std::min<size_t>(offenders.size(), 5); ++i) std::cerr << "\n  " << offenders[i];
  std::cerr << "\n";
  return kExitGateFailed;
}

void print_consent_ladders(const std::vector<const engine::LadderPlan*>& waiting, const std::string& consent) {
  constexpr size_t kShown = 5;
  for (size_t i = 0; i < std::min(waiting.size(), kShown); ++i) {
    const engine::LadderPlan& plan = *waiting[i];
    std::cerr << "tensormorph: needs consent: " << printable(plan.reason, 400) << "\n";
    if (!consent.empty()) std::cerr << "  the rung consented to ('" << consent << "') is not on offer for this tensor\n";
    if (plan.ladder.empty()) std::cerr << "  no rung can run within the constraints\n";
    for (const auto& rung : plan.ladder) {
      char cost[32];
      std::snprintf(cost, sizeof cost, "%.1f ms", rung.estimated_ns / 1e6);
      std::cerr << "  " << rung.id << std::string(12 - std::min<size_t>(11, rung.id.size()), ' ') << "about " << cost
                << " on " << rung.runs_on << ": " << rung.computes << "\n               bound: " << rung.error_bound << "\n";
    }
  }
  if (waiting.size() > kShown) std::cerr << "tensormorph: ... and " << waiting.size() - kShown << " more tensors need consent\n";
  if (!waiting.empty()) {
    std::cerr << "tensormorph: run again with --consent RUNG to accept a rung listed (approximate: the cheapest "
                 "below exact)\n";
  }
}

void print_error(const std::string& message) { std::cerr << "tensormorph: error: " << message << "\n"; }

void warn_unkept(const Status& kept) {
  if (kept.ok()) return;
  std::cerr << "tensormorph: warning: the results could not be kept (" << kept.message()
            << "): they will be computed again next time\n";
}

std::unique_ptr<Checkpoint> open_or_report(const std::string& path, const OpenOptions& options) {
  auto opened = open_checkpoint(path, options);
  if (!opened.ok()) {
    print_error(opened.status().message());
    return nullptr;
  }
  return std::move(opened).value();
}

}  // namespace tensormorph::cli

namespace tensormorph::cli {

void add_open_options(CLI::App* sub, OpenOptions& options) {
  sub->add_option("--tp-split", options.tensor_parallel_rules,
                  "How a Megatron set's tensor-parallel parts join where the layer name does not tell: GLOB=DIM, "
                  "GLOB=gated or GLOB=replicated (repeatable; the first match wins)");
}

void add_compute_options(CLI::App* sub, ComputeOptions& options) {
  sub->add_option("--compute", options.spec,
                  "Placement constraints for this run: prefer=X,never=Y,only=Z (names joined by +) or auto");
  sub->add_flag("--explain", options.explain, "Show where each operation ran and why");
  sub->add_option("--plugin-dir", options.plugin_dirs, "Extra plugin directories to search (before plugins.path)");
}

std::unique_ptr<engine::ComputeSession> open_session_or_report(const ComputeOptions& options) {
  auto session = engine::open_default_session(options.spec, options.opening, options.plugin_dirs);
  if (!session.ok()) {
    print_error(session.status().message());
    return nullptr;
  }
  for (const std::string& w : (*session)->warnings()) std::cerr << "tensormorph: warning: " << w << "\n";
  return std::move(session).value();
}

void print_placements(std::ostream& out, const engine::Records& records) {
  out << "\nplacements (" << records.size() << " operations)\n";
  // The tensor each operation served, when the records say: a column as wide as the longest name.
  constexpr size_t kMaxTensor = 48;
  size_t tensor_width = 0;
  for (const auto& r : records) tensor_width = std::max(tensor_width, printable(r.tensor, kMaxTensor).size());
  if (tensor_width > 0) tensor_width = std::max<size_t>(tensor_width, 6);
  auto tensor_cell = [&](const std::string& text) {
    if (tensor_width == 0) return std::string();
    std::string cell = text;
    cell.resize(std::max(cell.size(), tensor_width), ' ');
    return cell + " ";
  };
  char line[768];
  std::snprintf(line, sizeof line, "  %s%-16s %-8s %-10s %-10s %10s %10s %12s  %s\n", tensor_cell("tensor").c_str(),
                "operation", "dtype", "backend", "exactness", "est ms", "meas ms", "bytes moved", "why");
  out << line;
  for (const auto& r : records) {
    // The parts of an operation split across backends are indented above their merge.
    const std::string op = (r.split_group != 0 && !r.is_merge() ? "  " : "") + r.op;
    std::snprintf(line, sizeof line, "  %s%-16s %-8s %-10s %-10s %10.3f %10.3f %12llu  %s: %s\n",
                  tensor_cell(printable(r.tensor, kMaxTensor)).c_str(), op.c_str(), r.dtype.c_str(),
                  r.backend.c_str(), r.exactness.c_str(), r.estimated_ns / 1e6, r.measured_ns / 1e6,
                  static_cast<unsigned long long>(r.bytes_moved), compute::placement_reason_name(r.reason),
                  r.reason_detail.c_str());
    out << line;
  }
}

void note_unmet_preferences(const engine::Records& records) {
  size_t unmet = 0;
  std::string first;
  for (const auto& r : records) {
    if (r.reason != compute::PlacementReason::kPreferredUnavailable) continue;
    const std::string why = r.reason_detail.substr(0, r.reason_detail.find("; then the cheapest"));
    if (unmet++ == 0) first = r.op + (r.tensor.empty() ? "" : " of " + r.tensor) + " ran on " + r.backend + " (" + why + ")";
  }
  if (unmet == 0) return;
  std::cerr << "tensormorph: note: the preferred backend did not run " << unmet << " of " << records.size()
            << " operations; first: " << first << "\n";
}

}  // namespace tensormorph::cli
