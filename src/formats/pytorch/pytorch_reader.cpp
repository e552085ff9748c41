// torch.save zip archives: locate "<prefix>/data.pkl", run it through the restricted pickle
// machine, and map every tensor onto its stored "<prefix>/data/<key>" entry.
#include <algorithm>
#include <array>

#include "core/printable.h"
#include "formats/chunk_tiling.h"
#include "formats/pytorch/pickle_vm.h"
#include "formats/pytorch/pytorch.h"
#include "formats/pytorch/torch_objects.h"
#include "formats/pytorch/zip_archive.h"
#include "tensormorph/mapped_file.h"

namespace tensormorph::pytorch {
namespace {

// data.pkl holds only structure (tensor bytes live elsewhere); anything bigger is not a checkpoint.
constexpr uint64_t kMaxPickleBytes = 512ull << 20;
constexpr uint64_t kMaxRecordBytes = 4096;

// What a pre-1.6 torch.save stream starts with: protocol 2, LONG1 of the magic 0x1950a86a20f9469cfc6c.
constexpr std::string_view kLegacyMagicPickle = "\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19";

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == ' ')) text.remove_suffix(1);
  while (!text.empty() && (text.front() == ' ' || text.front() == '\n')) text.remove_prefix(1);
  return text;
}

bool is_pickle_start(std::string_view head) {
  return head.size() >= 2 && static_cast<unsigned char>(head[0]) == 0x80 && head[1] >= 2 && head[1] <= 5;
}

Status refuse_non_zip(const std::filesystem::path& path, std::string_view head) {
  if (head.starts_with(kLegacyMagicPickle)) {
    return Status::Unsupported(path.string() +
                               ": legacy (pre-1.6) torch.save format is not supported; re-save with torch>=1.6");
  }
  if (is_pickle_start(head)) {
    return Status::Unsupported(path.string() + ": a raw pickle stream, not a torch.save zip archive (byte 0 is a "
                                               "pickle PROTO opcode without torch's legacy magic number)");
  }
  return Status::FormatError(path.string() + ": not a zip archive: no 'PK' signature at byte 0");
}

// The single "<prefix>/data.pkl" entry (or a bare "data.pkl"); the prefix includes its trailing '/'.
Result<const ZipEntry*> find_data_pickle(const ZipArchive& zip, std::string* prefix) {
  const ZipEntry* found = nullptr;
  for (const ZipEntry& entry : zip.entries()) {
    std::string_view name = entry.name;
    if (!name.ends_with("data.pkl")) continue;
    std::string_view head = name.substr(0, name.size() - std::string_view("data.pkl").size());
    const bool top_level = head.empty() || (head.back() == '/' && head.find('/') == head.size() - 1);
    if (!top_level) continue;
    if (found != nullptr) {
      return Status::FormatError(zip.path().string() + ": archive holds both " + quoted_name(found->name) + " and " +
                                 quoted_name(entry.name) + " (central directory byte " +
                                 std::to_string(entry.central_header_offset) + "); expected one torch.save record");
    }
    found = &entry;
    *prefix = std::string(head);
  }
  if (found == nullptr) {
    return Status::FormatError(zip.path().string() + ": zip archive has no '<name>/data.pkl' entry (" +
                               std::to_string(zip.entries().size()) + " entries); not a torch.save checkpoint");
  }
  return found;
}

// Small text records torch.save writes beside data.pkl, kept as metadata.
Status read_records(const ZipArchive& zip, const std::string& prefix, std::vector<MetadataEntry>* metadata,
                    std::vector<std::string>* notes) {
  metadata->push_back({"pytorch.archive_prefix", "string",
                       prefix.empty() ? std::string() : prefix.substr(0, prefix.size() - 1)});
  constexpr std::array<std::pair<std::string_view, std::string_view>, 5> kRecords{{
      {"version", "pytorch.version"},
      {".format_version", "pytorch.format_version"},
      {"byteorder", "pytorch.byteorder"},
      {".storage_alignment", "pytorch.storage_alignment"},
      {".data/serialization_id", "pytorch.serialization_id"},
  }};
  for (const auto& [record, key] : kRecords) {
    const ZipEntry* entry = zip.find(prefix + std::string(record));
    if (entry == nullptr) continue;
    if (entry->uncompressed_size > kMaxRecordBytes) {
      notes->push_back("record " + quoted_name(entry->name) + " of " + std::to_string(entry->uncompressed_size) +
                       " bytes is too large to show; ignored");
      continue;
    }
    TM_ASSIGN_OR_RETURN(std::string text, zip.read_entry(*entry, kMaxRecordBytes));
    const std::string value(trim(text));
    if (record == "byteorder") {
      if (value == "big") {
        return Status::Unsupported(zip.path().string() + ": entry " + quoted_name(entry->name) +
                                   " says the tensors are big-endian; only little-endian checkpoints are supported");
      }
      if (value != "little") {
        return Status::FormatError(zip.path().string() + ": entry " + quoted_name(entry->name) + " holds " + quoted_name(value, 40) +
                                   "; expected 'little' or 'big'");
      }
    }
    metadata->push_back({std::string(key), "string", value});
  }
  return Status::Ok();
}

