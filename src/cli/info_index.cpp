// `tensormorph info` on an index file: what it is, which checkpoint it indexes, whether it is current.
#include <algorithm>
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "cli/format_util.h"
#include "core/printable.h"
#include "index/index_description.h"

namespace tensormorph::cli {
namespace {

nlohmann::ordered_json to_json(const index::IndexDescription& d) {
  nlohmann::ordered_json j = {{"schema", "tensormorph.index_info/1"},
                              {"path", d.path.string()},
                              {"kind", "tensormorph index"},
                              {"format_version", index::kIndexFormatVersion},
                              {"checkpoint", d.checkpoint.empty() ? nlohmann::ordered_json(nullptr)
                                                                  : nlohmann::ordered_json(d.checkpoint.string())},
                              {"tile", d.tile},
                              {"tensors", d.tensors},
                              {"tensors_with_histogram", d.with_histogram},
                              {"current", d.current()}};
  j["files"] = nlohmann::ordered_json::array();
  for (const auto& s : d.sources) {
    j["files"].push_back({{"path", s.resolved.string()}, {"recorded_bytes", s.recorded.size},
                          {"current", s.current}, {"state", s.state}});
  }
  return j;
}

void print_text(const index::IndexDescription& d) {
  std::cout << "index       " << printable(d.path.string(), 4096) << "\n";
  std::cout << "what        a Tensormorph index (every tensor's level-of-detail statistics), not a checkpoint\n";
  std::cout << "checkpoint  "
            << (d.checkpoint.empty() ? std::string("(its name does not say; the files below are what it indexes)")
                                     : printable(d.checkpoint.string(), 4096))
            << "\n";
  std::cout << "tile        " << d.tile << "\n";
  std::cout << "tensors     " << d.tensors << " (" << d.with_histogram << " with value histograms)\n";
  std::cout << "files       " << d.sources.size() << "\n";
  for (const auto& s : d.sources) {
    std::cout << "  " << printable(s.resolved.string(), 4096) << "  " << human_bytes(s.recorded.size) << "  "
              << printable(s.state, 400) << "\n";
  }
  if (d.current()) {
    std::cout << "state       current: every file is as it was indexed\n";
    return;
  }
  const bool files_current =
      std::all_of(d.sources.begin(), d.sources.end(), [](const index::IndexedSource& s) { return s.current; });
  std::cout << "state       stale: "
            << (files_current ? std::to_string(d.tensors - d.with_histogram) +
                                    " tensors have no value histogram (an older version wrote it)"
                              : std::string("a file changed since it was indexed"))
            << "; `tensormorph index "
            << printable((d.checkpoint.empty() ? d.path.parent_path() : d.checkpoint).string(), 4096)
            << "` brings it up to date (only what changed is read again)\n";
}

}  // namespace

int print_index_info(const std::filesystem::path& path, bool json) {
  auto described = index::describe_index(path);
  if (!described.ok()) {
    print_error(path.string() + ": a Tensormorph index this build cannot read (" + described.status().message() +
                "); `tensormorph index` on its checkpoint writes it anew");
    return kExitUserError;
  }
  if (json) std::cout << json_text(to_json(*described), 2) << "\n";
  else print_text(*described);
  return kExitOk;
}

}  // namespace tensormorph::cli
