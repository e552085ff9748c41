// Sharded safetensors sets: model.safetensors.index.json plus the shard files it names.
#include <algorithm>
#include <exception>
#include <new>
#include <unordered_map>

#include "formats/safetensors/safetensors.h"
#include "formats/safetensors/safetensors_internal.h"
#include "tensormorph/mapped_file.h"

namespace tensormorph::safetensors {
namespace {

using internal::quote_name;
using Json = nlohmann::json;

// Tolerated oddities are listed one by one up to this count, then summarised.
constexpr size_t kMaxNotesPerKind = 20;

// One shard file named by the weight map, in order of first appearance.
struct Shard {
  std::string name;             // as written in the index
  std::filesystem::path path;   // index directory / name
  std::string first_tensor;     // the first tensor mapped to it, for messages
  uint64_t first_listed_at = 0; // byte offset of that tensor's key in the index
};

std::string metadata_type(const Json& value) {
  if (value.is_string()) return "string";
  if (value.is_number_unsigned()) return "u64";
  if (value.is_number_integer()) return "i64";
  if (value.is_number_float()) return "f64";
  if (value.is_boolean()) return "bool";
  if (value.is_null()) return "null";
  return "json";
}

// Shard names come from the index file, so they must not reach outside its directory.
Status check_shard_name(const std::string& index_file, const std::string& tensor, const std::string& shard,
                        uint64_t at) {
  const std::filesystem::path shard_path(shard);
  std::string problem;
  if (shard.empty()) {
    problem = "is empty";
  } else if (shard.find('\0') != std::string::npos) {
    problem = "contains a NUL byte";
  } else if (shard_path.has_root_path()) {
    problem = "is an absolute path";
  } else if (std::any_of(shard_path.begin(), shard_path.end(), [](const auto& part) { return part == ".."; })) {
    problem = "contains '..'";
  }
  if (problem.empty()) return Status::Ok();
  return Status::FormatError(index_file + ": shard " + quote_name(shard) + " for tensor " + quote_name(tensor) +
                             " at byte " + std::to_string(at) + " " + problem +
                             "; shard paths must stay inside the index's directory");
}

Status read_index_metadata(const std::string& index_file, const internal::ParsedObject& parsed,
                           std::vector<MetadataEntry>& metadata, std::vector<std::string>& notes) {
  for (const std::string& key : parsed.positions.top_keys_in_order()) {
    if (key == "weight_map") continue;
    if (key != "metadata") {
      notes.push_back(index_file + ": ignored unknown index key " + quote_name(key) + " at byte " +
                      std::to_string(parsed.positions.of(key)));
      continue;
    }
    const Json& value = parsed.value.at(key);
    if (value.is_null()) continue;
    if (!value.is_object()) {
      return Status::FormatError(index_file + ": \"metadata\" at byte " + std::to_string(parsed.positions.of(key)) +
                                 " must be an object, found " + internal::json_type_name(value));
    }
    for (const std::string& name : parsed.positions.nested_keys_in_order(key)) {
      auto entry = value.find(name);
      if (entry == value.end()) continue;
      // MetadataEntry keeps document order inside nested values too, so convert through text.
      metadata.push_back(MetadataEntry{name, metadata_type(*entry), nlohmann::ordered_json::parse(entry->dump())});
    }
  }
  return Status::Ok();
}

// Adds a shard's __metadata__ entries whose keys are new; notes values that disagree with earlier ones.
void merge_shard_metadata(const Shard& shard, std::vector<MetadataEntry> shard_metadata,
                          std::vector<MetadataEntry>& metadata, std::vector<std::string>& notes) {
  for (MetadataEntry& entry : shard_metadata) {
    auto existing = std::find_if(metadata.begin(), metadata.end(),
                                 [&](const MetadataEntry& e) { return e.key == entry.key; });
    if (existing == metadata.end()) {
      metadata.push_back(std::move(entry));
    } else if (existing->value != entry.value) {
      notes.push_back("shard " + quote_name(shard.name) + " has metadata " + quote_name(entry.key) + " = " +
                      printable(entry.value.dump()) + ", which differs from " + printable(existing->value.dump()) +
                      "; kept the first");
    }
  }
}

Result<std::unique_ptr<Checkpoint>> open_index_unguarded(const std::filesystem::path& index_path) {
  const std::string index_file = index_path.string();
  TM_ASSIGN_OR_RETURN(uint64_t size, file_size_of(index_path));
  if (size > kMaxHeaderBytes) {
    return Status::FormatError(index_file + ": index is " + std::to_string(size) + " bytes, over the limit of " +
                               std::to_string(kMaxHeaderBytes) + " bytes for safetensors JSON");
  }
  TM_ASSIGN_OR_RETURN(std::string text, read_file_range(index_path, 0, size));
  TM_ASSIGN_OR_RETURN(internal::ParsedObject parsed, internal::parse_json_object(index_path, text, 0));

  std::vector<MetadataEntry> metadata;
  std::vector<std::string> notes;
  TM_RETURN_IF_ERROR(read_index_metadata(index_file, parsed, metadata, notes));
  auto weight_map = parsed.value.find("weight_map");
  if (weight_map == parsed.value.end() || !weight_map->is_object()) {
    return Status::FormatError(index_file + ": an index needs a \"weight_map\" object mapping tensor names to shard "
                               "files" + (weight_map == parsed.value.end()
                                              ? std::string(" (none found)")
                                              : " (found " + internal::json_type_name(*weight_map) + " at byte " +
                                                    std::to_string(parsed.positions.of("weight_map")) + ")"));
  }

  std::vector<Shard> shards;
  std::unordered_map<std::string, uint32_t> shard_by_name;
  const std::vector<std::string> listed_names = parsed.positions.nested_keys_in_order("weight_map");
  if (listed_names.size() != weight_map->size()) {
    return Status::Internal(index_file + ": weight_map key positions disagree with the parsed JSON");
  }
  std::unordered_map<std::string_view, uint32_t> listed_shard;  // tensor name -> shard, views into listed_names
  for (const std::string& tensor : listed_names) {
    const uint64_t at = parsed.positions.of("weight_map", tensor);
    const Json& shard_value = weight_map->at(tensor);
    if (!shard_value.is_string()) {
      return Status::FormatError(index_file + ": weight_map entry for tensor " + quote_name(tensor) + " at byte " +
                                 std::to_string(at) + " must name a shard file, found " +
                                 internal::json_type_name(shard_value));
    }
    const auto& shard_name = shard_value.get_ref<const std::string&>();
    TM_RETURN_IF_ERROR(check_shard_name(index_file, tensor, shard_name, at));
    auto [found, inserted] = shard_by_name.emplace(shard_name, static_cast<uint32_t>(shards.size()));
    if (inserted) shards.push_back(Shard{shard_name, index_path.parent_path() / shard_name, tensor, at});
    listed_shard.emplace(tensor, found->second);
  }

  std::vector<SourceFile> files;
  std::vector<FormatFact> facts;
  std::vector<TensorInfo> tensors;
  std::unordered_map<std::string, uint32_t> stored_shard;
  for (uint32_t i = 0; i < shards.size(); ++i) {
    const Shard& shard = shards[i];
    auto header = internal::read_file_header(shard.path, i);
    if (!header.ok() && header.status().code() == StatusCode::kNotFound) {
      return Status::NotFound(index_file + ": shard " + quote_name(shard.name) + " (listed for tensor " +
                              quote_name(shard.first_tensor) + " at byte " + std::to_string(shard.first_listed_at) +
                              ") does not exist: " + shard.path.string());
    }
    if (!header.ok()) return header.status().with_context(index_file + ": shard " + quote_name(shard.name));
    files.push_back(SourceFile{shard.path, header->file_size});
    for (FormatFact& fact : internal::header_facts(*header, i)) facts.push_back(std::move(fact));
    for (TensorInfo& tensor : header->tensors) {
      auto [found, inserted] = stored_shard.emplace(tensor.name, i);
      if (!inserted) {
        return Status::FormatError(index_file + ": tensor " + quote_name(tensor.name) + " is stored in both shard " +
                                   quote_name(shards[found->second].name) + " and shard " + quote_name(shard.name));
      }
      tensors.push_back(std::move(tensor));
    }
    merge_shard_metadata(shard, std::move(header->metadata), metadata, notes);
  }

  for (const std::string& tensor : listed_names) {
    const Shard& listed = shards[listed_shard.at(tensor)];
    auto stored = stored_shard.find(tensor);
    const std::string where = " at byte " + std::to_string(parsed.positions.of("weight_map", tensor));
    if (stored == stored_shard.end()) {
      return Status::FormatError(index_file + ": tensor " + quote_name(tensor) + " listed in weight_map" + where +
                                 " is missing from its shard " + quote_name(listed.name) + " (" +
                                 listed.path.string() + ")");
    }
    if (&shards[stored->second] != &listed) {
      return Status::FormatError(index_file + ": weight_map" + where + " puts tensor " + quote_name(tensor) +
                                 " in shard " + quote_name(listed.name) + " but it is stored in shard " +
                                 quote_name(shards[stored->second].name));
    }
  }

  size_t unlisted = 0;
  for (const TensorInfo& tensor : tensors) {
    if (listed_shard.count(tensor.name) != 0) continue;
    if (++unlisted <= kMaxNotesPerKind) {
      notes.push_back("tensor " + quote_name(tensor.name) + " is stored in shard " +
                      quote_name(shards[tensor.file].name) + " but not listed in the weight_map of " + index_file);
    }
  }
  if (unlisted > kMaxNotesPerKind) {
    notes.push_back(std::to_string(unlisted - kMaxNotesPerKind) + " more tensors are stored in shards but not listed "
                    "in the weight_map of " + index_file);
  }

  return std::make_unique<Checkpoint>(CheckpointFormat::kSafetensors, index_path, std::move(files),
                                      std::move(tensors), std::move(metadata), std::move(notes), std::move(facts));
}

}  // namespace

Result<std::unique_ptr<Checkpoint>> open_index(const std::filesystem::path& index_path) {
  try {
    return open_index_unguarded(index_path);
  } catch (const std::bad_alloc&) {
    return Status::ResourceExhausted(index_path.string() + ": out of memory reading the safetensors index");
  } catch (const std::exception& error) {
    return Status::Internal(index_path.string() + ": unexpected error reading the safetensors index: " +
                            error.what());
  }
}

}  // namespace tensormorph::safetensors
