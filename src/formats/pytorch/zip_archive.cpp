#include "formats/pytorch/zip_archive.h"

#include <zlib.h>

#include <algorithm>
#include <limits>

#include "core/printable.h"
#include "tensormorph/mapped_file.h"

namespace tensormorph::pytorch {
namespace {

constexpr uint32_t kEndOfCentralDirSignature = 0x06054b50;
constexpr uint32_t kZip64EndLocatorSignature = 0x07064b50;
constexpr uint32_t kZip64EndRecordSignature = 0x06064b50;
constexpr uint32_t kCentralHeaderSignature = 0x02014b50;
constexpr uint32_t kLocalHeaderSignature = 0x04034b50;
constexpr uint64_t kEndOfCentralDirBytes = 22;
constexpr uint64_t kZip64EndLocatorBytes = 20;
constexpr uint64_t kZip64EndRecordBytes = 56;
constexpr uint64_t kCentralHeaderBytes = 46;
constexpr uint64_t kLocalHeaderBytes = 30;
constexpr uint64_t kMaxCommentBytes = 0xFFFF;
constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr uint16_t kFlagEncrypted = 0x0001;

// Little-endian field of `width` bytes at `at`; callers have checked that it lies within `bytes`.
uint64_t load_le(std::string_view bytes, uint64_t at, unsigned width) {
  uint64_t value = 0;
  for (unsigned i = width; i-- > 0;) value = (value << 8) | static_cast<unsigned char>(bytes[at + i]);
  return value;
}
uint16_t load_u16(std::string_view bytes, uint64_t at) { return static_cast<uint16_t>(load_le(bytes, at, 2)); }
uint32_t load_u32(std::string_view bytes, uint64_t at) { return static_cast<uint32_t>(load_le(bytes, at, 4)); }
uint64_t load_u64(std::string_view bytes, uint64_t at) { return load_le(bytes, at, 8); }

/// The bytes of one archive: a whole file, or a range of one (an archive stored inside another
/// file). Offsets given to it are relative to the archive's first byte.
struct ZipSource {
  const std::filesystem::path& path;
  uint64_t base = 0;  // where the archive starts in the file
  uint64_t size = 0;  // the archive's bytes
  Result<std::string> read(uint64_t at, uint64_t length) const { return read_file_range(path, base + at, length); }
  std::string string() const { return path.string(); }
  /// The file offset of archive offset `at`, as messages give it.
  uint64_t absolute(uint64_t at) const { return base + at; }
};

Status zip_error(const ZipSource& source, uint64_t offset, std::string_view message) {
  return Status::FormatError(source.string() + ": zip: " + std::string(message) + " (at byte " +
                             std::to_string(source.absolute(offset)) + ")");
}

// Where the central directory lies, as the end records describe it.
struct DirectoryLocation {
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t entry_count = 0;
  uint64_t end_of_directory = 0;  // first byte after which the directory may not extend
};

Result<uint64_t> find_end_record(const ZipSource& path, uint64_t file_size, std::string* tail_out,
                                 uint64_t* tail_start_out) {
  if (file_size < kEndOfCentralDirBytes) {
    return zip_error(path, 0, "file of " + std::to_string(file_size) +
                                  " bytes is too short to hold an end-of-central-directory record");
  }
  const uint64_t tail_length = std::min<uint64_t>(file_size, kEndOfCentralDirBytes + kMaxCommentBytes);
  const uint64_t tail_start = file_size - tail_length;
  TM_ASSIGN_OR_RETURN(std::string tail, path.read(tail_start, tail_length));
  // Scan backwards so that the record closest to the end wins; its comment must fit in the file.
  for (uint64_t pos = tail_length - kEndOfCentralDirBytes + 1; pos-- > 0;) {
    if (load_u32(tail, pos) != kEndOfCentralDirSignature) continue;
    const uint64_t comment_length = load_u16(tail, pos + 20);
    if (pos + kEndOfCentralDirBytes + comment_length > tail_length) continue;
    *tail_out = std::move(tail);
    *tail_start_out = tail_start;
    return pos;
  }
  return zip_error(path, tail_start, "no end-of-central-directory record in the last " +
                                         std::to_string(tail_length) + " bytes (not a zip archive, or truncated)");
}

Result<DirectoryLocation> read_zip64_end(const ZipSource& path, std::string_view locator,
                                         uint64_t locator_offset) {
  const uint32_t record_disk = load_u32(locator, 4);
  const uint64_t record_offset = load_u64(locator, 8);
  const uint32_t total_disks = load_u32(locator, 16);
  if (record_disk != 0 || total_disks > 1) {
    return Status::Unsupported(path.string() + ": zip: multi-disk (split) archives are not supported (Zip64 locator at byte " +
                               std::to_string(path.absolute(locator_offset)) + ")");
  }
  uint64_t record_end = 0;
  if (__builtin_add_overflow(record_offset, kZip64EndRecordBytes, &record_end) || record_end > locator_offset) {
    return zip_error(path, locator_offset, "Zip64 end record offset " + std::to_string(record_offset) +
                                               " does not leave room for the record before its locator");
  }
  TM_ASSIGN_OR_RETURN(std::string record, path.read(record_offset, kZip64EndRecordBytes));
  if (load_u32(record, 0) != kZip64EndRecordSignature) {
    return zip_error(path, record_offset, "Zip64 end-of-central-directory record has a bad signature");
  }
  const uint32_t disk_number = load_u32(record, 16);
  const uint32_t directory_disk = load_u32(record, 20);
  const uint64_t entries_on_disk = load_u64(record, 24);
  DirectoryLocation location;
  location.entry_count = load_u64(record, 32);
  location.size = load_u64(record, 40);
  location.offset = load_u64(record, 48);
  location.end_of_directory = record_offset;
  if (disk_number != 0 || directory_disk != 0 || entries_on_disk != location.entry_count) {
    return Status::Unsupported(path.string() + ": zip: multi-disk (split) archives are not supported (Zip64 record at byte " +
                               std::to_string(path.absolute(record_offset)) + ")");
  }
  return location;
}

Result<DirectoryLocation> locate_directory(const ZipSource& path, uint64_t file_size) {
  std::string tail;
  uint64_t tail_start = 0;
  TM_ASSIGN_OR_RETURN(uint64_t end_pos, find_end_record(path, file_size, &tail, &tail_start));
  const uint64_t end_offset = tail_start + end_pos;
  // A Zip64 locator, when present, sits immediately before the classic record and is authoritative.
  if (end_offset >= kZip64EndLocatorBytes) {
    const uint64_t locator_offset = end_offset - kZip64EndLocatorBytes;
    std::string locator;
    if (locator_offset >= tail_start) {
      locator = tail.substr(locator_offset - tail_start, kZip64EndLocatorBytes);
    } else {
      TM_ASSIGN_OR_RETURN(locator, path.read(locator_offset, kZip64EndLocatorBytes));
    }
    if (load_u32(locator, 0) == kZip64EndLocatorSignature) {
      return read_zip64_end(path, locator, locator_offset);
    }
  }
  const uint16_t disk_number = load_u16(tail, end_pos + 4);
  const uint16_t directory_disk = load_u16(tail, end_pos + 6);
  const uint16_t entries_on_disk = load_u16(tail, end_pos + 8);
  DirectoryLocation location;
  location.entry_count = load_u16(tail, end_pos + 10);
  location.size = load_u32(tail, end_pos + 12);
  location.offset = load_u32(tail, end_pos + 16);
  location.end_of_directory = end_offset;
  if (disk_number != 0 || directory_disk != 0 || entries_on_disk != location.entry_count) {
    return Status::Unsupported(path.string() + ": zip: multi-disk (split) archives are not supported (end record at byte " +
                               std::to_string(path.absolute(end_offset)) + ")");
  }
  return location;
}

// Replaces 0xFFFF.. placeholders of `entry` with the values of its Zip64 extra field.
Status apply_zip64_extra(const ZipSource& path, std::string_view extra, uint64_t extra_offset,
                         bool need_uncompressed, bool need_compressed, bool need_local_offset, ZipEntry* entry) {
  uint64_t pos = 0;
  while (pos + 4 <= extra.size()) {
    const uint16_t id = load_u16(extra, pos);
    const uint16_t length = load_u16(extra, pos + 2);
    if (pos + 4 + length > extra.size()) {
      return zip_error(path, extra_offset + pos, "entry " + quoted_name(entry->name) + ": extra field of " +
                                                     std::to_string(length) + " bytes overruns its header");
    }
    if (id == kZip64ExtraId) {
      std::string_view field = extra.substr(pos + 4, length);
      uint64_t at = 0;
      auto take = [&](bool needed, uint64_t* out, std::string_view what) -> Status {
        if (!needed) return Status::Ok();
        if (at + 8 > field.size()) {
          return zip_error(path, extra_offset + pos, "entry " + quoted_name(entry->name) + ": Zip64 extra field lacks the " +
                                                         std::string(what));
        }
        *out = load_u64(field, at);
        at += 8;
        return Status::Ok();
      };
      TM_RETURN_IF_ERROR(take(need_uncompressed, &entry->uncompressed_size, "uncompressed size"));
      TM_RETURN_IF_ERROR(take(need_compressed, &entry->compressed_size, "compressed size"));
      TM_RETURN_IF_ERROR(take(need_local_offset, &entry->local_header_offset, "local header offset"));
      return Status::Ok();
    }
    pos += 4 + length;
  }
  if (need_uncompressed || need_compressed || need_local_offset) {
    return zip_error(path, extra_offset, "entry " + quoted_name(entry->name) +
                                             ": 32-bit fields are 0xFFFFFFFF but there is no Zip64 extra field");
  }
  return Status::Ok();
}

Result<std::vector<ZipEntry>> parse_directory(const ZipSource& path, const DirectoryLocation& location) {
  std::string directory;
  TM_ASSIGN_OR_RETURN(directory, path.read(location.offset, location.size));
  std::vector<ZipEntry> entries;
  entries.reserve(static_cast<size_t>(location.entry_count));
  uint64_t pos = 0;
  for (uint64_t index = 0; index < location.entry_count; ++index) {
    const uint64_t header_offset = location.offset + pos;
    if (directory.size() - pos < kCentralHeaderBytes) {
      return zip_error(path, header_offset, "central directory ends inside header #" + std::to_string(index) +
                                                " of " + std::to_string(location.entry_count));
    }
    if (load_u32(directory, pos) != kCentralHeaderSignature) {
      return zip_error(path, header_offset, "central directory header #" + std::to_string(index) +
                                                " has a bad signature");
    }
    const uint64_t name_length = load_u16(directory, pos + 28);
    const uint64_t extra_length = load_u16(directory, pos + 30);
    const uint64_t comment_length = load_u16(directory, pos + 32);
    const uint64_t variable_length = name_length + extra_length + comment_length;
    if (directory.size() - pos - kCentralHeaderBytes < variable_length) {
      return zip_error(path, header_offset, "central directory header #" + std::to_string(index) +
                                                " overruns the directory");
    }
    ZipEntry entry;
    entry.flags = load_u16(directory, pos + 8);
    entry.method = load_u16(directory, pos + 10);
    entry.crc32 = load_u32(directory, pos + 16);
    const uint32_t compressed32 = load_u32(directory, pos + 20);
    const uint32_t uncompressed32 = load_u32(directory, pos + 24);
    const uint32_t local_offset32 = load_u32(directory, pos + 42);
    entry.compressed_size = compressed32;
    entry.uncompressed_size = uncompressed32;
    entry.local_header_offset = local_offset32;
    entry.central_header_offset = header_offset;
    entry.name = directory.substr(pos + kCentralHeaderBytes, name_length);
    const uint64_t extra_start = pos + kCentralHeaderBytes + name_length;
    constexpr uint32_t kAll = 0xFFFFFFFF;
    TM_RETURN_IF_ERROR(apply_zip64_extra(path, std::string_view(directory).substr(extra_start, extra_length),
                                         location.offset + extra_start, uncompressed32 == kAll,
                                         compressed32 == kAll, local_offset32 == kAll, &entry));
    entries.push_back(std::move(entry));
    pos += kCentralHeaderBytes + variable_length;
  }
  return entries;
}

// Two entries of one name make the archive ambiguous: Python's zipfile (and so torch.load) reads
// the later one, other readers the first; refusing is the only answer that cannot be wrong.
Status check_unique_names(const ZipSource& path, const std::vector<ZipEntry>& entries) {
  std::unordered_map<std::string_view, size_t> first;
  first.reserve(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    const auto [it, inserted] = first.emplace(entries[i].name, i);
    if (inserted) continue;
    const ZipEntry& a = entries[it->second];
    const ZipEntry& b = entries[i];
    return zip_error(path, b.central_header_offset,
                     "duplicate entry name " + quoted_name(b.name) + ": central directory headers at bytes " +
                         std::to_string(a.central_header_offset) + " and " + std::to_string(b.central_header_offset) +
                         " (local headers at bytes " + std::to_string(a.local_header_offset) + " and " +
                         std::to_string(b.local_header_offset) +
                         "); readers disagree on which one counts (Python's zipfile takes the last)");
  }
  return Status::Ok();
}

}  // namespace

Result<ZipArchive> ZipArchive::open(const std::filesystem::path& path) {
  TM_ASSIGN_OR_RETURN(uint64_t file_size, file_size_of(path));
  return open(path, 0, file_size);
}

Result<ZipArchive> ZipArchive::open(const std::filesystem::path& file, uint64_t base, uint64_t size) {
  TM_ASSIGN_OR_RETURN(uint64_t file_size, file_size_of(file));
  if (base > file_size || file_size - base < size) {
    return Status::FormatError(file.string() + ": zip: an archive of " + std::to_string(size) + " bytes at byte " +
                               std::to_string(base) + " runs past the end of the file (" + std::to_string(file_size) +
                               " bytes)");
  }
  const ZipSource path{file, base, size};
  TM_ASSIGN_OR_RETURN(DirectoryLocation location, locate_directory(path, size));
  uint64_t directory_end = 0;
  if (__builtin_add_overflow(location.offset, location.size, &directory_end) ||
      directory_end > location.end_of_directory) {
    return zip_error(path, location.end_of_directory,
                     "central directory [" + std::to_string(location.offset) + ", +" + std::to_string(location.size) +
                         ") extends past the end records");
  }
  if (location.entry_count > location.size / kCentralHeaderBytes) {
    return zip_error(path, location.end_of_directory,
                     "end record claims " + std::to_string(location.entry_count) + " entries but the directory of " +
                         std::to_string(location.size) + " bytes cannot hold them");
  }
  TM_ASSIGN_OR_RETURN(std::vector<ZipEntry> entries, parse_directory(path, location));
  TM_RETURN_IF_ERROR(check_unique_names(path, entries));
  return ZipArchive(file, base, size, std::move(entries));
}

ZipArchive::ZipArchive(std::filesystem::path path, uint64_t base, uint64_t size, std::vector<ZipEntry> entries)
    : path_(std::move(path)), base_(base), file_size_(size), entries_(std::move(entries)) {
  by_name_.reserve(entries_.size());
  for (size_t i = 0; i < entries_.size(); ++i) by_name_.emplace(entries_[i].name, i);
}

const ZipEntry* ZipArchive::find(std::string_view name) const {
  auto it = by_name_.find(std::string(name));
  return it == by_name_.end() ? nullptr : &entries_[it->second];
}

Result<uint64_t> ZipArchive::data_offset(const ZipEntry& entry) const {
  TM_ASSIGN_OR_RETURN(uint64_t data, local_data_offset(entry));
  return base_ + data;
}

Result<uint64_t> ZipArchive::local_data_offset(const ZipEntry& entry) const {
  const ZipSource source{path_, base_, file_size_};
  if (entry.flags & kFlagEncrypted) {
    return Status::Unsupported(path_.string() + ": zip entry " + quoted_name(entry.name) + " is encrypted");
  }
  const uint64_t header = entry.local_header_offset;
  if (header > file_size_ || file_size_ - header < kLocalHeaderBytes) {
    return zip_error(source, entry.central_header_offset,
                     "entry " + quoted_name(entry.name) + ": local header offset " + std::to_string(header) +
                         " lies beyond the end of the file (" + std::to_string(file_size_) + " bytes)");
  }
  TM_ASSIGN_OR_RETURN(std::string local, source.read(header, kLocalHeaderBytes));
  if (load_u32(local, 0) != kLocalHeaderSignature) {
    return zip_error(source, header, "entry " + quoted_name(entry.name) + ": local file header has a bad signature");
  }
  const uint64_t name_length = load_u16(local, 26);
  const uint64_t extra_length = load_u16(local, 28);
  const uint64_t data = header + kLocalHeaderBytes + name_length + extra_length;  // < 2^64: header <= file size
  uint64_t data_end = 0;
  if (data > file_size_ || __builtin_add_overflow(data, entry.compressed_size, &data_end) || data_end > file_size_) {
    return zip_error(source, header, "entry " + quoted_name(entry.name) + ": data [" + std::to_string(data) + ", +" +
                                        std::to_string(entry.compressed_size) + ") runs past the end of the file (" +
                                        std::to_string(file_size_) + " bytes)");
  }
  if (name_length != entry.name.size()) {
    return zip_error(source, header, "entry " + quoted_name(entry.name) + ": local header names a " +
                                        std::to_string(name_length) + "-byte file, central directory a " +
                                        std::to_string(entry.name.size()) + "-byte one");
  }
  TM_ASSIGN_OR_RETURN(std::string local_name, source.read(header + kLocalHeaderBytes, name_length));
  if (local_name != entry.name) {
    return zip_error(source, header, "entry " + quoted_name(entry.name) + ": local header names " + quoted_name(local_name) + " instead");
  }
  return data;
}

Result<std::string> ZipArchive::read_entry(const ZipEntry& entry, uint64_t max_bytes) const {
  if (entry.uncompressed_size > max_bytes) {
    return Status::Unsupported(path_.string() + ": zip entry " + quoted_name(entry.name) + " holds " +
                               std::to_string(entry.uncompressed_size) + " bytes, more than the limit of " +
                               std::to_string(max_bytes));
  }
  TM_ASSIGN_OR_RETURN(uint64_t data, local_data_offset(entry));
  const ZipSource source{path_, base_, file_size_};
  std::string out;
  if (entry.method == kZipMethodStored) {
    if (entry.compressed_size != entry.uncompressed_size) {
      return zip_error(source, entry.central_header_offset,
                       "stored entry " + quoted_name(entry.name) + " has compressed size " + std::to_string(entry.compressed_size) +
                           " but uncompressed size " + std::to_string(entry.uncompressed_size));
    }
    TM_ASSIGN_OR_RETURN(out, source.read(data, entry.uncompressed_size));
  } else if (entry.method == kZipMethodDeflated) {
    // Deflate cannot expand more than 1032:1, so a larger claim is a lie; refusing it avoids
    // allocating the claimed size for a tiny hostile entry.
    constexpr uint64_t kMaxDeflateRatio = 1032;
    if (entry.uncompressed_size / kMaxDeflateRatio > entry.compressed_size) {
      return zip_error(source, entry.central_header_offset,
                       "deflated entry " + quoted_name(entry.name) + " claims to inflate " + std::to_string(entry.compressed_size) +
                           " bytes to " + std::to_string(entry.uncompressed_size) + ", beyond deflate's limit");
    }
    TM_ASSIGN_OR_RETURN(std::string packed, source.read(data, entry.compressed_size));
    out.resize(entry.uncompressed_size);
    z_stream stream{};
    if (inflateInit2(&stream, -MAX_WBITS) != Z_OK) {
      return Status::ResourceExhausted(path_.string() + ": zlib could not start inflating " + quoted_name(entry.name));
    }
    // zlib counts in 32-bit units, so feed both buffers in slices.
    constexpr uint64_t kSlice = std::numeric_limits<uInt>::max();
    uint64_t consumed = 0;
    uint64_t produced = 0;
    int rc = Z_OK;
    while (rc == Z_OK) {
      stream.next_in = reinterpret_cast<Bytef*>(packed.data() + consumed);
      stream.avail_in = static_cast<uInt>(std::min<uint64_t>(packed.size() - consumed, kSlice));
      stream.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
      stream.avail_out = static_cast<uInt>(std::min<uint64_t>(out.size() - produced, kSlice));
      const uInt in_before = stream.avail_in;
      const uInt out_before = stream.avail_out;
      rc = inflate(&stream, Z_NO_FLUSH);
      consumed += in_before - stream.avail_in;
      produced += out_before - stream.avail_out;
      if (rc == Z_OK && in_before == stream.avail_in && out_before == stream.avail_out) rc = Z_BUF_ERROR;
    }
    inflateEnd(&stream);
    if (rc != Z_STREAM_END || produced != entry.uncompressed_size) {
      return zip_error(source, data, "entry " + quoted_name(entry.name) + ": deflate stream is corrupt or does not inflate to the "
                                    "declared " + std::to_string(entry.uncompressed_size) + " bytes");
    }
  } else {
    return Status::Unsupported(path_.string() + ": zip entry " + quoted_name(entry.name) + " uses compression method " +
                               std::to_string(entry.method) + " (only stored and deflate are supported)");
  }
  if (zip_crc32(out) != entry.crc32) {
    return zip_error(source, data, "entry " + quoted_name(entry.name) + ": CRC-32 mismatch (the entry is corrupt)");
  }
  return out;
}

uint32_t zip_crc32(std::string_view bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  constexpr size_t kSlice = std::numeric_limits<uInt>::max();
  for (size_t pos = 0; pos < bytes.size(); pos += kSlice) {
    const size_t length = std::min(kSlice, bytes.size() - pos);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + pos), static_cast<uInt>(length));
  }
  return static_cast<uint32_t>(crc);
}

}  // namespace tensormorph::pytorch
