// safetensors reader: the 8-byte length, the JSON header (UTF-8, duplicates, key offsets), the
// tensor entries and the layout of the data section.
#include "formats/safetensors/safetensors.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tensormorph;
  const std::filesystem::path path = fuzz::write_scratch("input.safetensors", data, size);
  Result<std::unique_ptr<Checkpoint>> checkpoint = safetensors::open_file(path);
  if (checkpoint.ok()) fuzz::exercise(**checkpoint);
  return 0;
}
