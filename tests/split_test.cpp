// One operation split across several backends at once: the planner's shares, every split rule's
// merge against the whole computed in one piece (bit for bit), and the scheduler running parts on
// fake backends that compute with the CPU reference (host-visible and device-memory ones), with
// records, residency and a failing part that falls back alone.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <random>
#include <unistd.h>

#include "compute/scheduler.h"
#include "compute/settings.h"
#include "compute/split.h"
#include "compute/ops/reference.h"
#include "core/dtype_abi.h"
#include "core/quantize/quantize.h"

namespace tensormorph::compute {
namespace {

// ---- The planner ---------------------------------------------------------------------------------

SplitPolicy eager() { return {.enabled = true, .min_share = 0, .min_whole_ns = 0, .min_gain = -1e9, .share_host_cores = true}; }

TEST(SplitPlan, SharesFollowSpeedAndCoverEveryGranule) {
  const SplitOption options[] = {{0, 30e6, false}, {1, 10e6, false}};
  const SplitPlan plan = plan_split(options, 100, SplitPolicy{});
  ASSERT_EQ(plan.shares.size(), 2u);
  EXPECT_EQ(plan.shares[0].begin, 0u);
  EXPECT_EQ(plan.shares[0].end, 25u);  // a third of the speed: a quarter of the work
  EXPECT_EQ(plan.shares[1].begin, 25u);
  EXPECT_EQ(plan.shares[1].end, 100u);
  EXPECT_NEAR(plan.estimated_ns, 7.5e6, 1e3);
  EXPECT_EQ(plan.best_whole_ns, 10e6);
}

TEST(SplitPlan, RunsWholeWhenTheSplitDoesNotPay) {
  const SplitOption far_slower[] = {{0, 10e6, false}, {1, 500e6, false}};
  EXPECT_TRUE(plan_split(far_slower, 100, SplitPolicy{}).shares.empty()) << "a share under 1/16 is left out";
  const SplitOption tiny[] = {{0, 1e5, false}, {1, 1e5, false}};
  EXPECT_TRUE(plan_split(tiny, 100, SplitPolicy{}).shares.empty()) << "too small to be worth threads";
  const SplitOption even[] = {{0, 10e6, false}, {1, 10e6, false}};
  EXPECT_TRUE(plan_split(even, 1, SplitPolicy{}).shares.empty()) << "one granule";
  SplitPolicy off;
  off.enabled = false;
  EXPECT_TRUE(plan_split(even, 100, off).shares.empty());
  EXPECT_EQ(plan_split(even, 100, SplitPolicy{}).shares.size(), 2u);
}

TEST(SplitPlan, ADeviceWhoseCopiesCostTheHostMoreThanTheWorkDoesNotShareIt) {
  // The CPU does the whole in 5 ms; the device's copies alone take 8.5 ms of the host's memory.
  const SplitOption copy_bound[] = {{0, 5e6, true, 0}, {1, 8.6e6, false, 8.5e6}};
  EXPECT_TRUE(plan_split(copy_bound, 80, SplitPolicy{}).shares.empty());
  // Resident on the device (no copies): its share runs beside the CPU's.
  const SplitOption resident[] = {{0, 5e6, true, 0}, {1, 8.6e6, false, 0}};
  const SplitPlan plan = plan_split(resident, 80, SplitPolicy{});
  ASSERT_EQ(plan.shares.size(), 2u);
  // Cheap copies: the host's total (its share plus the copies) still undercuts the CPU alone.
  const SplitOption cheap_copies[] = {{0, 5e6, true, 0}, {1, 4e6, false, 1e6}};
  const SplitPlan cheap = plan_split(cheap_copies, 80, SplitPolicy{});
  ASSERT_EQ(cheap.shares.size(), 2u);
  EXPECT_LT(cheap.estimated_ns, 4e6);
}

TEST(SplitPlan, BackendsOnTheHostsCoresDoNotShareAnOperation) {
  const SplitOption options[] = {{0, 10e6, true}, {1, 12e6, true}, {2, 11e6, false}};
  const SplitPlan plan = plan_split(options, 64, SplitPolicy{});
  ASSERT_EQ(plan.shares.size(), 2u);
  EXPECT_EQ(plan.shares[0].candidate, 0u);  // the faster of the two on host cores
  EXPECT_EQ(plan.shares[1].candidate, 2u);
  EXPECT_EQ(plan_split(options, 64, eager()).shares.size(), 3u);
}

TEST(SplitPlan, EveryShareGetsAGranuleAndNoMoreSharesThanGranules) {
  const SplitOption options[] = {{0, 1e6, false}, {1, 1e9, false}, {2, 2e9, false}};
  const SplitPlan plan = plan_split(options, 3, eager());
  ASSERT_EQ(plan.shares.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(plan.shares[i].end - plan.shares[i].begin, 1u);
  EXPECT_EQ(plan_split(options, 2, eager()).shares.size(), 2u);
}

TEST(SplitSetting, AutoOrOffPersisted) {
  Settings settings;
  EXPECT_EQ(*get_setting(settings, "compute.split"), "auto");
  ASSERT_TRUE(set_setting(settings, "compute.split", "off").ok());
  EXPECT_FALSE(settings.split);
  const auto bad = set_setting(settings, "compute.split", "sometimes");
  EXPECT_EQ(bad.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.message().find("auto"), std::string::npos) << bad.message();
  const auto path = std::filesystem::temp_directory_path() / ("tm-split-settings-" + std::to_string(::getpid()) + ".json");
  ASSERT_TRUE(save_settings(path, settings).ok());
  auto loaded = load_settings(path);
  std::filesystem::remove(path);
  ASSERT_TRUE(loaded.ok());
  EXPECT_FALSE(loaded->split);
}

// ---- Fake backends that compute with the CPU reference --------------------------------------------

struct RefConfig {
  std::string name;
  double compute_ns = 1e6;
  bool host_visible = true;
  bool host_cores = false;
  TM_StatusCode fail_with = TM_STATUS_OK;
  int executions = 0;
  uint64_t bytes_written_to_buffers = 0;
};

struct RefBuffer {
  std::vector<std::byte> bytes;
};

struct RefError {
  TM_StatusCode code;
  std::string message;
};

thread_local RefConfig* g_next = nullptr;
const OpRegistry& registry() {
  static const OpRegistry r = OpRegistry::builtin();
  return r;
}

RefConfig* cfg(TM_Backend* b) { return reinterpret_cast<RefConfig*>(b); }
TM_Error* ref_error(TM_StatusCode code, std::string message) {
  return reinterpret_cast<TM_Error*>(new RefError{code, std::move(message)});
}

const TM_PluginApi* ref_api(const std::string& name) {
  static std::map<std::string, TM_PluginApi> tables;
  static std::map<std::string, std::string> names;
  names[name] = name;
  TM_PluginApi api{};
  api.struct_size = sizeof api;
  api.abi_major = TM_PLUGIN_ABI_MAJOR;
  api.abi_minor = TM_PLUGIN_ABI_MINOR;
  api.name = names[name].c_str();
  api.version = "test";
  api.error_code = [](const TM_Error* e) { return reinterpret_cast<const RefError*>(e)->code; };
  api.error_message = [](const TM_Error* e) { return reinterpret_cast<const RefError*>(e)->message.c_str(); };
  api.error_destroy = [](TM_Error* e) { delete reinterpret_cast<RefError*>(e); };
  api.backend_create = [](const TM_BackendCreateArgs*, TM_Backend** out) -> TM_Error* {
    *out = reinterpret_cast<TM_Backend*>(g_next);
    return nullptr;
  };
  api.backend_destroy = [](TM_Backend*) {};
  api.device_traits = [](TM_Backend* b, TM_DeviceTraits* t) -> TM_Error* {
    std::snprintf(t->device_name, sizeof t->device_name, "reference %s", cfg(b)->name.c_str());
    t->host_memory_visible = cfg(b)->host_visible ? 1 : 0;
    t->memory_space_count = cfg(b)->host_visible ? 0 : 1;
    t->memory_bytes = cfg(b)->host_visible ? 0 : (4ull << 30);
    t->host_to_device_gbps = 1000;
    t->device_to_host_gbps = 1000;
    t->runs_on_host_cores = cfg(b)->host_cores ? 1 : 0;
    return nullptr;
  };
  api.query = [](TM_Backend*, const TM_OpQuery*, TM_OpSupport* out) -> TM_Error* {
    out->level = TM_SUPPORT_FULL;
    out->exactness = TM_EXACT_BITWISE;
    return nullptr;
  };
  api.estimate = [](TM_Backend* b, const TM_OpInstance*, TM_CostEstimate* out) -> TM_Error* {
    out->compute_ns = cfg(b)->compute_ns;
    return nullptr;
  };
  api.buffer_alloc = [](TM_Backend*, uint32_t, uint64_t bytes, TM_Buffer** out) -> TM_Error* {
    *out = reinterpret_cast<TM_Buffer*>(new RefBuffer{std::vector<std::byte>(bytes)});
    return nullptr;
  };
  api.buffer_free = [](TM_Backend*, TM_Buffer* b) { delete reinterpret_cast<RefBuffer*>(b); };
  api.buffer_write = [](TM_Backend* b, TM_Buffer* buffer, uint64_t offset, const void* src, uint64_t bytes) -> TM_Error* {
    if (bytes > 0) std::memcpy(reinterpret_cast<RefBuffer*>(buffer)->bytes.data() + offset, src, bytes);
    cfg(b)->bytes_written_to_buffers += bytes;
    return nullptr;
  };
  // Runs the operation's CPU reference, reading device buffers (at their byte offsets) in place.
  api.execute = [](TM_Backend* b, const TM_OpInstance* op, const TM_ExecutionPolicy*, TM_ExecutionReport* report) -> TM_Error* {
    RefConfig* c = cfg(b);
    if (c->fail_with != TM_STATUS_OK) return ref_error(c->fail_with, c->name + " fails on purpose");
    std::vector<TM_TensorArg> inputs(op->inputs, op->inputs + op->input_count);
    for (auto& in : inputs) {
      if (in.buffer == nullptr) continue;
      if (c->host_visible) return ref_error(TM_STATUS_INVALID_ARGUMENT, "a host backend got a buffer");
      auto& bytes = reinterpret_cast<RefBuffer*>(in.buffer)->bytes;
      if (in.byte_offset + in.nbytes > bytes.size()) return ref_error(TM_STATUS_INVALID_ARGUMENT, "outside its buffer");
      in.host_data = bytes.data();
      in.buffer = nullptr;
    }
    TM_OpInstance host = *op;
    host.inputs = inputs.data();
    const OpDefinition* def = registry().find(op->op);
    if (def == nullptr) return ref_error(TM_STATUS_UNIMPLEMENTED, "unknown op");
    Status s = def->reference(host);
    if (!s.ok()) return ref_error(TM_STATUS_INVALID_ARGUMENT, s.message());
    ++c->executions;
    report->exactness = TM_EXACT_BITWISE;
    return nullptr;
  };
  tables[name] = api;
  return &tables[name];
}

// One operation's whole request with inputs this test owns.
struct Case {
  std::string label;
  OpRequest request;
  std::vector<std::vector<std::byte>> inputs;
  std::vector<std::vector<std::byte>> outputs;

  Case() = default;
  Case(Case&&) = default;
  // A copy's request views the copy's own bytes.
  Case(const Case& other) : label(other.label), request(other.request), inputs(other.inputs), outputs(other.outputs) {
    for (size_t i = 0; i < inputs.size(); ++i) request.inputs[i].bytes = std::span<const std::byte>(inputs[i]);
    for (size_t i = 0; i < outputs.size(); ++i) request.outputs[i].bytes = std::span(outputs[i]);
  }
};

std::vector<float> weights(uint64_t n, uint32_t seed, bool special) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  if (special && n > 1000) {
    v[3] = std::numeric_limits<float>::quiet_NaN();
    v[500] = std::numeric_limits<float>::infinity();
    v[n - 7] = -std::numeric_limits<float>::infinity();
    v[901] = -0.0f;
    v[n - 1] = 0.0f;
  }
  return v;
}

Case make_case(std::string label, std::string op, std::vector<std::pair<DType, std::vector<uint64_t>>> in,
               std::vector<std::pair<TM_DType, uint64_t>> out, std::vector<AttributeValue> attributes,
               const std::vector<float>* values = nullptr) {
  Case c;
  c.label = std::move(label);
  c.request.op = std::move(op);
  c.request.subject = c.label;
  c.inputs.resize(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    uint64_t n = 1;
    for (uint64_t d : in[i].second) n *= d;
    if (in[i].first == DType::kU64) {
      c.inputs[i].resize(n * 8);
    } else {
      const std::vector<float> own = weights(n, static_cast<uint32_t>(11 + i), true);
      c.inputs[i] = *encode_from_f32(in[i].first, values != nullptr && i == 0 ? *values : own);
    }
  }
  for (size_t i = 0; i < in.size(); ++i) {
    c.request.inputs.push_back({to_abi_dtype(in[i].first), in[i].second, std::span<const std::byte>(c.inputs[i]), 0});
  }
  c.outputs.resize(out.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const uint64_t element_bytes = out[i].first == TM_DTYPE_U8 ? 1 : out[i].first == TM_DTYPE_F32 ? 4 : 8;
    c.outputs[i].assign(out[i].second * element_bytes, std::byte{0xAB});
    c.request.outputs.push_back({out[i].first, {out[i].second}, std::span(c.outputs[i])});
  }
  c.request.attributes = std::move(attributes);
  return c;
}

std::vector<Case> cases() {
  std::vector<Case> v;
  constexpr uint64_t kT = sizeof(TM_TileStats);
  {
    const ops::TileGrid g = ops::tile_grid({5, 997, 8, 380}, 32);
    v.push_back(make_case("tile_stats BF16 view", TM_OP_TILE_STATS, {{DType::kBF16, {1000, 384}}}, {{TM_DTYPE_U8, g.count() * kT}},
                          {{TM_ATTR_ROW_BEGIN, 5, 0}, {TM_ATTR_ROW_END, 997, 0}, {TM_ATTR_COL_BEGIN, 8, 0},
                           {TM_ATTR_COL_END, 380, 0}, {TM_ATTR_TILE, 32, 0}}));
  }
  v.push_back(make_case("histogram F32", TM_OP_HISTOGRAM, {{DType::kF32, {300001}}}, {{TM_DTYPE_U64, 500 + 3}},
                        {{TM_ATTR_LO, 0, -0.05}, {TM_ATTR_HI, 0, 0.05}, {TM_ATTR_BINS, 500, 0}}));
  v.push_back(make_case("radix_histogram Q8_0", TM_OP_RADIX_HISTOGRAM, {{DType::kQ8_0, {65536 * 3 + 32 * 5}}, {DType::kU64, {0}}},
                        {{TM_DTYPE_U64, uint64_t{1} << 16}, {TM_DTYPE_U64, 4}},
                        {{TM_ATTR_KEY, TM_RADIX_KEY_VALUE, 0}, {TM_ATTR_SHIFT, 16, 0}, {TM_ATTR_BITS, 16, 0}, {TM_ATTR_CENTER, 0, 0}}));
  {
    // Ragged last block, and a column of -0.0 whose sums tell +0.0 padding apart.
    std::vector<float> m = weights(1000 * 96, 5, true);
    for (uint64_t r = 0; r < 1000; ++r) m[r * 96 + 7] = -0.0f;
    v.push_back(make_case("channel_stats F16 1000 rows", TM_OP_CHANNEL_STATS, {{DType::kF16, {1000, 96}}},
                          {{TM_DTYPE_U8, 1000 * kT}, {TM_DTYPE_U8, 96 * kT}}, {}, &m));
  }
  v.push_back(make_case("channel_stats F32 4096 rows", TM_OP_CHANNEL_STATS, {{DType::kF32, {4096, 64}}}, {{TM_DTYPE_U8, 4096 * kT}, {TM_DTYPE_U8, 64 * kT}}, {}));
  v.push_back(make_case("diff_stats F32 vs BF16", TM_OP_DIFF_STATS, {{DType::kF32, {200000}}, {DType::kBF16, {200000}}},
                        {{TM_DTYPE_U8, 4 * sizeof(TM_DiffStats)}}, {{TM_ATTR_ELEMENT_OFFSET, 7, 0}, {TM_ATTR_A_OFFSET, 0, 0.5}}));
  v.push_back(make_case("subtract F32 vs F16", TM_OP_SUBTRACT, {{DType::kF32, {150000}}, {DType::kF16, {150000}}},
                        {{TM_DTYPE_F32, 150000}}, {}));
  v.push_back(make_case("decode Q4_K", TM_OP_DECODE, {{DType::kQ4_K, {256 * 1000}}}, {{TM_DTYPE_F32, 256 * 1000}}, {}));
  return v;
}

class SplitRun : public ::testing::Test {
 protected:
  RefConfig& add(RefConfig c) {
    configs_.push_back(std::make_unique<RefConfig>(std::move(c)));
    g_next = configs_.back().get();
    auto backend = Backend::create(ref_api(configs_.back()->name), 0, {}, nullptr);
    EXPECT_TRUE(backend.ok()) << backend.status().to_string();
    backends_.push_back(std::move(backend).value());
    return *configs_.back();
  }
  std::unique_ptr<Scheduler> make(SplitPolicy policy = eager(), std::string only = "") {
    SchedulerOptions options;
    options.calibrate = false;
    options.split = policy;
    options.startup_costs_file = startup_;
    if (!only.empty()) options.constraints.only = {only};
    return std::make_unique<Scheduler>(registry(), backends_, std::move(options));
  }
  ~SplitRun() override { std::filesystem::remove(startup_); }

