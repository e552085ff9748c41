// `tensormorph backends`: every backend found, its device traits and its capability matrix.
#include <algorithm>
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "cli/format_util.h"
#include "core/dtype_abi.h"
#include "engine/compute_session.h"
#include "reports/backends_report.h"

namespace tensormorph::cli {
namespace {

struct Options {
  bool json = false;
  std::string compute;
  std::vector<std::string> plugin_dirs;
};

// Which dtypes one backend serves an operation for, in three classes.
struct OpSupport {
  std::string op;
  std::vector<DType> bitwise, partial, bounded;
};

std::vector<OpSupport> support_of(const compute::Backend& b, const compute::OpRegistry& registry) {
  std::vector<OpSupport> rows;
  for (const auto& [id, def] : registry.all()) {
    OpSupport row{id, {}, {}, {}};
    for (int d = 0; d < static_cast<int>(DType::kCount); ++d) {
      const DType dtype = static_cast<DType>(d);
      auto s = b.query(id, to_abi_dtype(dtype), TM_SHAPE_MATRIX);
      if (!s.ok() || s->level == TM_SUPPORT_NONE) continue;
      if (s->exactness != TM_EXACT_BITWISE) row.bounded.push_back(dtype);
      else if (s->level == TM_SUPPORT_PARTIAL) row.partial.push_back(dtype);
      else row.bitwise.push_back(dtype);
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

// The dtype sets the tables refer to, each listed once: "all" for every dtype, else a letter.
class DtypeSets {
 public:
  std::string label(const std::vector<DType>& set) {
    if (set.empty()) return "-";
    if (set.size() == static_cast<size_t>(DType::kCount)) return "all";
    for (size_t i = 0; i < sets_.size(); ++i) {
      if (sets_[i] == set) return name(i);
    }
    sets_.push_back(set);
    return name(sets_.size() - 1);
  }
  void print() const {
    std::cout << "\ndtype sets (\"all\": every one of the " << static_cast<int>(DType::kCount)
              << " dtypes; \"-\": none)\n";
    for (size_t i = 0; i < sets_.size(); ++i) {
      // A set of most dtypes reads better as what it lacks.
      std::vector<DType> lacking;
      for (int d = 0; d < static_cast<int>(DType::kCount); ++d) {
        if (std::find(sets_[i].begin(), sets_[i].end(), static_cast<DType>(d)) == sets_[i].end()) {
          lacking.push_back(static_cast<DType>(d));
        }
      }
      const bool by_complement = lacking.size() < sets_[i].size();
      std::string label = name(i);
      label.resize(std::max<size_t>(label.size(), 3), ' ');
      std::cout << wrapped("  " + label + " " + (by_complement ? "all but " : ""),
                           by_complement ? lacking : sets_[i])
                << "  (" << sets_[i].size() << ")\n";
    }
  }

 private:
  // `lead` then the dtype names, wrapped at 100 columns under the first name.
  static std::string wrapped(const std::string& lead, const std::vector<DType>& dtypes) {
    const size_t indent = lead.size() - (lead.ends_with("all but ") ? 8 : 0);
    std::string text = lead;
    size_t width = lead.size();
    for (size_t k = 0; k < dtypes.size(); ++k) {
      const std::string_view dtype = dtype_name(dtypes[k]);
      if (k > 0 && width + dtype.size() + 1 > 100) {
        text += "\n" + std::string(indent, ' ');
        width = indent;
      } else if (k > 0) {
        text += ' ';
        width += 1;
      }
      text += dtype;
      width += dtype.size();
    }
    return text;
  }

  static std::string name(size_t i) {
    std::string n(1, static_cast<char>('A' + i % 26));
    if (i >= 26) n += std::to_string(i / 26);
    return n;
  }
  std::vector<std::vector<DType>> sets_;
};

void print_text(engine::ComputeSession& session) {
  std::cout << "backends\n";
  for (const auto& r : session.load_reports()) {
    std::cout << "  " << (r.name.empty() ? r.library_path : r.name) << "  "
              << (r.builtin ? "built-in" : "plugin " + r.library_path) << "  "
              << (r.available ? "available" : "unavailable") << (r.detail.empty() ? "" : ": " + r.detail) << "\n";
  }
  DtypeSets sets;
  for (const auto& b : session.backends()) {
    const TM_DeviceTraits& t = b->traits();
    std::printf("\n%s  (%s)\n", b->name().c_str(), t.device_name);
    std::printf("  memory %.1f GiB, %u compute units, host memory %s", static_cast<double>(t.memory_bytes) / (1u << 30),
                t.compute_units, t.host_memory_visible ? "visible (no copies)" : "not visible");
    if (!t.host_memory_visible) {
      std::printf(", link %.1f / %.1f GB/s (%s)", t.host_to_device_gbps, t.device_to_host_gbps,
                  t.bandwidth_measured ? "measured" : "declared");
    }
    std::printf("\n");
    const std::vector<OpSupport> rows = support_of(*b, session.registry());
    int op_width = 9;
    for (const auto& row : rows) op_width = std::max(op_width, static_cast<int>(row.op.size()));
    std::printf("  %-*s  %-8s  %-8s  %s\n", op_width, "operation", "bitwise", "partial", "bounded/approximate");
    for (const auto& row : rows) {
      std::printf("  %-*s  %-8s  %-8s  %s\n", op_width, row.op.c_str(), sets.label(row.bitwise).c_str(),
                  sets.label(row.partial).c_str(), sets.label(row.bounded).c_str());
    }
  }
  std::fflush(stdout);
  sets.print();
  std::cout << "\nconstraints: " << session.scheduler().constraints().to_string() << "\n";
}

}  // namespace

Command add_backends_command(CLI::App& app) {
  auto opt = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand("backends", "List compute backends, their devices and what they support");
  sub->add_flag("--json", opt->json, "Print JSON (schema tensormorph.backends/1)");
  sub->add_option("--compute", opt->compute, "Constraints for this run: prefer=X,never=Y,only=Z or auto");
  sub->add_option("--plugin-dir", opt->plugin_dirs, "Extra plugin directories to search");
  return {sub, [opt]() {
            engine::SessionOptions options;
            auto settings = compute::load_settings(compute::settings_path());
            if (!settings.ok()) {
              print_error(settings.status().message());
              return static_cast<int>(kExitUserError);
            }
            options.settings = *settings;
            options.extra_plugin_dirs = opt->plugin_dirs;
            if (!opt->compute.empty()) {
              auto parsed = compute::parse_constraints(opt->compute);
              if (!parsed.ok()) {
                print_error(parsed.status().message());
                return static_cast<int>(kExitUsage);
              }
              options.override_constraints = *parsed;
            }
            auto session = engine::ComputeSession::open(options);
            if (!session.ok()) {
              print_error(session.status().message());
              return static_cast<int>(kExitUserError);
            }
            if (!opt->json) {
              print_text(**session);
              return static_cast<int>(kExitOk);
            }
            const auto j = reports::backends_document(**session);
            std::cout << json_text(j, 2) << "\n";
            return static_cast<int>(kExitOk);
          }};
}

}  // namespace tensormorph::cli
