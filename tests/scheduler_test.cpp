// Scheduler behaviour with fake backends whose capabilities, costs and failures the test controls.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <unistd.h>

#include "compute/cost_model.h"
#include "compute/scheduler.h"

namespace tensormorph::compute {
namespace {

// Everything a fake backend does is decided by this configuration.
struct FakeConfig {
  std::string name;
  TM_SupportLevel level = TM_SUPPORT_FULL;
  TM_Exactness exactness = TM_EXACT_BITWISE;
  double error_bound = 0;
  double compute_ns = 1000;
  uint64_t bytes_written = 0;
  uint64_t working_bytes = 0;
  bool host_visible = true;
  double link_gbps = 1.0;
  TM_StatusCode fail_with = TM_STATUS_OK;  // execute fails with this code
  int executions = 0;
  int buffer_writes = 0;
  std::string supported_op;  // empty: every op
  uint64_t needs_bytes = 0;  // a data-dependent output of this many bytes (0: none)
  uint32_t seen_inputs = 0;  // what the last query named
  std::vector<TM_DType> seen_dtypes;
  uint32_t abi_minor = TM_PLUGIN_ABI_MINOR;  // the minor ABI version its table declares
};

struct FakeError {
  TM_StatusCode code;
  std::string message;
};

struct FakeBuffer {
  std::vector<std::byte> bytes;
};

thread_local FakeConfig* g_next_config = nullptr;

FakeConfig* config(TM_Backend* b) { return reinterpret_cast<FakeConfig*>(b); }
TM_Error* make_error(TM_StatusCode code, std::string message) {
  return reinterpret_cast<TM_Error*>(new FakeError{code, std::move(message)});
}

TM_StatusCode fake_error_code(const TM_Error* e) { return reinterpret_cast<const FakeError*>(e)->code; }
const char* fake_error_message(const TM_Error* e) { return reinterpret_cast<const FakeError*>(e)->message.c_str(); }
void fake_error_destroy(TM_Error* e) { delete reinterpret_cast<FakeError*>(e); }

TM_Error* fake_create(const TM_BackendCreateArgs*, TM_Backend** out) {
  *out = reinterpret_cast<TM_Backend*>(g_next_config);
  return nullptr;
}
void fake_destroy(TM_Backend*) {}

TM_Error* fake_traits(TM_Backend* b, TM_DeviceTraits* t) {
  std::snprintf(t->device_name, sizeof t->device_name, "fake %s", config(b)->name.c_str());
  t->host_memory_visible = config(b)->host_visible ? 1 : 0;
  t->memory_space_count = config(b)->host_visible ? 0 : 1;
  t->memory_bytes = config(b)->host_visible ? 0 : (1ull << 30);
  t->host_to_device_gbps = config(b)->link_gbps;
  t->device_to_host_gbps = config(b)->link_gbps;
  return nullptr;
}

TM_Error* fake_query(TM_Backend* b, const TM_OpQuery* q, TM_OpSupport* out) {
  FakeConfig* c = config(b);
  c->seen_inputs = q->input_count;
  c->seen_dtypes.assign(q->input_dtypes, q->input_dtypes + std::min<uint32_t>(q->input_count, TM_MAX_OP_INPUTS));
  out->level = (c->supported_op.empty() || c->supported_op == q->op) ? c->level : TM_SUPPORT_NONE;
  out->exactness = c->exactness;
  out->error_bound = c->error_bound;
  std::snprintf(out->reason, sizeof out->reason, "%s", out->level == TM_SUPPORT_NONE ? "fake: not this op" : "");
  return nullptr;
}

TM_Error* fake_estimate(TM_Backend* b, const TM_OpInstance*, TM_CostEstimate* out) {
  out->compute_ns = config(b)->compute_ns;
  out->bytes_written = config(b)->bytes_written;
  out->working_bytes = config(b)->working_bytes;
  return nullptr;
}

TM_Error* fake_alloc(TM_Backend*, uint32_t, uint64_t bytes, TM_Buffer** out) {
  *out = reinterpret_cast<TM_Buffer*>(new FakeBuffer{std::vector<std::byte>(bytes)});
  return nullptr;
}
void fake_free(TM_Backend*, TM_Buffer* buffer) { delete reinterpret_cast<FakeBuffer*>(buffer); }
TM_Error* fake_write(TM_Backend* b, TM_Buffer* buffer, uint64_t offset, const void* src, uint64_t bytes) {
  std::memcpy(reinterpret_cast<FakeBuffer*>(buffer)->bytes.data() + offset, src, bytes);
  config(b)->buffer_writes++;
  return nullptr;
}

// "Computes" by writing the backend's name length into the first output byte.
TM_Error* fake_execute(TM_Backend* b, const TM_OpInstance* op, const TM_ExecutionPolicy* policy,
                       TM_ExecutionReport* report) {
  FakeConfig* c = config(b);
  if (c->fail_with != TM_STATUS_OK) return make_error(c->fail_with, "fake failure");
  if (c->exactness > policy->exactness_floor) return make_error(TM_STATUS_UNIMPLEMENTED, "below exactness floor");
  if (!c->host_visible && op->input_count > 0 && op->inputs[0].buffer == nullptr) {
    return make_error(TM_STATUS_INVALID_ARGUMENT, "device backend got host data");
  }
  if (c->needs_bytes > 0) {
    report->output_nbytes[0] = c->needs_bytes;
    if (op->outputs[0].nbytes < c->needs_bytes) return make_error(TM_STATUS_OUTPUT_TOO_SMALL, "needs more room");
  }
  c->executions++;
  if (op->output_count > 0 && op->outputs[0].host_out) {
    static_cast<unsigned char*>(op->outputs[0].host_out)[0] = static_cast<unsigned char>(c->name.size());
  }
  report->exactness = c->exactness;
  report->error_bound = c->error_bound;
  return nullptr;
}

const TM_PluginApi* fake_api(const std::string& name, uint32_t abi_minor = TM_PLUGIN_ABI_MINOR) {
  static std::map<std::string, TM_PluginApi> tables;
  static std::map<std::string, std::string> names;
  names[name] = name;
  TM_PluginApi api{};
  api.struct_size = sizeof api;
  api.abi_major = TM_PLUGIN_ABI_MAJOR;
  api.abi_minor = abi_minor;
  api.name = names[name].c_str();
  api.version = "test";
  api.error_code = fake_error_code;
  api.error_message = fake_error_message;
  api.error_destroy = fake_error_destroy;
  api.backend_create = fake_create;
  api.backend_destroy = fake_destroy;
  api.device_traits = fake_traits;
  api.query = fake_query;
  api.estimate = fake_estimate;
  api.buffer_alloc = fake_alloc;
  api.buffer_free = fake_free;
  api.buffer_write = fake_write;
  api.execute = fake_execute;
  tables[name] = api;
  return &tables[name];
}

class SchedulerTest : public ::testing::Test {
 protected:
  SchedulerTest() {
    EXPECT_TRUE(registry_.add({"test.op@1", "a test operation", {}, {}, {}, "exact means exact",
                               {{"test.op_sampled@1", "a sampled estimate", "relative error <= 1%"}}})
                    .ok());
    EXPECT_TRUE(registry_.add({"test.op_sampled@1", "sampled variant", {}, {}, {}, "approximate", {}}).ok());
  }

