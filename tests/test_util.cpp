#include "test_util.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>

namespace tensormorph::testing {

std::filesystem::path testdata_dir() { return TM_TESTDATA_DIR; }

std::string to_hex(std::span<const std::byte> bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (std::byte b : bytes) {
    out += kDigits[std::to_integer<unsigned>(b) >> 4];
    out += kDigits[std::to_integer<unsigned>(b) & 15];
  }
  return out;
}

void expect_tensors_as_listed(const Checkpoint& checkpoint, const std::filesystem::path& expected_json) {
  std::ifstream in(expected_json);
  const nlohmann::json expected = nlohmann::json::parse(in);
  ASSERT_FALSE(expected.empty()) << expected_json;
  for (const auto& [name, want] : expected.items()) {
    SCOPED_TRACE(name);
    const TensorInfo* t = checkpoint.find(name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(std::string(dtype_name(t->dtype)), want.at("dtype").get<std::string>());
    EXPECT_EQ(t->shape, want.at("shape").get<std::vector<uint64_t>>());
    auto bytes = checkpoint.tensor_bytes(*t);
    ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
    EXPECT_EQ(to_hex(*bytes), want.at("hex").get<std::string>());
  }
}

TempDir::TempDir() {
  std::random_device rd;
  auto base = std::filesystem::temp_directory_path();
  for (int attempt = 0; attempt < 100; ++attempt) {
    auto candidate = base / ("tm-test-" + std::to_string(getpid()) + "-" + std::to_string(rd()));
    if (std::filesystem::create_directory(candidate)) {
      path_ = candidate;
      return;
    }
  }
  throw std::runtime_error("cannot create a temporary directory");
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

ScopedEnv::ScopedEnv(const char* name, const std::string& value) : name_(name) {
  if (const char* old = std::getenv(name)) saved_ = old;
  ::setenv(name, value.c_str(), 1);
}

ScopedEnv::~ScopedEnv() {
  if (saved_) {
    ::setenv(name_.c_str(), saved_->c_str(), 1);
  } else {
    ::unsetenv(name_.c_str());
  }
}

void write_bytes(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

std::string read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {
std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'') q += "'\\''";
    else q += c;
  }
  return q + "'";
}
}  // namespace

CliResult run_cli(const std::vector<std::string>& args) {
  TempDir dir;
  std::string cmd = shell_quote(TM_CLI_PATH);
  for (const auto& a : args) cmd += " " + shell_quote(a);
  cmd += " >" + shell_quote((dir / "out").string()) + " 2>" + shell_quote((dir / "err").string()) +
         " </dev/null";
  int status = std::system(cmd.c_str());
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_bytes(dir / "out");
  r.err = read_bytes(dir / "err");
  return r;
}

}  // namespace tensormorph::testing
