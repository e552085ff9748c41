// Q8_0 and Q4_K, ggml's quantized blocks: decoders bit-identical to src/core/decode (the same
// float operations in the same order), and each type's exact-sum shortcut as a block policy of
// the one skeleton in kernels.h (exact_segment). Include only from kernels.h.
//
// The canonical tree is only an order of float64 additions. When no addition in it can round, its
// result is the exact sum, whatever the order; every partial sum of a segment is a multiple of
// some power of two 2^t and at most the sum of the magnitudes, so while that bound stays below
// 2^53·2^t no addition rounds (the squares likewise with 2^2t). For these blocks the exact sums are
// short formulas in integer quant sums, computed without the tree. A segment whose bounds do not
// hold, or whose exact sum is zero (the tree decides the sign of a zero), runs the tree.
//
// A block policy has kElems values in kBytes bytes per block and adds kGroup blocks at a time:
//   add<Cvt, kWhole>(src, n, partial)  adds n blocks (n == kGroup when kWhole); false refuses
//                                      the segment at once,
//   finish<Cvt>(partial, ExactSums&)    checks the proof's bounds; false refuses the segment,
//   decode(src, blocks, out)            the blocks as float32, for the tree.
#pragma once

#include <algorithm>
#include <bit>
#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "backends/cpu/tile_stats/simd.h"
#include "core/decode/decode_internal.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace tensormorph::cpu::tile_kernel {

using namespace simd;  // NOLINT(google-build-using-namespace): the vocabulary of this file

/// What a shortcut found for a segment: its exact sums, and the lane statistics of its values
/// (merged into the tile's LaneStats).
struct ExactSums {
  double sum = 0;
  double squares = 0;
  i32x8 min_key;      ///< lane-wise smallest order key
  i32x8 max_key;      ///< lane-wise largest order key
  i32x8 minus_zeros;  ///< minus the zeros, summed over the lanes
};

// ---- Q8_0 ------------------------------------------------------------------------------------
//
// 34-byte blocks: an fp16 scale d, then 32 int8 quants q; value = float(q)·d. Every decoded value
// (exact in float32: 8 × 11 bits) is a multiple of 2^t, t the lowest set bit over the blocks' d,
// and a segment's exact sums are Σ_b d_b·Σq and Σ_b d_b²·Σq². Weight-like blocks pass easily; a
// segment that does not (scales spread over more than ~16×, a zero or non-finite scale, a quant of
// -128, which ggml never writes) runs the tree. Per group of 8 blocks everything stays in integers
// until the last step: pairwise byte sums and squares (vpmaddubsw, vpmaddwd), then one fold8 each
// for Σq, Σq², min q and max q, which leaves block kFoldOrder[i] in lane i; the scales are
// gathered in that order too.

/// Quant statistics of 8 blocks of 32 signed quants; lane i holds block kFoldOrder[i].
struct QuantStats {
  i32x8 sum;      ///< Σq
  i32x8 squares;  ///< Σq², meaningless for a block holding -128 (low tells)
  i32x8 low;      ///< smallest q
  i32x8 high;     ///< largest q
};

/// Sign-extends byte 0 of every 32-bit lane.
TM_CPU_INLINE i32x8 low_byte(const i8x32& v) { return (bits<i32x8>(v) << 24) >> 24; }

/// QuantStats of the 8 blocks in q.
template <typename Cvt>
TM_CPU_INLINE QuantStats quant_stats(const i8x32 (&q)[8]) {
  i16x16 pairs[8];
  i32x8 squares[8];
  for (int k = 0; k < 8; ++k) {
    pairs[k] = Cvt::pair_sums(q[k]);
    squares[k] = Cvt::quad_squares(q[k]);
  }
  QuantStats out;
  // |Σq| <= 4096 per block: the partial sums fit 16 bits; the last halving adds the two fields.
  const i32x8 sum2 = bits<i32x8>(fold8(pairs, lane_add));
  out.sum = ((sum2 << 16) >> 16) + (sum2 >> 16);
  out.squares = bits<i32x8>(fold8(squares, lane_add));
  out.low = low_byte(fold_lane_bytes(bits<i8x32>(fold8(q, lane_min)), lane_min));
  out.high = low_byte(fold_lane_bytes(bits<i8x32>(fold8(q, lane_max)), lane_max));
  return out;
}

