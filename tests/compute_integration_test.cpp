// The real backends under the real scheduler: the OpenCL plugin (a separately built shared library
// that only knows the C header) beside the built-in CPU backend.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>

#include "compute/builtin_backends.h"
#include "core/quantize/quantize.h"
#include "formats/safetensors/safetensors.h"
#include "engine/compute_session.h"
#include "engine/pyramid.h"
#include "engine/tensor_ops.h"
#include "tensormorph/open.h"
#include "test_util.h"

namespace tensormorph {
namespace {

namespace fs = std::filesystem;

const fs::path kPluginDir = TM_OPENCL_PLUGIN_DIR;

bool opencl_plugin_built() { return fs::exists(kPluginDir / "libtm_opencl.so"); }

// CI builds the plugin before the tests (scripts/test.sh sets TM_REQUIRE_OPENCL=1), so a missing
// plugin is a failure there; a developer's partial build skips with a message.
#define REQUIRE_OPENCL_PLUGIN()                                                                       \
  do {                                                                                                \
    if (!opencl_plugin_built()) {                                                                     \
      if (std::getenv("TM_REQUIRE_OPENCL")) FAIL() << "OpenCL plugin not built in " << kPluginDir;   \
      GTEST_SKIP() << "OpenCL plugin not built (run plugins/opencl/build.sh)";                        \
    }                                                                                                 \
  } while (0)

std::unique_ptr<engine::ComputeSession> open_session(const std::string& constraints) {
  engine::SessionOptions options;
  options.extra_plugin_dirs = {kPluginDir.string()};
  if (!constraints.empty()) options.override_constraints = *compute::parse_constraints(constraints);
  auto session = engine::ComputeSession::open(options);
  EXPECT_TRUE(session.ok()) << session.status().to_string();
  return std::move(session).value();
}

const compute::Backend* find_backend(engine::ComputeSession& s, const std::string& prefix) {
  for (const auto& b : s.backends()) {
    if (b->name().rfind(prefix, 0) == 0) return b.get();
  }
  return nullptr;
}

// A checkpoint with one tensor of each kind the mixed run needs.
class MixedCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 0.02f);
    std::vector<float> values(300 * 520);
    for (auto& v : values) v = normal(rng);
    values[17] = std::numeric_limits<float>::quiet_NaN();
    values[900] = -std::numeric_limits<float>::infinity();
    values[901] = -0.0f;
    f32_ = *encode_from_f32(DType::kF32, values);
    f16_ = *encode_from_f32(DType::kF16, values);
    bf16_ = *encode_from_f32(DType::kBF16, values);
    std::vector<float> q(256 * 512);
    for (auto& v : q) v = normal(rng);
    q8_ = *encode_from_f32(DType::kQ8_0, q);
    const safetensors::TensorToWrite tensors[] = {
        {"w.f32", DType::kF32, {300, 520}, f32_},
        {"w.f16", DType::kF16, {300, 520}, f16_},
        {"w.bf16", DType::kBF16, {300, 520}, bf16_},
    };
    ASSERT_TRUE(safetensors::write_file(dir_ / "mixed.safetensors", tensors, {}).ok());
    auto ckpt = open_checkpoint(dir_ / "mixed.safetensors");
    ASSERT_TRUE(ckpt.ok()) << ckpt.status().to_string();
    ckpt_ = std::move(ckpt).value();
  }

  testing::TempDir dir_;
  std::vector<std::byte> f32_, f16_, bf16_, q8_;
  std::unique_ptr<Checkpoint> ckpt_;
};

TEST_F(MixedCheckpoint, ResidencyKeysNameTheSpanSentNotABandNumber) {
  // A device copy is found by its key: two operations that cut a tensor into bands of different
  // sizes, or one that sends the whole, must not find each other's copies of other bytes.
  const TensorInfo& t = *ckpt_->find("w.f32");
  const TensorInfo& other = *ckpt_->find("w.bf16");
  const uint64_t row = 520 * 4;
  EXPECT_EQ(engine::residency_key(*ckpt_, t, 0, 100 * row), engine::residency_key(*ckpt_, t, 0, 100 * row));
  EXPECT_NE(engine::residency_key(*ckpt_, t, 0, 100 * row), engine::residency_key(*ckpt_, t, 0, 300 * row)) << "a band vs the whole";
  EXPECT_NE(engine::residency_key(*ckpt_, t, 100 * row, 100 * row), engine::residency_key(*ckpt_, t, 128 * row, 100 * row))
      << "equal lengths at other rows";
  EXPECT_NE(engine::residency_key(*ckpt_, t, 0, 100 * row), engine::residency_key(*ckpt_, other, 0, 100 * row)) << "another tensor";
  TensorInfo transposed = t;  // a view of the same storage: same offset and size, other strides
  transposed.shape = {520, 300};
  transposed.strides = {1, 520};
  EXPECT_NE(engine::residency_key(*ckpt_, t, 0, 300 * row), engine::residency_key(*ckpt_, transposed, 0, 300 * row)) << "a view";
}

