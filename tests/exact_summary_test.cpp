// tm.exact_summary@1: statistics of F64 and 32/64-bit integer tensors in their own domain (the
// reference, its placement on the CPU backend, and `stats` and `export` built on it).
#include <gtest/gtest.h>

#include <httplib.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/safetensors/safetensors.h"
#include "engine/compute_session.h"
#include "compute/ops/reference.h"
#include "engine/tensor_ops.h"
#include "server/server.h"
#include "tensormorph/open.h"
#include "test_util.h"

namespace tensormorph {
namespace {

namespace fs = std::filesystem;
using testing::run_cli;
using testing::TempDir;

template <typename T>
TM_ExactSummary summary_of(DType dtype, const std::vector<T>& values) {
  TM_ExactSummary s{};
  const Status done =
      ops::exact_summary_reference({dtype, std::as_bytes(std::span(values)), values.size()}, &s);
  EXPECT_TRUE(done.ok()) << done.message();
  return s;
}

__extension__ typedef __int128 i128;
__extension__ typedef unsigned __int128 u128;

i128 sum_of(const TM_ExactSummary& s) {
  return static_cast<i128>((static_cast<u128>(static_cast<uint64_t>(s.sum_high)) << 64) | s.sum_low);
}

TEST(ExactSummary, Int32ExtremesThatFloat32Rounds) {
  const std::vector<int32_t> v = {2147483647, -2147483647 - 1, 0, 16777217};
  const TM_ExactSummary s = summary_of(DType::kI32, v);
  EXPECT_EQ(s.count, 4u);
  EXPECT_EQ(s.zeros, 1u);
  EXPECT_EQ(s.max_int, 2147483647);
  EXPECT_EQ(s.min_int, -2147483648LL);
  EXPECT_EQ(s.absmax_uint, 2147483648u);
  EXPECT_EQ(sum_of(s), 16777216);
  EXPECT_EQ(s.mean, 4194304.0);
  EXPECT_EQ(s.nan + s.pos_inf + s.neg_inf, 0u);
}

TEST(ExactSummary, Int64BeyondFloat64AndTheMostNegativeValue) {
  const int64_t big = (int64_t{1} << 53) + 1;
  const std::vector<int64_t> v = {big, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()};
  const TM_ExactSummary s = summary_of(DType::kI64, v);
  EXPECT_EQ(s.min_int, std::numeric_limits<int64_t>::min());
  EXPECT_EQ(s.max_int, std::numeric_limits<int64_t>::max());
  EXPECT_EQ(s.absmax_uint, uint64_t{1} << 63);
  EXPECT_EQ(sum_of(s), static_cast<i128>(big) - 1);  // INT64_MIN + INT64_MAX = -1
  // Two values only: the standard deviation of {INT64_MIN, INT64_MAX} is (2^64 - 1) / 2.
  const TM_ExactSummary pair = summary_of(DType::kI64, std::vector<int64_t>{std::numeric_limits<int64_t>::min(),
                                                                             std::numeric_limits<int64_t>::max()});
  EXPECT_EQ(pair.mean, -0.5);
  EXPECT_EQ(pair.std, 0x1p63);
}

TEST(ExactSummary, Uint64SumCarriesPast64Bits) {
  const uint64_t max = std::numeric_limits<uint64_t>::max();
  const TM_ExactSummary s = summary_of(DType::kU64, std::vector<uint64_t>{max, max, 0});
  EXPECT_EQ(s.max_uint, max);
  EXPECT_EQ(s.min_uint, 0u);
  EXPECT_EQ(s.sum_high, 1);
  EXPECT_EQ(s.sum_low, max - 1);  // 2 * (2^64 - 1) = 2^65 - 2
  EXPECT_EQ(s.zeros, 1u);
  const TM_ExactSummary same = summary_of(DType::kU64, std::vector<uint64_t>{max, max});
  EXPECT_EQ(same.std, 0.0) << "the variance numerator is exact: no cancellation";
}

TEST(ExactSummary, IntegerMomentsMatchALongDoubleTwoPass) {
  std::mt19937_64 rng(7);
  std::vector<int64_t> v(10007);
  for (auto& x : v) x = static_cast<int64_t>(rng() >> 20) - (int64_t{1} << 43);
  const TM_ExactSummary s = summary_of(DType::kI64, v);
  long double mean = 0, m2 = 0;
  for (int64_t x : v) mean += static_cast<long double>(x);
  mean /= static_cast<long double>(v.size());
  for (int64_t x : v) m2 += (static_cast<long double>(x) - mean) * (static_cast<long double>(x) - mean);
  const double std = static_cast<double>(std::sqrt(m2 / static_cast<long double>(v.size())));
  EXPECT_NEAR(s.mean, static_cast<double>(mean), std::fabs(static_cast<double>(mean)) * 1e-15);
  EXPECT_NEAR(s.std, std, std * 1e-12);
}

TEST(ExactSummary, Float64NeverOverflowsThroughSquares) {
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> v = {1e300, -1e300, std::nan(""), inf, -inf, -0.0};
  const TM_ExactSummary s = summary_of(DType::kF64, v);
  EXPECT_EQ(s.nan, 1u);
  EXPECT_EQ(s.pos_inf, 1u);
  EXPECT_EQ(s.neg_inf, 1u);
  EXPECT_EQ(s.zeros, 1u);
  EXPECT_EQ(s.max, 1e300);
  EXPECT_EQ(s.min, -1e300);
  EXPECT_EQ(s.absmax, 1e300);
  EXPECT_EQ(s.mean, 0.0);
  // sqrt((2 * 1e300^2) / 3) without ever forming 1e600.
  EXPECT_NEAR(s.std, 1e300 * std::sqrt(2.0 / 3.0), 1e285);
  const TM_ExactSummary tiny = summary_of(DType::kF64, std::vector<double>{5e-324, 5e-324});
  EXPECT_EQ(tiny.min, 5e-324);
  EXPECT_EQ(tiny.mean, 5e-324);
  EXPECT_EQ(tiny.std, 0.0);
}

TEST(ExactSummary, EmptyAndWrongTypes) {
  const TM_ExactSummary s = summary_of(DType::kI32, std::vector<int32_t>{});
  EXPECT_EQ(s.count, 0u);
  EXPECT_EQ(s.min, std::numeric_limits<double>::infinity());
  EXPECT_EQ(s.mean, 0.0);
  TM_ExactSummary out{};
  const std::vector<float> f = {1.0f};
  EXPECT_FALSE(ops::exact_summary_reference({DType::kF32, std::as_bytes(std::span(f)), 1}, &out).ok());
  const std::vector<int64_t> one = {1};
  EXPECT_FALSE(ops::exact_summary_reference({DType::kI64, std::as_bytes(std::span(one)), 2}, &out).ok())
      << "a byte count that does not match is refused";
}

// A checkpoint holding the values float32 cannot hold, as a real F64/I64 tensor would.
struct WideCheckpoint {
  std::vector<int32_t> i32 = {2147483647, -5, 0};
  std::vector<int64_t> i64 = {(int64_t{1} << 53) + 1, -3};
  std::vector<uint64_t> u64 = {std::numeric_limits<uint64_t>::max(), 1};
  std::vector<double> f64 = {1e300, -2.5, 0.1};
  fs::path path;

