// Shared helpers for the test programs.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tensormorph/checkpoint.h"

namespace tensormorph::testing {

/// ../shared/testdata (real, negative and gguf-ref checkpoints).
std::filesystem::path testdata_dir();

/// A fresh empty directory, removed when the object dies.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  /// The directory.
  const std::filesystem::path& path() const { return path_; }
  /// path() / name.
  std::filesystem::path operator/(std::string_view name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

/// Sets an environment variable for the object's lifetime, then restores (or unsets) it.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const std::string& value);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
  std::optional<std::string> saved_;
};

/// Writes `bytes` to `path`, replacing it.
void write_bytes(const std::filesystem::path& path, std::string_view bytes);
/// Reads a whole file.
std::string read_bytes(const std::filesystem::path& path);

/// The bytes as lowercase hexadecimal digits.
std::string to_hex(std::span<const std::byte> bytes);

/// Every tensor `expected_json` lists ({name: {"dtype", "shape", "hex"}}, as the fixture scripts
/// write it) is in `checkpoint` with that dtype, shape and stored bytes.
void expect_tensors_as_listed(const Checkpoint& checkpoint, const std::filesystem::path& expected_json);

/// Result of running the tensormorph binary.
struct CliResult {
  int exit_code = -1;
  std::string out;  ///< stdout
  std::string err;  ///< stderr
};
/// Runs the built `tensormorph` binary with `args` (shell-quoted for you).
CliResult run_cli(const std::vector<std::string>& args);

}  // namespace tensormorph::testing
