// `tensormorph config get|set KEY [VALUE]`: the persisted settings (XDG config dir).
#include <iostream>

#include "cli/commands.h"
#include "compute/settings.h"

namespace tensormorph::cli {
namespace {

struct Options {
  std::string key;
  std::string value;
};

}  // namespace

Command add_config_command(CLI::App& app) {
  auto get_opt = std::make_shared<Options>();
  auto set_opt = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand("config", "Read or change persisted settings (" +
                                                   compute::settings_path().string() + ")");
  sub->require_subcommand(1);
  CLI::App* get = sub->add_subcommand("get", "Print a setting (compute, compute.memory_budget, compute.time_budget, compute.device_cache, compute.split, plugins.path)");
  get->add_option("key", get_opt->key, "Setting name; omit to print all");
  CLI::App* set = sub->add_subcommand("set", "Change a setting, e.g. `config set compute prefer=opencl,never=cuda`");
  set->add_option("key", set_opt->key, "Setting name")->required();
  set->add_option("value", set_opt->value, "New value (`auto` clears compute constraints)")->required();
  return {sub, [get, set_opt, get_opt]() {
            const auto path = compute::settings_path();
            auto settings = compute::load_settings(path);
            if (!settings.ok()) {
              print_error(settings.status().message());
              return static_cast<int>(kExitUserError);
            }
            if (get->parsed()) {
              std::vector<std::string> keys = {"compute", "compute.memory_budget", "compute.time_budget", "compute.device_cache", "compute.split", "plugins.path"};
              if (!get_opt->key.empty()) keys = {get_opt->key};
              for (const auto& k : keys) {
                auto value = compute::get_setting(*settings, k);
                if (!value.ok()) {
                  print_error(value.status().message());
                  return static_cast<int>(kExitUsage);
                }
                std::cout << (get_opt->key.empty() ? k + " = " : "") << *value << "\n";
              }
              return static_cast<int>(kExitOk);
            }
            Status changed = compute::set_setting(*settings, set_opt->key, set_opt->value);
            if (!changed.ok()) {
              print_error(changed.message());
              return static_cast<int>(kExitUsage);
            }
            Status saved = compute::save_settings(path, *settings);
            if (!saved.ok()) {
              print_error(saved.message());
              return static_cast<int>(kExitUserError);
            }
            std::cout << set_opt->key << " = " << *compute::get_setting(*settings, set_opt->key) << "  (saved to "
                      << path.string() << ")\n";
            return static_cast<int>(kExitOk);
          }};
}

}  // namespace tensormorph::cli
