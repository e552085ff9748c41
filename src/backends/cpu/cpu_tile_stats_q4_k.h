// Q4_K without the tree: the exact-sum shortcut for ggml's 4-bit K-quants (the Q8_0 one is in
// cpu_tile_stats_q8_0.h). Include only from cpu_tile_stats_isa.h.
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
template <typename Cvt>
TM_CPU_INLINE void q4_k_scales(const std::byte* packed, u32x8& scale, u32x8& minimum) {
  // Byte shuffles in 16-byte vectors, then one widening each.
  const u8x16 p = load<u8x16>(packed);
  const u32x8 first = Cvt::widen_u8(__builtin_shufflevector(p, p, 0, 2, 8, 10, 1, 3, 9, 11, 0, 0, 0, 0, 0, 0, 0, 0));
  const u32x8 second = Cvt::widen_u8(__builtin_shufflevector(p, p, 4, 6, 0, 2, 5, 7, 1, 3, 0, 0, 0, 0, 0, 0, 0, 0));
  const u32x8 third = Cvt::widen_u8(__builtin_shufflevector(p, p, 4, 6, 4, 6, 5, 7, 5, 7, 0, 0, 0, 0, 0, 0, 0, 0));
  const i32x8 early = {-1, -1, 0, 0, -1, -1, 0, 0};  // lanes of sub-blocks 0-3
  scale = early != 0 ? first & 63u : (first & 15u) | ((second >> 6) << 4);
  minimum = early != 0 ? second & 63u : (first >> 4) | ((third >> 6) << 4);
}

/// True when some lane of a comparison mask (32 or 64 bytes) is set.
template <typename Cvt, typename Mask>
TM_CPU_INLINE bool any_lane(const Mask& mask) {
  if constexpr (sizeof(Mask) == 64) {
    typedef uint64_t u64x8 __attribute__((vector_size(64)));
    const u64x8 all = bits<u64x8>(mask);
    return Cvt::any_bit(__builtin_shufflevector(all, all, 0, 1, 2, 3) | __builtin_shufflevector(all, all, 4, 5, 6, 7));
  } else {
    return Cvt::any_bit(bits<u64x4>(mask));
  }
}