  FakeConfig& add(FakeConfig c) {
    configs_.push_back(std::make_unique<FakeConfig>(std::move(c)));
    g_next_config = configs_.back().get();
    auto backend = Backend::create(fake_api(configs_.back()->name, configs_.back()->abi_minor), 0, {}, nullptr);
    EXPECT_TRUE(backend.ok()) << backend.status().to_string();
    backends_.push_back(std::move(backend).value());
    return *configs_.back();
  }

  // A backend whose device opens on first use (the next fake_create binds it to `cfg`).
  FakeConfig& add_deferred(FakeConfig cfg) {
    configs_.push_back(std::make_unique<FakeConfig>(std::move(cfg)));
    auto backend = Backend::deferred(fake_api(configs_.back()->name), {}, nullptr);
    EXPECT_TRUE(backend.ok()) << backend.status().to_string();
    backends_.push_back(std::move(backend).value());
    return *configs_.back();
  }

  // Calibration is off so the costs these tests pin are the costs the scheduler compares.
  Scheduler make(SchedulerOptions options = {}) {
    options.calibrate = false;
    if (options.startup_costs_file.empty()) options.startup_costs_file = startup_file_;
    return Scheduler(registry_, backends_, std::move(options));
  }

  OpRequest request(uint64_t residency_key = 0) {
    OpRequest r;
    r.op = "test.op@1";
    r.inputs.push_back({TM_DTYPE_F32, {4, 4}, std::span<const std::byte>(input_), residency_key});
    r.outputs.push_back({TM_DTYPE_U8, {1}, std::span<std::byte>(output_)});
    return r;
  }

  std::filesystem::path startup_file_ = std::filesystem::temp_directory_path() /
                                        ("tm-scheduler-test-startup-" + std::to_string(::getpid()) + ".json");
  ~SchedulerTest() override { std::filesystem::remove(startup_file_); }

