// `tensormorph demo DIR`: writes the built-in demo checkpoint.
#include <iostream>

#include "cli/commands.h"
#include "formats/demo/demo_checkpoint.h"

namespace tensormorph::cli {

Command add_demo_command(CLI::App& app) {
  auto dir = std::make_shared<std::string>();
  CLI::App* sub = app.add_subcommand("demo", "Write the deterministic demo checkpoint (sharded safetensors + GGUF twin)");
  sub->add_option("dir", *dir, "Directory to write into (created if missing)")->required();
  return {sub, [dir]() {
            auto files = demo::write_demo_checkpoint(*dir);
            if (!files.ok()) {
              print_error(files.status().message());
              return static_cast<int>(kExitUserError);
            }
            std::cout << "wrote the demo checkpoint:\n  " << files->index.string() << "\n";
            for (const auto& s : files->shards) std::cout << "  " << s.string() << "\n";
            std::cout << "  " << files->gguf.string() << "\n";
            return static_cast<int>(kExitOk);
          }};
}

}  // namespace tensormorph::cli
