// End-to-end tests of `tensormorph index` and `tensormorph stats` (issue 4): every kind of path,
// the index built on demand, the cache fallback for a read-only directory, and kill -9 atomicity.
#include <gtest/gtest.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/cache_dir.h"
#include "formats/safetensors/safetensors.h"
#include "index/index_builder.h"
#include "engine/compute_session.h"
#include "tensormorph/open.h"
#include "test_util.h"

namespace tensormorph {
namespace {

namespace fs = std::filesystem;
using testing::read_bytes;
using testing::run_cli;
using testing::TempDir;

struct F32Tensor {
  std::string name;
  std::vector<uint64_t> shape;
  std::vector<float> values;
};

std::vector<float> random_values(std::mt19937_64& rng, uint64_t n) {
  std::normal_distribution<float> normal(0.0f, 0.5f);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

void write_f32_safetensors(const fs::path& path, const std::vector<F32Tensor>& tensors) {
  std::vector<safetensors::TensorToWrite> out;
  for (const auto& t : tensors) out.push_back({t.name, DType::kF32, t.shape, std::as_bytes(std::span(t.values))});
  const Status written = safetensors::write_file(path, out, {});
  ASSERT_TRUE(written.ok()) << written.message();
}

// A sharded set of two shards in `dir` with its model.safetensors.index.json.
void write_two_shards(const fs::path& dir, std::mt19937_64& rng) {
  write_f32_safetensors(dir / "model-00001-of-00002.safetensors",
                        {{"layer.0.weight", {64, 80}, random_values(rng, 64 * 80)},
                         {"layer.0.bias", {80}, random_values(rng, 80)}});
  write_f32_safetensors(dir / "model-00002-of-00002.safetensors",
                        {{"layer.1.weight", {300, 20}, random_values(rng, 6000)}});
  const nlohmann::json index = {{"metadata", nlohmann::json::object()},
                                {"weight_map",
                                 {{"layer.0.weight", "model-00001-of-00002.safetensors"},
                                  {"layer.0.bias", "model-00001-of-00002.safetensors"},
                                  {"layer.1.weight", "model-00002-of-00002.safetensors"}}}};
  testing::write_bytes(dir / "model.safetensors.index.json", index.dump());
}

// "tensors     N: X indexed, Y reused, Z skipped" from `tensormorph index`'s summary.
struct Counts {
  int total = -1, indexed = -1, reused = -1, skipped = -1;
};

Counts parse_counts(const std::string& out) {
  Counts c;
  const auto at = out.find("tensors ");
  if (at != std::string::npos) {
    std::sscanf(out.c_str() + at, "tensors %d: %d indexed, %d reused, %d skipped", &c.total, &c.indexed, &c.reused,
                &c.skipped);
  }
  return c;
}

void expect_summary_lines(const testing::CliResult& r) {
  for (const char* line : {"index       ", "tensors     ", "bytes       ", "time        ", "operations  "}) {
    EXPECT_NE(("\n" + r.out).find(std::string("\n") + line), std::string::npos)
        << "missing '" << line << "' in:\n" << r.out;
  }
}

// ---------------------------------------------------------------------------------------------
// Running the binary as a child we control (kill it, change its user and environment).

struct Child {
  pid_t pid = -1;
  fs::path out, err;
};

// Starts the CLI with stdout/stderr in `dir`. `env` entries are NAME=VALUE set in the child;
// `as_nobody` drops to uid/gid 65534 first (exit 126 when that is impossible).
Child spawn_cli(const std::vector<std::string>& args, const fs::path& dir, const std::vector<std::string>& env = {},
                bool as_nobody = false) {
  Child child{-1, dir / "child.out", dir / "child.err"};
  std::vector<std::string> argv_storage = {TM_CLI_PATH};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  child.pid = ::fork();
  if (child.pid == 0) {
    const int out = ::open(child.out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = ::open(child.err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int in = ::open("/dev/null", O_RDONLY);
    if (out < 0 || err < 0 || in < 0) ::_exit(125);
    ::dup2(in, 0);
    ::dup2(out, 1);
    ::dup2(err, 2);
    for (const auto& e : env) {
      const auto eq = e.find('=');
      ::setenv(e.substr(0, eq).c_str(), e.substr(eq + 1).c_str(), 1);
    }
    if (as_nobody && (::setgroups(0, nullptr) != 0 || ::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(126);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return child;
}

int wait_exit_code(const Child& child) {
  int status = 0;
  if (::waitpid(child.pid, &status, 0) != child.pid) return -2;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// ---------------------------------------------------------------------------------------------
// 8. The commands on every kind of path.

TEST(IndexCli, IndexesADirectoryAnIndexJsonAndASingleFile) {
  TempDir dir;
  std::mt19937_64 rng(1);
  fs::create_directory(dir / "sharded");
  write_two_shards(dir / "sharded", rng);

  auto r = run_cli({"index", (dir / "sharded").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_summary_lines(r);
  Counts c = parse_counts(r.out);
  EXPECT_EQ(c.total, 3);
  EXPECT_EQ(c.indexed, 3);
  EXPECT_EQ(c.reused, 0);
  EXPECT_EQ(c.skipped, 0);
  const fs::path sidecar = dir / "sharded" / "model.safetensors.index.tmindex";
  ASSERT_TRUE(fs::exists(sidecar)) << r.out;
  EXPECT_NE(r.out.find(sidecar.string()), std::string::npos) << r.out;
  EXPECT_TRUE(index::read_index(sidecar).ok());

  // The index JSON names the same checkpoint: same sidecar, nothing to do.
  r = run_cli({"index", (dir / "sharded" / "model.safetensors.index.json").string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_summary_lines(r);
  c = parse_counts(r.out);
  EXPECT_EQ(c.indexed, 0);
  EXPECT_EQ(c.reused, 3);
  EXPECT_NE(r.out.find("up to date"), std::string::npos) << r.out;

  // A single shard is a checkpoint of its own, with its own sidecar.
  const fs::path shard = dir / "sharded" / "model-00001-of-00002.safetensors";
  r = run_cli({"index", shard.string(), "--tile", "16", "--threads", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  expect_summary_lines(r);
  c = parse_counts(r.out);
  EXPECT_EQ(c.total, 2);
  EXPECT_EQ(c.indexed, 2);
  auto single = index::read_index(fs::path(shard.string() + ".tmindex"));
  ASSERT_TRUE(single.ok()) << single.status().message();
  EXPECT_EQ(single->tile, 16u);
  EXPECT_EQ(single->tensors.size(), 2u);
}

TEST(IndexCli, IndexReportsErrorsAndBadOptions) {
  TempDir dir;
  auto r = run_cli({"index", (dir / "missing.safetensors").string()});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("missing.safetensors"), std::string::npos) << r.err;
  std::mt19937_64 rng(2);
  write_f32_safetensors(dir / "m.safetensors", {{"w", {4, 4}, random_values(rng, 16)}});
  for (const char* tile : {"5000", "100"}) {
    r = run_cli({"index", (dir / "m.safetensors").string(), "--tile", tile});
    EXPECT_NE(r.exit_code, 0) << "--tile " << tile << "\n" << r.out;
    EXPECT_FALSE(fs::exists(dir / "m.safetensors.tmindex")) << "--tile " << tile;
  }
}

TEST(IndexCli, StatsJsonBuildsTheIndexOnDemandAndMatchesTheLibrary) {
  TempDir dir;
  std::mt19937_64 rng(3);
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  std::vector<F32Tensor> tensors = {{"dense", {300, 500}, random_values(rng, 150000)},
                                    {"with_nan", {2, 4}, {1.0f, nan, -3.0f, inf, 0.0f, -inf, 2.5f, nan}},
                                    {"all_nan", {3}, {nan, nan, nan}},
                                    {"vector", {1000}, random_values(rng, 1000)}};
  const fs::path file = dir / "model.safetensors";
  write_f32_safetensors(file, tensors);
  const fs::path sidecar = dir / "model.safetensors.tmindex";
  ASSERT_FALSE(fs::exists(sidecar));

  auto r = run_cli({"stats", file.string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(sidecar)) << "stats builds the index beside the checkpoint";
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["schema"], "tensormorph.stats/1");
  ASSERT_EQ(j["tensors"].size(), tensors.size());

  // The library's numbers for the same checkpoint and tile size.
  auto session = engine::ComputeSession::open(engine::SessionOptions{});
  ASSERT_TRUE(session.ok()) << session.status().message();
  auto ckpt = open_checkpoint(file);
  ASSERT_TRUE(ckpt.ok());
  index::IndexOptions options;
  options.location = dir / "library.tmindex";
  index::IndexContents contents;
  auto report = index::update_index((*session)->scheduler(), **ckpt, options, &contents);
  ASSERT_TRUE(report.ok()) << report.status().message();
  ASSERT_EQ(contents.tensors.size(), tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& row = j["tensors"][i];
    const auto s = engine::summarize(contents.tensors[i].levels.back().tiles[0]);
    SCOPED_TRACE(tensors[i].name);
    EXPECT_EQ(row["name"], tensors[i].name);
    EXPECT_EQ(row["count"].get<uint64_t>(), s.count);
    EXPECT_EQ(row["finite"].get<uint64_t>(), s.finite);
    EXPECT_EQ(row["nan"].get<uint64_t>(), s.nan);
    EXPECT_EQ(row["pos_inf"].get<uint64_t>(), s.pos_inf);
    EXPECT_EQ(row["neg_inf"].get<uint64_t>(), s.neg_inf);
    EXPECT_EQ(row["zeros"].get<uint64_t>(), s.zeros);
    EXPECT_EQ(row["min"].get<double>(), s.min);
    EXPECT_EQ(row["max"].get<double>(), s.max);
    EXPECT_EQ(row["absmax"].get<double>(), s.absmax);
    EXPECT_EQ(row["mean"].get<double>(), s.mean());
    EXPECT_EQ(row["std"].get<double>(), s.stddev());
  }
  EXPECT_EQ(j["tensors"][1]["nan"], 2);
  EXPECT_EQ(j["tensors"][1]["min"].get<double>(), -3.0);
  EXPECT_EQ(j["tensors"][1]["max"].get<double>(), 2.5);
  EXPECT_DOUBLE_EQ(j["tensors"][1]["mean"].get<double>(), 0.5 / 4);
  EXPECT_EQ(j["tensors"][2]["finite"], 0);
  EXPECT_EQ(j["tensors"][2]["mean"].get<double>(), 0.0);

  // A second stats run reads the index it built: the file is not rewritten.
  const auto before = fs::last_write_time(sidecar);
  r = run_cli({"stats", file.string(), "--json", "--tensor", "dense"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(fs::last_write_time(sidecar), before);
  EXPECT_EQ(nlohmann::json::parse(r.out)["tensors"].size(), 1u);
}

TEST(IndexCli, ReadOnlyCheckpointDirectoryIndexesIntoTheCache) {
  TempDir dir;
  fs::permissions(dir.path(), fs::perms(0755));
  const fs::path ro = dir / "ro", cache = dir / "cache";
  fs::create_directories(ro);
  fs::create_directories(cache / "xdg");
  std::mt19937_64 rng(4);
  write_f32_safetensors(ro / "model.safetensors",
                        {{"a", {30, 40}, random_values(rng, 1200)}, {"b", {5}, {1, 2, 3, 4, 5}}});
  fs::permissions(ro / "model.safetensors", fs::perms(0644));
  fs::permissions(ro, fs::perms(0555));
  fs::permissions(cache, fs::perms(0777));
  fs::permissions(cache / "xdg", fs::perms(0777));
  // Root ignores directory permissions, so as root the child runs as `nobody`.
  const bool root = ::geteuid() == 0;
  const Child child = spawn_cli({"stats", (ro / "model.safetensors").string(), "--json"}, dir.path(),
                                {"XDG_CACHE_HOME=" + (cache / "xdg").string(), "HOME=" + cache.string(),
                                 "XDG_CONFIG_HOME=" + (cache / "config").string()},
                                root);
  const int code = wait_exit_code(child);
  fs::permissions(ro, fs::perms(0755));
  if (code == 126) GTEST_SKIP() << "cannot drop root privileges to test a read-only directory";
  ASSERT_EQ(code, 0) << read_bytes(child.err);
  const auto j = nlohmann::json::parse(read_bytes(child.out));
  ASSERT_EQ(j["tensors"].size(), 2u);
  EXPECT_EQ(j["tensors"][1]["mean"].get<double>(), 3.0);

  EXPECT_FALSE(fs::exists(ro / "model.safetensors.tmindex"));
  std::vector<fs::path> cached;
  for (const auto& e : fs::directory_iterator(cache / "xdg" / "tensormorph")) {
    if (e.path().extension() == ".tmindex") cached.push_back(e.path());  // (beside the CPU calibration)
  }
  ASSERT_EQ(cached.size(), 1u);
  const std::string name = cached[0].filename().string();
  EXPECT_TRUE(name.size() > 17 && name.substr(16) == "-model.safetensors.tmindex") << name;
  auto stored = index::read_index(cached[0]);
  ASSERT_TRUE(stored.ok()) << stored.status().message();
  EXPECT_EQ(stored->tensors.size(), 2u);
}

// ---------------------------------------------------------------------------------------------
// 5. kill -9 never leaves a corrupt index, and the re-run resumes.

constexpr uint64_t kBigRows = 1024, kBigCols = 1024;  // 4 MiB of F32 per tensor

// A safetensors file of `count` [1024, 1024] F32 tensors named <prefix>.<i>, written directly
// (cheap values, no fsync) so a few hundred MB take well under a second.
void write_big_shard(const fs::path& path, const std::string& prefix, int count) {
  std::string header = "{";
  const uint64_t bytes = kBigRows * kBigCols * 4;
  for (int i = 0; i < count; ++i) {
    if (i) header += ",";
    header += "\"" + prefix + "." + std::to_string(i) + "\":{\"dtype\":\"F32\",\"shape\":[1024,1024],\"data_offsets\":[" +
              std::to_string(uint64_t(i) * bytes) + "," + std::to_string(uint64_t(i + 1) * bytes) + "]}";
  }
  header += "}";
  header.append((8 - header.size() % 8) % 8, ' ');
  std::ofstream out(path, std::ios::binary);
  const uint64_t length = header.size();
  out.write(reinterpret_cast<const char*>(&length), 8);
  out << header;
  std::vector<float> values(kBigRows * kBigCols);
  for (int i = 0; i < count; ++i) {
    for (size_t k = 0; k < values.size(); ++k) values[k] = float((k * 2654435761u + uint64_t(i)) % 2001) * 1e-3f - 1.0f;
    out.write(reinterpret_cast<const char*>(values.data()), static_cast<std::streamsize>(bytes));
  }
  ASSERT_TRUE(out.good()) << path;
}

// Runs `index` and kills it with SIGKILL once it has started reading tensor data. Returns false
// when it finished first (the machine was fast or we were slow), so there was nothing to kill.
bool index_and_kill(const fs::path& target, const fs::path& dir) {
  const Child child = spawn_cli({"index", target.string()}, dir);
  if (child.pid <= 0) return false;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    if (read_bytes(child.err).find("indexing") != std::string::npos) break;
    int status = 0;
    if (::waitpid(child.pid, &status, WNOHANG) == child.pid) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ::kill(child.pid, SIGKILL);
  int status = 0;
  ::waitpid(child.pid, &status, 0);
  return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

TEST(IndexCli, KillNineLeavesNoIndexOrAValidOneAndTheRerunResumes) {
  TempDir dir;
  constexpr int kFirst = 16, kSecond = 56;  // 64 MiB + 224 MiB
  write_big_shard(dir / "big-00001-of-00002.safetensors", "first", kFirst);
  write_big_shard(dir / "big-00002-of-00002.safetensors", "second", kSecond);
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (int i = 0; i < kFirst; ++i) weight_map["first." + std::to_string(i)] = "big-00001-of-00002.safetensors";
  for (int i = 0; i < kSecond; ++i) weight_map["second." + std::to_string(i)] = "big-00002-of-00002.safetensors";
  const fs::path json = dir / "big.safetensors.index.json";
  testing::write_bytes(json, nlohmann::ordered_json({{"weight_map", weight_map}}).dump());
  const fs::path sidecar = dir / "big.safetensors.index.tmindex";
  fs::create_directory(dir / "logs");

  // From scratch: killed mid-run, the index is absent or valid; the re-run reuses what it holds.
  const bool killed_first = index_and_kill(json, dir / "logs");
  size_t held = 0;
  const bool existed = fs::exists(sidecar);
  if (existed) {
    auto partial = index::read_index(sidecar);
    ASSERT_TRUE(partial.ok()) << "kill -9 left a corrupt index: " << partial.status().message();
    held = partial->tensors.size();
  }
  auto r = run_cli({"index", json.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Counts c = parse_counts(r.out);
  std::fprintf(stderr, "  (from scratch: %s; the index %s; the re-run reused %d)\n",
               killed_first ? "killed" : "finished before the kill", existed ? "was valid" : "was absent", c.reused);
  EXPECT_EQ(c.total, kFirst + kSecond);
  EXPECT_EQ(c.reused, static_cast<int>(held)) << r.out;
  EXPECT_EQ(c.indexed + c.reused, kFirst + kSecond) << r.out;

  // With a complete index on disk and shard 2 stale: killed mid-run, the old (or a newer) index
  // stays valid, and the re-run does not redo shard 1.
  fs::last_write_time(dir / "big-00002-of-00002.safetensors",
                      fs::last_write_time(dir / "big-00002-of-00002.safetensors") + std::chrono::seconds(10));
  const bool killed_second = index_and_kill(json, dir / "logs");
  auto after_kill = index::read_index(sidecar);
  ASSERT_TRUE(after_kill.ok()) << "kill -9 left a corrupt index: " << after_kill.status().message();
  EXPECT_GE(after_kill->tensors.size(), static_cast<size_t>(kFirst));
  r = run_cli({"index", json.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  c = parse_counts(r.out);
  std::fprintf(stderr, "  (shard 2 stale: %s; the index held %zu tensors; the re-run reused %d)\n",
               killed_second ? "killed" : "finished before the kill", after_kill->tensors.size(), c.reused);
  EXPECT_GE(c.reused, kFirst) << r.out;
  EXPECT_EQ(c.indexed + c.reused, kFirst + kSecond) << r.out;
  auto final_index = index::read_index(sidecar);
  ASSERT_TRUE(final_index.ok()) << final_index.status().message();
  ASSERT_EQ(final_index->tensors.size(), static_cast<size_t>(kFirst + kSecond));
  for (const auto& t : final_index->tensors) {
    EXPECT_EQ(t.levels.back().tiles[0].count, kBigRows * kBigCols) << t.name;
  }
}

// ---------------------------------------------------------------------------------------------
// Hardening: what the index and the commands do with hostile or unlucky surroundings.

// A process id that belonged to a process that has exited (and was reaped).
pid_t dead_pid() {
  const pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return pid;
}

void set_mtime_seconds_ago(const fs::path& path, int seconds) {
  fs::last_write_time(path, fs::file_time_type::clock::now() - std::chrono::seconds(seconds));
}

TEST(IndexCli, StaleTemporariesOfDeadRunsAreRemovedAndLiveOnesKept) {
  TempDir dir;
  std::mt19937_64 rng(11);
  const fs::path file = dir / "model.safetensors";
  write_f32_safetensors(file, {{"w", {16, 16}, random_values(rng, 256)}});
  const std::string prefix = ".model.safetensors.tmindex.tmp.";
  const fs::path dead = dir / (prefix + std::to_string(dead_pid()) + ".0");
  const fs::path dead_recent = dir / (prefix + std::to_string(dead_pid()) + ".1");
  const fs::path alive = dir / (prefix + std::to_string(::getpid()) + ".0");
  const fs::path unrelated = dir / ".model.safetensors.tmindex.tmp.notapid.0";
  for (const auto& p : {dead, dead_recent, alive, unrelated}) testing::write_bytes(p, std::string(4096, 'x'));
  for (const auto& p : {dead, alive, unrelated}) set_mtime_seconds_ago(p, 3600);

  auto r = run_cli({"index", file.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(fs::exists(dead)) << "a dead run's temporary is removed";
  EXPECT_NE(r.err.find("removed 1 temporary file (4.00 KiB)"), std::string::npos) << r.err;
  EXPECT_TRUE(fs::exists(dead_recent)) << "written to within the last minute: may belong to another host";
  EXPECT_TRUE(fs::exists(alive)) << "the writer is alive";
  EXPECT_TRUE(fs::exists(unrelated)) << "not a temporary's name";
}

TEST(IndexCli, FifosAreRefusedWithoutBlocking) {
  TempDir dir;
  const fs::path fifo = dir / "model.safetensors";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto r = run_cli({"info", fifo.string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("is a FIFO, not a regular file"), std::string::npos) << r.err;

  // A FIFO as one shard of a sharded set.
  std::mt19937_64 rng(12);
  fs::create_directory(dir / "sharded");
  write_two_shards(dir / "sharded", rng);
  fs::remove(dir / "sharded" / "model-00002-of-00002.safetensors");
  ASSERT_EQ(::mkfifo((dir / "sharded" / "model-00002-of-00002.safetensors").c_str(), 0600), 0);
  r = run_cli({"info", (dir / "sharded" / "model.safetensors.index.json").string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("model-00002-of-00002.safetensors: is a FIFO"), std::string::npos) << r.err;
}

TEST(IndexCli, StatsFailsWhenARequestedTensorCannotBeComputed) {
  TempDir dir;
  std::mt19937_64 rng(13);
  const fs::path file = dir / "model.safetensors";
  write_f32_safetensors(file, {{"a", {32, 32}, random_values(rng, 1024)}, {"b", {8}, random_values(rng, 8)}});
  const fs::path config = dir / "settings.json";
  testing::write_bytes(config, R"({"compute": {"memory_budget_bytes": 1}})");
  const Child budget = spawn_cli({"stats", file.string(), "--json"}, dir.path(), {"TENSORMORPH_CONFIG=" + config.string()});
  EXPECT_EQ(wait_exit_code(budget), 1) << read_bytes(budget.err);
  const std::string err = read_bytes(budget.err);
  EXPECT_NE(err.find("2 of 2 requested tensors could not be computed"), std::string::npos) << err;
  EXPECT_NE(err.find("'a'"), std::string::npos) << err;
}

TEST(IndexCli, UnwritableIndexAndCacheStillGiveStatistics) {
  TempDir dir;
  fs::permissions(dir.path(), fs::perms(0755));
  const fs::path ro = dir / "ro", cache = dir / "cache";
  fs::create_directories(ro);
  fs::create_directories(cache);
  std::mt19937_64 rng(14);
  write_f32_safetensors(ro / "model.safetensors", {{"b", {5}, {1, 2, 3, 4, 5}}});
  fs::permissions(ro / "model.safetensors", fs::perms(0644));
  fs::permissions(ro, fs::perms(0555));
  fs::permissions(cache, fs::perms(0555));  // the cache directory cannot take the index either
  const bool root = ::geteuid() == 0;
  const Child child = spawn_cli({"stats", (ro / "model.safetensors").string(), "--json"}, dir.path(),
                                {"XDG_CACHE_HOME=" + cache.string(), "HOME=" + cache.string(),
                                 "XDG_CONFIG_HOME=" + (dir / "config").string()},
                                root);
  const int code = wait_exit_code(child);
  fs::permissions(ro, fs::perms(0755));
  fs::permissions(cache, fs::perms(0755));
  if (code == 126) GTEST_SKIP() << "cannot drop root privileges to test an unwritable directory";
  const std::string err = read_bytes(child.err);
  ASSERT_EQ(code, 0) << err;
  EXPECT_NE(err.find("the index could not be kept"), std::string::npos) << err;
  EXPECT_NE(err.find("Permission denied"), std::string::npos) << "the real cause, not ENOENT: " << err;
  const auto j = nlohmann::json::parse(read_bytes(child.out));
  EXPECT_EQ(j["tensors"][0]["mean"].get<double>(), 3.0);
}

TEST(IndexCli, VerifyFindsAnEditTheQuickCheckCannotSee) {
  TempDir dir;
  const fs::path file = dir / "model.safetensors";
  // Large enough that the middle lies outside the hashed head (1 MiB) and tail (64 KiB).
  std::vector<float> values(1 << 20, 1.0f);
  write_f32_safetensors(file, {{"big", {1024, 1024}, values}});
  auto r = run_cli({"index", file.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;

  // Same size, one value in the middle changed, the modification time put back.
  struct stat before {};
  ASSERT_EQ(::stat(file.c_str(), &before), 0);
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(before.st_size / 2) & ~std::streamoff{3});
    const float changed = 1000.0f;
    f.write(reinterpret_cast<const char*>(&changed), sizeof changed);
  }
  const struct timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, file.c_str(), times, 0), 0);

  r = run_cli({"index", file.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("up to date, nothing read"), std::string::npos) << "the documented blind spot: " << r.out;
  r = run_cli({"index", file.string(), "--verify"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("1 tensors re-read: 0 matched the index, 1 had changed"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("changed     big"), std::string::npos) << r.out;
  r = run_cli({"stats", file.string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["tensors"][0]["max"].get<double>(), 1000.0);
  r = run_cli({"index", file.string(), "--verify"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("verified: unchanged"), std::string::npos) << r.out;
}

TEST(IndexCli, WithoutHomeTheCacheIsPrivate) {
  testing::ScopedEnv no_xdg("XDG_CACHE_HOME", "");
  testing::ScopedEnv no_home("HOME", "");
  const fs::path cache = user_cache_dir();
  EXPECT_NE(cache.string().rfind("/tmp/.cache", 0), 0u) << cache;
  if (cache.string().rfind("/tmp/", 0) == 0) {
    struct stat st {};
    ASSERT_EQ(::lstat(cache.parent_path().c_str(), &st), 0) << cache;
    EXPECT_TRUE(S_ISDIR(st.st_mode));
    EXPECT_EQ(st.st_mode & 077, 0u) << "only this user may enter " << cache.parent_path();
    EXPECT_EQ(st.st_uid, ::geteuid());
  }
}

TEST(IndexCli, ExportWritesThroughFifosLinksAndDevicesWithoutReplacingThem) {
  TempDir dir;
  std::mt19937_64 rng(15);
  const fs::path file = dir / "model.safetensors";
  write_f32_safetensors(file, {{"w", {4, 4}, random_values(rng, 16)}});

  // A FIFO: written in place, read by a reader on the other end.
  const fs::path fifo = dir / "pipe.npy";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string received;
  std::thread reader([&] { received = read_bytes(fifo); });
  auto r = run_cli({"export", file.string(), "--tensor", "w", "-o", fifo.string()});
  reader.join();
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::is_fifo(fifo)) << "the FIFO is still a FIFO";
  EXPECT_EQ(received.substr(0, 6), "\x93NUMPY");
  EXPECT_EQ(received.size(), 128u + 64u);

  // A symbolic link: the file it names is replaced, the link stays.
  const fs::path target = dir / "real.npy", link = dir / "link.npy";
  testing::write_bytes(target, "old");
  fs::create_symlink(target, link);
  r = run_cli({"export", file.string(), "--tensor", "w", "-o", link.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::is_symlink(link));
  EXPECT_EQ(read_bytes(target).substr(0, 6), "\x93NUMPY");

  // A device that refuses the bytes: an error, and the device stays a device.
  if (fs::exists("/dev/full")) {
    r = run_cli({"export", file.string(), "--tensor", "w", "-o", "/dev/full"});
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.err.find("No space left on device"), std::string::npos) << r.err;
    EXPECT_TRUE(fs::is_character_file("/dev/full"));
  }
  // A directory is refused by name.
  r = run_cli({"export", file.string(), "--tensor", "w", "-o", dir.path().string()});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("is a directory"), std::string::npos) << r.err;
}

// ---------------------------------------------------------------------------------------------
// What the commands say about the index and their progress.

TEST(IndexCli, ProgressDrawsTheFinalLineOnceAndExplainNamesEachTensor) {
  TempDir dir;
  std::mt19937_64 rng(21);
  const fs::path file = dir / "model.safetensors";
  write_f32_safetensors(file,
                        {{"first", {64, 80}, random_values(rng, 64 * 80)}, {"second", {300}, random_values(rng, 300)}});
  auto r = run_cli({"index", file.string(), "--explain"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  size_t complete = 0;
  for (size_t at = r.err.find("100.0%"); at != std::string::npos; at = r.err.find("100.0%", at + 1)) ++complete;
  EXPECT_EQ(complete, 1u) << r.err;
  // The placements table has a tensor column naming what each operation served.
  const auto table = r.out.find("\nplacements (");
  ASSERT_NE(table, std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  tensor ", table), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  first ", table), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  second ", table), std::string::npos) << r.out;
  // Run again: nothing to do, and --explain says so instead of printing an empty table.
  r = run_cli({"index", file.string(), "--explain"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("placements: none: 2 tensors current in the index (no operation ran)"), std::string::npos)
      << r.out;
}

TEST(IndexCli, StatsSaysWhereItWroteAndReadTheIndex) {
  TempDir dir;
  std::mt19937_64 rng(22);
  const fs::path file = dir / "model.safetensors";
  write_f32_safetensors(file, {{"w", {16, 16}, random_values(rng, 256)}});
  const fs::path sidecar = dir / "model.safetensors.tmindex";
  auto r = run_cli({"stats", file.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("tensormorph: index " + sidecar.string() + ": written (1 of 1 tensors indexed now, 0 reused)"),
            std::string::npos)
      << r.err;
  r = run_cli({"stats", file.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("tensormorph: index " + sidecar.string() + ": read (up to date)"), std::string::npos) << r.err;
  // One line: nothing else about the index on stderr.
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(IndexCli, StatsPatternsMatchingNothingFailBeforeAnyIndexIsBuilt) {
  TempDir dir;
  std::mt19937_64 rng(23);
  const fs::path file = dir / "model.safetensors";
  write_f32_safetensors(file, {{"encoder.weight", {16, 16}, random_values(rng, 256)}});
  auto r = run_cli({"stats", file.string(), "--tensor", "nomatch*"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("no tensor matches the given --tensor patterns ('nomatch*')"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(dir / "model.safetensors.tmindex")) << "the index was built before the patterns were checked";
  // The same rule and message as the other commands that take --tensor.
  auto o = run_cli({"outliers", file.string(), "--tensor", "encodr.*"});
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_NE(o.err.find("close names: 'encoder.weight'"), std::string::npos) << o.err;
}

TEST(IndexCli, InfoOnAnIndexSaysWhenItsCheckpointChanged) {
  TempDir dir;
  std::mt19937_64 rng(24);
  const fs::path file = dir / "model.safetensors";
  write_f32_safetensors(file, {{"w", {16, 16}, random_values(rng, 256)}});
  ASSERT_EQ(run_cli({"index", file.string()}).exit_code, 0);
  const std::string sidecar = file.string() + ".tmindex";
  auto r = run_cli({"info", sidecar, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["checkpoint"], file.string());
  EXPECT_EQ(j["tile"], 256);
  EXPECT_TRUE(j["current"]);
  // Same size, other values: the header hash no longer matches.
  write_f32_safetensors(file, {{"w", {16, 16}, random_values(rng, 256)}});
  r = run_cli({"info", sidecar, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_FALSE(j["current"]);
  EXPECT_NE(j["files"][0]["state"].get<std::string>().find("changed since it was indexed"), std::string::npos) << j;
  auto text = run_cli({"info", sidecar});
  EXPECT_NE(text.out.find("state       stale"), std::string::npos) << text.out;
  fs::remove(file);
  r = run_cli({"info", sidecar, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["files"][0]["state"], "missing");
}

TEST(IndexCli, InfoOnAnIndexFromAnOlderVersionSaysItIsStale) {
  // An index kept beside a real checkpoint in the read-only test data, written before value
  // histograms were kept: the next build counts them, so it is not current whatever the file times.
  const fs::path sidecar = testing::testdata_dir() / "real/dfdx_mnist.safetensors.tmindex";
  auto r = run_cli({"info", sidecar.string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["checkpoint"], (testing::testdata_dir() / "real/dfdx_mnist.safetensors").string());
  EXPECT_EQ(j["tensors"], 8);  // MANIFEST.md: 8 F32 tensors
  EXPECT_EQ(j["tensors_with_histogram"], 0);
  EXPECT_FALSE(j["current"]);
  ASSERT_EQ(j["files"].size(), 1u);
  EXPECT_EQ(fs::path(j["files"][0]["path"].get<std::string>()).filename(), "dfdx_mnist.safetensors");
  auto text = run_cli({"info", sidecar.string()});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("state       stale"), std::string::npos) << text.out;
}

}  // namespace
}  // namespace tensormorph