TEST_F(MixedCheckpoint, OpenClServesWhatItSupportsAndCpuTheRest) {
  REQUIRE_OPENCL_PLUGIN();
  auto session = open_session("prefer=opencl");
  ASSERT_NE(find_backend(*session, "opencl"), nullptr) << "no OpenCL device (is pocl-opencl-icd installed?)";
  engine::Records records;
  for (const char* name : {"w.f32", "w.f16", "w.bf16"}) {
    auto level = engine::tensor_tile_stats(session->scheduler(), *ckpt_, *ckpt_->find(name), 256, &records);
    ASSERT_TRUE(level.ok()) << level.status().to_string();
  }
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].backend.rfind("opencl", 0), 0u) << records[0].to_json().dump();
  EXPECT_EQ(records[0].reason, compute::PlacementReason::kPreferred);
  EXPECT_EQ(records[1].backend.rfind("opencl", 0), 0u);
  EXPECT_EQ(records[2].backend, "cpu");
  // The record says why the preferred plugin did not serve BF16.
  EXPECT_EQ(records[2].reason, compute::PlacementReason::kPreferredUnavailable);
  EXPECT_NE(records[2].reason_detail.find("preferred opencl unsupported"), std::string::npos)
      << records[2].reason_detail;
  for (const auto& r : records) EXPECT_EQ(r.exactness, "bitwise");
  EXPECT_EQ(records[2].tensor, "w.bf16");
}

TEST_F(MixedCheckpoint, OpenClTileStatsEqualCpuBitForBit) {
  REQUIRE_OPENCL_PLUGIN();
  auto on_opencl = open_session("only=opencl");
  auto on_cpu = open_session("only=cpu");
  for (const char* name : {"w.f32", "w.f16"}) {
    for (uint32_t tile : {8u, 64u, 256u}) {
      auto a = engine::tensor_tile_stats(on_opencl->scheduler(), *ckpt_, *ckpt_->find(name), tile);
      auto b = engine::tensor_tile_stats(on_cpu->scheduler(), *ckpt_, *ckpt_->find(name), tile);
      ASSERT_TRUE(a.ok()) << a.status().to_string();
      ASSERT_TRUE(b.ok()) << b.status().to_string();
      ASSERT_EQ(a->tiles.size(), b->tiles.size());
      EXPECT_EQ(0, std::memcmp(a->tiles.data(), b->tiles.data(), a->tiles.size() * sizeof(TM_TileStats)))
          << name << " tile " << tile;
    }
  }
}

// One operation split between the CPU backend and the OpenCL plugin at once (both compute on this
// machine's cores, which the default policy keeps apart: the test lets them share) equals the CPU
// alone bit for bit, with a record per part and one for the merge.
TEST_F(MixedCheckpoint, OperationsSplitAcrossCpuAndOpenClEqualTheCpuAloneBitForBit) {
  REQUIRE_OPENCL_PLUGIN();
  auto split = open_session("only=cpu+opencl");
  ASSERT_NE(find_backend(*split, "opencl"), nullptr) << "no OpenCL device (is pocl-opencl-icd installed?)";
  split->scheduler().set_split_policy(
      {.enabled = true, .min_share = 0, .min_whole_ns = 0, .min_gain = -1e9, .share_host_cores = true});
  auto on_cpu = open_session("only=cpu");
  for (const char* name : {"w.f32", "w.f16"}) {
    for (uint32_t tile : {8u, 64u}) {
      engine::Records records;
      auto a = engine::tensor_tile_stats(split->scheduler(), *ckpt_, *ckpt_->find(name), tile, &records);
      auto b = engine::tensor_tile_stats(on_cpu->scheduler(), *ckpt_, *ckpt_->find(name), tile);
      ASSERT_TRUE(a.ok()) << a.status().to_string();
      ASSERT_TRUE(b.ok()) << b.status().to_string();
      ASSERT_EQ(a->tiles.size(), b->tiles.size());
      EXPECT_EQ(0, std::memcmp(a->tiles.data(), b->tiles.data(), a->tiles.size() * sizeof(TM_TileStats)))
          << name << " tile " << tile;
      ASSERT_GE(records.size(), 3u);
      const auto& merge = records.back();
      EXPECT_TRUE(merge.is_merge()) << merge.to_json().dump();
      bool on_both[2] = {false, false};
      for (size_t i = 0; i + 1 < records.size(); ++i) {
        EXPECT_EQ(records[i].split_group, merge.split_group);
        on_both[records[i].backend.rfind("opencl", 0) == 0 ? 1 : 0] = true;
      }
      EXPECT_TRUE(on_both[0] && on_both[1]) << merge.reason_detail;
    }
  }
  // Decoding splits by runs of 65536 elements (156000 elements: three parts' worth).
  auto a = engine::decode_tensor(split->scheduler(), *ckpt_, *ckpt_->find("w.f16"));
  auto b = engine::decode_tensor(on_cpu->scheduler(), *ckpt_, *ckpt_->find("w.f16"));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(0, std::memcmp(a->data(), b->data(), a->size() * sizeof(float)));
  // With the default policy the two never share an operation: both run on the host's cores.
  split->scheduler().set_split_policy({});
  engine::Records records;
  ASSERT_TRUE(engine::tensor_tile_stats(split->scheduler(), *ckpt_, *ckpt_->find("w.f32"), 8, &records).ok());
  for (const auto& r : records) EXPECT_EQ(r.split_group, 0u) << r.to_json().dump();
}