  OpRegistry registry_;
  std::vector<std::unique_ptr<FakeConfig>> configs_;
  std::vector<std::unique_ptr<Backend>> backends_;
  std::vector<std::byte> input_ = std::vector<std::byte>(64);
  std::vector<std::byte> output_ = std::vector<std::byte>(1);
};

TEST_F(SchedulerTest, PicksCheapestAndRecordsWhy) {
  add({.name = "slow", .compute_ns = 5000});
  auto& fast = add({.name = "fast", .compute_ns = 100});
  auto s = make();
  auto p = s.run(request());
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_TRUE(p->executed);
  EXPECT_EQ(p->record.backend, "fast");
  EXPECT_EQ(p->record.reason, PlacementReason::kCheapest);
  EXPECT_NE(p->record.reason_detail.find("slow"), std::string::npos);
  EXPECT_EQ(fast.executions, 1);
  EXPECT_EQ(s.log().recent(10).size(), 1u);
  EXPECT_EQ(p->record.to_json()["backend"], "fast");
}

TEST_F(SchedulerTest, ConstraintsNeverOnlyPrefer) {
  add({.name = "alpha", .compute_ns = 5000});
  add({.name = "beta", .compute_ns = 100});
  auto s = make();
  s.set_constraints({.prefer = {}, .never = {"beta"}, .only = {}});
  EXPECT_EQ(s.run(request())->record.backend, "alpha");
  s.set_constraints({.prefer = {"alpha"}, .never = {}, .only = {}});
  auto preferred = s.run(request());
  EXPECT_EQ(preferred->record.backend, "alpha");
  EXPECT_EQ(preferred->record.reason, PlacementReason::kPreferred);
  s.set_constraints({.prefer = {}, .never = {}, .only = {"alpha"}});
  EXPECT_EQ(s.run(request())->record.backend, "alpha");
  s.set_constraints({.prefer = {}, .never = {"alpha", "beta"}, .only = {}});
  auto none = s.run(request());
  EXPECT_FALSE(none.ok() && none->executed);
}

TEST_F(SchedulerTest, ConstraintsThatExcludeEveryBackendAreAFailedPreconditionSayingWhatToAllow) {
  add({.name = "alpha", .compute_ns = 5000});
  add({.name = "beta", .compute_ns = 100});
  auto s = make();
  s.set_constraints({.prefer = {}, .never = {"alpha", "beta"}, .only = {}});
  auto none = s.run(request());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kFailedPrecondition) << none.status().to_string();
  EXPECT_NE(none.status().hint().find("allow a backend"), std::string::npos) << none.status().hint();
  EXPECT_NE(none.status().hint().find("alpha, beta"), std::string::npos) << none.status().hint();
  // The message says it too (the command line prints only the message).
  EXPECT_NE(none.status().message().find(none.status().hint()), std::string::npos);
  s.set_constraints({.prefer = {}, .never = {}, .only = {"gamma"}});
  auto only = s.run(request());
  ASSERT_FALSE(only.ok());
  EXPECT_EQ(only.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(only.status().hint().find("only=gamma"), std::string::npos) << only.status().hint();
  // The estimate says the same without running anything.
  auto estimate = s.estimate(request());
  ASSERT_TRUE(estimate.ok());
  EXPECT_FALSE(estimate->placeable);
  EXPECT_EQ(estimate->refusal.code(), StatusCode::kFailedPrecondition);
}

TEST_F(SchedulerTest, OverTheMemoryBudgetWithNothingToConsentToIsResourceExhaustedSayingHowMuch) {
  // Over the budget, and test.op@1's approximate rung has no backend: nothing to offer.
  add({.name = "exact", .compute_ns = 10, .bytes_written = 96ull << 20, .supported_op = "test.op@1"});
  auto s = make({.constraints = {}, .memory_budget_bytes = 64ull << 20});
  auto p = s.run(request());
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kResourceExhausted) << p.status().to_string();
  EXPECT_NE(p.status().hint().find("raise the memory budget (now 64 MiB) to at least 96 MiB"), std::string::npos)
      << p.status().hint();
  EXPECT_NE(p.status().message().find("over the memory budget"), std::string::npos);
}

TEST_F(SchedulerTest, BackendsThatAllFailAreStillUnimplemented) {
  // A kernel's UNIMPLEMENTED means "place it elsewhere"; when nowhere is left, that is the answer.
  add({.name = "broken", .compute_ns = 1, .fail_with = TM_STATUS_UNIMPLEMENTED, .supported_op = "test.op@1"});
  add({.name = "broken_too", .compute_ns = 2, .fail_with = TM_STATUS_UNIMPLEMENTED, .supported_op = "test.op@1"});
  auto s = make();
  auto p = s.run(request());
  ASSERT_FALSE(p.ok()) << "executed: " << p->executed;
  EXPECT_EQ(p.status().code(), StatusCode::kUnimplemented) << p.status().to_string();
  EXPECT_TRUE(p.status().hint().empty());
}

TEST_F(SchedulerTest, ABackendRuledOutThatCouldNotRunItEitherIsNoPrecondition) {
  add({.name = "elsewhere", .supported_op = "other.op@1"});
  add({.name = "nowhere", .supported_op = "another.op@1"});
  auto s = make();
  s.set_constraints({.prefer = {}, .never = {"elsewhere"}, .only = {}});
  auto p = s.run(request());
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kUnimplemented) << p.status().to_string();
}

