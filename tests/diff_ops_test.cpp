// tm.diff_stats@1 and tm.subtract@1: the reference against an independent float64 computation
// (exact counts, maximum and index; sums within rounding), the CPU kernel and the engine bit for
// bit against the reference, the merge rule (bands at multiples of 65536 merged == one instance),
// the derived metrics on known vectors, and the errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "compute/ops/diff_stats.h"
#include "compute/ops/op_instance.h"
#include "core/dtype_abi.h"
#include "core/quantize/quantize.h"
#include "engine/compute_session.h"
#include "engine/diff_ops.h"
#include "tensormorph/decode.h"

namespace tensormorph {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

/// Weights, with NaN, +-Inf and signed zeros planted.
std::vector<float> weights(uint64_t n, uint32_t seed, bool specials = true) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  if (specials) {
    const float planted[] = {kNaN, kInf, -kInf, 0.0f, -0.0f, std::bit_cast<float>(0x7fa00001u)};
    for (uint64_t i = 0; i < n / 300 + 1; ++i) v[rng() % n] = planted[rng() % 6];
  }
  return v;
}

std::vector<std::byte> encode(DType dtype, const std::vector<float>& v) { return *encode_from_f32(dtype, v); }

std::vector<float> decoded(DType dtype, const std::vector<std::byte>& bytes, uint64_t n, float offset = 0) {
  std::vector<float> v(n);
  EXPECT_TRUE(decode_to_f32(dtype, bytes, n, v.data()).ok());
  if (offset != 0) {
    for (float& x : v) x = x + offset;
  }
  return v;
}

ops::DiffSide side(DType dtype, const std::vector<std::byte>& bytes, uint64_t n, float offset = 0) {
  return {{dtype, bytes, n}, {offset != 0, offset}};
}

std::vector<TM_DiffStats> reference(const ops::DiffSide& a, const ops::DiffSide& b, uint64_t element_offset = 0) {
  std::vector<TM_DiffStats> out((a.tensor.elems + TM_DIFF_CHUNK - 1) / TM_DIFF_CHUNK);
  const Status s = ops::diff_stats_reference(a, b, element_offset, out);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return out;
}

bool same_bits(const std::vector<TM_DiffStats>& x, const std::vector<TM_DiffStats>& y) {
  return x.size() == y.size() && (x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(TM_DiffStats)) == 0);
}

/// Within rounding: relative to the larger of |want| and the sum of the terms' magnitudes.
void expect_close(double got, long double want, long double magnitude, const char* what) {
  const long double scale = std::max<long double>({std::fabs(want), magnitude, 1e-300L});
  EXPECT_LE(std::fabs(static_cast<long double>(got) - want) / scale, 1e-12L) << what << ": " << got << " vs " << static_cast<double>(want);
}

/// The record of pairs [first, first + m) computed independently: long double sums in element order.
void check_independent(const TM_DiffStats& s, const std::vector<float>& a, const std::vector<float>& b, uint64_t first,
                       uint64_t m, uint64_t element_offset) {
  uint64_t finite = 0, differing = 0, bits = 0, classes = 0, nan_a = 0, nan_b = 0, inf_a = 0, inf_b = 0;
  long double sd = 0, sdd = 0, saa = 0, sbb = 0, sab = 0, sd_abs = 0, sab_abs = 0;
  double best = -1;
  uint64_t best_i = ~uint64_t{0};
  auto cls = [](float v) { return std::isnan(v) ? 1 : std::isinf(v) ? (v > 0 ? 2 : 3) : 0; };
  for (uint64_t i = first; i < first + m; ++i) {
    const float x = a[i], y = b[i];
    bits += std::bit_cast<uint32_t>(x) != std::bit_cast<uint32_t>(y);
    classes += cls(x) != cls(y);
    nan_a += std::isnan(x);
    nan_b += std::isnan(y);
    inf_a += std::isinf(x);
    inf_b += std::isinf(y);
    if (!std::isfinite(x) || !std::isfinite(y)) {
      differing += cls(x) != cls(y);
      continue;
    }
    ++finite;
    differing += x != y;
    const long double d = static_cast<long double>(x) - static_cast<long double>(y);
    sd += d;
    sd_abs += std::fabs(d);
    sab_abs += std::fabs(static_cast<long double>(x) * y);
    sdd += d * d;
    saa += static_cast<long double>(x) * x;
    sbb += static_cast<long double>(y) * y;
    sab += static_cast<long double>(x) * y;
    const double ad = std::fabs(static_cast<double>(x) - static_cast<double>(y));
    if (ad > best) {
      best = ad;
      best_i = i;
    }
  }
  EXPECT_EQ(s.pairs, m);
  EXPECT_EQ(s.finite_pairs, finite);
  EXPECT_EQ(s.differing, differing);
  EXPECT_EQ(s.bits_differing, bits);
  EXPECT_EQ(s.class_mismatch, classes);
  EXPECT_EQ(s.nan_a, nan_a);
  EXPECT_EQ(s.nan_b, nan_b);
  EXPECT_EQ(s.inf_a, inf_a);
  EXPECT_EQ(s.inf_b, inf_b);
  if (best_i == ~uint64_t{0}) {
    EXPECT_EQ(s.max_abs_index, ~uint64_t{0});
  } else {
    EXPECT_EQ(s.max_abs_index, element_offset + best_i);
    EXPECT_EQ(s.max_abs_diff, best);
    EXPECT_EQ(std::bit_cast<uint32_t>(s.a_at_max), std::bit_cast<uint32_t>(a[best_i]));
    EXPECT_EQ(std::bit_cast<uint32_t>(s.b_at_max), std::bit_cast<uint32_t>(b[best_i]));
  }
  expect_close(s.sum_diff, sd, sd_abs, "sum_diff");
  expect_close(s.sum_sq_diff, sdd, sdd, "sum_sq_diff");
  expect_close(s.sum_sq_a, saa, saa, "sum_sq_a");
  expect_close(s.sum_sq_b, sbb, sbb, "sum_sq_b");
  expect_close(s.sum_ab, sab, sab_abs, "sum_ab");
}

