#include "index/index_builder.h"

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdint>
#include <span>
#include <string_view>
#include <unordered_map>

#include <nlohmann/json.hpp>
#include <xxhash.h>

#include "core/band_reader.h"
#include "core/cache_dir.h"
#include "engine/matrix_shape.h"
#include "engine/tensor_ops.h"
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

/// The old index's pyramids by tensor name (names are unique within a checkpoint).
std::unordered_map<std::string_view, const TensorPyramid*> pyramids_by_name(const IndexContents& old) {
  std::unordered_map<std::string_view, const TensorPyramid*> by_name;
  by_name.reserve(old.tensors.size());
  for (const auto& p : old.tensors) by_name.emplace(p.name, &p);
  return by_name;
}

const TensorPyramid* reusable(const std::unordered_map<std::string_view, const TensorPyramid*>& old_by_name,
                              const IndexContents& old, const TensorInfo& t, const FileIdentity& now) {
  const auto it = old_by_name.find(t.name);
  if (it == old_by_name.end()) return nullptr;
  const TensorPyramid& p = *it->second;
  const bool current = p.dtype == t.dtype && p.shape == t.shape && p.file < old.files.size() && old.files[p.file] == now;
  // An entry of an index written before value histograms were kept is counted again, once.
  return current && !p.value_histogram.empty() ? &p : nullptr;
}

bool same_bits(const TM_TileStats& a, const TM_TileStats& b) {
  return a.count == b.count && a.nan == b.nan && a.pos_inf == b.pos_inf && a.neg_inf == b.neg_inf &&
         a.zeros == b.zeros && std::bit_cast<uint64_t>(a.sum) == std::bit_cast<uint64_t>(b.sum) &&
         std::bit_cast<uint64_t>(a.sum_sq) == std::bit_cast<uint64_t>(b.sum_sq) &&
         std::bit_cast<uint32_t>(a.min) == std::bit_cast<uint32_t>(b.min) &&
         std::bit_cast<uint32_t>(a.max) == std::bit_cast<uint32_t>(b.max) &&
         std::bit_cast<uint32_t>(a.absmax) == std::bit_cast<uint32_t>(b.absmax);
}

