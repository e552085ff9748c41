// Entry point of the `tensormorph` command.
#include <cstdio>
#include <exception>
#include <vector>

#include "cli/commands.h"

int main(int argc, char** argv) {
  using namespace tensormorph::cli;
  CLI::App app{"Tensormorph: look inside neural-network checkpoints (safetensors, GGUF, PyTorch)", "tensormorph"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "tensormorph 0.1.0");
  const std::vector<Command> commands = {
      add_info_command(app),
      add_index_command(app),
      add_stats_command(app),
      add_quantiles_command(app),
      add_outliers_command(app),
      add_spectrum_command(app),
      add_channels_command(app),
      add_diff_command(app),
      add_quantize_error_command(app),
      add_export_command(app),
      add_backends_command(app),
      add_config_command(app),
      add_demo_command(app),
      add_serve_command(app),
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? kExitOk : kExitUsage;
  }
  try {
    for (const Command& command : commands) {
      if (command.app->parsed()) return command.run();
    }
  } catch (const std::exception& e) {
    // Library code returns Status; this only catches allocation failures and similar.
    print_error(std::string("unexpected failure: ") + e.what());
    return kExitUserError;
  }
  return kExitUsage;
}