// What the reader learnt about the archive: its entries, the pickle and the storages beside it.
std::vector<FormatFact> archive_facts(const ZipArchive& zip, const std::string& prefix, const ZipEntry& pickle_entry,
                                      std::string_view pickle) {
  const std::string data_dir = prefix + "data/";
  uint64_t storages = 0, storage_bytes = 0;
  for (const ZipEntry& entry : zip.entries()) {
    if (entry.name.size() > data_dir.size() && entry.name.starts_with(data_dir)) {
      storages += 1;
      storage_bytes += entry.uncompressed_size;
    }
  }
  std::vector<FormatFact> facts = {
      {"pytorch.zip_entries", zip.entries().size(), std::nullopt},
      {"pytorch.pickle_entry", printable(pickle_entry.name), std::nullopt},
      {"pytorch.pickle_bytes", pickle.size(), std::nullopt},
      {"pytorch.pickle_compression", pickle_entry.method == kZipMethodStored ? "stored" : "deflate", std::nullopt},
  };
  // A pickle opens with PROTO n (0x80 n) from protocol 2 on.
  if (is_pickle_start(pickle)) {
    const unsigned protocol = static_cast<unsigned char>(pickle[1]);
    facts.push_back({"pytorch.pickle_protocol", protocol, std::nullopt});
  }
  facts.push_back({"pytorch.storages", storages, std::nullopt});
  facts.push_back({"pytorch.storage_bytes", storage_bytes, std::nullopt});
  return facts;
}

}  // namespace

Result<ShardedArchive> open_sharded_archive(const std::filesystem::path& path) {
  TM_ASSIGN_OR_RETURN(uint64_t size, file_size_of(path));
  if (size == 0) return Status::FormatError(path.string() + ": file is empty");
  TM_ASSIGN_OR_RETURN(std::string head, read_file_range(path, 0, std::min<uint64_t>(size, kLegacyMagicPickle.size())));
  if (!head.starts_with("PK")) return refuse_non_zip(path, head);

  TM_ASSIGN_OR_RETURN(ZipArchive zip, ZipArchive::open(path));
  std::string prefix;
  TM_ASSIGN_OR_RETURN(const ZipEntry* pickle_entry, find_data_pickle(zip, &prefix));
  std::vector<MetadataEntry> metadata;
  std::vector<std::string> notes;
  TM_RETURN_IF_ERROR(read_records(zip, prefix, &metadata, &notes));

  TM_ASSIGN_OR_RETURN(std::string pickle, zip.read_entry(*pickle_entry, kMaxPickleBytes));
  TM_ASSIGN_OR_RETURN(PickleTree tree, run_pickle(pickle, path.string() + ": " + printable(pickle_entry->name)));
  TM_ASSIGN_OR_RETURN(TorchTensors found, collect_tensors(tree, zip, prefix, printable(pickle_entry->name)));
  if (pickle_entry->method != kZipMethodStored) {
    notes.push_back(quoted_name(pickle_entry->name) + " is deflate-compressed; it was inflated in memory");
  }
  notes.insert(notes.end(), std::make_move_iterator(found.notes.begin()), std::make_move_iterator(found.notes.end()));
  for (const ShardedTensorRecord& record : found.sharded) {
    if (record.local.size() == record.shards_total) continue;
    notes.push_back(quoted_name(record.name) + " is a ShardedTensor " + dims_text(record.shape) + " of " + std::to_string(record.shards_total) +
                    " shards, " + std::to_string(record.local.size()) + " of them here (listed as " + quoted_name(record.name) +
                    "[...]); open the directory that holds every rank's file to see it whole");
  }

  std::vector<SourceFile> files{{path, zip.file_size()}};
  ShardedArchive out;
  out.checkpoint = std::make_unique<Checkpoint>(CheckpointFormat::kPyTorch, path, std::move(files), std::move(found.tensors),
                                                std::move(metadata), std::move(notes), archive_facts(zip, prefix, *pickle_entry, pickle));
  out.sharded = std::move(found.sharded);
  return out;
}

Result<std::unique_ptr<Checkpoint>> open_file(const std::filesystem::path& path) {
  TM_ASSIGN_OR_RETURN(ShardedArchive archive, open_sharded_archive(path));
  return std::move(archive.checkpoint);
}

Result<PickleTree> read_archive_pickle(const std::filesystem::path& path) {
  TM_ASSIGN_OR_RETURN(ZipArchive zip, ZipArchive::open(path));
  std::string prefix;
  TM_ASSIGN_OR_RETURN(const ZipEntry* pickle_entry, find_data_pickle(zip, &prefix));
  TM_ASSIGN_OR_RETURN(std::string pickle, zip.read_entry(*pickle_entry, kMaxPickleBytes));
  return run_pickle(pickle, path.string() + ": " + printable(pickle_entry->name));
}

Result<TensorInfo> read_embedded_tensor(const std::filesystem::path& path, uint64_t base, uint64_t size) {
  TM_ASSIGN_OR_RETURN(ZipArchive zip, ZipArchive::open(path, base, size));
  std::string prefix;
  TM_ASSIGN_OR_RETURN(const ZipEntry* pickle_entry, find_data_pickle(zip, &prefix));
  TM_ASSIGN_OR_RETURN(std::string pickle, zip.read_entry(*pickle_entry, kMaxPickleBytes));
  const std::string source = path.string() + ": the archive at byte " + std::to_string(base) + ": " + printable(pickle_entry->name);
  TM_ASSIGN_OR_RETURN(PickleTree tree, run_pickle(pickle, source));
  TM_ASSIGN_OR_RETURN(TorchTensors found, collect_tensors(tree, zip, prefix, printable(pickle_entry->name)));
  if (found.tensors.size() != 1) {
    return Status::FormatError(source + ": holds " + std::to_string(found.tensors.size()) +
                               " tensors; a distributed checkpoint stores one per chunk");
  }
  return std::move(found.tensors.front());
}

}  // namespace tensormorph::pytorch
