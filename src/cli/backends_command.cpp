// `tensormorph backends`: every backend found, its device traits and its capability matrix.
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "cli/format_util.h"
#include "core/dtype_abi.h"
#include "engine/compute_session.h"

namespace tensormorph::cli {
namespace {

struct Options {
  bool json = false;
  std::string compute;
  std::vector<std::string> plugin_dirs;
};

const char* level_name(TM_SupportLevel level) {
  switch (level) {
    case TM_SUPPORT_NONE: return "none";
    case TM_SUPPORT_PARTIAL: return "partial";
    case TM_SUPPORT_FULL: return "full";
  }
  return "?";
}

nlohmann::ordered_json traits_json(const compute::Backend& b) {
  const TM_DeviceTraits& t = b.traits();
  return {{"device", t.device_name},
          {"memory_bytes", t.memory_bytes},
          {"memory_spaces", t.memory_space_count},
          {"host_memory_visible", t.host_memory_visible != 0},
          {"host_to_device_gbps", t.host_to_device_gbps},
          {"device_to_host_gbps", t.device_to_host_gbps},
          {"bandwidth", t.bandwidth_measured ? "measured" : "declared"},
          {"compute_units", t.compute_units}};
}

// Operation x dtype -> support, for every registered op and every dtype.
nlohmann::ordered_json capability_json(const compute::Backend& b, const compute::OpRegistry& registry) {
  nlohmann::ordered_json caps = nlohmann::ordered_json::object();
  for (const auto& [id, def] : registry.all()) {
    nlohmann::ordered_json per_dtype = nlohmann::ordered_json::object();
    for (int d = 0; d < static_cast<int>(DType::kCount); ++d) {
      const DType dtype = static_cast<DType>(d);
      auto support = b.query(id, to_abi_dtype(dtype), TM_SHAPE_MATRIX);
      nlohmann::ordered_json cell;
      if (!support.ok()) {
        cell = {{"level", "error"}, {"reason", support.status().message()}};
      } else {
        cell = {{"level", level_name(support->level)}};
        if (support->level != TM_SUPPORT_NONE) cell["exactness"] = compute::exactness_name(support->exactness);
        if (support->exactness == TM_EXACT_BOUNDED) cell["error_bound"] = support->error_bound;
        if (support->reason[0]) cell["reason"] = support->reason;
      }
      per_dtype[std::string(dtype_name(dtype))] = cell;
    }
    caps[id] = per_dtype;
  }
  return caps;
}

void print_text(engine::ComputeSession& session) {
  std::cout << "backends\n";
  for (const auto& r : session.load_reports()) {
    std::cout << "  " << (r.name.empty() ? r.library_path : r.name) << "  "
              << (r.builtin ? "built-in" : "plugin " + r.library_path) << "  "
              << (r.available ? "available" : "unavailable") << (r.detail.empty() ? "" : ": " + r.detail) << "\n";
  }
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
    for (const auto& [id, def] : session.registry().all()) {
      std::string full, partial, bounded, none;
      for (int d = 0; d < static_cast<int>(DType::kCount); ++d) {
        const DType dtype = static_cast<DType>(d);
        auto s = b->query(id, to_abi_dtype(dtype), TM_SHAPE_MATRIX);
        std::string name(dtype_name(dtype));
        if (!s.ok() || s->level == TM_SUPPORT_NONE) none += " " + name;
        else if (s->exactness != TM_EXACT_BITWISE) bounded += " " + name;
        else if (s->level == TM_SUPPORT_PARTIAL) partial += " " + name;
        else full += " " + name;
      }
      std::printf("  %-18s bitwise:%s\n", id.c_str(), full.empty() ? " (none)" : full.c_str());
      if (!partial.empty()) std::printf("  %-18s partial:%s\n", "", partial.c_str());
      if (!bounded.empty()) std::printf("  %-18s bounded/approximate:%s\n", "", bounded.c_str());
    }
  }
  std::fflush(stdout);
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
            nlohmann::ordered_json j = {{"schema", "tensormorph.backends/1"}};
            j["abi"] = std::to_string(TM_PLUGIN_ABI_MAJOR) + "." + std::to_string(TM_PLUGIN_ABI_MINOR);
            j["sources"] = nlohmann::ordered_json::array();
            for (const auto& r : (*session)->load_reports()) {
              j["sources"].push_back({{"name", r.name}, {"builtin", r.builtin}, {"library", r.library_path},
                                      {"available", r.available}, {"detail", r.detail}});
            }
            j["backends"] = nlohmann::ordered_json::array();
            for (const auto& b : (*session)->backends()) {
              j["backends"].push_back({{"name", b->name()},
                                       {"version", b->version()},
                                       {"builtin", b->origin().builtin},
                                       {"traits", traits_json(*b)},
                                       {"capabilities", capability_json(*b, (*session)->registry())}});
            }
            j["constraints"] = (*session)->scheduler().constraints().to_string();
            std::cout << json_text(j, 2) << "\n";
            return static_cast<int>(kExitOk);
          }};
}

}  // namespace tensormorph::cli