TEST_F(MixedCheckpoint, Q8DecodeOnOpenClEqualsCpu) {
  REQUIRE_OPENCL_PLUGIN();
  // Decode through the scheduler directly: a Q8_0 buffer as a tm.decode@1 request.
  auto run = [&](const std::string& constraints, std::vector<float>& out, engine::Records& records) {
    auto session = open_session(constraints);
    compute::OpRequest req;
    req.op = TM_OP_DECODE;
    req.inputs.push_back({TM_DTYPE_Q8_0, {256 * 512}, q8_, 0});
    out.assign(256 * 512, 0.0f);
    req.outputs.push_back({TM_DTYPE_F32, {256 * 512}, std::as_writable_bytes(std::span(out))});
    auto p = session->scheduler().run(req);
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    ASSERT_TRUE(p->executed);
    records.push_back(p->record);
  };
  std::vector<float> a, b;
  engine::Records ra, rb;
  run("only=opencl", a, ra);
  run("only=cpu", b, rb);
  EXPECT_EQ(ra[0].backend.rfind("opencl", 0), 0u);
  EXPECT_EQ(rb[0].backend, "cpu");
  EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)));
}

TEST_F(MixedCheckpoint, NeverKeepsThePluginOut) {
  REQUIRE_OPENCL_PLUGIN();
  auto session = open_session("prefer=opencl,never=opencl");
  engine::Records records;
  auto level = engine::tensor_tile_stats(session->scheduler(), *ckpt_, *ckpt_->find("w.f32"), 256, &records);
  ASSERT_TRUE(level.ok());
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].backend, "cpu");
  bool excluded = false;
  for (const auto& c : records[0].candidates) excluded |= c.verdict == "never (constraint)";
  EXPECT_TRUE(excluded);
}

TEST(PluginLoader, RefusesAnIncompatibleAbiBeforeCallingIt) {
  REQUIRE_OPENCL_PLUGIN();
  // This plugin declares ABI 2.x; every other function it exports aborts, so reaching one would
  // kill this test.
  compute::BackendSet set;
  compute::load_plugin_library(kPluginDir / "libtm_abi_v2_test_plugin.so", set);
  ASSERT_EQ(set.reports.size(), 1u);
  EXPECT_FALSE(set.reports[0].available);
  EXPECT_NE(set.reports[0].detail.find("plugin ABI 2."), std::string::npos) << set.reports[0].detail;
  EXPECT_NE(set.reports[0].detail.find("none of its functions were called"), std::string::npos);
  EXPECT_TRUE(set.backends.empty());
}

TEST(PluginLoader, ReportsLibrariesThatAreNotPlugins) {
  testing::TempDir dir;
  testing::write_bytes(dir / "libbroken.so", "this is not an ELF file");
  auto set = compute::load_backends(compute::builtin_backend_entry_points(), {dir.path()});
  bool reported = false;
  for (const auto& r : set.reports) {
    if (r.library_path.find("libbroken.so") != std::string::npos) {
      reported = true;
      EXPECT_FALSE(r.available);
      EXPECT_NE(r.detail.find("cannot load"), std::string::npos) << r.detail;
    }
  }
  EXPECT_TRUE(reported);
  // The built-in CPU backend is always there.
  bool cpu = false;
  for (const auto& b : set.backends) cpu |= b->name() == "cpu";
  EXPECT_TRUE(cpu);
}

}  // namespace
}  // namespace tensormorph