/// Q8_0's block policy.
struct Q8_0Blocks {
  static constexpr uint32_t kElems = 32;  ///< values per block
  static constexpr uint32_t kBytes = 34;  ///< bytes per block
  static constexpr uint32_t kGroup = 8;   ///< blocks per add: one block per lane

  /// What add gathers over a segment's groups of 8 blocks, lanes in fold order.
  struct Partial {
    f64x8 sum{}, squares{};              ///< Σq·d, Σq²·d²
    f64x8 scale_sum{}, scale_squares{};  ///< Σ|d|, Σd²
    i32x8 min_key = i32x8{} + INT32_MAX, max_key = i32x8{} + INT32_MIN;
    i32x8 minus_zeros{};
    u16x8 refused{};                        ///< lanes with a zero or non-finite scale or a quant of -128
    u16x8 scale_field = u16x8{} + 0xffffu;  ///< smallest exponent field of a scale
  };

  /// Adds the `n` (1..8) blocks starting at `group` to `p`; refusals are only recorded (finish).
  template <typename Cvt, bool kWhole>
  TM_CPU_INLINE static bool add(const std::byte* group, uint32_t n, Partial& p) {
    // The scales in fold order (built in registers: lane stores then a vector load would stall
    // store forwarding); blocks past n read as 0.
    const auto half_at = [&](uint32_t b) {
      return kWhole || b < n ? decode_internal::load_u16(group + b * kBytes) : uint16_t{0};
    };
    const u16x8 halves = {half_at(0), half_at(2), half_at(4), half_at(6), half_at(1), half_at(3), half_at(5), half_at(7)};
    const u16x8 magnitude = halves & 0x7fffu;
    i32x8 in_segment = i32x8{} - 1;
    u16x8 in_segment16 = u16x8{} + 0xffffu;
    if constexpr (!kWhole) {
      const i32x8 lane_block = {kFoldOrder[0], kFoldOrder[1], kFoldOrder[2], kFoldOrder[3],
                                kFoldOrder[4], kFoldOrder[5], kFoldOrder[6], kFoldOrder[7]};
      in_segment = lane_block < static_cast<int32_t>(n);
      in_segment16 = __builtin_convertvector(in_segment, u16x8);
    }
    // Zero or non-finite scales refuse: lanes of the segment outside [0x0001, 0x7bff].
    p.refused |= in_segment16 & ((magnitude == 0) | (magnitude >= 0x7c00u));
    // Every |d| is a multiple of 2^(max(e, 1) - 25), e its exponent field: t is at least the
    // smallest of those (ignoring trailing zero bits only makes the proof stricter).
    const u16x8 field = (magnitude >> 10) | ~in_segment16;  // lanes past n: 0xffff
    p.scale_field = field < p.scale_field ? field : p.scale_field;
    const f32x8 scales = Cvt::half8(halves);
    const f64x8 wide = Cvt::widen(scales);
    p.scale_sum += Cvt::widen(Cvt::half8(magnitude));  // |d|; lanes past n are zero
    p.scale_squares += wide * wide;

    i8x32 q[8];
    i8x32 zero_lanes{};
    for (uint32_t b = 0; b < 8; ++b) {
      q[b] = kWhole || b < n ? load<i8x32>(group + b * kBytes + 2) : i8x32{};
      if (kWhole || b < n) zero_lanes += q[b] == 0;  // at most 8 blocks: -8 per lane at most
    }
    const QuantStats s = quant_stats<Cvt>(q);
    p.refused |= __builtin_convertvector(in_segment & (s.low == -128), u16x8);
    // q·d is monotone in q, and these are the very products the decoder forms.
    const i32x8 falling = bits<i32x8>(scales) < 0;
    const f32x8 low = __builtin_convertvector(s.low, f32x8), high = __builtin_convertvector(s.high, f32x8);
    const i32x8 at_min = order_key((falling != 0 ? high : low) * scales);
    const i32x8 at_max = order_key((falling != 0 ? low : high) * scales);
    p.min_key = min(p.min_key, in_segment != 0 ? at_min : i32x8{} + INT32_MAX);
    p.max_key = max(p.max_key, in_segment != 0 ? at_max : i32x8{} + INT32_MIN);
    // Σq·d and Σq²·d² are exact in float64 (at most 24 and 41 bits), and so is every sum of them
    // while the bounds of finish hold.
    p.sum += Cvt::widen(s.sum) * wide;
    p.squares += Cvt::widen(s.squares) * (wide * wide);
    p.minus_zeros += Cvt::quad_sums(zero_lanes);
    return true;
  }

