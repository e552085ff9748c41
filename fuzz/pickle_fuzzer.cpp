// The restricted pickle VM (protocols 0-5) and the walk that turns its value tree into tensors.
// The input is the data.pkl stream itself; the storages it names resolve against a small archive
// written at start-up with entries "archive/data/0" .. "archive/data/3" of 64 bytes each.
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "formats/pytorch/pickle_vm.h"
#include "formats/pytorch/torch_objects.h"
#include "formats/pytorch/zip_archive.h"
#include "fuzz_util.h"

namespace {

using tensormorph::pytorch::ZipArchive;

constexpr size_t kStorageBytes = 64;
constexpr int kStorages = 4;

void put_le(std::string& out, uint64_t value, int width) {
  for (int i = 0; i < width; ++i) out += static_cast<char>((value >> (8 * i)) & 0xFF);
}

// A stored (uncompressed) zip archive, the layout torch.save writes minus its alignment padding.
std::string make_archive() {
  std::string file;
  std::string directory;
  for (int i = 0; i < kStorages; ++i) {
    const std::string name = "archive/data/" + std::to_string(i);
    const std::string data(kStorageBytes, static_cast<char>(0x3C + i));
    const uint32_t crc = tensormorph::pytorch::zip_crc32(data);
    const uint64_t local_offset = file.size();
    put_le(file, 0x04034b50, 4);
    put_le(file, 20, 2);  // version needed
    put_le(file, 0, 2);   // flags
    put_le(file, 0, 2);   // stored
    put_le(file, 0, 4);   // time, date
    put_le(file, crc, 4);
    put_le(file, data.size(), 4);
    put_le(file, data.size(), 4);
    put_le(file, name.size(), 2);
    put_le(file, 0, 2);  // extra
    file += name + data;
    put_le(directory, 0x02014b50, 4);
    put_le(directory, 20, 2);  // version made by
    put_le(directory, 20, 2);  // version needed
    put_le(directory, 0, 2);
    put_le(directory, 0, 2);
    put_le(directory, 0, 4);
    put_le(directory, crc, 4);
    put_le(directory, data.size(), 4);
    put_le(directory, data.size(), 4);
    put_le(directory, name.size(), 2);
    put_le(directory, 0, 2);  // extra
    put_le(directory, 0, 2);  // comment
    put_le(directory, 0, 2);  // disk
    put_le(directory, 0, 2);  // internal attributes
    put_le(directory, 0, 4);  // external attributes
    put_le(directory, local_offset, 4);
    directory += name;
  }
  const uint64_t directory_offset = file.size();
  file += directory;
  put_le(file, 0x06054b50, 4);
  put_le(file, 0, 4);  // disk numbers
  put_le(file, kStorages, 2);
  put_le(file, kStorages, 2);
  put_le(file, directory.size(), 4);
  put_le(file, directory_offset, 4);
  put_le(file, 0, 2);  // comment
  return file;
}

std::optional<ZipArchive>& archive() {
  static std::optional<ZipArchive> zip;
  return zip;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const std::string bytes = make_archive();
  const auto path = tensormorph::fuzz::write_scratch("storages.pt", reinterpret_cast<const uint8_t*>(bytes.data()),
                                                     bytes.size());
  tensormorph::Result<ZipArchive> zip = ZipArchive::open(path);
  if (!zip.ok()) {
    std::fprintf(stderr, "cannot open the storage archive: %s\n", zip.status().to_string().c_str());
    std::abort();
  }
  archive().emplace(std::move(*zip));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tensormorph;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  Result<pytorch::PickleTree> tree = pytorch::run_pickle(bytes, "fuzz: archive/data.pkl");
  if (!tree.ok()) return 0;
  (void)pytorch::collect_tensors(*tree, *archive(), "archive/", "archive/data.pkl");
  return 0;
}
