// Sharded safetensors sets: the input is model.safetensors.index.json; two small valid shards
// ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors") lie beside it, so
// inputs that name them reach the cross-checks between the weight map and the shard headers.
#include <array>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <utility>

#include "formats/safetensors/safetensors.h"
#include "fuzz_util.h"

namespace {

void write_shard(const std::string& name, std::span<const tensormorph::safetensors::TensorToWrite> tensors) {
  const std::pair<std::string, std::string> metadata[] = {{"format", "pt"}};
  tensormorph::Status status = tensormorph::safetensors::write_file(tensormorph::fuzz::scratch_dir() / name, tensors, metadata);
  if (!status.ok()) {
    std::fprintf(stderr, "cannot write shard %s: %s\n", name.c_str(), status.to_string().c_str());
    std::abort();
  }
}

void write_shards() {
  using namespace tensormorph;
  static const std::array<float, 4> values = {1.0f, -2.0f, 0.5f, 3.0f};
  const auto bytes = std::as_bytes(std::span<const float>(values));
  const safetensors::TensorToWrite first[] = {
      {.name = "a.weight", .dtype = DType::kF32, .shape = {2, 2}, .data = bytes},
      {.name = "a.bias", .dtype = DType::kF32, .shape = {2}, .data = bytes.first(8)},
  };
  const safetensors::TensorToWrite second[] = {
      {.name = "b.weight", .dtype = DType::kF16, .shape = {4}, .data = bytes.first(8)},
  };
  write_shard("model-00001-of-00002.safetensors", first);
  write_shard("model-00002-of-00002.safetensors", second);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  write_shards();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tensormorph;
  const std::filesystem::path path = fuzz::write_scratch("model.safetensors.index.json", data, size);
  Result<std::unique_ptr<Checkpoint>> checkpoint = safetensors::open_index(path);
  if (checkpoint.ok()) fuzz::exercise(**checkpoint);
  return 0;
}
