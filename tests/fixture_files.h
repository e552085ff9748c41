// A fixture checkpoint opened through the project's own readers, its tensors' stored bytes at hand
// (shared by the tests that compare decoders and encoders with ggml's reference files).
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "formats/gguf/gguf.h"
#include "formats/safetensors/safetensors.h"
#include "tensormorph/checkpoint.h"

namespace tensormorph::testing {

/// One tensor of a fixture file; its bytes stay mapped by the owning LoadedFile's checkpoint.
struct StoredTensor {
  std::string name;
  DType dtype = DType::kF32;
  uint64_t elements = 0;
  std::span<const std::byte> bytes;
};

/// An opened fixture and its tensors in file order.
struct LoadedFile {
  std::unique_ptr<Checkpoint> checkpoint;
  std::vector<StoredTensor> tensors;

  const StoredTensor* find(std::string_view name) const {
    for (const auto& t : tensors) {
      if (t.name == name) return &t;
    }
    return nullptr;
  }
};

inline LoadedFile load(Result<std::unique_ptr<Checkpoint>> opened) {
  LoadedFile file;
  EXPECT_TRUE(opened.ok()) << opened.status().to_string();
  if (!opened.ok()) return file;
  file.checkpoint = std::move(opened).value();
  for (const TensorInfo& info : file.checkpoint->tensors()) {
    auto bytes = file.checkpoint->tensor_bytes(info);
    EXPECT_TRUE(bytes.ok()) << bytes.status().to_string();
    if (!bytes.ok()) continue;
    file.tensors.push_back({info.name, info.dtype, info.elements(), *bytes});
  }
  return file;
}

inline LoadedFile load_gguf(const std::filesystem::path& path) { return load(gguf::open_file(path)); }

inline LoadedFile load_safetensors(const std::filesystem::path& path) { return load(safetensors::open_file(path)); }

}  // namespace tensormorph::testing