  explicit WideCheckpoint(const TempDir& dir) : path(dir / "wide.safetensors") {
    const std::vector<safetensors::TensorToWrite> tensors = {
        {"i32", DType::kI32, {3}, std::as_bytes(std::span(i32))},
        {"i64", DType::kI64, {2}, std::as_bytes(std::span(i64))},
        {"u64", DType::kU64, {2}, std::as_bytes(std::span(u64))},
        {"f64", DType::kF64, {3}, std::as_bytes(std::span(f64))},
    };
    const Status written = safetensors::write_file(path, tensors, {});
    EXPECT_TRUE(written.ok()) << written.message();
  }
};

TEST(ExactSummary, PlacedOnTheCpuWithARecord) {
  TempDir dir;
  WideCheckpoint wide(dir);
  auto session = engine::ComputeSession::open(engine::SessionOptions{});
  ASSERT_TRUE(session.ok()) << session.status().message();
  auto ckpt = open_checkpoint(wide.path);
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  engine::Records records;
  auto s = engine::tensor_exact_summary((*session)->scheduler(), **ckpt, *(*ckpt)->find("i64"), &records);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->max_int, (int64_t{1} << 53) + 1);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].op, TM_OP_EXACT_SUMMARY);
  EXPECT_EQ(records[0].backend, "cpu");
}

