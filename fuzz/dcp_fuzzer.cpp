// PyTorch Distributed Checkpoint metadata: the input is a `.metadata` pickle, read beside the real
// data files of ../shared/testdata/dcp/dcp_2rank (copied into the scratch directory once), so
// mutated chunk tables, storage records and offsets reach the chunk archives and the gathering.
#include <filesystem>

#include "formats/dcp/dcp.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace tensormorph;
  namespace fs = std::filesystem;
  static const bool copied = [] {
    const fs::path source = fs::path(TM_TESTDATA_DIR) / "dcp" / "dcp_2rank";
    std::error_code ec;
    for (const char* name : {"__0_0.distcp", "__1_0.distcp"}) {
      fs::copy_file(source / name, fuzz::scratch_dir() / name, fs::copy_options::overwrite_existing, ec);
    }
    return true;
  }();
  (void)copied;
  fuzz::write_scratch(".metadata", data, size);
  Result<std::unique_ptr<Checkpoint>> checkpoint = dcp::open_directory(fuzz::scratch_dir());
  if (checkpoint.ok()) fuzz::exercise(**checkpoint);
  return 0;
}
