#include "index/index_builder.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <span>

#include <nlohmann/json.hpp>
#include <xxhash.h>

#include "core/cache_dir.h"
#include "ops/matrix_shape.h"
#include "ops/tensor_ops.h"
#include "tensormorph/decode.h"

namespace tensormorph::index {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The index stores names as safetensors tensor names and JSON strings, which must be UTF-8
// (GGUF does not enforce that for tensor names).
bool storable_name(const std::string& name) {
  try {
    (void)nlohmann::json(name).dump();
    return true;
  } catch (const nlohmann::json::exception&) {
    return false;
  }
}

const TensorPyramid* reusable(const IndexContents& old, const TensorInfo& t, const FileIdentity& now) {
  for (const auto& p : old.tensors) {
    if (p.name == t.name && p.dtype == t.dtype && p.shape == t.shape && p.file < old.files.size() &&
        old.files[p.file] == now) {
      return &p;
    }
  }
  return nullptr;
}

}  // namespace

fs::path default_index_path(const Checkpoint& checkpoint) {
  fs::path source = checkpoint.path();
  std::error_code ec;
  if (fs::is_directory(source, ec) && !checkpoint.files().empty()) source = checkpoint.files()[0].path;
  fs::path sidecar = source;
  if (sidecar.extension() == ".json") sidecar.replace_extension();  // model.safetensors.index.json -> .index
  sidecar += ".tmindex";
  fs::path dir = sidecar.parent_path().empty() ? fs::path(".") : sidecar.parent_path();
  if (::access(dir.c_str(), W_OK) == 0) return sidecar;
  const std::string absolute = fs::absolute(sidecar, ec).string();
  char hash[17];
  std::snprintf(hash, sizeof hash, "%016llx",
                static_cast<unsigned long long>(XXH64(absolute.data(), absolute.size(), 0)));
  return user_cache_dir() / (std::string(hash) + "-" + sidecar.filename().string());
}

Result<IndexReport> update_index(compute::Scheduler& scheduler, const Checkpoint& checkpoint,
                                 const IndexOptions& options, IndexContents* out) {
  const auto start = Clock::now();
  if (options.tile < ops::kMinTile || options.tile > ops::kMaxTile || (options.tile & (options.tile - 1)) != 0) {
    // Caught here, not per tensor: every tensor would fail, and the index would not be readable.
    return Status::InvalidArgument("tile size " + std::to_string(options.tile) + " is not a power of two in [" +
                                   std::to_string(ops::kMinTile) + ", " + std::to_string(ops::kMaxTile) + "]");
  }
  IndexReport report;
  report.index_path = options.location.empty() ? default_index_path(checkpoint) : options.location;
  std::error_code ec;
  fs::create_directories(report.index_path.parent_path().empty() ? fs::path(".") : report.index_path.parent_path(), ec);
  const fs::path index_dir = fs::absolute(report.index_path, ec).parent_path();

  IndexContents now;
  now.tile = options.tile;
  for (uint32_t file = 0; file < checkpoint.files().size(); ++file) {
    TM_ASSIGN_OR_RETURN(const auto map, checkpoint.mapped(file));
    TM_ASSIGN_OR_RETURN(FileIdentity id, identify_file(*map, index_dir));
    now.files.push_back(std::move(id));
  }
  IndexContents old;
  if (auto existing = read_index(report.index_path); existing.ok() && existing->tile == options.tile) {
    old = std::move(existing).value();
  }

  // Decide what is current and what must be (re)built, so progress knows the real total.
  std::vector<const TensorPyramid*> reuse(checkpoint.tensors().size(), nullptr);
  IndexProgress progress;
  for (size_t i = 0; i < checkpoint.tensors().size(); ++i) {
    const TensorInfo& t = checkpoint.tensors()[i];
    reuse[i] = reusable(old, t, now.files[t.file]);
    if (reuse[i] == nullptr && dtype_decodable(t.dtype) && storable_name(t.name)) {
      progress.bytes_total += t.nbytes;
      progress.tensors_total += 1;
    }
  }
  report.tensors_total = checkpoint.tensors().size();

  auto snapshot = [&](size_t upto) -> Status {
    // Completed tensors only, in checkpoint order: a reader never sees a half-built pyramid.
    TM_RETURN_IF_ERROR(write_index(report.index_path, now.tile, now.files,
                                   std::span(now.tensors).first(std::min(upto, now.tensors.size()))));
    report.written = true;
    return Status::Ok();
  };

  auto last_snapshot = Clock::now();
  for (size_t i = 0; i < checkpoint.tensors().size(); ++i) {
    const TensorInfo& t = checkpoint.tensors()[i];
    if (reuse[i] != nullptr) {
      TensorPyramid p = *reuse[i];
      p.file = t.file;
      now.tensors.push_back(std::move(p));
      report.tensors_reused++;
      continue;
    }
    if (!dtype_decodable(t.dtype)) {
      report.skipped.push_back(t.name + ": " + std::string(dtype_not_decodable_reason(t.dtype)));
      continue;
    }
    if (!storable_name(t.name)) {
      report.skipped.push_back(t.name + ": the name is not valid UTF-8, so the index cannot store it");
      continue;
    }
    // After an interruption the loop goes on without reading data, so the current entries of
    // later tensors (e.g. of an unchanged shard) are kept in the snapshot, not dropped.
    if (report.interrupted || (options.interrupted && options.interrupted->load())) {
      report.interrupted = true;
      continue;
    }
    progress.current = t.name;
    ops::Records records;
    const uint64_t before = progress.bytes_done;
    auto level0 = ops::tensor_tile_stats(scheduler, checkpoint, t, options.tile, &records, options.threads,
                                         [&](uint64_t bytes) {
                                           progress.bytes_done += bytes;
                                           progress.seconds = seconds_since(start);
                                           if (options.progress) options.progress(progress);
                                         });
    progress.bytes_done = before + t.nbytes;
    progress.tensors_done++;
    for (const auto& r : records) report.ops_per_backend[r.backend]++;
    if (options.records) options.records->insert(options.records->end(), records.begin(), records.end());
    if (!level0.ok()) {
      // One unreadable tensor (e.g. a truncated shard) does not sink the whole index.
      report.skipped.push_back(t.name + ": " + level0.status().message());
      continue;
    }
    const ops::MatrixShape m = ops::as_matrix(t);
    now.tensors.push_back({t.name, t.dtype, t.shape, m.rows, m.cols, t.file, ops::build_pyramid(std::move(level0).value())});
    report.tensors_indexed++;
    report.bytes_indexed += t.nbytes;
    if (seconds_since(last_snapshot) >= options.snapshot_seconds) {
      TM_RETURN_IF_ERROR(snapshot(now.tensors.size()));
      last_snapshot = Clock::now();
    }
  }
  const bool unchanged = report.tensors_indexed == 0 && !report.interrupted && old.files == now.files &&
                         old.tensors.size() == now.tensors.size();
  if (!unchanged) TM_RETURN_IF_ERROR(snapshot(now.tensors.size()));
  report.seconds = seconds_since(start);
  progress.seconds = report.seconds;
  if (options.progress) options.progress(progress);
  if (out) *out = std::move(now);
  return report;
}

}  // namespace tensormorph::index