TEST(ExactSummary, StatsJsonReportsExactValues) {
  TempDir dir;
  WideCheckpoint wide(dir);
  auto r = run_cli({"stats", wide.path.string(), "--json", "--explain"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  std::map<std::string, nlohmann::json> rows;
  for (const auto& t : j["tensors"]) rows[t["name"]] = t;
  EXPECT_EQ(rows["i32"]["max"].get<int64_t>(), 2147483647) << "not 2147483648";
  EXPECT_EQ(rows["i32"]["min"].get<int64_t>(), -5);
  EXPECT_EQ(rows["i64"]["max"].get<int64_t>(), (int64_t{1} << 53) + 1) << "not 2^53";
  EXPECT_EQ(rows["u64"]["max"].get<uint64_t>(), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(rows["u64"]["absmax"].get<uint64_t>(), std::numeric_limits<uint64_t>::max());
  EXPECT_EQ(rows["f64"]["max"].get<double>(), 1e300) << "a finite F64 is not +Inf";
  EXPECT_EQ(rows["f64"]["pos_inf"], 0);
  EXPECT_EQ(rows["f64"]["min"].get<double>(), -2.5);
  EXPECT_EQ(rows["f64"]["mean"].get<double>(), (1e300 - 2.5 + 0.1) / 3);
  size_t exact_records = 0;
  for (const auto& p : j["placements"]) exact_records += p["op"] == TM_OP_EXACT_SUMMARY;
  EXPECT_EQ(exact_records, 4u) << "each wide tensor leaves a placement record";

  // The table and the CSV print the integers in full.
  r = run_cli({"stats", wide.path.string(), "--csv"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find(",2147483647,"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("18446744073709551615"), std::string::npos) << r.out;
  r = run_cli({"stats", wide.path.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("9007199254740993"), std::string::npos) << r.out;
}

TEST(ExactSummary, ExportSaysWhenFloat32RoundsAndStoredIsExact) {
  TempDir dir;
  WideCheckpoint wide(dir);
  const fs::path out = dir / "i32.npy";
  auto r = run_cli({"export", wide.path.string(), "--tensor", "i32", "-o", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("1 of 3 I32 values cannot be held by float32"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("2147483647 became 2147483648"), std::string::npos) << r.err;

  r = run_cli({"export", wide.path.string(), "--tensor", "i64", "--dtype", "stored", "-o", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string npy = testing::read_bytes(out);
  ASSERT_EQ(npy.size(), 128u + 16u);
  EXPECT_NE(npy.find("'descr': '<i8'"), std::string::npos);
  int64_t first = 0;
  std::memcpy(&first, npy.data() + 128, sizeof first);
  EXPECT_EQ(first, (int64_t{1} << 53) + 1);

  // A float32 tensor rounds nothing: no warning.
  const std::vector<float> f = {0.1f, 2.0f};
  const Status written = safetensors::write_file(
      dir / "f32.safetensors", std::vector<safetensors::TensorToWrite>{{"f", DType::kF32, {2}, std::as_bytes(std::span(f))}}, {});
  ASSERT_TRUE(written.ok());
  r = run_cli({"export", (dir / "f32.safetensors").string(), "--tensor", "f", "-o", out.string()});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err.find("warning"), std::string::npos) << r.err;
}

TEST(ExactSummary, ViewerStatisticsAreExactToo) {
  TempDir dir;
  WideCheckpoint wide(dir);
  testing::ScopedEnv config("TENSORMORPH_CONFIG", (dir / "settings.json").string());
  auto session = engine::open_default_session("");
  ASSERT_TRUE(session.ok()) << session.status().message();
  server::ServerOptions options;
  options.port = 0;
  options.build_index = false;
  auto created = server::ViewerServer::create({wide.path.string()}, options, std::move(session).value());
  ASSERT_TRUE(created.ok()) << created.status().message();
  server::ViewerServer& viewer = **created;
  auto port = viewer.bind();
  ASSERT_TRUE(port.ok()) << port.status().message();
  std::thread serving([&] { viewer.run(); });
  httplib::Client client("127.0.0.1", *port);
  auto i64 = client.Get("/api/stats?ckpt=0&tensor=i64");
  auto f64 = client.Get("/api/stats?ckpt=0&tensor=f64");
  viewer.stop();
  serving.join();
  ASSERT_TRUE(i64 && f64);
  ASSERT_EQ(i64->status, 200) << i64->body;
  const auto ji = nlohmann::json::parse(i64->body), jf = nlohmann::json::parse(f64->body);
  EXPECT_EQ(ji["source"], "exact");
  EXPECT_EQ(ji["max"].get<int64_t>(), (int64_t{1} << 53) + 1);
  EXPECT_EQ(ji["min"].get<int64_t>(), -3);
  EXPECT_EQ(ji["records"][0]["op"], TM_OP_EXACT_SUMMARY);
  EXPECT_EQ(jf["max"].get<double>(), 1e300);
}

}  // namespace
}  // namespace tensormorph