struct Pair {
  DType da, db;
  bool reencode;  // B: A's values in B's dtype (else its own data)
  float a_offset, b_offset;
};

TEST(DiffStats, ReferenceEqualsAnIndependentComputationAndTheCpuKernelEqualsTheReference) {
  const uint64_t n = 3 * TM_DIFF_CHUNK + 256 * 5;  // ragged last chunk
  for (const Pair& p : {Pair{DType::kF32, DType::kBF16, true, 0, 0}, Pair{DType::kF16, DType::kQ8_0, true, 0, 0},
                        Pair{DType::kQ4_K, DType::kF32, false, 0, 0}, Pair{DType::kBF16, DType::kF32, true, 1.0f, 0},
                        Pair{DType::kF32, DType::kF32, false, -0.25f, 0.5f}, Pair{DType::kBF16, DType::kBF16, false, 0, 0}}) {
    SCOPED_TRACE(std::string(dtype_name(p.da)) + " vs " + std::string(dtype_name(p.db)));
    const auto a_bytes = p.da == DType::kQ4_K ? encode(p.da, weights(n, 1, false)) : encode(p.da, weights(n, 1));
    const auto a_plain = decoded(p.da, a_bytes, n);
    const auto b_bytes = p.reencode ? encode(p.db, a_plain) : encode(p.db, weights(n, 2));
    const auto va = decoded(p.da, a_bytes, n, p.a_offset), vb = decoded(p.db, b_bytes, n, p.b_offset);
    const auto a = side(p.da, a_bytes, n, p.a_offset), b = side(p.db, b_bytes, n, p.b_offset);
    const uint64_t element_offset = 7 * TM_DIFF_CHUNK;
    const auto want = reference(a, b, element_offset);
    ASSERT_EQ(want.size(), 4u);
    for (size_t c = 0; c < want.size(); ++c) {
      SCOPED_TRACE("chunk " + std::to_string(c));
      check_independent(want[c], va, vb, c * TM_DIFF_CHUNK, std::min<uint64_t>(TM_DIFF_CHUNK, n - c * TM_DIFF_CHUNK),
                        element_offset);
    }
    for (const uint32_t threads : {1u, 2u, 0u}) {
      std::vector<TM_DiffStats> got(want.size());
      ASSERT_TRUE(cpu::diff_stats(a, b, element_offset, got, threads).ok());
      EXPECT_TRUE(same_bits(got, want)) << threads << " threads";
      std::vector<float> diff(n), ref(n);
      ASSERT_TRUE(cpu::subtract(a, b, diff, threads).ok());
      ASSERT_TRUE(ops::subtract_reference(a, b, ref).ok());
      EXPECT_EQ(0, std::memcmp(diff.data(), ref.data(), n * sizeof(float)));
      for (uint64_t i = 0; i < n; ++i) {
        const float d = va[i] - vb[i];
        const uint32_t want_bits = std::isnan(d) ? 0x7fc00000u : std::bit_cast<uint32_t>(d);
        ASSERT_EQ(std::bit_cast<uint32_t>(diff[i]), want_bits) << i;
      }
    }
  }
}