TEST_F(SchedulerTest, AnUnmetPreferenceSaysWhyTheOthersServed) {
  add({.name = "host", .compute_ns = 1000});
  add({.name = "gpu", .compute_ns = 10, .supported_op = "test.op_sampled@1"});
  auto s = make();
  s.set_constraints({.prefer = {"gpu"}, .never = {}, .only = {}});
  auto p = s.run(request());
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->record.backend, "host");
  EXPECT_EQ(p->record.reason, PlacementReason::kPreferredUnavailable);
  EXPECT_EQ(p->record.to_json()["reason"], "preferred-unavailable");
  EXPECT_NE(p->record.reason_detail.find("preferred gpu unsupported: fake: not this op"), std::string::npos)
      << p->record.reason_detail;
  // A preference naming no loaded backend says so.
  s.set_constraints({.prefer = {"tpu"}, .never = {}, .only = {}});
  auto q = s.run(request());
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->record.reason, PlacementReason::kPreferredUnavailable);
  EXPECT_NE(q->record.reason_detail.find("no loaded backend is named tpu"), std::string::npos) << q->record.reason_detail;
  // Without a preference the same placement is plainly the cheapest.
  s.set_constraints({});
  EXPECT_EQ(s.run(request())->record.reason, PlacementReason::kCheapest);
}

TEST_F(SchedulerTest, RecordsNameTheTensorTheyServed) {
  add({.name = "host"});
  auto s = make();
  OpRequest r = request();
  r.subject = "model.layers.0.mlp.up_proj.weight";
  auto p = s.run(r);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->record.tensor, r.subject);
  EXPECT_EQ(p->record.to_json()["tensor"], r.subject);
  EXPECT_EQ(s.log().recent(1)[0].tensor, r.subject);
  EXPECT_EQ(s.run(request())->record.to_json()["tensor"], "");
}

TEST_F(SchedulerTest, ThePlacementLogKeepsRunningTotalsAndTheLastConsents) {
  auto& flaky = add({.name = "flaky", .compute_ns = 1, .fail_with = TM_STATUS_UNIMPLEMENTED});
  add({.name = "steady", .compute_ns = 100});
  add({.name = "bounded", .exactness = TM_EXACT_BOUNDED, .error_bound = 1e-6, .compute_ns = 10});
  SchedulerOptions options;
  auto s = make(options);
  ASSERT_TRUE(s.run(request()).ok());  // flaky fails, steady serves: a fallback
  flaky.fail_with = TM_STATUS_OK;
  ASSERT_TRUE(s.run(request()).ok());  // flaky, the cheapest
  s.set_constraints({.prefer = {}, .never = {"flaky", "steady"}, .only = {}});
  OpRequest consenting = request();
  consenting.consent = "backend:bounded";
  for (int i = 0; i < 22; ++i) {
    consenting.subject = "t" + std::to_string(i);
    auto p = s.run(consenting);
    ASSERT_TRUE(p.ok() && p->executed) << p.status().to_string();
  }
  const PlacementSummary summary = s.log().summary();
  EXPECT_EQ(summary.total.operations, 24u);
  EXPECT_EQ(summary.total.fallbacks, 1u);
  EXPECT_EQ(summary.total.consented, 22u);
  EXPECT_EQ(summary.total.bounded, 22u);
  EXPECT_EQ(summary.total.approximate, 0u);
  EXPECT_EQ(summary.by_backend.at("steady").operations, 1u);
  EXPECT_EQ(summary.by_backend.at("steady").fallbacks, 1u);
  EXPECT_EQ(summary.by_backend.at("flaky").operations, 1u);
  EXPECT_EQ(summary.by_backend.at("bounded").consented, 22u);
  ASSERT_EQ(summary.consents.size(), PlacementSummary::kKeptConsents);
  EXPECT_EQ(summary.consents.front().tensor, "t2");  // the oldest two were let go
  EXPECT_EQ(summary.consents.back().tensor, "t21");
  const auto j = summary.to_json();
  EXPECT_EQ(j["operations"], 24);
  EXPECT_EQ(j["by_backend"]["bounded"]["bounded"], 22);
  EXPECT_EQ(j["by_backend"]["bounded"]["approximate"], 0);
  EXPECT_EQ(j["consents"].size(), 20u);
  EXPECT_EQ(j["consents"][19]["tensor"], "t21");
  EXPECT_EQ(j["consents"][19]["exactness"], "bounded");
  EXPECT_EQ(j["consents"][19]["backend"], "bounded");
  EXPECT_NE(j["consents"][19]["detail"].get<std::string>().find("consented"), std::string::npos);
  EXPECT_GT(j["consents"][19]["sequence"].get<uint64_t>(), j["consents"][18]["sequence"].get<uint64_t>());
}

