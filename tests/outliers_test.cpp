// Top-k by magnitude: the CPU kernel against the reference for any thread count, the order
// (magnitude, then position) with ties and non-finite values, and `tensormorph outliers`.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "backends/cpu/cpu_kernels.h"
#include "compute/ops/channel_stats.h"
#include "compute/ops/top_k.h"
#include "core/quantize/quantize.h"
#include "formats/safetensors/safetensors.h"
#include "tensormorph/decode.h"
#include "test_util.h"

namespace tensormorph {
namespace {

using testing::run_cli;
using testing::TempDir;

std::vector<std::byte> random_bits(DType dtype, uint64_t elems, uint32_t seed) {
  std::mt19937_64 rng(seed);
  const DTypeInfo& info = dtype_info(dtype);
  std::vector<std::byte> bytes(elems / info.block_elems * info.block_bytes);
  for (auto& b : bytes) b = static_cast<std::byte>(rng());
  return bytes;
}

/// The expected list, by sorting every finite element (independent of heaps and the reference).
std::vector<std::pair<uint64_t, float>> sorted_top(DType dtype, std::span<const std::byte> bytes, uint64_t elems, uint64_t k) {
  std::vector<float> v(elems);
  EXPECT_TRUE(decode_to_f32(dtype, bytes, elems, v.data()).ok());
  std::vector<uint64_t> order;
  for (uint64_t i = 0; i < elems; ++i) {
    if (std::isfinite(v[i])) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](uint64_t a, uint64_t b) { return std::fabs(v[a]) > std::fabs(v[b]); });
  order.resize(std::min<size_t>(order.size(), k));
  std::vector<std::pair<uint64_t, float>> out;
  for (uint64_t i : order) out.push_back({i, v[i]});
  return out;
}

TEST(TopK, CpuEqualsSortingAndTheReferenceForAnyThreadCount) {
  for (const DType dtype : {DType::kF32, DType::kBF16, DType::kF16, DType::kQ4_K, DType::kQ8_0, DType::kI8}) {
    const uint64_t elems = 256 * 1200;
    const auto bytes = random_bits(dtype, elems, 3 + static_cast<uint32_t>(dtype));
    for (const uint64_t k : {uint64_t{1}, uint64_t{37}, uint64_t{5000}}) {
      const auto want = sorted_top(dtype, bytes, elems, k);
      std::vector<uint64_t> ref_i(k);
      std::vector<float> ref_v(k);
      uint64_t ref_n = 0;
      ASSERT_TRUE(ops::top_k_reference({dtype, bytes, elems}, ref_i, ref_v, &ref_n).ok());
      ASSERT_EQ(ref_n, want.size()) << dtype_name(dtype);
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(ref_i[i], want[i].first) << dtype_name(dtype) << " k " << k << " entry " << i;
        ASSERT_EQ(std::bit_cast<uint32_t>(ref_v[i]), std::bit_cast<uint32_t>(want[i].second));
      }
      for (const uint32_t threads : {1u, 2u, 0u}) {
        std::vector<uint64_t> got_i(k, 7);
        std::vector<float> got_v(k, 7);
        uint64_t got_n = 0;
        ASSERT_TRUE(cpu::top_k({dtype, bytes, elems}, got_i, got_v, &got_n, threads).ok());
        EXPECT_EQ(got_n, ref_n);
        EXPECT_EQ(got_i, ref_i) << dtype_name(dtype) << " k " << k << " threads " << threads;
        EXPECT_EQ(0, std::memcmp(got_v.data(), ref_v.data(), k * sizeof(float))) << dtype_name(dtype);
      }
    }
  }
}

TEST(TopK, TiesGoByPositionNonFiniteValuesAreLeftOutAndTheRestIsPadding) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> v = {1.0f, -2.0f, nan, 2.0f, inf, -0.0f, -2.0f, 0.5f};
  const auto bytes = std::as_bytes(std::span(v));
  std::vector<uint64_t> idx(10);
  std::vector<float> val(10);
  uint64_t n = 0;
  ASSERT_TRUE(cpu::top_k({DType::kF32, bytes, v.size()}, idx, val, &n, 0).ok());
  ASSERT_EQ(n, 6u);
  EXPECT_EQ(std::vector<uint64_t>(idx.begin(), idx.begin() + 6), (std::vector<uint64_t>{1, 3, 6, 0, 7, 5}));
  EXPECT_EQ(idx[6], ~uint64_t{0});
  EXPECT_EQ(std::bit_cast<uint32_t>(val[9]), ops::kTopKPaddingBits);
}