  /// The segment's exact sums from `p`; false when a block refused or the bounds do not hold.
  template <typename Cvt>
  TM_CPU_INLINE static bool finish(const Partial& p, ExactSums& out) {
    if (reduce_or(p.refused) != 0) return false;
    const int t_min = static_cast<int>(std::max<uint32_t>(reduce_min(p.scale_field), 1)) - 25;
    // Magnitude bounds: |q| <= 128 over 32 quants, q^2 <= 2^14; both sums are over the blocks.
    const double magnitude_bound = halving_lanes(p.scale_sum) * 0x1p12;
    const double square_bound = halving_lanes(p.scale_squares) * 0x1p19;
    if (magnitude_bound >= power_of_two(52 + t_min) || square_bound >= power_of_two(52 + 2 * t_min)) {
      return false;
    }
    out.sum = halving_lanes(p.sum);
    out.squares = halving_lanes(p.squares);
    out.min_key = p.min_key;
    out.max_key = p.max_key;
    out.minus_zeros = p.minus_zeros;
    return true;
  }

  /// Decodes `blocks` blocks to float32 like src/core/decode: value = float(q) * d.
  TM_CPU_INLINE static void decode(const std::byte* src, uint64_t blocks, float* out) {
    for (uint64_t b = 0; b < blocks; ++b, src += kBytes, out += kElems) {
      const float d = decode_internal::half_bits_to_float(decode_internal::load_u16(src));
      for (uint32_t h = 0; h < 2; ++h) {
        f32x8 lo, hi;
        widen16(__builtin_convertvector(load<i8x16>(src + 2 + 16 * h), i16x16), lo, hi);
        store(out + 16 * h, lo * d);
        store(out + 16 * h + 8, hi * d);
      }
    }
  }
};

// ---- Q4_K ------------------------------------------------------------------------------------
//
// A 144-byte super-block holds 8 sub-blocks of 32 four-bit quants q, decoded in float32 as
// v = (d·sc)·q − (dmin·m) with d, dmin half floats and sc, m six-bit integers. In integers:
// d = D·2^a, dmin = M·2^b, c = min(a, b), and v = 2^c·(A·q − B) with A = D·sc·2^(a−c) and
// B = M·m·2^(b−c). When |B| and |15A − B| are at most 2^24, every value of the sub-block is
// exactly that integer times 2^c (D·sc·q has at most 21 bits, so no float32 operation of the
// decoder rounds), and a segment's sums are integer formulas in each sub-block's Σq and Σq²:
//   Σv = 2^c·(A·Σq − 32B),   Σv² = 2^2c·(A²·Σq² − 2AB·Σq + 32B²).
// Every partial sum of the tree is a multiple of 2^c_min (the smallest c of the segment) and at
// most Σ|v| in magnitude, so Σ|v| < 2^53·2^c_min suffices, and Σv² < 2^53·2^2c_min for the
// squares. Extremes follow from each sub-block's smallest and largest quant (v is strictly
// monotone in q unless d·sc is zero), zeros from the single quant, if any, with A·q = B. A segment
// with a non-finite scale, or a decode that would round, runs the tree.

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

/// Q4_K's block policy.
struct Q4_KBlocks {
  static constexpr uint32_t kElems = 256;  ///< values per super-block
  static constexpr uint32_t kBytes = 144;  ///< bytes per super-block
  static constexpr uint32_t kGroup = 1;    ///< super-blocks per add: its sub-blocks fill the lanes

  /// Each super-block's sums are formed in its own unit 2^c, exactly (float64 where every step is
  /// an integer below 2^53, 64-bit integers for the squares, whose terms may cancel), then scaled
  /// and added here in float64; those additions are exact when the totals of the magnitudes and of
  /// the squares stay below 2^53 units of the smallest c (finish checks).
  struct Partial {
    double total = 0, magnitude = 0, squares = 0;
    int unit = INT32_MAX;  ///< the smallest c so far
    i32x8 min_key = i32x8{} + INT32_MAX, max_key = i32x8{} + INT32_MIN;
    uint32_t zeros = 0;
  };