TEST(PlacementLogTest, TotalsOutliveTheRecordsKept) {
  PlacementLog log(2);
  for (int i = 0; i < 5; ++i) {
    PlacementRecord r;
    r.backend = i % 2 ? "a" : "b";
    r.exactness = "bitwise";
    log.append(r);
  }
  EXPECT_EQ(log.recent(10).size(), 2u);
  EXPECT_EQ(log.summary().total.operations, 5u);
  EXPECT_EQ(log.summary().by_backend.at("b").operations, 3u);
  EXPECT_EQ(log.summary().total.approximate, 0u);
}

TEST_F(SchedulerTest, APluginBuiltForAnOlderMinorGetsNoValueItsRangeLacked) {
  // An attribute whose range grew in minor 4: values above 2 go only to plugins built for >= 4.
  ops::AttributeSpec widened{"mode", ops::AttributeKind::kInt, false, 0, 0, 100, "a mode", 4, 2};
  ASSERT_TRUE(registry_.add({"test.modes@1", "an operation with modes", {}, {widened}, {}, "exact", {}}).ok());
  add({.name = "old", .compute_ns = 1, .abi_minor = 3});
  add({.name = "new", .compute_ns = 1000});
  auto s = make();
  OpRequest r = request();
  r.op = "test.modes@1";
  r.attributes = {{"mode", 2, 0}};
  EXPECT_EQ(s.run(r)->record.backend, "old");  // within the range it knew
  r.attributes = {{"mode", 17, 0}};
  auto p = s.run(r);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->record.backend, "new");
  bool said = false;
  for (const auto& v : p->record.candidates) {
    said |= v.backend == "old" && v.verdict.find("built for plugin ABI 1.3: mode 17 came in 1.4") != std::string::npos;
  }
  EXPECT_TRUE(said) << p->record.to_json().dump();
}

TEST_F(SchedulerTest, FallsBackOperationByOperation) {
  auto& broken = add({.name = "broken", .compute_ns = 1, .fail_with = TM_STATUS_UNIMPLEMENTED});
  auto& steady = add({.name = "steady", .compute_ns = 1000});
  auto s = make();
  auto p = s.run(request());
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->record.backend, "steady");
  EXPECT_EQ(p->record.reason, PlacementReason::kFallback);
  EXPECT_NE(p->record.reason_detail.find("fallback from broken"), std::string::npos);
  EXPECT_NE(p->record.reason_detail.find("UNIMPLEMENTED"), std::string::npos);
  EXPECT_EQ(steady.executions, 1);
  // Each operation is placed afresh: the next one tries the cheapest again.
  broken.fail_with = TM_STATUS_OK;
  EXPECT_EQ(s.run(request())->record.backend, "broken");
}

TEST_F(SchedulerTest, ResourceExhaustedFallsBackAndDeviceLostRetires) {
  auto& gpu = add({.name = "gpu", .compute_ns = 1, .fail_with = TM_STATUS_RESOURCE_EXHAUSTED});
  add({.name = "host", .compute_ns = 1000});
  auto s = make();
  EXPECT_EQ(s.run(request())->record.backend, "host");
  gpu.fail_with = TM_STATUS_DEVICE_LOST;
  EXPECT_EQ(s.run(request())->record.backend, "host");
  gpu.fail_with = TM_STATUS_OK;
  auto after = s.run(request());
  EXPECT_EQ(after->record.backend, "host");  // a lost device is never chosen again
  bool saw_lost = false;
  for (const auto& c : after->record.candidates) saw_lost |= c.verdict.find("device lost") != std::string::npos;
  EXPECT_TRUE(saw_lost);
}

TEST_F(SchedulerTest, NonRetryableErrorsAreReturned) {
  add({.name = "picky", .compute_ns = 1, .fail_with = TM_STATUS_INVALID_ARGUMENT});
  add({.name = "other", .compute_ns = 1000});
  auto s = make();
  auto p = s.run(request());
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
}