TEST(OutliersCommand, ListsTheLargestMagnitudesWithTheirPositions) {
  TempDir dir;
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0, 0.02f);
  std::vector<float> w(300 * 257);
  for (auto& x : w) x = normal(rng);
  w[5 * 257 + 200] = 9.5f;    // an outlier at (5, 200)
  w[299 * 257 + 3] = -12.0f;  // a larger one at (299, 3)
  w[17] = std::numeric_limits<float>::quiet_NaN();
  const auto bf16 = *encode_from_f32(DType::kBF16, w);
  const safetensors::TensorToWrite tensors[] = {{"w", DType::kF32, {300, 257}, std::as_bytes(std::span(w))},
                                                {"w.bf16", DType::kBF16, {300, 257}, bf16}};
  ASSERT_TRUE(safetensors::write_file(dir / "m.safetensors", tensors, {}).ok());
  auto r = run_cli({"outliers", (dir / "m.safetensors").string(), "-k", "3", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  EXPECT_EQ(j["schema"], "tensormorph.outliers/1");
  for (const auto& t : j["tensors"]) {
    ASSERT_EQ(t["top_k"].size(), 3u) << t.dump();
    EXPECT_EQ(t["top_k"][0]["row"], 299);
    EXPECT_EQ(t["top_k"][0]["col"], 3);
    EXPECT_EQ(t["top_k"][0]["value"], -12.0);
    EXPECT_EQ(t["top_k"][1]["row"], 5);
    EXPECT_EQ(t["top_k"][1]["col"], 200);
  }
  const auto want = sorted_top(DType::kF32, std::as_bytes(std::span(w)), w.size(), 3);
  EXPECT_EQ(j["tensors"][0]["top_k"][2]["index"], want[2].first);
  r = run_cli({"outliers", (dir / "m.safetensors").string(), "--tensor", "w", "-k", "2", "--explain"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("299"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(TM_OP_TOP_K), std::string::npos) << r.out;
  r = run_cli({"outliers", (dir / "m.safetensors").string(), "--csv", "-k", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("w,F32,1,76846,299,3,-12,"), std::string::npos) << r.out;
  r = run_cli({"outliers", (dir / "m.safetensors").string(), "-k", "0"});
  EXPECT_EQ(r.exit_code, 2) << r.err;
}

TEST(ChannelStats, CpuEqualsTheReferenceForAnyThreadCountAndShape) {
  // Wider shapes than one column strip (512), with a ragged last strip, and widths that are not a
  // power of two (for the dtypes whose blocks allow them); rows of 8 and more segments, whose pairs
  // are visited in bit-reversed order.
  const std::pair<uint64_t, uint64_t> shapes[] = {{1, 256}, {3, 512}, {300, 256}, {4097, 256}, {0, 256}, {5, 1536},
                                                  {67, 1280}, {2, 2048}, {9, 1000}, {4, 1}, {33, 3}, {1, 2},
                                                  {3, 4608}, {2, 16384}};
  for (const DType dtype : {DType::kF32, DType::kBF16, DType::kQ4_K, DType::kQ8_0}) {
    for (const auto& [rows, cols] : shapes) {
      if (cols % dtype_info(dtype).block_elems != 0) continue;
      const auto bytes = random_bits(dtype, rows * cols, 11 + static_cast<uint32_t>(rows));
      const ops::MatrixView m{dtype, bytes, rows, cols};
      std::vector<TM_TileStats> want_rows(rows), want_cols(cols);
      ASSERT_TRUE(ops::channel_stats_reference(m, want_rows, want_cols).ok());
      for (const uint32_t threads : {1u, 2u, 0u}) {
        std::vector<TM_TileStats> got_rows(rows), got_cols(cols);
        ASSERT_TRUE(cpu::channel_stats(m, got_rows, got_cols, threads).ok());
        // Empty records have no storage: memcmp must not see their null data().
        EXPECT_TRUE(rows == 0 || std::memcmp(got_rows.data(), want_rows.data(), rows * sizeof(TM_TileStats)) == 0)
            << dtype_name(dtype) << " " << rows << "x" << cols << " threads " << threads;
        EXPECT_EQ(0, std::memcmp(got_cols.data(), want_cols.data(), cols * sizeof(TM_TileStats)))
            << dtype_name(dtype) << " " << rows << "x" << cols << " threads " << threads;
      }
    }
  }
}

TEST(ChannelStats, SumsFollowTheirTreesAndCountsAreExact) {
  // Column 0 holds r + 1 (an exact sum); column 1 holds 1e17, 1, -1e17, 1, NaN, where the order
  // decides: the pairwise tree ((1e17 + 1) + (-1e17 + 1)) + ... gives 0, the halving tree 2, a
  // running sum 1.
  const uint64_t rows = 5, cols = 2;
  const float column[rows] = {1e17f, 1.0f, -1e17f, 1.0f, std::numeric_limits<float>::quiet_NaN()};
  std::vector<float> v(rows * cols);
  for (uint64_t r = 0; r < rows; ++r) {
    v[r * cols] = static_cast<float>(r + 1);
    v[r * cols + 1] = column[r];
  }
  std::vector<TM_TileStats> row_stats(rows), col_stats(cols);
  ASSERT_TRUE(cpu::channel_stats({DType::kF32, std::as_bytes(std::span(v)), rows, cols}, row_stats, col_stats, 0).ok());
  EXPECT_EQ(col_stats[0].sum, 15.0);
  EXPECT_EQ(col_stats[0].count, rows);
  EXPECT_EQ(col_stats[1].nan, 1u);
  EXPECT_EQ(col_stats[1].sum, 0.0);
  EXPECT_EQ(row_stats[0].sum, static_cast<double>(1.0f) + static_cast<double>(1e17f));
  EXPECT_EQ(col_stats[1].absmax, 1e17f);
}

TEST(OutliersCommand, FlagsChannelsByMagnitudeAndByNorm) {
  TempDir dir;
  std::mt19937 rng(4);
  std::normal_distribution<float> normal(0, 0.02f);
  const uint64_t rows = 64, cols = 256;
  std::vector<float> w(rows * cols);
  for (auto& x : w) x = normal(rng);
  w[10 * cols + 77] = 7.0f;                           // column 77 and row 10 hold |x| >= 6
  for (uint64_t c = 0; c < cols; ++c) w[40 * cols + c] *= 25;  // row 40's norm stands far out
  const safetensors::TensorToWrite tensors[] = {{"w", DType::kF32, {rows, cols}, std::as_bytes(std::span(w))}};
  ASSERT_TRUE(safetensors::write_file(dir / "m.safetensors", tensors, {}).ok());
  auto r = run_cli({"outliers", (dir / "m.safetensors").string(), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r.out;
  bool row10 = false, col77 = false, row40 = false;
  for (const auto& c : j["tensors"][0]["outlier_channels"]) {
    const bool magnitude = c["why"].dump().find("magnitude") != std::string::npos;
    const bool norm = c["why"].dump().find("norm") != std::string::npos;
    if (c["axis"] == "row" && c["index"] == 10 && magnitude) row10 = true;
    if (c["axis"] == "col" && c["index"] == 77 && magnitude) col77 = true;
    if (c["axis"] == "row" && c["index"] == 40 && norm) row40 = true;
  }
  EXPECT_TRUE(row10 && col77 && row40) << j["tensors"][0]["outlier_channels"].dump();
  r = run_cli({"outliers", (dir / "m.safetensors").string(), "--json", "--magnitude", "8"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto strict = nlohmann::json::parse(r.out);  // kept alive: the loop walks into it
  for (const auto& ch : strict["tensors"][0]["outlier_channels"]) {
    EXPECT_EQ(ch["why"].dump().find("magnitude"), std::string::npos) << "no |x| reaches 8: " << ch.dump();
  }
  r = run_cli({"channels", (dir / "m.safetensors").string(), "--axis", "rows", "--sort", "l2", "--limit", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("64 rows, 3 shown by l2"), std::string::npos) << r.out;
  r = run_cli({"channels", (dir / "m.safetensors").string(), "--axis", "cols", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto c = nlohmann::json::parse(r.out, nullptr, false);
  ASSERT_EQ(c["tensors"][0]["channels"].size(), cols);
  EXPECT_EQ(c["tensors"][0]["channels"][77]["absmax"], 7.0);
  r = run_cli({"channels", (dir / "m.safetensors").string(), "--axis", "diagonal"});
  EXPECT_EQ(r.exit_code, 2);
}

TEST(OutliersCommand, ResultsAreKeptBesideTheIndexUntilTheFileChanges) {
  TempDir dir;
  std::mt19937 rng(12);
  std::normal_distribution<float> normal(0, 0.02f);
  std::vector<float> w(96 * 130), v(777);
  for (auto& x : w) x = normal(rng);
  for (auto& x : v) x = normal(rng);
  w[7 * 130 + 9] = 8.0f;
  const auto file = dir / "m.safetensors";
  const safetensors::TensorToWrite tensors[] = {{"w", DType::kF32, {96, 130}, std::as_bytes(std::span(w))},
                                                {"v", DType::kF32, {777}, std::as_bytes(std::span(v))}};
  ASSERT_TRUE(safetensors::write_file(file, tensors, {}).ok());
  const std::vector<std::string> outliers = {"outliers", file.string(), "-k", "4", "--json", "--explain"};
  const std::vector<std::string> channels = {"channels", file.string(), "--axis", "cols", "--json", "--explain"};
  const auto first = run_cli(outliers), first_channels = run_cli(channels);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  ASSERT_EQ(first_channels.exit_code, 0) << first_channels.err;
  EXPECT_TRUE(std::filesystem::exists(file.string() + ".tmindex.channels"));
  EXPECT_TRUE(std::filesystem::exists(file.string() + ".tmindex.analyses.json"));
  const auto second = run_cli(outliers), second_channels = run_cli(channels);
  ASSERT_EQ(second.exit_code, 0) << second.err;
  const auto a = nlohmann::json::parse(first.out), b = nlohmann::json::parse(second.out);
  const auto ac = nlohmann::json::parse(first_channels.out), bc = nlohmann::json::parse(second_channels.out);
  EXPECT_FALSE(a["placements"].empty());
  EXPECT_TRUE(b["placements"].empty()) << "asking twice reads nothing: " << b["placements"].dump();
  EXPECT_TRUE(bc["placements"].empty()) << bc["placements"].dump();
  ASSERT_EQ(a["tensors"].size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(a["tensors"][i]["top_k"], b["tensors"][i]["top_k"]);
    EXPECT_EQ(a["tensors"][i]["outlier_channels"], b["tensors"][i]["outlier_channels"]);
    EXPECT_EQ(ac["tensors"][i]["channels"], bc["tensors"][i]["channels"]);
  }
  EXPECT_EQ(b["tensors"][0]["top_k"][0]["value"], 8.0);
  // Another k is another question; --recompute reads again.
  auto other_k = run_cli({"outliers", file.string(), "-k", "5", "--json", "--explain"});
  EXPECT_FALSE(nlohmann::json::parse(other_k.out)["placements"].empty());
  auto again = run_cli({"channels", file.string(), "--json", "--explain", "--recompute"});
  EXPECT_FALSE(nlohmann::json::parse(again.out)["placements"].empty());
  // Another file under the same name: nothing kept for the old one is used.
  w[7 * 130 + 9] = -3.0f;
  w[50 * 130 + 1] = 11.0f;
  const safetensors::TensorToWrite changed[] = {{"w", DType::kF32, {96, 130}, std::as_bytes(std::span(w))},
                                                {"v", DType::kF32, {777}, std::as_bytes(std::span(v))}};
  ASSERT_TRUE(safetensors::write_file(file, changed, {}).ok());
  const auto fresh = nlohmann::json::parse(run_cli(outliers).out);
  EXPECT_FALSE(fresh["placements"].empty());
  EXPECT_EQ(fresh["tensors"][0]["top_k"][0]["value"], 11.0);
  EXPECT_EQ(fresh["tensors"][0]["top_k"][0]["row"], 50);
  const auto fresh_channels = nlohmann::json::parse(run_cli(channels).out);
  EXPECT_EQ(fresh_channels["tensors"][0]["channels"][1]["absmax"], 11.0);
  // A damaged store reads as none, and is replaced.
  std::filesystem::resize_file(file.string() + ".tmindex.channels", 100);
  const auto repaired = run_cli(channels);
  ASSERT_EQ(repaired.exit_code, 0) << repaired.err;
  EXPECT_EQ(nlohmann::json::parse(repaired.out)["tensors"][0]["channels"], fresh_channels["tensors"][0]["channels"]);
  EXPECT_TRUE(nlohmann::json::parse(run_cli(channels).out)["placements"].empty());
}

}  // namespace
}  // namespace tensormorph
