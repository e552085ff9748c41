// Zip central directory (end records, Zip64, extra fields, local headers, stored and deflated
// entries) and, through it, the whole torch.save reader.
#include "formats/pytorch/pytorch.h"
#include "formats/pytorch/zip_archive.h"
#include "fuzz_util.h"

namespace {

// Inflating is bounded per entry so that a small input claiming a huge entry stays fast.
constexpr uint64_t kMaxEntryBytes = 1 << 20;
constexpr size_t kMaxEntriesRead = 16;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tensormorph;
  const std::filesystem::path path = fuzz::write_scratch("input.pt", data, size);
  Result<pytorch::ZipArchive> zip = pytorch::ZipArchive::open(path);
  if (zip.ok()) {
    size_t read = 0;
    for (const pytorch::ZipEntry& entry : zip->entries()) {
      if (read++ == kMaxEntriesRead) break;
      (void)zip->find(entry.name);
      (void)zip->data_offset(entry);
      (void)zip->read_entry(entry, kMaxEntryBytes);
    }
  }
  Result<std::unique_ptr<Checkpoint>> checkpoint = pytorch::open_file(path);
  if (checkpoint.ok()) fuzz::exercise(**checkpoint);
  return 0;
}
