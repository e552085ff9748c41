// Q4_K without the tree: the exact-sum shortcut for ggml's 4-bit K-quants (the Q8_0 one is in
// cpu_tile_stats_kernel.h). Include only from cpu_tile_stats_isa.h.
//
// A Q4_K super-block holds 8 sub-blocks of 32 four-bit quants q, decoded in float32 as
// v = (d·sc)·q − (dmin·m) with d, dmin half floats and sc, m six-bit integers. In integers:
// d = D·2^a, dmin = M·2^b, c = min(a, b), and v = 2^c·(A·q − B) with A = D·sc·2^(a−c) and
// B = M·m·2^(b−c). When |B| and |15A − B| are at most 2^24, every value of the sub-block is
// exactly that integer times 2^c (D·sc·q has at most 21 bits, so no float32 operation of the
// decoder rounds), and a segment's sums are integer formulas in each sub-block's Σq and Σq²:
//   Σv = 2^c·(A·Σq − 32B),   Σv² = 2^2c·(A²·Σq² − 2AB·Σq + 32B²).
// They equal the canonical tree when no addition in it can round (docs/COMPUTE.md): every partial
// sum is a multiple of 2^c_min (the smallest c of the segment) and at most Σ|v| in magnitude, so
// Σ|v| ≤ 2^53·2^c_min suffices, and Σv² ≤ 2^53·2^2c_min for the squares. Extremes follow from
// each sub-block's smallest and largest quant (v is strictly monotone in q unless d·sc is zero),
// zeros from the single quant, if any, with A·q = B. Segments that fail (non-finite scales, a
// decode that would round, an exact sum of zero whose sign the tree decides) run the tree.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include "backends/cpu/cpu_tile_stats_kernel.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace tensormorph::cpu::tile_kernel {

/// A finite half float as mantissa·2^exponent with an integer mantissa (|mantissa| < 2^11);
/// false for infinities and NaN.
TM_CPU_INLINE bool half_as_scaled_integer(uint16_t h, int64_t& mantissa, int& exponent) {
  const uint32_t field = (h >> 10) & 0x1fu, fraction = h & 0x3ffu;
  if (field == 0x1fu) return false;
  const auto magnitude = static_cast<int64_t>(field == 0 ? fraction : (fraction | 0x400u));
  mantissa = (h & 0x8000u) != 0 ? -magnitude : magnitude;
  exponent = static_cast<int>(field == 0 ? 1u : field) - 25;
  return true;
}

/// Quant statistics of one super-block's 8 sub-blocks; lane i holds sub-block kFoldOrder[i].
struct NibbleStats {
  u32x8 sum;      ///< Σq
  u32x8 squares;  ///< Σq²
  u32x8 low;      ///< smallest q
  u32x8 high;     ///< largest q
};

/// Σq, Σq², min q and max q of the 8 sub-blocks of one super-block's 128 quant bytes: bytes
/// [32j, 32j + 32) hold sub-block 2j in their low nibbles and 2j + 1 in their high nibbles.
template <typename Cvt>
TM_CPU_INLINE NibbleStats nibble_stats(const std::byte* qs) {
  u8x32 q[8];
  u16x16 sq[8];
  for (int j = 0; j < 4; ++j) {
    const u8x32 x = load<u8x32>(qs + 32 * j);
    q[2 * j] = x & 0xf;
    q[2 * j + 1] = bits<u8x32>(bits<u16x16>(x) >> 4) & 0xf;
  }
  for (int k = 0; k < 8; ++k) sq[k] = Cvt::pair_squares(q[k]);  // <= 450 per lane
  NibbleStats out;
  // Byte sums of 8 quants are at most 120: the last two halvings run in 16-bit fields.
  const u32x8 sum4 = fold8(q, lane_add);
  const u32x8 sum2 = (sum4 & 0x00ff00ffu) + ((sum4 >> 8) & 0x00ff00ffu);
  out.sum = (sum2 & 0xffffu) + (sum2 >> 16);
  const u32x8 sq2 = fold8(sq, lane_add);
  out.squares = (sq2 & 0xffffu) + (sq2 >> 16);
  out.low = bits<u32x8>(fold_lane_bytes(bits<u8x32>(fold8(q, lane_min)), lane_min)) & 0xffu;
  out.high = bits<u32x8>(fold_lane_bytes(bits<u8x32>(fold8(q, lane_max)), lane_max)) & 0xffu;
  return out;
}