/// Lane-wise magnitude.
TM_CPU_INLINE f64x8 magnitude_of(const f64x8& x) { return bits<f64x8>(bits<i64x8>(x) & INT64_MAX); }

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
/// proof does not hold. Each super-block's sums are formed in its own unit 2^c, exactly (float64
/// where every step is an integer below 2^53, 64-bit integers for the squares, whose terms may
/// cancel), then scaled and added in float64; those additions are exact when the totals of the
/// magnitudes and of the squares stay below 2^53 units of the smallest c (checked at the end).
template <typename Cvt>
TM_CPU_INLINE bool q4_k_exact_segment(const std::byte* src, uint64_t blocks, LaneStats& stats, double& sum,
                                      double& sum_sq) {
  double total = 0, magnitude = 0, squares = 0;
  int unit = INT32_MAX;
  i32x8 min_key = i32x8{} + INT32_MAX, max_key = i32x8{} + INT32_MIN;
  uint32_t zeros = 0;
  for (uint64_t b = 0; b < blocks; ++b, src += 144) {
    const uint16_t d_bits = decode_internal::load_u16(src), dmin_bits = decode_internal::load_u16(src + 2);
    if ((d_bits & 0x7c00u) == 0x7c00u || (dmin_bits & 0x7c00u) == 0x7c00u) return false;  // Inf or NaN
    // A half is an integer times 2^(max(field, 1) - 25); c is the smaller exponent of the two.
    const uint32_t d_field = std::max((d_bits >> 10) & 0x1fu, 1u), dmin_field = std::max((dmin_bits >> 10) & 0x1fu, 1u);
    const int c = static_cast<int>(std::min(d_field, dmin_field)) - 25;
    const f32x8 halves = Cvt::half8(u16x8{d_bits, dmin_bits});
    const float to_units = std::bit_cast<float>(static_cast<uint32_t>(127 - c) << 23);  // 2^-c, c in [-24, 5]
    u32x8 scale, minimum;
    q4_k_scales<Cvt>(src + 4, scale, minimum);
    // The decoder's own float32 products (exact: 11 times 6 bits), then A_j and B_j: the same
    // products in units of 2^c, integers, scaled exactly by a power of two.
    const f32x8 d1 = splat<f32x8>(halves[0]) * __builtin_convertvector(bits<i32x8>(scale), f32x8);
    const f32x8 m1 = splat<f32x8>(halves[1]) * __builtin_convertvector(bits<i32x8>(minimum), f32x8);
    const f32x8 a = d1 * to_units, bm = m1 * to_units;
    // |B_j| <= 2^24 and |15 A_j - B_j| <= 2^24, checked a little more strictly as
    // 15 |A_j| + |B_j| <= 2^24 (in float64: at most 51-bit integers, exact).
    const f64x8 a64 = Cvt::widen(a), b64 = Cvt::widen(bm);
    const f64x8 reach = 15.0 * magnitude_of(a64) + magnitude_of(b64);  // >= |v| of the sub-block
    if (any_lane<Cvt>(reach > 0x1p24)) return false;
    const std::byte* qs = src + 16;
    const NibbleStats q = nibble_stats<Cvt>(qs);
    // Σv_j = A_j Σq_j - 32 B_j: integers below 2^34 (from products of at most 26 bits), and their
    // sum below 2^37: exact in float64, in any order.
    const f64x8 sub_sums = a64 * Cvt::widen(bits<i32x8>(q.sum)) - 32.0 * b64;
    // Σv²_j = A_j (A_j Σq²_j - 2 B_j Σq_j) + 32 B_j²: every term below 2^62, the result at most 2^53.
    const i64x8 ai = Cvt::widen_i64(__builtin_convertvector(a, i32x8));
    const i64x8 bi = Cvt::widen_i64(__builtin_convertvector(bm, i32x8));
    const i64x8 s1 = Cvt::widen_i64(bits<i32x8>(q.sum)), s2 = Cvt::widen_i64(bits<i32x8>(q.squares));
    const int64_t block_squares = reduce_add(ai * (ai * s2 - 2 * bi * s1) + 32 * bi * bi);
    if (block_squares > (int64_t{1} << 53)) return false;  // beyond exact conversion
    total += halving_lanes(sub_sums) * power_of_two(c);
    magnitude += 32.0 * halving_lanes(reach) * power_of_two(c);
    squares += static_cast<double>(block_squares) * power_of_two(2 * c);
    unit = std::min(unit, c);
    // Extremes by the decoder's own float operations (exact here), so they carry its zero signs.
    const f32x8 low = __builtin_convertvector(bits<i32x8>(q.low), f32x8);
    const f32x8 high = __builtin_convertvector(bits<i32x8>(q.high), f32x8);
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
    if (any_lane<Cvt>(hit | all_zero)) {
      for (int i = 0; i < 8; ++i) {
        if (all_zero[i] != 0) zeros += 32;
        if (hit[i] != 0) zeros += count_quant(qs, kFoldOrder[i], static_cast<uint32_t>(q0[i]));
      }
    }
  }
  // The scaled terms are multiples of 2^unit (2^2unit), the squares' and magnitudes' non-negative:
  // the first addition to round would have left its total at 2^53 units or more. Below that, no
  // addition rounded, and every partial sum of the values, bounded by the magnitudes, was exact.
  if (!(magnitude < power_of_two(53 + unit)) || !(squares < power_of_two(53 + 2 * unit))) return false;
  if (total == 0 || squares == 0) return false;  // the tree decides the sign of a zero
  sum = total;
  sum_sq = squares;
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
