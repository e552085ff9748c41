// GGUF header reader: fixed header, key/values (nested arrays), tensor infos, layout checks.
#include "formats/gguf/gguf.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tensormorph;
  const std::filesystem::path path = fuzz::write_scratch("input.gguf", data, size);
  Result<std::unique_ptr<Checkpoint>> checkpoint = gguf::open_file(path);
  if (checkpoint.ok()) fuzz::exercise(**checkpoint);
  return 0;
}