TEST_F(SchedulerTest, ResidencyMakesTheDeviceCheaperOnceDataIsThere) {
  // Host: 50 us of compute. Device: 1 us of compute but a 64-byte upload over a 1 GB/s link
  // costs 10 us latency + 64 ns, and the 1-byte download another 10 us: 21 us > ... so tune compute.
  auto& host = add({.name = "host", .compute_ns = 15'000});
  auto& device = add({.name = "device", .compute_ns = 1'000, .host_visible = false, .link_gbps = 1.0});
  auto s = make();
  // Not resident: device = 1 us + 10.064 us upload + 10.001 us download > host's 15 us.
  auto first = s.run(request(/*residency_key=*/42));
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_EQ(first->record.backend, "host");
  EXPECT_EQ(host.executions, 1);
  // Make it resident by running there once (prefer), then Auto chooses it because the upload is gone.
  s.set_constraints({.prefer = {"device"}, .never = {}, .only = {}});
  auto warm = s.run(request(42));
  EXPECT_EQ(warm->record.backend, "device");
  EXPECT_EQ(warm->record.bytes_moved, 64u + 1u);
  EXPECT_TRUE(s.residency().resident(42, *backends_[1], 64));
  s.set_constraints({});
  auto resident = s.run(request(42));
  EXPECT_EQ(resident->record.backend, "device");
  EXPECT_EQ(resident->record.reason, PlacementReason::kCheapest);
  EXPECT_EQ(resident->record.bytes_moved, 1u);  // only the output comes back
  EXPECT_EQ(device.buffer_writes, 1);
  // Shrinking the device-cache budget evicts at once (a live settings change); the next run
  // uploads again, so the host is cheapest again.
  s.set_device_cache_budget(16);
  EXPECT_FALSE(s.residency().resident(42, *backends_[1], 64));
  EXPECT_EQ(s.residency().bytes_on(*backends_[1]), 0u);
  auto evicted = s.run(request(42));
  EXPECT_EQ(evicted->record.backend, "host");
}

TEST_F(SchedulerTest, NoApproximationWithoutConsent) {
  add({.name = "bounded", .exactness = TM_EXACT_BOUNDED, .error_bound = 1e-6, .compute_ns = 10});
  auto s = make();
  auto p = s.run(request());
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_FALSE(p->executed);
  EXPECT_FALSE(p->needs_consent_reason.empty());
  ASSERT_FALSE(p->ladder.empty());
  EXPECT_EQ(p->ladder[0].id, "backend:bounded");
  EXPECT_NE(p->ladder[0].error_bound.find("1e-06"), std::string::npos);
  EXPECT_EQ(configs_[0]->executions, 0);

  OpRequest consenting = request();
  consenting.consent = "backend:bounded";
  auto q = s.run(consenting);
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  ASSERT_TRUE(q->executed);
  EXPECT_EQ(q->record.reason, PlacementReason::kConsented);
  EXPECT_EQ(q->record.exactness, "bounded");
  EXPECT_NE(q->record.reason_detail.find("consented"), std::string::npos);
}

TEST_F(SchedulerTest, MemoryBudgetOffersTheRegisteredApproximateRung) {
  add({.name = "exact", .compute_ns = 10, .bytes_written = 1ull << 40});
  add({.name = "sampler", .exactness = TM_EXACT_APPROXIMATE, .compute_ns = 10, .supported_op = "test.op_sampled@1"});
  auto s = make({.constraints = {}, .memory_budget_bytes = 1 << 20});
  auto p = s.run(request());
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_FALSE(p->executed);
  EXPECT_NE(p->needs_consent_reason.find("memory budget"), std::string::npos);
  ASSERT_EQ(p->ladder.size(), 1u);
  EXPECT_EQ(p->ladder[0].id, "test.op_sampled@1");
  EXPECT_EQ(p->ladder[0].backend, "sampler");
  EXPECT_EQ(p->ladder[0].error_bound, "relative error <= 1%");

  OpRequest consenting = request();
  consenting.consent = "test.op_sampled@1";
  auto q = s.run(consenting);
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  ASSERT_TRUE(q->executed);
  EXPECT_EQ(q->record.op, "test.op_sampled@1");
  EXPECT_EQ(q->record.backend, "sampler");
  EXPECT_EQ(q->record.exactness, "approximate");
}

TEST_F(SchedulerTest, MemoryBudgetCountsWorkingMemoryNotOnlyOutputs) {
  // A small output whose kernel needs much working memory is over the budget; the lean one serves.
  add({.name = "hungry", .compute_ns = 10, .bytes_written = 16, .working_bytes = 8ull << 20});
  add({.name = "lean", .compute_ns = 1000, .bytes_written = 16, .working_bytes = 1 << 10});
  auto s = make({.constraints = {}, .memory_budget_bytes = 1 << 20});
  auto p = s.run(request());
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_TRUE(p->executed);
  EXPECT_EQ(p->record.backend, "lean");
  bool said = false;
  for (const auto& v : p->record.candidates) {
    if (v.backend == "hungry") said = v.verdict.find("working memory") != std::string::npos;
  }
  EXPECT_TRUE(said) << "the record says why the faster backend was passed over";
}

TEST_F(SchedulerTest, ConsentIsPermissionNotARequest) {
  add({.name = "exact", .compute_ns = 100});
  add({.name = "bounded", .exactness = TM_EXACT_BOUNDED, .compute_ns = 1});
  auto s = make();
  OpRequest r = request();
  r.consent = "backend:bounded";
  auto p = s.run(r);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->record.backend, "exact");  // exact is within reach, so it runs
}

TEST_F(SchedulerTest, UnknownOperationIsAnError) {
  add({.name = "any"});
  auto s = make();
  OpRequest r = request();
  r.op = "tm.nope@1";
  EXPECT_EQ(s.run(r).status().code(), StatusCode::kInvalidArgument);
}

TEST(CostModelTest, SmallOperationsDoNotTeachTheCalibration) {
  // Indexing starts with a checkpoint's small tensors (norm weights): the first one took 1.4 ms
  // for an estimated 1 µs (the thread pool starting), which used to set the factor to its cap of
  // 16, and the large tensors after it were estimated 16 times too slow (8x in the placement
  // records), enough to send them to a slower backend.
  CostModel model;
  model.observe("cpu", "tm.tile_stats@1", 1'000, 1'360'000);
  model.observe("cpu", "tm.tile_stats@1", 20'000, 400'000);
  EXPECT_EQ(model.calibration("cpu", "tm.tile_stats@1"), 1.0);
  model.observe("cpu", "tm.tile_stats@1", 4'200'000, 8'300'000);
  EXPECT_NEAR(model.calibration("cpu", "tm.tile_stats@1"), 8.3 / 4.2, 1e-9);
  model.observe("cpu", "tm.tile_stats@1", 4'200'000, 4'200'000);
  EXPECT_NEAR(model.calibration("cpu", "tm.tile_stats@1"), 0.7 * 8.3 / 4.2 + 0.3, 1e-9);
  EXPECT_EQ(model.calibration("cpu", "tm.decode@1"), 1.0);  // per operation
  EXPECT_EQ(model.calibration("accelerator", "tm.tile_stats@1"), 1.0);  // per backend
}

TEST(ConstraintsTest, ParseAndMerge) {
  auto c = parse_constraints("prefer=opencl,never=cuda+hip,only=cpu+opencl");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->prefer, std::vector<std::string>{"opencl"});
  EXPECT_EQ(c->never, (std::vector<std::string>{"cuda", "hip"}));
  EXPECT_EQ(c->to_string(), "prefer=opencl,never=cuda+hip,only=cpu+opencl");
  EXPECT_TRUE(parse_constraints("auto")->automatic());
  EXPECT_FALSE(parse_constraints("sometimes=cpu").ok());
  EXPECT_FALSE(parse_constraints("prefer").ok());
  EXPECT_TRUE(backend_matches("opencl:1", "opencl"));
  EXPECT_FALSE(backend_matches("openclx", "opencl"));
  auto merged = merge_constraints(*c, *parse_constraints("never=opencl"));
  EXPECT_EQ(merged.never, std::vector<std::string>{"opencl"});
  EXPECT_EQ(merged.prefer, std::vector<std::string>{"opencl"});
}

// Rule 2: the scheduler and the rest of src/compute never name a backend.
TEST(SchedulerSource, NamesNoBackend) {
  const std::regex names(R"(\b(cpu|cuda|hip|rocm|opencl|pocl|metal|webgpu|wgpu|vulkan|nvidia|amd)\b)",
                         std::regex::icase);
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(TM_SOURCE_DIR) / "src/compute")) {
    std::ifstream in(entry.path());
    std::string line;
    int number = 0;
    while (std::getline(in, line)) {
      ++number;
      EXPECT_FALSE(std::regex_search(line, names)) << entry.path() << ":" << number << ": " << line;
    }
    ++files;
  }
  EXPECT_GT(files, 5);
}

TEST(Layering, DefinitionsAndBackendsNeverReachTheSchedulerOrAbove) {
  // The operation definitions (src/compute/ops) and every backend depend on the definitions, the
  // core and the C ABI only: not on the scheduler's registry (src/compute/*.h) nor anything above.
  const std::regex upward(R"re(#include\s+"(compute/[a-z_]+\.h|engine/|index/|server/|cli/))re");
  int files = 0;
  for (const char* root : {"src/compute/ops", "src/backends"}) {
    for (const auto& entry : std::filesystem::recursive_directory_iterator(std::filesystem::path(TM_SOURCE_DIR) / root)) {
      if (!entry.is_regular_file()) continue;
      std::ifstream in(entry.path());
      std::string line;
      int number = 0;
      while (std::getline(in, line)) {
        ++number;
        EXPECT_FALSE(std::regex_search(line, upward)) << entry.path() << ":" << number << ": " << line;
      }
      ++files;
    }
  }
  EXPECT_GT(files, 20);
}

}  // namespace
}  // namespace tensormorph::compute