TEST(DiffStats, IdenticalInputsDifferNowhere) {
  const uint64_t n = 1000;
  const auto bytes = encode(DType::kF32, weights(n, 5));
  const auto s = ops::merge_diff_stats(reference(side(DType::kF32, bytes, n), side(DType::kF32, bytes, n)));
  EXPECT_EQ(s.pairs, n);
  EXPECT_EQ(s.differing, 0u);
  EXPECT_EQ(s.bits_differing, 0u);
  EXPECT_EQ(s.class_mismatch, 0u);
  EXPECT_GT(s.nan_a, 0u);
  EXPECT_EQ(s.nan_a, s.nan_b);
  EXPECT_EQ(s.sum_sq_diff, 0.0);
  EXPECT_EQ(s.max_abs_diff, 0.0);
  EXPECT_TRUE(ops::diff_metrics(s).identical);
  EXPECT_EQ(ops::diff_metrics(s).snr_db, std::numeric_limits<double>::infinity());
  // The values of a Q4_K tensor decoded into F32 are the same numbers (the bits too).
  const auto q = encode(DType::kQ4_K, weights(256 * 9, 6, false));
  const auto f = encode(DType::kF32, decoded(DType::kQ4_K, q, 256 * 9));
  const auto t = ops::merge_diff_stats(reference(side(DType::kQ4_K, q, 256 * 9), side(DType::kF32, f, 256 * 9)));
  EXPECT_EQ(t.differing, 0u);
  EXPECT_EQ(t.bits_differing, 0u);
  // An offset that the other side already carries: BF16 w + 1 against F32 holding float(w) + 1.
  const auto w = encode(DType::kBF16, weights(512, 7, false));
  std::vector<float> plus_one = decoded(DType::kBF16, w, 512);
  for (float& x : plus_one) x = x + 1.0f;
  const auto g = encode(DType::kF32, plus_one);
  const auto u = ops::merge_diff_stats(reference(side(DType::kBF16, w, 512, 1.0f), side(DType::kF32, g, 512)));
  EXPECT_EQ(u.bits_differing, 0u);
}

TEST(DiffStats, BandsAtMultiplesOfTheChunkMergeToOneInstanceBitwise) {
  const uint64_t n = 9 * TM_DIFF_CHUNK + 4096;
  const auto a_bytes = encode(DType::kF32, weights(n, 11));
  const auto b_bytes = encode(DType::kBF16, weights(n, 12));
  const auto whole = reference(side(DType::kF32, a_bytes, n), side(DType::kBF16, b_bytes, n), 100 * TM_DIFF_CHUNK);
  // Bands of 1, 3 and 5(+ragged) chunks, each an instance with its own element_offset.
  std::vector<TM_DiffStats> banded;
  for (const auto& [first, count] : {std::pair<uint64_t, uint64_t>{0, TM_DIFF_CHUNK}, {TM_DIFF_CHUNK, 3 * TM_DIFF_CHUNK},
                                     {4 * TM_DIFF_CHUNK, n - 4 * TM_DIFF_CHUNK}}) {
    const std::vector<std::byte> a(a_bytes.begin() + static_cast<std::ptrdiff_t>(first * 4),
                                   a_bytes.begin() + static_cast<std::ptrdiff_t>((first + count) * 4));
    const std::vector<std::byte> b(b_bytes.begin() + static_cast<std::ptrdiff_t>(first * 2),
                                   b_bytes.begin() + static_cast<std::ptrdiff_t>((first + count) * 2));
    const auto part = reference(side(DType::kF32, a, count), side(DType::kBF16, b, count), 100 * TM_DIFF_CHUNK + first);
    banded.insert(banded.end(), part.begin(), part.end());
  }
  EXPECT_TRUE(same_bits(banded, whole));
  const TM_DiffStats x = ops::merge_diff_stats(banded), y = ops::merge_diff_stats(whole);
  EXPECT_EQ(0, std::memcmp(&x, &y, sizeof x));
  // The merged maximum is the chunks' largest, at the lowest index among equal ones.
  const auto best = std::max_element(whole.begin(), whole.end(), [](const TM_DiffStats& p, const TM_DiffStats& q) {
    return p.max_abs_diff < q.max_abs_diff;
  });
  EXPECT_EQ(y.max_abs_index, best->max_abs_index);
  EXPECT_GE(y.max_abs_index, 100 * TM_DIFF_CHUNK);
}

