#include "index/channel_store.h"

#include <cstring>

#include "engine/matrix_shape.h"
#include "formats/safetensors/safetensors.h"
#include "index/index_builder.h"
#include "index/index_file.h"

namespace tensormorph::index {
namespace {

constexpr const char* kMetadataKey = "tensormorph.channels";
constexpr int kVersion = 1;

std::string rows_name(const std::string& tensor) { return tensor + "/rows"; }
std::string cols_name(const std::string& tensor) { return tensor + "/cols"; }

// The metadata's description of one tensor: what must be unchanged for its records to hold.
nlohmann::json description(const TensorInfo& tensor) {
  return {{"name", tensor.name}, {"dtype", std::string(dtype_name(tensor.dtype))}, {"shape", tensor.shape}};
}

// The stored records named `name`, expected `count` of them; nullopt when missing or damaged.
std::optional<std::vector<TM_TileStats>> read_records(const Checkpoint& file, const std::string& name, uint64_t count) {
  const TensorInfo* stored = file.find(name);
  if (stored == nullptr || stored->dtype != DType::kF64 ||
      stored->shape != std::vector<uint64_t>{count, kFieldsPerTile}) {
    return std::nullopt;
  }
  auto bytes = file.tensor_bytes(*stored);
  if (!bytes.ok() || bytes->size() != count * kFieldsPerTile * sizeof(double)) return std::nullopt;
  std::vector<double> fields(count * kFieldsPerTile);
  if (!fields.empty()) std::memcpy(fields.data(), bytes->data(), bytes->size());
  std::vector<TM_TileStats> records(count);
  for (uint64_t i = 0; i < count; ++i) {
    if (!unpack_tile_stats(&fields[i * kFieldsPerTile], &records[i])) return std::nullopt;
  }
  return records;
}

// The tensors the store's metadata describes, by name; empty when it is not a current store of `files`.
std::map<std::string, nlohmann::json> stored_tensors(const Checkpoint& file, const std::vector<FileIdentity>& files) {
  std::map<std::string, nlohmann::json> described;
  for (const auto& m : file.metadata()) {
    if (m.key != kMetadataKey || !m.value.is_string()) continue;
    const nlohmann::json meta = nlohmann::json::parse(m.value.get<std::string>(), nullptr, false);
    if (meta.is_discarded() || !meta.is_object() || meta.value("version", 0) != kVersion ||
        !meta.contains("files") || meta["files"] != identities_json(files) || !meta.contains("tensors") ||
        !meta["tensors"].is_array()) {
      return described;
    }
    for (const auto& t : meta["tensors"]) {
      if (t.is_object() && t.contains("name") && t["name"].is_string()) described[t["name"].get<std::string>()] = t;
    }
  }
  return described;
}

}  // namespace

Result<ChannelStore> ChannelStore::open(const Checkpoint& checkpoint, const std::filesystem::path& index_path) {
  const std::filesystem::path index = index_path.empty() ? default_index_path(checkpoint) : index_path;
  TM_ASSIGN_OR_RETURN(std::vector<FileIdentity> files, identify_checkpoint_files(checkpoint, index));
  return at(index, std::move(files));
}

ChannelStore ChannelStore::beside(const AnalysisCache& cache) { return at(cache.index_path(), cache.files()); }

ChannelStore ChannelStore::at(const std::filesystem::path& index, std::vector<FileIdentity> files) {
  ChannelStore store;
  store.path_ = index;
  store.path_ += ".channels";
  store.files_ = std::move(files);
  std::error_code ec;
  if (!std::filesystem::is_regular_file(store.path_, ec)) return store;
  auto file = safetensors::open_file(store.path_);
  // A damaged or foreign store is as good as none: its results are computed again and replace it.
  if (file.ok()) {
    store.stored_described_ = stored_tensors(**file, store.files_);
    if (!store.stored_described_.empty()) store.stored_ = std::move(file).value();
  }
  return store;
}

std::optional<engine::ChannelStats> ChannelStore::find(const TensorInfo& tensor) const {
  if (const auto added = added_.find(tensor.name); added != added_.end()) return added->second;
  if (stored_ == nullptr) return std::nullopt;
  const auto described = stored_described_.find(tensor.name);
  if (described == stored_described_.end() || described->second != description(tensor)) return std::nullopt;
  const engine::MatrixShape m = engine::as_matrix(tensor);
  auto rows = read_records(*stored_, rows_name(tensor.name), m.rows);
  auto cols = read_records(*stored_, cols_name(tensor.name), m.cols);
  if (!rows || !cols) return std::nullopt;
  return engine::ChannelStats{std::move(*rows), std::move(*cols)};
}

void ChannelStore::put(const TensorInfo& tensor, engine::ChannelStats stats) {
  added_[tensor.name] = std::move(stats);
  added_described_[tensor.name] = description(tensor);
}

Status ChannelStore::save() {
  if (added_.empty()) return Status::Ok();
  nlohmann::json tensors_meta = nlohmann::json::array();
  std::vector<safetensors::TensorToWrite> tensors;
  std::vector<double> packed;
  // Stored tensors not replaced keep their bytes, straight from the mapping of the old store
  // (which stays valid: the new one is written beside it and renamed over it).
  if (stored_ != nullptr) {
    for (const auto& [name, t] : stored_described_) {
      if (added_.count(name) != 0) continue;
      const TensorInfo* rows = stored_->find(rows_name(name));
      const TensorInfo* cols = stored_->find(cols_name(name));
      if (rows == nullptr || cols == nullptr) continue;
      auto rows_bytes = stored_->tensor_bytes(*rows);
      auto cols_bytes = stored_->tensor_bytes(*cols);
      if (!rows_bytes.ok() || !cols_bytes.ok()) continue;
      tensors_meta.push_back(t);
      tensors.push_back({rows->name, rows->dtype, rows->shape, *rows_bytes, nullptr});
      tensors.push_back({cols->name, cols->dtype, cols->shape, *cols_bytes, nullptr});
    }
  }
  for (const auto& [name, stats] : added_) {
    tensors_meta.push_back(added_described_.at(name));
    tensors.push_back({rows_name(name), DType::kF64, {stats.rows.size(), kFieldsPerTile}, {},
                       [&packed, &stats] { return pack_tile_stats(stats.rows, packed); }});
    tensors.push_back({cols_name(name), DType::kF64, {stats.cols.size(), kFieldsPerTile}, {},
                       [&packed, &stats] { return pack_tile_stats(stats.cols, packed); }});
  }
  std::string text;
  try {
    text = nlohmann::json{{"version", kVersion}, {"files", identities_json(files_)}, {"tensors", tensors_meta}}.dump();
  } catch (const nlohmann::json::exception& e) {  // a tensor name that is not UTF-8
    return Status::InvalidArgument(path_.string() + ": cannot store the channel statistics: " + e.what());
  }
  std::error_code ec;
  std::filesystem::create_directories(path_.parent_path(), ec);
  const std::pair<std::string, std::string> metadata[] = {{kMetadataKey, std::move(text)}};
  TM_RETURN_IF_ERROR(safetensors::write_file(path_, tensors, metadata));
  // What was written is now the store; reading it back keeps find() and the next save() simple.
  auto file = safetensors::open_file(path_);
  stored_ = nullptr;
  stored_described_.clear();
  if (file.ok()) {
    stored_described_ = stored_tensors(**file, files_);
    stored_ = std::move(file).value();
  }
  added_.clear();
  added_described_.clear();
  return Status::Ok();
}

Result<engine::ChannelStats> kept_channel_stats(ChannelStore& store, bool recompute, compute::Scheduler& scheduler,
                                                const Checkpoint& checkpoint, const TensorInfo& tensor,
                                                engine::Records* records, uint32_t max_threads, bool* was_stored) {
  if (!recompute) {
    if (auto kept = store.find(tensor)) {
      if (was_stored != nullptr) *was_stored = true;
      return std::move(*kept);
    }
  }
  if (was_stored != nullptr) *was_stored = false;
  TM_ASSIGN_OR_RETURN(engine::ChannelStats stats,
                      engine::tensor_channel_stats(scheduler, checkpoint, tensor, records, max_threads));
  store.put(tensor, stats);
  return stats;
}

}  // namespace tensormorph::index
