#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "tensormorph/open.h"

namespace tensormorph::cli {

void print_error(const std::string& message) { std::cerr << "tensormorph: error: " << message << "\n"; }

std::unique_ptr<Checkpoint> open_or_report(const std::string& path) {
  auto opened = open_checkpoint(path);
  if (!opened.ok()) {
    print_error(opened.status().message());
    return nullptr;
  }
  return std::move(opened).value();
}

}  // namespace tensormorph::cli