/// True when two pyramids of the same tensor hold the same statistics, bit for bit.
bool same_pyramid(const std::vector<engine::PyramidLevel>& a, const std::vector<engine::PyramidLevel>& b) {
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); ++k) {
    if (a[k].tiles.size() != b[k].tiles.size()) return false;
    for (size_t i = 0; i < a[k].tiles.size(); ++i) {
      if (!same_bits(a[k].tiles[i], b[k].tiles[i])) return false;
    }
  }
  return true;
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
  const fs::path parent = report.index_path.parent_path().empty() ? fs::path(".") : report.index_path.parent_path();
  fs::create_directories(parent, ec);
  if (ec) report.not_kept = "cannot create " + parent.string() + ": " + ec.message();
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
  report.stale_removed = remove_stale_temporaries(report.index_path);

  // Decide what is current and what must be (re)built, so progress knows the real total.
  std::vector<const TensorPyramid*> reuse(checkpoint.tensors().size(), nullptr);
  std::vector<const TensorPyramid*> to_verify(checkpoint.tensors().size(), nullptr);
  IndexProgress progress;
  const auto old_by_name = pyramids_by_name(old);
  for (size_t i = 0; i < checkpoint.tensors().size(); ++i) {
    const TensorInfo& t = checkpoint.tensors()[i];
    reuse[i] = reusable(old_by_name, old, t, now.files[t.file]);
    if (options.verify) std::swap(reuse[i], to_verify[i]);
    if (reuse[i] == nullptr && dtype_decodable(t.dtype) && storable_name(t.name)) {
      progress.bytes_total += t.nbytes;
      progress.tensors_total += 1;
    }
  }
  report.tensors_total = checkpoint.tensors().size();

  auto snapshot = [&](size_t upto) -> Status {
    if (!report.not_kept.empty()) return Status::Ok();
    // Completed tensors only, in checkpoint order: a reader never sees a half-built pyramid.
    const Status written = write_index(report.index_path, now.tile, now.files,
                                       std::span(now.tensors).first(std::min(upto, now.tensors.size())));
    // Nowhere to keep it is no reason to withhold the statistics: they go on in memory.
    if (written.code() == StatusCode::kIoError) {
      report.not_kept = written.message();
      return Status::Ok();
    }
    TM_RETURN_IF_ERROR(written);
    report.written = true;
    return Status::Ok();
  };

  // One reader over every tensor to be read, in the order they are read, so that reads run ahead
  // across tensor boundaries. A tensor without an extent (a strided view, short storage) reads
  // alone inside tensor_tile_stats, which also reports why it cannot.
  constexpr size_t kNoExtent = SIZE_MAX;
  std::vector<size_t> extent_of(checkpoint.tensors().size(), kNoExtent);
  std::vector<ReadExtent> extents;
  for (size_t i = 0; i < checkpoint.tensors().size(); ++i) {
    const TensorInfo& t = checkpoint.tensors()[i];
    if (reuse[i] != nullptr || !dtype_decodable(t.dtype) || !storable_name(t.name)) continue;
    auto extent = engine::tile_stats_extent(checkpoint, t, options.tile);
    if (!extent.ok() || !extent->has_value()) continue;
    extent_of[i] = extents.size();
    extents.push_back(std::move(**extent));
  }
  TM_ASSIGN_OR_RETURN(auto reader, BandReader::open(std::move(extents)));

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
      report.skipped.push_back(
          {t.name, SkippedTensor::Kind::kNotDecodable, std::string(dtype_not_decodable_reason(t.dtype))});
      continue;
    }
    if (!storable_name(t.name)) {
      report.skipped.push_back(
          {t.name, SkippedTensor::Kind::kUnstorableName, "the name is not valid UTF-8, so the index cannot store it"});
      continue;
    }
    // After an interruption the loop goes on without reading data, so the current entries of
    // later tensors (e.g. of an unchanged shard) are kept in the snapshot, not dropped.
    if (report.interrupted || (options.interrupted && options.interrupted->load())) {
      report.interrupted = true;
      continue;
    }
    progress.current = t.name;
    engine::Records records;
    const uint64_t before = progress.bytes_done;
    std::vector<uint64_t> value_histogram;
    auto level0 = engine::tensor_tile_stats(scheduler, checkpoint, t, options.tile, &records, options.threads,
                                         [&](uint64_t bytes) {
                                           progress.bytes_done += bytes;
                                           progress.seconds = seconds_since(start);
                                           if (options.progress) options.progress(progress);
                                         },
                                         extent_of[i] == kNoExtent ? engine::BandInput{}
                                                                   : engine::BandInput{reader.get(), extent_of[i]},
                                         &value_histogram);
    progress.bytes_done = before + t.nbytes;
    progress.tensors_done++;
    for (auto& r : records) {
      report.ops_per_backend[r.backend]++;
      if (r.tensor.empty()) r.tensor = t.name;
    }
    if (options.records) options.records->insert(options.records->end(), records.begin(), records.end());
    if (!level0.ok()) {
      // One unreadable tensor (e.g. a truncated shard) does not sink the whole index.
      report.skipped.push_back({t.name, SkippedTensor::Kind::kFailed, level0.status().message()});
      continue;
    }
    const engine::MatrixShape m = engine::as_matrix(t);
    now.tensors.push_back({t.name, t.dtype, t.shape, m.rows, m.cols, t.file, engine::build_pyramid(std::move(level0).value()),
                           std::move(value_histogram)});
    if (to_verify[i] != nullptr) {
      report.tensors_verified++;
      if (!same_pyramid(to_verify[i]->levels, now.tensors.back().levels) ||
          to_verify[i]->value_histogram != now.tensors.back().value_histogram) {
        report.verify_mismatches.push_back(t.name);
      }
    }
    report.tensors_indexed++;
    report.bytes_indexed += t.nbytes;
    if (seconds_since(last_snapshot) >= options.snapshot_seconds) {
      TM_RETURN_IF_ERROR(snapshot(now.tensors.size()));
      last_snapshot = Clock::now();
    }
  }
  const bool unchanged = (report.tensors_indexed == report.tensors_verified && report.verify_mismatches.empty()) &&
                         !report.interrupted && old.files == now.files && old.tensors.size() == now.tensors.size();
  if (!unchanged) TM_RETURN_IF_ERROR(snapshot(now.tensors.size()));
  report.seconds = seconds_since(start);
  progress.seconds = report.seconds;
  if (options.progress) options.progress(progress);
  if (out) *out = std::move(now);
  return report;
}

Result<std::unique_ptr<CurrentEntries>> read_current_entries(const Checkpoint& checkpoint, const fs::path& location) {
  auto entries = std::make_unique<CurrentEntries>();
  const fs::path path = location.empty() ? default_index_path(checkpoint) : location;
  auto contents = read_index(path);
  if (!contents.ok()) return entries;
  entries->contents = std::move(contents).value();
  std::error_code ec;
  const fs::path index_dir = fs::absolute(path, ec).parent_path();
  std::vector<FileIdentity> now;
  for (uint32_t file = 0; file < checkpoint.files().size(); ++file) {
    TM_ASSIGN_OR_RETURN(const auto map, checkpoint.mapped(file));
    TM_ASSIGN_OR_RETURN(FileIdentity id, identify_file(*map, index_dir));
    now.push_back(std::move(id));
  }
  for (const TensorPyramid& p : entries->contents.tensors) {
    const bool current = p.file < entries->contents.files.size() && p.file < now.size() &&
                         entries->contents.files[p.file] == now[p.file];
    if (current) entries->by_name.emplace(p.name, &p);
  }
  return entries;
}

}  // namespace tensormorph::index
