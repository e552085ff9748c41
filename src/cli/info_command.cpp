// `tensormorph info`: format, files, metadata, tensor table and per-dtype totals.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <map>

#include "cli/commands.h"
#include "cli/format_util.h"
#include "core/printable.h"
#include "index/index_description.h"
#include "tensormorph/decode.h"

namespace tensormorph::cli {
namespace {

/// A data file as a chunk listing names it: its path inside the checkpoint's directory.
std::string file_label(const Checkpoint& ckpt, uint32_t file) {
  const std::filesystem::path& path = ckpt.files()[file].path;
  const std::filesystem::path inside = path.lexically_relative(ckpt.path());
  return inside.empty() || inside.native().starts_with("..") ? path.filename().string() : inside.string();
}

// Long metadata arrays (e.g. 32,000-token vocabularies) are cut to this many elements in output.
constexpr size_t kMaxArrayElements = 16;

struct Options {
  std::string path;
  bool json = false;
  bool full_metadata = false;
  OpenOptions open;
};

nlohmann::ordered_json shortened(const nlohmann::ordered_json& value, bool full) {
  if (full || !value.is_array() || value.size() <= kMaxArrayElements) return value;
  nlohmann::ordered_json head = nlohmann::ordered_json::array();
  for (size_t i = 0; i < kMaxArrayElements; ++i) head.push_back(value[i]);
  return head;
}

struct DtypeTotals {
  uint64_t tensors = 0, parameters = 0, bytes = 0;
};

std::map<std::string, DtypeTotals> totals_by_dtype(const Checkpoint& ckpt) {
  std::map<std::string, DtypeTotals> totals;
  for (const TensorInfo& t : ckpt.tensors()) {
    auto& row = totals[std::string(dtype_name(t.dtype))];
    row.tensors += 1;
    row.parameters += t.elements();
    row.bytes += t.nbytes;
  }
  return totals;
}

nlohmann::ordered_json to_json(const Checkpoint& ckpt, const Options& opt) {
  nlohmann::ordered_json j;
  j["schema"] = "tensormorph.info/1";
  j["path"] = ckpt.path().string();
  j["format"] = std::string(format_name(ckpt.format()));
  j["files"] = nlohmann::ordered_json::array();
  for (const SourceFile& f : ckpt.files()) j["files"].push_back({{"path", f.path.string()}, {"bytes", f.size}});
  j["facts"] = nlohmann::ordered_json::array();
  for (const FormatFact& fact : format_facts(ckpt)) j["facts"].push_back(fact.to_json());
  j["metadata"] = nlohmann::ordered_json::array();
  for (const MetadataEntry& m : ckpt.metadata()) {
    nlohmann::ordered_json e = {{"key", m.key}, {"type", m.type}, {"value", shortened(m.value, opt.full_metadata)}};
    if (m.value.is_array()) {
      e["length"] = m.value.size();
      e["truncated"] = !opt.full_metadata && m.value.size() > kMaxArrayElements;
    }
    j["metadata"].push_back(std::move(e));
  }
  j["tensors"] = nlohmann::ordered_json::array();
  uint64_t params = 0, bytes = 0;
  for (const TensorInfo& t : ckpt.tensors()) {
    nlohmann::ordered_json e = {{"name", t.name},
                                {"dtype", std::string(dtype_name(t.dtype))},
                                {"shape", t.shape},
                                {"parameters", t.elements()},
                                {"bytes", t.nbytes},
                                {"file", t.file},
                                {"offset", t.offset},
                                {"decodable", dtype_decodable(t.dtype)}};
    if (!t.contiguous()) e["strides"] = t.strides;
    if (!t.chunks.empty()) {
      e["chunks"] = nlohmann::ordered_json::array();
      for (const TensorChunk& c : t.chunks) {
        nlohmann::ordered_json chunk = {{"start", c.start}, {"sizes", c.sizes}, {"file", c.file}, {"offset", c.offset}};
        if (!c.strides.empty()) chunk["strides"] = c.strides;
        e["chunks"].push_back(std::move(chunk));
      }
    }
    j["tensors"].push_back(std::move(e));
    params += t.elements();
    bytes += t.nbytes;
  }
  nlohmann::ordered_json by_dtype = nlohmann::ordered_json::object();
  for (const auto& [name, row] : totals_by_dtype(ckpt)) {
    by_dtype[name] = {{"tensors", row.tensors}, {"parameters", row.parameters}, {"bytes", row.bytes}};
  }
  j["totals"] = {{"tensors", ckpt.tensors().size()}, {"parameters", params}, {"bytes", bytes}, {"by_dtype", by_dtype}};
  j["notes"] = ckpt.notes();
  return j;
}

// The reader's facts and bits per weight; the files themselves are listed above them.
void print_facts(const Checkpoint& ckpt) {
  std::vector<FormatFact> facts = format_facts(ckpt);
  std::erase_if(facts, [](const FormatFact& f) { return f.key.starts_with("file."); });
  size_t width = 0;
  for (const FormatFact& f : facts) width = std::max(width, f.key.size());
  std::cout << "\nformat facts\n";
  for (const FormatFact& f : facts) {
    std::string value = f.value.is_string() ? f.value.get<std::string>() : json_text(f.value);
    if (f.file && ckpt.files().size() > 1) value += "  (" + ckpt.files()[*f.file].path.filename().string() + ")";
    std::printf("  %-*s  %s\n", static_cast<int>(width), f.key.c_str(), printable(value, 4096).c_str());
  }
  std::fflush(stdout);
}

// Names, keys and shard paths come from the file; printable() keeps escape sequences and invalid
// UTF-8 in them off the terminal.
void print_text(const Checkpoint& ckpt, const Options& opt) {
  std::cout << "checkpoint  " << printable(ckpt.path().string(), 4096) << "\n";
  std::cout << "format      " << format_name(ckpt.format()) << "\n";
  std::cout << "files       " << ckpt.files().size() << "\n";
  for (const SourceFile& f : ckpt.files()) std::cout << "  " << printable(f.path.string(), 4096) << "  " << human_bytes(f.size) << "\n";
  print_facts(ckpt);
  if (!ckpt.metadata().empty()) {
    std::cout << "\nmetadata (" << ckpt.metadata().size() << ")\n";
    for (const MetadataEntry& m : ckpt.metadata()) {
      std::string value = json_text(shortened(m.value, opt.full_metadata));
      if (m.value.is_array() && m.value.size() > kMaxArrayElements && !opt.full_metadata) {
        value += " ... (" + std::to_string(m.value.size()) + " elements)";
      }
      if (value.size() > 160 && !opt.full_metadata) value = value.substr(0, 157) + "...";
      std::cout << "  " << printable(m.key) << " (" << m.type << ") = " << value << "\n";
    }
  }
  std::vector<std::string> names;
  names.reserve(ckpt.tensors().size());
  size_t name_width = 4;
  for (const TensorInfo& t : ckpt.tensors()) {
    names.push_back(printable(t.name));
    name_width = std::max(name_width, names.back().size());
  }
  name_width = std::min<size_t>(name_width, 64);
  std::cout << "\ntensors (" << ckpt.tensors().size() << ")\n";
  std::printf("  %-*s  %-8s  %-20s  %12s  %12s\n", static_cast<int>(name_width), "name", "dtype", "shape", "bytes",
              "parameters");
  std::fflush(stdout);
  for (size_t i = 0; i < ckpt.tensors().size(); ++i) {
    const TensorInfo& t = ckpt.tensors()[i];
    std::string flag = dtype_decodable(t.dtype) ? "" : "  (not decodable yet)";
    if (!t.contiguous()) flag += "  (strided view)";
    if (!t.chunks.empty()) flag += "  (" + std::to_string(t.chunks.size()) + " chunks)";
    std::printf("  %-*s  %-8s  %-20s  %12s  %12s%s\n", static_cast<int>(name_width), names[i].c_str(),
                std::string(dtype_name(t.dtype)).c_str(), t.shape_string().c_str(), human_bytes(t.nbytes).c_str(),
                human_count(t.elements()).c_str(), flag.c_str());
    // A tensor saved in shards: where each block of it lies (the first few; --json lists all).
    constexpr size_t kChunksShown = 8;
    for (size_t c = 0; c < std::min(t.chunks.size(), kChunksShown); ++c) {
      const TensorChunk& chunk = t.chunks[c];
      const auto dims = [](const std::vector<uint64_t>& v) {
        std::string s;
        for (uint64_t d : v) s += (s.empty() ? "" : ", ") + std::to_string(d);
        return "[" + s + "]";
      };
      std::printf("    chunk at %s of %s: %s, byte %llu\n", dims(chunk.start).c_str(), dims(chunk.sizes).c_str(),
                  file_label(ckpt, chunk.file).c_str(), static_cast<unsigned long long>(chunk.offset));
    }
    if (t.chunks.size() > kChunksShown) std::printf("    ... and %zu more chunks\n", t.chunks.size() - kChunksShown);
  }
  std::fflush(stdout);
  std::cout << "\ntotals by dtype\n";
  uint64_t params = 0, bytes = 0;
  for (const auto& [name, row] : totals_by_dtype(ckpt)) {
    std::printf("  %-8s  %6llu tensors  %12s parameters  %12s\n", name.c_str(),
                static_cast<unsigned long long>(row.tensors), human_count(row.parameters).c_str(),
                human_bytes(row.bytes).c_str());
    params += row.parameters;
    bytes += row.bytes;
  }
  std::printf("  %-8s  %6zu tensors  %12s parameters  %12s\n", "all", ckpt.tensors().size(),
              human_count(params).c_str(), human_bytes(bytes).c_str());
  std::fflush(stdout);
  if (!ckpt.notes().empty()) {
    std::cout << "\nnotes\n";
    for (const std::string& n : ckpt.notes()) std::cout << "  " << n << "\n";
  }
}

}  // namespace

Command add_info_command(CLI::App& app) {
  auto opt = std::make_shared<Options>();
  CLI::App* sub = app.add_subcommand("info", "Show a checkpoint's format, files, metadata and tensors (headers only)");
  sub->add_option("path", opt->path, "Checkpoint file, model.safetensors.index.json, or directory")->required();
  sub->add_flag("--json", opt->json, "Print the stable JSON form (schema tensormorph.info/1)");
  sub->add_flag("--full-metadata", opt->full_metadata, "Print metadata arrays in full");
  add_open_options(sub, opt->open);
  return {sub, [opt]() {
            auto ckpt = open_or_report(opt->path, opt->open);
            if (!ckpt) return static_cast<int>(kExitUserError);
            if (index::is_index_file(*ckpt)) return print_index_info(ckpt->files()[0].path, opt->json);
            if (opt->json) std::cout << json_text(to_json(*ckpt, *opt), 2) << "\n";
            else print_text(*ckpt, *opt);
            return static_cast<int>(kExitOk);
          }};
}

}  // namespace tensormorph::cli