/// The six-bit scales and minimums of a super-block's sub-blocks from its 12 packed bytes (and
/// the 4 bytes after them, unused), in kFoldOrder. Sub-block j < 4: scale = p[j] & 63, minimum =
/// p[j + 4] & 63; j >= 4: scale = (p[j + 4] & 15) | (p[j - 4] >> 6) << 4, minimum =
/// (p[j + 4] >> 4) | (p[j] >> 6) << 4.
TM_CPU_INLINE void q4_k_scales(const std::byte* packed, u32x8& scale, u32x8& minimum) {
  const u8x16 p = load<u8x16>(packed);
  const auto lanes = [&p](auto... index) __attribute__((always_inline)) { return u32x8{p[index]...}; };
  const u32x8 first = lanes(0, 2, 8, 10, 1, 3, 9, 11);  // p[j] for j < 4, p[j + 4] after
  const u32x8 second = lanes(4, 6, 0, 2, 5, 7, 1, 3);   // p[j + 4] for j < 4, p[j - 4] after
  const u32x8 third = lanes(4, 6, 4, 6, 5, 7, 5, 7);    // p[j] for j >= 4
  const i32x8 early = {-1, -1, 0, 0, -1, -1, 0, 0};       // lanes of sub-blocks 0-3
  scale = early != 0 ? first & 63u : (first & 15u) | ((second >> 6) << 4);
  minimum = early != 0 ? second & 63u : (first >> 4) | ((third >> 6) << 4);
}

/// True when some lane of a comparison mask (32 or 64 bytes) is set.
template <typename Mask>
TM_CPU_INLINE bool any_lane(const Mask& mask) {
  u64x4 words;
  if constexpr (sizeof(Mask) == 64) {
    typedef uint64_t u64x8 __attribute__((vector_size(64)));
    const u64x8 all = bits<u64x8>(mask);
    words = __builtin_shufflevector(all, all, 0, 1, 2, 3) | __builtin_shufflevector(all, all, 4, 5, 6, 7);
  } else {
    words = bits<u64x4>(mask);
  }
  return ((words[0] | words[1]) | (words[2] | words[3])) != 0;
}

/// 2^e as a double, for the exponents of these sums (normal range).
TM_CPU_INLINE double power_of_two(int e) { return std::bit_cast<double>(static_cast<uint64_t>(1023 + e) << 52); }

/// Exact sums of a segment in units of 2^unit (2^2unit for the squares), merged super-block by
/// super-block: a finer unit rescales what came before. Every total stays at most 2^53 (beyond
/// that the proof fails anyway), so 64-bit integers hold them and every shift.
struct ExactAccumulator {
  static constexpr int64_t kLimit = int64_t{1} << 53;
  int unit = INT32_MAX;
  int64_t sum = 0;        ///< Σ N
  int64_t magnitude = 0;  ///< an upper bound of Σ |N|, at least |sum|
  int64_t squares = 0;    ///< Σ N²

  /// x·2^s when that is at most 2^53, else -1.
  TM_CPU_INLINE static int64_t scaled(int64_t x, int s) {
    if (s >= 54) return x == 0 ? 0 : -1;
    return x > (kLimit >> s) ? -1 : x * (int64_t{1} << s);
  }

  /// Adds sums given in units of 2^c (magnitude and squares non-negative); false when a total
  /// passes 2^53.
  TM_CPU_INLINE bool add(int c, int64_t block_sum, int64_t block_magnitude, int64_t block_squares) {
    if (unit == INT32_MAX) unit = c;
    if (c < unit) {
      magnitude = scaled(magnitude, unit - c);
      squares = scaled(squares, 2 * (unit - c));
      if (magnitude < 0 || squares < 0) return false;
      sum *= int64_t{1} << (unit - c);  // |sum| <= magnitude: in range
      unit = c;
    }
    const int64_t m = scaled(block_magnitude, c - unit), q = scaled(block_squares, 2 * (c - unit));
    if (m < 0 || q < 0) return false;
    sum += block_sum * (int64_t{1} << std::min(c - unit, 53));  // |block_sum| <= block_magnitude
    magnitude += m;
    squares += q;
    return magnitude <= kLimit && squares <= kLimit;
  }
};