std::unique_ptr<engine::ComputeSession> cpu_session() {
  engine::SessionOptions options;
  options.override_constraints = *compute::parse_constraints("only=cpu");
  auto session = engine::ComputeSession::open(options);
  EXPECT_TRUE(session.ok()) << session.status().to_string();
  return session.ok() ? std::move(session).value() : nullptr;
}

TEST(DiffStats, EngineBandsEqualOneReferenceInstance) {
  auto session = cpu_session();
  ASSERT_NE(session, nullptr);
  const uint64_t n = engine::kDiffBandElems + 3 * TM_DIFF_CHUNK + 512;  // two bands, the second ragged
  const auto a_bytes = encode(DType::kBF16, weights(n, 21));
  const auto b_bytes = encode(DType::kQ8_0, decoded(DType::kBF16, a_bytes, n));
  const engine::DiffOperand a{a_bytes, DType::kBF16, 0.5, 0}, b{b_bytes, DType::kQ8_0, 0, 0};
  engine::Records records;
  auto got = engine::run_diff_stats(session->scheduler(), a, b, n, 12345, &records);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(records.size(), 2u);
  EXPECT_TRUE(same_bits(*got, reference(side(DType::kBF16, a_bytes, n, 0.5f), side(DType::kQ8_0, b_bytes, n), 12345)));
  auto total = engine::diff_stats_total(session->scheduler(), a, b, n, 12345);
  ASSERT_TRUE(total.ok());
  const TM_DiffStats merged = ops::merge_diff_stats(*got);
  EXPECT_EQ(0, std::memcmp(&*total, &merged, sizeof merged));
  auto diff = engine::run_subtract(session->scheduler(), a, b, n);
  ASSERT_TRUE(diff.ok()) << diff.status().to_string();
  std::vector<float> ref(n);
  ASSERT_TRUE(ops::subtract_reference(side(DType::kBF16, a_bytes, n, 0.5f), side(DType::kQ8_0, b_bytes, n), ref).ok());
  EXPECT_EQ(0, std::memcmp(diff->data(), ref.data(), n * sizeof(float)));
}

TEST(DiffStats, MetricsOfKnownVectors) {
  auto stats_of = [](std::vector<float> x, std::vector<float> y) {
    const auto a = encode(DType::kF32, x), b = encode(DType::kF32, y);
    return ops::merge_diff_stats(reference(side(DType::kF32, a, x.size()), side(DType::kF32, b, y.size())));
  };
  const auto m = ops::diff_metrics(stats_of({1, 2, 3, 4}, {1, 2, 3, 5}));
  EXPECT_EQ(m.max_abs_diff, 1.0);
  EXPECT_EQ(m.max_abs_index, 3u);
  EXPECT_EQ(m.a_at_max, 4.0f);
  EXPECT_EQ(m.b_at_max, 5.0f);
  EXPECT_EQ(m.differing, 1u);
  EXPECT_DOUBLE_EQ(m.mean_diff, -0.25);
  EXPECT_DOUBLE_EQ(m.rmse, 0.5);
  EXPECT_DOUBLE_EQ(m.nmse, 1.0 / 30.0);
  EXPECT_DOUBLE_EQ(m.rel_frobenius, std::sqrt(1.0 / 30.0));
  EXPECT_DOUBLE_EQ(m.cosine, 34.0 / std::sqrt(30.0 * 39.0));
  EXPECT_DOUBLE_EQ(m.snr_db, 10.0 * std::log10(30.0));
  EXPECT_FALSE(m.identical);
  // Ties go to the lowest index; -0 equals +0 as a number but not in bits.
  const auto t = ops::diff_metrics(stats_of({0.0f, 1, -1, 5}, {-0.0f, 2, 0, 5}));
  EXPECT_EQ(t.max_abs_index, 1u);
  EXPECT_EQ(t.differing, 2u);
  EXPECT_EQ(t.bits_differing, 3u);
  // Zero vectors: nothing differs; the cosine of a zero vector is NaN, as are ratios over 0 / 0.
  const auto z = ops::diff_metrics(stats_of({0, 0, 0}, {0, 0, 0}));
  EXPECT_TRUE(z.identical);
  EXPECT_EQ(z.rmse, 0.0);
  EXPECT_TRUE(std::isnan(z.cosine));
  EXPECT_TRUE(std::isnan(z.nmse));
  EXPECT_EQ(z.snr_db, std::numeric_limits<double>::infinity());
  const auto one_zero = ops::diff_metrics(stats_of({0, 0}, {1, 2}));
  EXPECT_EQ(one_zero.nmse, std::numeric_limits<double>::infinity());
  EXPECT_EQ(one_zero.snr_db, -std::numeric_limits<double>::infinity());
  EXPECT_TRUE(std::isnan(one_zero.cosine));
  // No finite pair: no maximum, the means NaN; class mismatches count as differing.
  const auto none = ops::diff_metrics(stats_of({kNaN, kInf}, {kNaN, -kInf}));
  EXPECT_EQ(none.finite_pairs, 0u);
  EXPECT_EQ(none.max_abs_index, ~uint64_t{0});
  EXPECT_EQ(none.differing, 1u);
  EXPECT_EQ(none.class_mismatch, 1u);
  EXPECT_TRUE(std::isnan(none.rmse));
  EXPECT_TRUE(std::isnan(none.mean_diff));
  EXPECT_EQ(ops::merge_diff_stats({}).max_abs_index, ~uint64_t{0});
}

