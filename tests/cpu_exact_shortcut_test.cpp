// The CPU backend's exact-sum shortcuts for Q8_0 and Q4_K (the block policies of
// src/backends/cpu/tile_stats/quantized.h through kernels.h's exact_segment), called directly.
// The tile-level tests in cpu_backend_test compare whole tiles with the reference, which a
// shortcut that refused every segment would pass too (the tree would compute them); these check
// that weight-like segments are taken by the shortcut and come out with the canonical tree's bits.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "backends/cpu/tile_stats/kernels.h"
#include "core/dtype_abi.h"
#include "core/quantize/quantize.h"
#include "compute/ops/reference.h"
#include "tensormorph/decode.h"

#pragma GCC diagnostic ignored "-Wpsabi"  // vectors only pass through the always_inline kernels

namespace tensormorph {
namespace {

using cpu::simd::PortableConvert;
using cpu::tile_kernel::LaneStats;

/// What the canonical tree and a plain pass give for one row segment of decoded values.
struct SegmentTruth {
  double sum = 0, sum_sq = 0;
  int32_t min_key = INT32_MAX, max_key = INT32_MIN;
  uint32_t zeros = 0;
};

int32_t key_of(float v) {
  const auto b = std::bit_cast<int32_t>(v);
  return b ^ ((b >> 31) & 0x7fffffff);
}

/// The tree of docs/COMPUTE.md over a segment as wide as its tile (a power of two).
SegmentTruth truth_of(DType dtype, std::span<const std::byte> blocks, uint64_t elems) {
  std::vector<float> values(elems);
  EXPECT_TRUE(decode_to_f32(dtype, blocks, elems, values.data()).ok());
  std::vector<double> slots(elems), squares(elems);
  SegmentTruth t;
  for (uint64_t i = 0; i < elems; ++i) {
    slots[i] = values[i];
    squares[i] = slots[i] * slots[i];
    t.min_key = std::min(t.min_key, key_of(values[i]));
    t.max_key = std::max(t.max_key, key_of(values[i]));
    t.zeros += values[i] == 0.0f ? 1 : 0;
  }
  t.sum = ops::halving_sum(std::span<double>(slots));
  t.sum_sq = ops::halving_sum(std::span<double>(squares));
  return t;
}

/// Runs `shortcut` on every row of `bytes` (rows of `row_blocks` blocks of `dtype`) and checks that
/// it takes every one of them with the tree's sums, extremes and zeros.
template <typename Shortcut>
void expect_taken_and_exact(DType dtype, const std::vector<std::byte>& bytes, uint64_t rows, uint64_t row_blocks,
                            const Shortcut& shortcut) {
  const DTypeInfo& info = dtype_info(dtype);
  const uint64_t row_bytes = row_blocks * info.block_bytes, elems = row_blocks * info.block_elems;
  for (uint64_t r = 0; r < rows; ++r) {
    SCOPED_TRACE("row " + std::to_string(r));
    const std::byte* src = bytes.data() + r * row_bytes;
    LaneStats stats = LaneStats::fresh();
    double sum = -1, sum_sq = -1;
    ASSERT_TRUE(shortcut(src, row_blocks, stats, sum, sum_sq)) << "a weight-like segment went back to the tree";
    const SegmentTruth t = truth_of(dtype, std::span<const std::byte>(src, row_bytes), elems);
    EXPECT_EQ(std::bit_cast<uint64_t>(sum), std::bit_cast<uint64_t>(t.sum)) << sum << " vs " << t.sum;
    EXPECT_EQ(std::bit_cast<uint64_t>(sum_sq), std::bit_cast<uint64_t>(t.sum_sq)) << sum_sq << " vs " << t.sum_sq;
    EXPECT_EQ(cpu::simd::reduce_min(stats.min_key), t.min_key);
    EXPECT_EQ(cpu::simd::reduce_max(stats.max_key), t.max_key);
    int64_t zeros = 0;
    for (int i = 0; i < 8; ++i) zeros -= stats.minus_zeros[i];
    EXPECT_EQ(zeros, t.zeros);
  }
}

void put_half(std::byte* at, double value) {
  const uint16_t h = f32_to_f16(static_cast<float>(value));
  std::memcpy(at, &h, 2);
}

TEST(CpuExactShortcut, Q4_KWeightLikeSegmentsAreTakenAndEqualTheTree) {
  // dmin 1-32x d, as ggml's quantizer makes them: the proof holds for every super-block.
  const uint64_t rows = 48, row_blocks = 4;  // 1024 values per row: a tile of 1024
  std::mt19937_64 rng(41);
  std::vector<std::byte> bytes(rows * row_blocks * 144);
  for (auto& b : bytes) b = static_cast<std::byte>(rng());
  for (uint64_t k = 0; k < rows * row_blocks; ++k) {
    put_half(bytes.data() + k * 144, std::uniform_real_distribution<double>(5e-5, 2e-4)(rng));
    put_half(bytes.data() + k * 144 + 2, std::uniform_real_distribution<double>(2e-4, 1.6e-3)(rng));
  }
  expect_taken_and_exact(DType::kQ4_K, bytes, rows, row_blocks,
                         [](const std::byte* src, uint64_t blocks, LaneStats& stats, double& sum, double& sum_sq) {
                           return cpu::tile_kernel::exact_segment<cpu::tile_kernel::Q4_KBlocks, PortableConvert>(
                               src, blocks, stats, sum, sum_sq);
                         });
}

TEST(CpuExactShortcut, Q8_0WeightLikeSegmentsAreTakenAndEqualTheTree) {
  // Scales within a factor of 4 and quants in [-127, 127], as ggml writes them.
  const uint64_t rows = 48, row_blocks = 32;  // 1024 values per row
  std::mt19937_64 rng(43);
  std::vector<std::byte> bytes(rows * row_blocks * 34);
  for (auto& b : bytes) {
    const auto v = static_cast<uint32_t>(rng() % 255);
    b = static_cast<std::byte>(v < 0x80 ? v : v + 1);  // never 0x80 (-128)
  }
  for (uint64_t k = 0; k < rows * row_blocks; ++k) {
    put_half(bytes.data() + k * 34, std::uniform_real_distribution<double>(2.5e-4, 1e-3)(rng));
  }
  expect_taken_and_exact(DType::kQ8_0, bytes, rows, row_blocks,
                         [](const std::byte* src, uint64_t blocks, LaneStats& stats, double& sum, double& sum_sq) {
                           return cpu::tile_kernel::exact_segment<cpu::tile_kernel::Q8_0Blocks, PortableConvert>(
                               src, blocks, stats, sum, sum_sq);
                         });
}

}  // namespace
}  // namespace tensormorph