/// Quants of sub-block j equal to q0.
TM_CPU_INLINE uint32_t count_quant(const std::byte* qs, uint32_t j, uint32_t q0) {
  const std::byte* bytes = qs + 32 * (j / 2);
  const uint32_t shift = 4 * (j % 2);
  uint32_t n = 0;
  for (int i = 0; i < 32; ++i) n += ((static_cast<uint32_t>(bytes[i]) >> shift) & 0xfu) == q0 ? 1u : 0u;
  return n;
}

/// The row sum and sum of squares of a Q4_K segment of `blocks` whole super-blocks by the
/// shortcut above, observing its values into `stats`; false, with `stats` untouched, when the
/// proof does not hold.
template <typename Cvt>
TM_CPU_INLINE bool q4_k_exact_segment(const std::byte* src, uint64_t blocks, LaneStats& stats, double& sum,
                                      double& sum_sq) {
  constexpr int64_t kExactLimit = int64_t{1} << 24;
  ExactAccumulator acc;
  i32x8 min_key = i32x8{} + INT32_MAX, max_key = i32x8{} + INT32_MIN;
  uint32_t zeros = 0;
  for (uint64_t b = 0; b < blocks; ++b, src += 144) {
    const uint16_t d_bits = decode_internal::load_u16(src), dmin_bits = decode_internal::load_u16(src + 2);
    int64_t d_int, dmin_int;
    int d_exp, dmin_exp;
    if (!half_as_scaled_integer(d_bits, d_int, d_exp) || !half_as_scaled_integer(dmin_bits, dmin_int, dmin_exp)) {
      return false;
    }
    const int c = std::min(d_exp, dmin_exp);
    const int64_t d_unit = d_int * (int64_t{1} << (d_exp - c));           // A_j = d_unit * scale_j
    const int64_t dmin_unit = dmin_int * (int64_t{1} << (dmin_exp - c));  // B_j = dmin_unit * minimum_j
    u32x8 scale, minimum;
    q4_k_scales(src + 4, scale, minimum);
    // |B_j| <= 2^24 and |15 A_j - B_j| <= 2^24 for every j (checked a little more strictly, as
    // 15 |A_j| + |B_j| <= 2^24, in float64: exact below 2^53). That also bounds every product
    // below: |d_unit| <= 2^24 / 15 when a scale is non-zero (otherwise every A_j is 0), and
    // |dmin_unit| <= 2^24 when a minimum is.
    const int64_t d_abs = d_int < 0 ? -d_unit : d_unit, dmin_abs = dmin_int < 0 ? -dmin_unit : dmin_unit;
    const f64x8 bound = __builtin_convertvector(scale, f64x8) * static_cast<double>(15 * d_abs) +
                        __builtin_convertvector(minimum, f64x8) * static_cast<double>(dmin_abs);
    if (any_lane(bound > static_cast<double>(kExactLimit))) return false;
    const std::byte* qs = src + 16;
    const NibbleStats q = nibble_stats<Cvt>(qs);
    // Σ_j A_j Σq_j, Σ_j B_j, Σ_j A_j² Σq²_j, ... as d_unit, dmin_unit times small integer dot
    // products (each fits 32 bits: scale, minimum <= 63, Σq <= 480, Σq² <= 7200), all eight
    // horizontal sums in one fold.
    const u32x8 parts[8] = {scale * q.sum, minimum, scale, scale * scale * q.squares, scale * minimum * q.sum,
                            minimum * minimum, u32x8{}, u32x8{}};
    const u32x8 totals = fold8(parts, lane_add);  // entity k in lane kFoldLane[k]
    const auto total = [&totals](int k) { return static_cast<int64_t>(totals[kFoldLane[k]]); };
    const int64_t scale_dot_sum = total(0), minimum_total = total(1), scale_total = total(2);
    const int64_t squares_dot = total(3), cross_dot = total(4), minimum_squares = total(5);
    const int64_t d_used = scale_total > 0 ? d_unit : 0, dmin_used = minimum_total > 0 ? dmin_unit : 0;
    const int64_t block_sum = d_used * scale_dot_sum - 32 * dmin_used * minimum_total;
    const int64_t block_magnitude =
        32 * (15 * (scale_total > 0 ? d_abs : 0) * scale_total + (minimum_total > 0 ? dmin_abs : 0) * minimum_total);
    const int64_t block_squares =
        d_used * d_used * squares_dot - 2 * d_used * dmin_used * cross_dot + 32 * dmin_used * dmin_used * minimum_squares;
    if (!acc.add(c, block_sum, block_magnitude, block_squares)) return false;
    // Extremes by the decoder's own float operations (exact here), so they carry its zero signs.
    const f32x8 d1 = splat<f32x8>(decode_internal::half_bits_to_float(d_bits)) * __builtin_convertvector(scale, f32x8);
    const f32x8 m1 = splat<f32x8>(decode_internal::half_bits_to_float(dmin_bits)) * __builtin_convertvector(minimum, f32x8);
    const f32x8 low = __builtin_convertvector(q.low, f32x8), high = __builtin_convertvector(q.high, f32x8);
    const f32x8 at_low = d1 * low - m1, at_high = d1 * high - m1;
    const i32x8 falling = bits<i32x8>(d1) < 0;
    min_key = min(min_key, order_key(falling != 0 ? at_high : at_low));
    max_key = max(max_key, order_key(falling != 0 ? at_low : at_high));
    // Zeros: a whole sub-block when d1 = m1 = 0; else the quant q0 = m1 / d1, when that is a whole
    // number in [low, high] (rare), checked by decoding it (exact for every quant here).
    const i32x8 flat = d1 == 0.0f;
    const f32x8 quotient = m1 / (flat != 0 ? f32x8{} + 1.0f : d1);
    f32x8 q0 = __builtin_convertvector(__builtin_convertvector(quotient + 0.5f, i32x8), f32x8);
    q0 = q0 < low ? low : (q0 > high ? high : q0);
    const i32x8 hit = (flat == 0) & (d1 * q0 - m1 == 0.0f);
    const i32x8 all_zero = flat & (m1 == 0.0f);
    if (any_lane(hit | all_zero)) {
      for (int i = 0; i < 8; ++i) {
        if (all_zero[i] != 0) zeros += 32;
        if (hit[i] != 0) zeros += count_quant(qs, kFoldOrder[i], static_cast<uint32_t>(q0[i]));
      }
    }
  }
  if (acc.sum == 0 || acc.squares == 0) return false;
  sum = static_cast<double>(acc.sum) * power_of_two(acc.unit);
  sum_sq = static_cast<double>(acc.squares) * power_of_two(2 * acc.unit);
  stats.min_key = min(stats.min_key, min_key);
  stats.max_key = max(stats.max_key, max_key);
  stats.minus_zeros -= i32x8{static_cast<int32_t>(zeros)};  // a vector op: no narrow store into the vector
  return true;
}

/// Q4_K items: the exact shortcut where it holds, the tree elsewhere.
template <typename F32>
TM_CPU_INLINE void process_q4_k(const ItemSpec& item, KernelScratch& scratch) {
  process_exact_or_tree<F32, 256, 144>(
      item, scratch,
      [](const std::byte* src, uint64_t blocks, LaneStats& stats, double& sum, double& sum_sq) __attribute__((always_inline)) {
        return q4_k_exact_segment<typename F32::Cvt>(src, blocks, stats, sum, sum_sq);
      },
      [](const std::byte* src, uint64_t blocks, float* out) __attribute__((always_inline)) { decode_q4_k(src, blocks, out); });
}

}  // namespace tensormorph::cpu::tile_kernel

#pragma GCC diagnostic pop