TEST(Subtract, NanIsCanonical) {
  const std::vector<float> x = {std::bit_cast<float>(0xffa00001u), kInf, 1.0f, -0.0f};
  const std::vector<float> y = {1.0f, kInf, std::bit_cast<float>(0x7f800001u), 0.0f};
  const auto a = encode(DType::kF32, x), b = encode(DType::kF32, y);
  std::vector<float> out(4), cpu(4);
  ASSERT_TRUE(ops::subtract_reference(side(DType::kF32, a, 4), side(DType::kF32, b, 4), out).ok());
  ASSERT_TRUE(cpu::subtract(side(DType::kF32, a, 4), side(DType::kF32, b, 4), cpu, 0).ok());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(std::bit_cast<uint32_t>(out[i]), 0x7fc00000u) << i;
  EXPECT_EQ(std::bit_cast<uint32_t>(out[3]), std::bit_cast<uint32_t>(-0.0f));
  EXPECT_EQ(0, std::memcmp(out.data(), cpu.data(), sizeof(float) * 4));
}

TM_TensorArg arg(DType dtype, uint64_t elems, const void* host, bool output) {
  TM_TensorArg t{};
  t.struct_size = sizeof t;
  t.dtype = to_abi_dtype(dtype);
  t.rank = 1;
  t.shape[0] = elems;
  t.nbytes = *dtype_storage_bytes(dtype, elems);
  if (output) {
    t.host_out = const_cast<void*>(host);
  } else {
    t.host_data = host;
  }
  return t;
}

TEST(DiffStats, DifferentElementCountsAreInvalidArgumentsNamingBoth) {
  std::vector<float> a(1024), b(2048);
  std::vector<std::byte> out(sizeof(TM_DiffStats));
  const TM_TensorArg ins[2] = {arg(DType::kF32, 1024, a.data(), false), arg(DType::kF32, 2048, b.data(), false)};
  const TM_TensorArg outs[1] = {arg(DType::kU8, sizeof(TM_DiffStats), out.data(), true)};
  for (const char* op : {TM_OP_DIFF_STATS, TM_OP_SUBTRACT}) {
    const TM_OpInstance instance{sizeof(TM_OpInstance), op, ins, 2, outs, 1, nullptr, 0};
    const Status s = std::string_view(op) == TM_OP_DIFF_STATS ? ops::parse_diff_stats(instance).status()
                                                              : ops::parse_subtract(instance).status();
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << op;
    EXPECT_NE(s.message().find("1024"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("2048"), std::string::npos) << s.message();
  }
  auto session = cpu_session();
  ASSERT_NE(session, nullptr);
  const auto a_bytes = encode(DType::kF32, std::vector<float>(1024, 1.0f));
  const auto b_bytes = encode(DType::kBF16, std::vector<float>(2048, 1.0f));
  auto r = engine::run_diff_stats(session->scheduler(), {a_bytes, DType::kF32}, {b_bytes, DType::kBF16}, 1024, 0, nullptr);
  ASSERT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("1024 F32"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("2048 BF16"), std::string::npos) << r.status().message();
  // Offsets must be finite float32 values.
  std::vector<float> c(1024);
  const TM_TensorArg same[2] = {arg(DType::kF32, 1024, a.data(), false), arg(DType::kF32, 1024, c.data(), false)};
  const TM_Attribute bad[1] = {{sizeof(TM_Attribute), TM_ATTR_A_OFFSET, 0, 1e300}};
  const TM_OpInstance instance{sizeof(TM_OpInstance), TM_OP_DIFF_STATS, same, 2, outs, 1, bad, 1};
  EXPECT_EQ(ops::parse_diff_stats(instance).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace tensormorph
