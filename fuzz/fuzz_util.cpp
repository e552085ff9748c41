#include "fuzz_util.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "tensormorph/decode.h"

namespace tensormorph::fuzz {
namespace {

// Decoding is cheap per element but a fuzzed shape can be large; a few small tensors cover the
// decoders and the strided gather without slowing every run.
constexpr uint64_t kMaxDecodedElements = 1 << 16;
constexpr size_t kMaxDecodedTensors = 8;

std::filesystem::path make_scratch_dir() {
  const std::filesystem::path base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path();
  std::filesystem::path dir = base / ("tensormorph-fuzz-" + std::to_string(::getpid()));
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    std::fprintf(stderr, "cannot create %s: %s\n", dir.c_str(), error.message().c_str());
    std::abort();
  }
  return dir;
}

}  // namespace

const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    std::filesystem::path made = make_scratch_dir();
    std::atexit([] {
      std::error_code ignored;
      std::filesystem::remove_all(scratch_dir(), ignored);
    });
    return made;
  }();
  return dir;
}

std::filesystem::path write_scratch(const std::string& name, const uint8_t* data, size_t size) {
  std::filesystem::path path = scratch_dir() / name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  out.close();
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::abort();
  }
  return path;
}

void exercise(const Checkpoint& checkpoint) {
  size_t decoded = 0;
  for (const TensorInfo& tensor : checkpoint.tensors()) {
    (void)tensor.shape_string();
    if (decoded >= kMaxDecodedTensors || !dtype_decodable(tensor.dtype) || tensor.elements() > kMaxDecodedElements) {
      continue;
    }
    ++decoded;
    Result<std::vector<float>> values = checkpoint.decode_f32(tensor);
    if (values.ok() && values->size() != tensor.elements()) {
      std::fprintf(stderr, "decode_f32 returned %zu values for %llu elements\n", values->size(),
                   static_cast<unsigned long long>(tensor.elements()));
      std::abort();
    }
  }
  for (const MetadataEntry& entry : checkpoint.metadata()) {
    // The CLI and the server print metadata as JSON; invalid UTF-8 would throw there.
    (void)entry.value.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  }
}

}  // namespace tensormorph::fuzz