  std::filesystem::path startup_ = std::filesystem::temp_directory_path() / ("tm-split-test-" + std::to_string(::getpid()) + ".json");
  std::vector<std::unique_ptr<RefConfig>> configs_;
  std::vector<std::unique_ptr<Backend>> backends_;
};

// Runs `c` whole on `only` and split on every backend; the outputs must be identical bytes.
void expect_split_equals_whole(Scheduler& whole, Scheduler& split, Case& c, size_t min_parts) {
  auto one = whole.run(c.request);
  ASSERT_TRUE(one.ok() && one->executed) << c.label << ": " << one.status().to_string();
  EXPECT_TRUE(one->parts.empty()) << c.label;
  const auto expected = c.outputs;
  for (auto& out : c.outputs) std::fill(out.begin(), out.end(), std::byte{0xCD});
  auto parts = split.run(c.request);
  ASSERT_TRUE(parts.ok() && parts->executed) << c.label << ": " << parts.status().to_string();
  EXPECT_GE(parts->parts.size(), min_parts) << c.label;
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_TRUE(expected[i] == c.outputs[i]) << c.label << ": output " << i;
  EXPECT_EQ(parts->record.reason, PlacementReason::kSplit) << c.label;
  EXPECT_TRUE(parts->record.is_merge()) << c.label;
  for (const auto& p : parts->parts) {
    EXPECT_EQ(p.split_group, parts->record.split_group) << c.label;
    EXPECT_EQ(p.reason, PlacementReason::kSplit) << c.label << ": " << p.reason_detail;
  }
}

TEST_F(SplitRun, EverySplittableOperationEqualsItsWholeRunBitForBit) {
  add({.name = "host"});
  add({.name = "device", .host_visible = false});
  auto whole = make(eager(), "host");
  auto split = make();
  for (Case& c : cases()) expect_split_equals_whole(*whole, *split, c, 2);
}

TEST_F(SplitRun, ThreeBackendsAndUnevenSpeeds) {
  add({.name = "a", .compute_ns = 1e6});
  add({.name = "b", .compute_ns = 3e6, .host_visible = false});
  add({.name = "c", .compute_ns = 7e6, .host_visible = false});
  auto whole = make(eager(), "a");
  auto split = make();
  for (Case& c : cases()) expect_split_equals_whole(*whole, *split, c, 3);
}

TEST_F(SplitRun, RecordsSayWhereEachPartRanAndTheLogCountsPartsNotMerges) {
  add({.name = "host"});
  add({.name = "device", .host_visible = false});
  auto split = make();
  Case c = cases()[0];
  auto p = split->run(c.request);
  ASSERT_TRUE(p.ok() && p->executed);
  ASSERT_EQ(p->parts.size(), 2u);
  EXPECT_EQ(p->parts[0].backend, "host");
  EXPECT_EQ(p->parts[1].backend, "device");
  EXPECT_EQ(p->record.backend, "host+device");
  EXPECT_NE(p->record.reason_detail.find("2 parts at once"), std::string::npos) << p->record.reason_detail;
  EXPECT_NE(p->parts[0].split_part.find("part 1/2: granules [0, "), std::string::npos) << p->parts[0].split_part;
  EXPECT_GT(p->parts[1].bytes_moved, 0u);  // the device part's slice was copied in
  const auto json = p->record.to_json();
  EXPECT_EQ(json["split_part"], "merge");
  EXPECT_EQ(json["reason"], "split");
  const auto summary = split->log().summary();
  EXPECT_EQ(summary.total.operations, 2u);
  EXPECT_EQ(summary.by_backend.count("host+device"), 0u);
  EXPECT_EQ(split->log().recent(10).size(), 3u);
  std::vector<PlacementRecord> taken;
  p->take_records(taken);
  ASSERT_EQ(taken.size(), 3u);
  EXPECT_TRUE(taken.back().is_merge());
}

TEST_F(SplitRun, AFailingPartFallsBackAloneAndTheResultIsUnchanged) {
  add({.name = "good"});
  RefConfig& bad = add({.name = "bad", .host_visible = false, .fail_with = TM_STATUS_UNIMPLEMENTED});
  auto whole = make(eager(), "good");
  auto split = make();
  for (Case& c : cases()) {
    auto one = whole->run(c.request);
    ASSERT_TRUE(one.ok() && one->executed);
    const auto expected = c.outputs;
    auto p = split->run(c.request);
    ASSERT_TRUE(p.ok() && p->executed) << c.label << ": " << p.status().to_string();
    for (size_t i = 0; i < expected.size(); ++i) EXPECT_TRUE(expected[i] == c.outputs[i]) << c.label;
    bool fell_back = false;
    for (const auto& part : p->parts) {
      EXPECT_EQ(part.backend, "good") << c.label;
      if (part.reason == PlacementReason::kFallback) {
        fell_back = true;
        EXPECT_NE(part.reason_detail.find("bad"), std::string::npos) << part.reason_detail;
        EXPECT_EQ(part.split_group, p->record.split_group);
      }
    }
    EXPECT_TRUE(fell_back) << c.label;
  }
  EXPECT_EQ(bad.executions, 0);
}

TEST_F(SplitRun, AnInputResidentOnTheDeviceIsReadInPlaceByItsPart) {
  add({.name = "host"});
  RefConfig& device = add({.name = "device", .host_visible = false});
  Case c = cases()[0];
  c.request.inputs[0].residency_key = 42;
  auto split = make();
  auto first = split->run(c.request);  // split: the device part's slice is copied, never cached
  ASSERT_TRUE(first.ok() && first->executed);
  ASSERT_EQ(first->parts.size(), 2u);
  EXPECT_GT(device.bytes_written_to_buffers, 0u);
  EXPECT_LT(device.bytes_written_to_buffers, c.request.inputs[0].bytes.size()) << "only its slice";
  EXPECT_FALSE(split->residency().resident(42, *backends_[1], c.request.inputs[0].bytes.size())) << "a slice is never cached as the whole";
  // Whole on the device (cached), then split: the device part reads the cached copy at its offset.
  split->set_constraints({.prefer = {}, .never = {}, .only = {"device"}});
  ASSERT_TRUE(split->run(c.request).ok());
  EXPECT_TRUE(split->residency().resident(42, *backends_[1], c.request.inputs[0].bytes.size()));
  split->set_constraints({});
  const uint64_t before = device.bytes_written_to_buffers;
  const auto expected = c.outputs;
  auto again = split->run(c.request);
  ASSERT_TRUE(again.ok() && again->executed);
  ASSERT_EQ(again->parts.size(), 2u);
  EXPECT_EQ(device.bytes_written_to_buffers, before) << "the resident copy was read in place";
  ASSERT_EQ(expected[0].size(), c.outputs[0].size());
  size_t first_bad = 0;
  while (first_bad < expected[0].size() && expected[0][first_bad] == c.outputs[0][first_bad]) ++first_bad;
  EXPECT_EQ(first_bad, expected[0].size()) << "first differing byte; tile " << first_bad / sizeof(TM_TileStats) << " "
                                           << again->parts[1].split_part;
}

TEST_F(SplitRun, ACachedCopyOfAnotherSizeIsNeverTakenForTheInput) {
  // One residency key for two spans of different lengths (say a tensor's first band, then the
  // whole tensor): the cached copy of the first must not stand in for the second.
  add({.name = "host"});
  RefConfig& device = add({.name = "device", .host_visible = false});
  auto s = make(SplitPolicy{.enabled = false}, "device");
  Case small = make_case("histogram F32 70000", TM_OP_HISTOGRAM, {{DType::kF32, {70000}}}, {{TM_DTYPE_U64, 35}},
                         {{TM_ATTR_LO, 0, -0.05}, {TM_ATTR_HI, 0, 0.05}, {TM_ATTR_BINS, 32, 0}});
  Case large = make_case("histogram F32 140000", TM_OP_HISTOGRAM, {{DType::kF32, {140000}}}, {{TM_DTYPE_U64, 35}},
                         {{TM_ATTR_LO, 0, -0.05}, {TM_ATTR_HI, 0, 0.05}, {TM_ATTR_BINS, 32, 0}});
  small.request.inputs[0].residency_key = 7;
  large.request.inputs[0].residency_key = 7;
  ASSERT_TRUE(s->run(small.request).ok());
  EXPECT_TRUE(s->residency().resident(7, *backends_[1], small.inputs[0].size()));
  EXPECT_FALSE(s->residency().resident(7, *backends_[1], large.inputs[0].size()));
  const uint64_t before = device.bytes_written_to_buffers;
  auto placed = s->run(large.request);
  ASSERT_TRUE(placed.ok() && placed->executed) << placed.status().to_string();
  EXPECT_EQ(device.bytes_written_to_buffers - before, large.inputs[0].size()) << "the larger input was uploaded";
  auto host = make(SplitPolicy{.enabled = false}, "host");
  Case check = large;
  ASSERT_TRUE(host->run(check.request).ok());
  EXPECT_TRUE(check.outputs[0] == large.outputs[0]) << "the device counted the whole input";
}

TEST_F(SplitRun, APreferenceNarrowsTheSplitAndOperationsThatCannotSplitRunWhole) {
  add({.name = "a"});
  add({.name = "b", .host_visible = false});
  add({.name = "c", .host_visible = false});
  auto split = make();
  split->set_constraints({.prefer = {"b", "c"}, .never = {}, .only = {}});
  Case c = cases()[1];
  auto p = split->run(c.request);
  ASSERT_TRUE(p.ok() && p->executed);
  EXPECT_EQ(p->record.backend, "b+c");
  // tm.top_k@1 says why it is never split.
  const OpDefinition* top_k = registry().find(TM_OP_TOP_K);
  ASSERT_NE(top_k, nullptr);
  EXPECT_FALSE(top_k->split.splittable());
  EXPECT_FALSE(top_k->split.never_because.empty());
  EXPECT_TRUE(registry().find(TM_OP_TILE_STATS)->split.splittable());
}

}  // namespace
}  // namespace tensormorph::compute
