#include "tensormorph/open.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <vector>

#include "formats/dcp/dcp.h"
#include "formats/deepspeed/deepspeed.h"
#include "formats/gguf/gguf.h"
#include "formats/megatron/megatron.h"
#include "formats/pytorch/pytorch.h"
#include "formats/safetensors/safetensors.h"

namespace tensormorph {
namespace {

namespace fs = std::filesystem;

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool looks_like_text(std::string_view head) {
  if (head.empty()) return false;
  return std::all_of(head.begin(), head.end(), [](char c) {
    auto u = static_cast<unsigned char>(c);
    return u == '\n' || u == '\r' || u == '\t' || (u >= 0x20 && u != 0x7f);
  });
}

bool is_checkpoint_name(const fs::path& p) {
  static const char* kExtensions[] = {".safetensors", ".gguf", ".pt", ".pth", ".bin", ".ckpt"};
  std::string ext = p.extension().string();
  return std::any_of(std::begin(kExtensions), std::end(kExtensions), [&](const char* e) { return ext == e; });
}

// Opens the checkpoint a directory stands for: its safetensors index, its only checkpoint file, or
// its torch.save archives as one set when they hold ShardedTensors saved per rank.
Result<std::unique_ptr<Checkpoint>> open_plain_directory(const fs::path& dir) {
  std::vector<fs::path> indexes, files;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (!entry.is_regular_file()) continue;
    std::string name = entry.path().filename().string();
    if (ends_with(name, ".safetensors.index.json")) indexes.push_back(entry.path());
    else if (is_checkpoint_name(entry.path())) files.push_back(entry.path());
  }
  if (ec) return Status::IoError(dir.string() + ": cannot list directory: " + ec.message());
  std::sort(indexes.begin(), indexes.end());
  std::sort(files.begin(), files.end());
  if (indexes.size() == 1) return safetensors::open_index(indexes.front());
  auto list = [](const std::vector<fs::path>& paths) {
    std::string s;
    for (const auto& p : paths) s += (s.empty() ? "" : ", ") + p.filename().string();
    return s;
  };
  if (indexes.size() > 1) {
    return Status::InvalidArgument(dir.string() + ": holds several sharded checkpoints (" + list(indexes) +
                                   "); name the index file to open");
  }
  if (files.size() == 1) return open_checkpoint(files.front());
  if (files.empty()) return Status::NotFound(dir.string() + ": no checkpoint found in this directory");
  // Several torch.save archives may be one checkpoint saved per rank (ShardedTensors).
  std::vector<fs::path> archives;
  for (const fs::path& file : files) {
    auto format = detect_format(file);
    if (format.ok() && *format == DetectedFormat::kPyTorchZip) archives.push_back(file);
  }
  if (archives.size() == files.size()) {
    TM_ASSIGN_OR_RETURN(auto set, pytorch::open_sharded_set(dir, archives));
    if (set) return std::move(*set);
  }
  return Status::InvalidArgument(dir.string() + ": holds several checkpoints (" + list(files) +
                                 ") and no model.safetensors.index.json; name the file to open");
}

}  // namespace

std::string describe_format(DetectedFormat format) {
  switch (format) {
    case DetectedFormat::kSafetensors: return "a safetensors file";
    case DetectedFormat::kSafetensorsIndex: return "a sharded safetensors index";
    case DetectedFormat::kGguf: return "a GGUF file";
    case DetectedFormat::kPyTorchZip: return "a PyTorch zip checkpoint";
    case DetectedFormat::kPyTorchLegacy: return "a legacy (pre-1.6) PyTorch pickle file";
    case DetectedFormat::kGgmlLegacy: return "a pre-GGUF ggml/GGJT model file";
    case DetectedFormat::kZipOther: return "a zip archive";
    case DetectedFormat::kText: return "a text file";
    case DetectedFormat::kEmpty: return "an empty file";
    case DetectedFormat::kUnknown: return "a file of unknown format";
  }
  return "a file of unknown format";
}

Result<DetectedFormat> detect_format(const fs::path& path) {
  TM_ASSIGN_OR_RETURN(uint64_t size, file_size_of(path));
  if (size == 0) return DetectedFormat::kEmpty;
  TM_ASSIGN_OR_RETURN(std::string head, read_file_range(path, 0, std::min<uint64_t>(size, 512)));
  std::string_view magic(head.data(), std::min<size_t>(head.size(), 4));
  if (magic == "GGUF") return DetectedFormat::kGguf;
  if (magic == "lmgg" || magic == "fmgg" || magic == "tjgg" || magic == "algg" || magic == "nsgg") {
    return DetectedFormat::kGgmlLegacy;
  }
  if (magic == "PK\x03\x04" || magic == "PK\x05\x06") return DetectedFormat::kPyTorchZip;
  if (head.size() >= 2 && static_cast<unsigned char>(head[0]) == 0x80 && head[1] >= 2 && head[1] <= 5) {
    return DetectedFormat::kPyTorchLegacy;
  }
  if (head.size() >= 9 && head[8] == '{') {
    uint64_t header_len = 0;
    std::memcpy(&header_len, head.data(), 8);  // little-endian hosts only (checked at build time)
    if (header_len <= size - 8) return DetectedFormat::kSafetensors;
  }
  std::string name = path.filename().string();
  if (ends_with(name, ".json") && head.find("weight_map") != std::string::npos) {
    return DetectedFormat::kSafetensorsIndex;
  }
  if (ends_with(name, ".safetensors.index.json")) return DetectedFormat::kSafetensorsIndex;
  if (looks_like_text(head)) return DetectedFormat::kText;
  return DetectedFormat::kUnknown;
}

Result<std::unique_ptr<Checkpoint>> open_checkpoint(const fs::path& path, const OpenOptions& options) {
  std::error_code ec;
  fs::path target = path;
  if (fs::is_directory(path, ec)) {
    if (dcp::is_dcp_directory(path)) return dcp::open_directory(path);
    if (deepspeed::is_zero_directory(path)) return deepspeed::open_directory(path, options.tensor_parallel_rules);
    if (megatron::is_tensor_parallel_directory(path)) return megatron::open_directory(path, options.tensor_parallel_rules);
    return open_plain_directory(path);
  } else if (!fs::exists(path, ec)) {
    return Status::NotFound(path.string() + ": no such file or directory");
  }
  TM_ASSIGN_OR_RETURN(DetectedFormat format, detect_format(target));
  switch (format) {
    case DetectedFormat::kSafetensors: return safetensors::open_file(target);
    case DetectedFormat::kSafetensorsIndex: return safetensors::open_index(target);
    case DetectedFormat::kGguf: return gguf::open_file(target);
    case DetectedFormat::kPyTorchZip:
    case DetectedFormat::kPyTorchLegacy: return pytorch::open_file(target);
    default:
      return Status::Unsupported(target.string() + ": not a checkpoint Tensormorph can read: it is " +
                                 describe_format(format) +
                                 " (supported: safetensors, sharded safetensors index, GGUF v2/v3, PyTorch zip)");
  }
}

static_assert(std::endian::native == std::endian::little, "Tensormorph reads little-endian formats in place");

}  // namespace tensormorph
