#include "index/index_file.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include <nlohmann/json.hpp>

#include "core/printable.h"
#include "formats/safetensors/safetensors.h"
#include "engine/matrix_shape.h"
#include "engine/value_histogram.h"

namespace tensormorph::index {
namespace {

constexpr const char* kMetadataKey = kIndexMetadataKey;

std::string level_name(const std::string& tensor, size_t level) { return tensor + "/L" + std::to_string(level); }
std::string histogram_name(const std::string& tensor) { return tensor + "/H"; }

// The non-empty bins of `histogram` as (bin, count) pairs, in `out`.
std::span<const std::byte> pack_histogram(const std::vector<uint64_t>& histogram, std::vector<uint64_t>& out) {
  out.clear();
  for (uint64_t bin = 0; bin < histogram.size(); ++bin) {
    if (histogram[bin] != 0) {
      out.push_back(bin);
      out.push_back(histogram[bin]);
    }
  }
  return std::as_bytes(std::span(out));
}

uint64_t non_empty_bins(const std::vector<uint64_t>& histogram) {
  return static_cast<uint64_t>(std::count_if(histogram.begin(), histogram.end(), [](uint64_t c) { return c != 0; }));
}

uint64_t ceil_div(uint64_t a, uint64_t b) { return a / b + (a % b != 0); }

// The grids a pyramid of a rows x cols matrix has (see build_pyramid): tiles of `tile` at level 0,
// then 2x2 merges up to a single tile. Readers index tiles by position, so an index whose
// geometry differs is damaged, not merely stale.
std::vector<ops::TileGrid> expected_grids(uint64_t rows, uint64_t cols, uint32_t tile) {
  std::vector<ops::TileGrid> grids = {{ceil_div(rows, tile), ceil_div(cols, tile)}};
  if (grids[0].rows == 0 || grids[0].cols == 0) grids[0] = {1, 1};
  while (grids.back().rows > 1 || grids.back().cols > 1) {
    grids.push_back({ceil_div(grids.back().rows, 2), ceil_div(grids.back().cols, 2)});
  }
  return grids;
}

// Reads "T/H" into p.value_histogram: bins strictly increasing and in range, counts adding up to
// the finite values the pyramid's top tile counts.
template <typename File, typename Damaged>
Status read_histogram(const File& file, uint64_t bins, TensorPyramid& p, const Damaged& damaged) {
  const TensorInfo* stored = file.find(histogram_name(p.name));
  if (stored == nullptr || stored->dtype != DType::kU64 || stored->shape != std::vector<uint64_t>{bins, 2} ||
      bins > engine::kValueHistogramBins) {
    return damaged("its value histogram is missing or malformed");
  }
  TM_ASSIGN_OR_RETURN(auto bytes, file.tensor_bytes(*stored));
  std::vector<uint64_t> pairs(bins * 2);
  if (bytes.size() != pairs.size() * sizeof(uint64_t)) return damaged("its value histogram is truncated");
  if (!pairs.empty()) std::memcpy(pairs.data(), bytes.data(), bytes.size());
  p.value_histogram.assign(engine::kValueHistogramBins, 0);
  uint64_t total = 0;
  for (uint64_t i = 0; i < bins; ++i) {
    const uint64_t bin = pairs[2 * i], count = pairs[2 * i + 1];
    if (bin >= engine::kValueHistogramBins || (i > 0 && bin <= pairs[2 * i - 2]) || count == 0 ||
        __builtin_add_overflow(total, count, &total)) {
      return damaged("value histogram entry " + std::to_string(i) + " is impossible");
    }
    p.value_histogram[bin] = count;
  }
  const TM_TileStats& top = p.levels.back().tiles.front();
  const uint64_t non_finite = top.nan + top.pos_inf + top.neg_inf;
  if (non_finite > top.count || total != top.count - non_finite) {
    return damaged("its value histogram counts " + std::to_string(total) + " finite values where the pyramid counts " +
                   std::to_string(top.count - std::min(top.count, non_finite)));
  }
  return Status::Ok();
}

bool valid_tile(uint32_t tile) { return tile >= ops::kMinTile && tile <= ops::kMaxTile && (tile & (tile - 1)) == 0; }

// Counts are stored as doubles; anything but a whole number in [0, 2^53] marks a damaged file
// (and converting it to an integer would be undefined).
bool valid_count(double v) { return v >= 0 && v <= 9007199254740992.0 && v == std::floor(v); }

}  // namespace

std::span<const std::byte> pack_tile_stats(std::span<const TM_TileStats> records, std::vector<double>& out) {
  out.resize(records.size() * kFieldsPerTile);
  double* f = out.data();
  for (const TM_TileStats& t : records) {
    const double fields[kFieldsPerTile] = {static_cast<double>(t.count), static_cast<double>(t.nan),
                                           static_cast<double>(t.pos_inf), static_cast<double>(t.neg_inf),
                                           static_cast<double>(t.zeros), t.sum, t.sum_sq, t.min, t.max, t.absmax};
    f = std::copy(std::begin(fields), std::end(fields), f);
  }
  return std::as_bytes(std::span(out));
}

bool unpack_tile_stats(const double* f, TM_TileStats* t) {
  for (size_t i = 0; i < 5; ++i) {
    if (!valid_count(f[i])) return false;
  }
  *t = TM_TileStats{};
  t->count = static_cast<uint64_t>(f[0]);
  t->nan = static_cast<uint64_t>(f[1]);
  t->pos_inf = static_cast<uint64_t>(f[2]);
  t->neg_inf = static_cast<uint64_t>(f[3]);
  t->zeros = static_cast<uint64_t>(f[4]);
  t->sum = f[5];
  t->sum_sq = f[6];
  t->min = static_cast<float>(f[7]);
  t->max = static_cast<float>(f[8]);
  t->absmax = static_cast<float>(f[9]);
  return true;
}

Status write_index(const std::filesystem::path& path, const IndexContents& contents) {
  return write_index(path, contents.tile, contents.files, contents.tensors);
}

Status write_index(const std::filesystem::path& path, uint32_t tile, std::span<const FileIdentity> files,
                   std::span<const TensorPyramid> pyramids) {
  nlohmann::ordered_json meta;
  meta["version"] = kIndexFormatVersion;
  meta["tile"] = tile;
  meta["files"] = nlohmann::ordered_json::array();
  for (const FileIdentity& f : files) {
    meta["files"].push_back({{"path", f.path}, {"size", f.size}, {"mtime_ns", f.mtime_ns},
                             {"header_xxh64", f.header_hash}});
  }
  meta["tensors"] = nlohmann::ordered_json::array();
  // Levels are packed one at a time into one buffer as the writer reaches them: packing them all
  // first doubled the memory written (and, fresh, page-faulted) for an index of many small tiles.
  std::vector<double> packed;
  std::vector<uint64_t> packed_bins;
  std::vector<safetensors::TensorToWrite> tensors;
  for (const TensorPyramid& t : pyramids) {
    meta["tensors"].push_back({{"name", t.name}, {"dtype", std::string(dtype_name(t.dtype))}, {"shape", t.shape},
                               {"rows", t.rows}, {"cols", t.cols}, {"file", t.file}, {"levels", t.levels.size()}});
    for (size_t k = 0; k < t.levels.size(); ++k) {
      const engine::PyramidLevel& level = t.levels[k];
      tensors.push_back({level_name(t.name, k), DType::kF64, {level.grid.rows, level.grid.cols, kFieldsPerTile}, {},
                         [&packed, &level] { return pack_tile_stats(level.tiles, packed); }});
    }
    if (t.value_histogram.size() == engine::kValueHistogramBins) {
      const uint64_t bins = non_empty_bins(t.value_histogram);
      meta["tensors"].back()["histogram_bins"] = bins;
      tensors.push_back({histogram_name(t.name), DType::kU64, {bins, 2}, {},
                         [&packed_bins, &t] { return pack_histogram(t.value_histogram, packed_bins); }});
    }
  }
  std::string text;
  try {
    text = meta.dump();
  } catch (const nlohmann::json::exception& e) {  // a name that is not UTF-8
    return Status::InvalidArgument(path.string() + ": cannot write the index: " + e.what());
  }
  const std::pair<std::string, std::string> metadata[] = {{kMetadataKey, std::move(text)}};
  return safetensors::write_file(path, tensors, metadata);
}

Result<IndexContents> read_index(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return Status::NotFound(path.string() + ": no index");
  TM_ASSIGN_OR_RETURN(auto file, safetensors::open_file(path));
  const MetadataEntry* entry = nullptr;
  for (const auto& m : file->metadata()) {
    if (m.key == kMetadataKey) entry = &m;
  }
  if (entry == nullptr || !entry->value.is_string()) {
    return Status::FormatError(path.string() + ": not a Tensormorph index (no " + kMetadataKey + " metadata)");
  }
  IndexContents contents;
  try {
    auto meta = nlohmann::json::parse(entry->value.get<std::string>());
    if (meta.at("version").get<int>() != kIndexFormatVersion) {
      return Status::FormatError(path.string() + ": index format version " + meta.at("version").dump() +
                                 " (this build reads " + std::to_string(kIndexFormatVersion) + ")");
    }
    contents.tile = meta.at("tile").get<uint32_t>();
    if (!valid_tile(contents.tile)) {
      return Status::FormatError(path.string() + ": tile size " + std::to_string(contents.tile) +
                                 " is not a power of two in [8, 4096]");
    }
    for (const auto& f : meta.at("files")) {
      contents.files.push_back({f.at("path").get<std::string>(), f.at("size").get<uint64_t>(),
                                f.at("mtime_ns").get<int64_t>(), f.at("header_xxh64").get<uint64_t>()});
    }
    for (const auto& t : meta.at("tensors")) {
      TensorPyramid p;
      p.name = t.at("name").get<std::string>();
      auto dtype = dtype_from_name(t.at("dtype").get<std::string>());
      if (!dtype) return Status::FormatError(path.string() + ": tensor " + quoted_name(p.name) + " has an unknown dtype");
      p.dtype = *dtype;
      p.shape = t.at("shape").get<std::vector<uint64_t>>();
      p.rows = t.at("rows").get<uint64_t>();
      p.cols = t.at("cols").get<uint64_t>();
      p.file = t.at("file").get<uint32_t>();
      if (p.file >= contents.files.size()) return Status::FormatError(path.string() + ": tensor " + quoted_name(p.name) + " names a missing file");
      auto damaged = [&](const std::string& why) {
        return Status::FormatError(path.string() + ": tensor " + quoted_name(p.name) + ": " + why);
      };
      TensorInfo described;
      described.shape = p.shape;
      if (!checked_element_count(p.shape).ok()) return damaged("its shape overflows");
      const engine::MatrixShape m = engine::as_matrix(described);
      if (p.rows != m.rows || p.cols != m.cols) return damaged("its matrix shape disagrees with its shape");
      const std::vector<ops::TileGrid> grids = expected_grids(p.rows, p.cols, contents.tile);
      const size_t levels = t.at("levels").get<size_t>();
      if (levels != grids.size()) {
        return damaged(std::to_string(levels) + " pyramid levels where its shape needs " + std::to_string(grids.size()));
      }
      for (size_t k = 0; k < levels; ++k) {
        const TensorInfo* stored = file->find(level_name(p.name, k));
        if (stored == nullptr || stored->dtype != DType::kF64 || stored->shape.size() != 3 ||
            stored->shape[2] != kFieldsPerTile || stored->shape[0] != grids[k].rows ||
            stored->shape[1] != grids[k].cols) {
          return Status::FormatError(path.string() + ": level " + std::to_string(k) + " of '" + p.name +
                                     "' is missing or malformed");
        }
        TM_ASSIGN_OR_RETURN(auto bytes, file->tensor_bytes(*stored));
        engine::PyramidLevel level;
        level.grid = {stored->shape[0], stored->shape[1]};
        level.tiles.resize(level.grid.count());
        std::vector<double> fields(level.grid.count() * kFieldsPerTile);
        std::memcpy(fields.data(), bytes.data(), std::min<size_t>(bytes.size(), fields.size() * sizeof(double)));
        for (size_t i = 0; i < level.tiles.size(); ++i) {
          if (!unpack_tile_stats(&fields[i * kFieldsPerTile], &level.tiles[i])) {
            return damaged("level " + std::to_string(k) + " tile " + std::to_string(i) + " holds an impossible count");
          }
        }
        p.levels.push_back(std::move(level));
      }
      if (t.contains("histogram_bins")) TM_RETURN_IF_ERROR(read_histogram(*file, t.at("histogram_bins").get<uint64_t>(), p, damaged));
      contents.tensors.push_back(std::move(p));
    }
  } catch (const nlohmann::json::exception& e) {
    return Status::FormatError(path.string() + ": malformed index metadata: " + e.what());
  }
  return contents;
}

}  // namespace tensormorph::index