namespace tensormorph::compute {
namespace {

TEST_F(SchedulerTest, ADeferredDeviceOpensOnceThePlacedWorkPaysForItsStartup) {
  add({.name = "host", .compute_ns = 1e6});  // 1 ms per operation
  {
    std::ofstream costs(startup_file_);
    costs << R"({"gpu||test": 2.5e6})";  // its start-up, measured earlier: 2.5 ms
  }
  auto& gpu = add_deferred({.name = "gpu", .compute_ns = 1e4});
  g_next_config = &gpu;
  auto s = make();
  for (int i = 0; i < 2; ++i) {
    auto p = s.run(request());
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    EXPECT_EQ(p->record.backend, "host");
    EXPECT_FALSE(backends_[1]->opened());
    bool said = false;
    for (const auto& v : p->record.candidates) said |= v.backend == "gpu" && v.verdict.find("not opened") != std::string::npos;
    EXPECT_TRUE(said) << p->record.to_json().dump();
  }
  // 2 ms placed + 1 ms for this one reaches the 2.5 ms start-up: the device opens and wins.
  auto p = s.run(request());
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_TRUE(backends_[1]->opened());
  EXPECT_EQ(p->record.backend, "gpu");
  EXPECT_EQ(gpu.executions, 1);
  // The measured start-up replaced the old one in the store.
  std::ifstream costs(startup_file_);
  const std::string text((std::istreambuf_iterator<char>(costs)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text.find("2500000"), std::string::npos) << text;
  EXPECT_NE(text.find("gpu||test"), std::string::npos) << text;
}

TEST_F(SchedulerTest, ADeferredDeviceOpensAtOnceWhenAConstraintNamesIt) {
  auto& host = add({.name = "host", .compute_ns = 1e6, .supported_op = "test.op@1"});
  auto& gpu = add_deferred({.name = "gpu", .compute_ns = 1e4});
  g_next_config = &gpu;
  auto s = make();
  s.set_constraints({.prefer = {"gpu"}, .never = {}, .only = {}});
  auto p = s.run(request());
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(p->record.backend, "gpu");
  (void)host;
}

TEST_F(SchedulerTest, ADeferredDeviceOpensAtOnceWhenNothingOpenCanRunTheOperation) {
  add({.name = "host", .compute_ns = 1e6, .supported_op = "test.op@1"});
  auto& gpu = add_deferred({.name = "gpu", .compute_ns = 1e9});
  g_next_config = &gpu;
  auto s = make();
  auto r = request();
  r.op = "test.op_sampled@1";
  auto p = s.run(r);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  ASSERT_TRUE(p->executed);
  EXPECT_EQ(p->record.backend, "gpu");
}

TEST_F(SchedulerTest, ADataDependentOutputGrowsToWhatTheBackendNeeds) {
  auto& b = add({.name = "lister", .needs_bytes = 40});
  auto s = make();
  std::vector<std::byte> out(8);
  OpRequest r = request();
  r.outputs[0] = {TM_DTYPE_U8, {out.size()}, std::span(out), &out};
  auto p = s.run(r);
  ASSERT_TRUE(p.ok()) << p.status().to_string();
  EXPECT_EQ(out.size(), 40u);
  ASSERT_EQ(p->output_nbytes.size(), 1u);
  EXPECT_EQ(p->output_nbytes[0], 40u);
  EXPECT_EQ(b.executions, 1);
  EXPECT_EQ(p->record.backend, "lister");
  // Without a growable buffer the request fails, naming the output.
  auto fixed = s.run(request());
  ASSERT_FALSE(fixed.ok());
  EXPECT_NE(fixed.status().message().find("not data-dependent"), std::string::npos) << fixed.status().to_string();
}

TEST_F(SchedulerTest, QueriesNameEveryInput) {
  auto& b = add({.name = "pair"});
  auto s = make();
  OpRequest r = request();
  r.inputs.push_back({TM_DTYPE_BF16, {4, 8}, std::span<const std::byte>(input_), 0});
  ASSERT_TRUE(s.run(r).ok());
  EXPECT_EQ(b.seen_inputs, 2u);
  EXPECT_EQ(b.seen_dtypes, (std::vector<TM_DType>{TM_DTYPE_F32, TM_DTYPE_BF16}));
}

}  // namespace
}  // namespace tensormorph::compute