  /// Adds the super-block at `src` to `p`; false when its scales refuse the segment.
  template <typename Cvt, bool>
  TM_CPU_INLINE static bool add(const std::byte* src, uint32_t, Partial& p) {
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
    p.total += halving_lanes(sub_sums) * power_of_two(c);
    p.magnitude += 32.0 * halving_lanes(reach) * power_of_two(c);
    p.squares += static_cast<double>(block_squares) * power_of_two(2 * c);
    p.unit = std::min(p.unit, c);
    // Extremes by the decoder's own float operations (exact here), so they carry its zero signs.
    const f32x8 low = __builtin_convertvector(bits<i32x8>(q.low), f32x8);
    const f32x8 high = __builtin_convertvector(bits<i32x8>(q.high), f32x8);
    const f32x8 at_low = d1 * low - m1, at_high = d1 * high - m1;
    const i32x8 falling = bits<i32x8>(d1) < 0;
    p.min_key = min(p.min_key, order_key(falling != 0 ? at_high : at_low));
    p.max_key = max(p.max_key, order_key(falling != 0 ? at_low : at_high));
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
        if (all_zero[i] != 0) p.zeros += 32;
        if (hit[i] != 0) p.zeros += count_quant(qs, kFoldOrder[i], static_cast<uint32_t>(q0[i]));
      }
    }
    return true;
  }

  /// The segment's exact sums from `p`; false when the totals reach 2^53 units.
  template <typename Cvt>
  TM_CPU_INLINE static bool finish(const Partial& p, ExactSums& out) {
    // The scaled terms are multiples of 2^unit (2^2unit), the squares' and magnitudes'
    // non-negative: the first addition to round would have left its total at 2^53 units or more.
    // Below that, no addition rounded, and every partial sum of the values, bounded by the
    // magnitudes, was exact.
    if (!(p.magnitude < power_of_two(53 + p.unit)) || !(p.squares < power_of_two(53 + 2 * p.unit))) return false;
    out.sum = p.total;
    out.squares = p.squares;
    out.min_key = p.min_key;
    out.max_key = p.max_key;
    out.minus_zeros = i32x8{} - i32x8{static_cast<int32_t>(p.zeros)};  // lane 0 only
    return true;
  }

  /// Decodes `blocks` super-blocks to float32 like src/core/decode (decode_ggml_kquants.cpp).
  TM_CPU_INLINE static void decode(const std::byte* src, uint64_t blocks, float* out) {
    for (uint64_t b = 0; b < blocks; ++b, src += kBytes, out += kElems) {
      const float d = decode_internal::half_bits_to_float(decode_internal::load_u16(src));
      const float dmin = decode_internal::half_bits_to_float(decode_internal::load_u16(src + 2));
      const std::byte* packed = src + 4;
      const std::byte* qs = src + 16;
      for (uint32_t p = 0; p < 4; ++p) {
        uint32_t scale[2], minimum[2];
        for (uint32_t h = 0; h < 2; ++h) {
          const uint32_t j = 2 * p + h;
          const auto byte = [packed](uint32_t i) { return static_cast<uint32_t>(packed[i]); };
          if (j < 4) {
            scale[h] = byte(j) & 63u;
            minimum[h] = byte(j + 4) & 63u;
          } else {
            scale[h] = (byte(j + 4) & 0xfu) | ((byte(j - 4) >> 6) << 4);
            minimum[h] = (byte(j + 4) >> 4) | ((byte(j) >> 6) << 4);
          }
        }
        const float d_lo = d * static_cast<float>(scale[0]);
        const float m_lo = dmin * static_cast<float>(minimum[0]);
        const float d_hi = d * static_cast<float>(scale[1]);
        const float m_hi = dmin * static_cast<float>(minimum[1]);
        for (uint32_t g = 0; g < 2; ++g) {
          const u8x16 q = load<u8x16>(qs + 32 * p + 16 * g);
          f32x8 lo0, lo1, hi0, hi1;
          widen16(__builtin_convertvector(q & 0xf, i16x16), lo0, lo1);
          widen16(__builtin_convertvector(q >> 4, i16x16), hi0, hi1);
          store(out + 64 * p + 16 * g, d_lo * lo0 - m_lo);
          store(out + 64 * p + 16 * g + 8, d_lo * lo1 - m_lo);
          store(out + 64 * p + 32 + 16 * g, d_hi * hi0 - m_hi);
          store(out + 64 * p + 32 + 16 * g + 8, d_hi * hi1 - m_hi);
        }
      }
    }
  }
};

}  // namespace tensormorph::cpu::tile_kernel

#pragma GCC diagnostic pop
