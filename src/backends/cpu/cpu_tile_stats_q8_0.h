// Q8_0 without the tree: the exact-sum shortcut for ggml's 8-bit blocks (the Q4_K one is in
// cpu_tile_stats_q4_k.h). Include only from cpu_tile_stats_isa.h.
//
// The canonical tree is only an order of float64 additions. When no addition in it can round, its
// result is the exact sum, whatever the order, and a Q8_0 segment's exact sum is a short formula in
// integer quant sums: Σ_b d_b·Σq and Σ_b d_b²·Σq². Proof, per segment: every decoded value q·d_b
// (exact in float32: 8 × 11 bits) is a multiple of 2^t, t the lowest set bit over the blocks' d;
// so is every partial sum of the tree, and every one is at most the sum of the magnitudes. While
// that bound stays below 2^52·2^t every partial sum is representable, so no addition rounds. The
// squares likewise with 2^(2t). Weight-like blocks pass easily; a segment that does not (scales
// spread over more than ~16×, a zero or non-finite scale, an exact sum of zero whose sign the
// tree decides, a quant of -128, which ggml never writes) runs the tree.
//
// Per group of 8 blocks everything stays in integers until the last step: pairwise byte sums and
// squares (vpmaddubsw, vpmaddwd), then one fold8 each for Σq, Σq², min q and max q, which leaves
// block kFoldOrder[i] in lane i; the scales are gathered in that order too.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>

#include "backends/cpu/cpu_tile_stats_kernel.h"

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace tensormorph::cpu::tile_kernel {

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

/// What q8_0_exact_segment gathers over a segment's groups of 8 blocks, lanes in fold order.
struct Q8_0Partial {
  f64x8 sum{}, squares{};              ///< Σq·d, Σq²·d²
  f64x8 scale_sum{}, scale_squares{};  ///< Σ|d|, Σd²
  i32x8 min_key = i32x8{} + INT32_MAX, max_key = i32x8{} + INT32_MIN;
  i32x8 minus_zeros{};
  u16x8 refused{};                     ///< lanes with a zero or non-finite scale or a quant of -128
  u16x8 scale_field = u16x8{} + 0xffffu;  ///< smallest exponent field of a scale
};

/// Adds `n` (1..8) blocks starting at `group` to `p`; kWhole when n is 8.
template <typename Cvt, bool kWhole>
TM_CPU_INLINE void q8_0_group(const std::byte* group, uint32_t n, Q8_0Partial& p) {
  // The scales in fold order (built in registers: lane stores then a vector load would stall
  // store forwarding); blocks past n read as 0.
  const auto half_at = [&](uint32_t b) { return kWhole || b < n ? decode_internal::load_u16(group + b * 34) : uint16_t{0}; };
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
    q[b] = kWhole || b < n ? load<i8x32>(group + b * 34 + 2) : i8x32{};
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
  // while the bounds of q8_0_exact_segment hold.
  p.sum += Cvt::widen(s.sum) * wide;
  p.squares += Cvt::widen(s.squares) * (wide * wide);
  p.minus_zeros += Cvt::quad_sums(zero_lanes);
}

/// The row sum and sum of squares of a Q8_0 segment of `blocks` whole blocks by the shortcut above,
/// observing its values into `stats`; false, with `stats` untouched, when the proof does not hold.
template <typename Cvt>
TM_CPU_INLINE bool q8_0_exact_segment(const std::byte* src, uint64_t blocks, LaneStats& stats, double& sum,
                                      double& sum_sq) {
  Q8_0Partial p;
  uint64_t first = 0;
  for (; first + 8 <= blocks; first += 8) q8_0_group<Cvt, true>(src + first * 34, 8, p);
  if (first < blocks) q8_0_group<Cvt, false>(src + first * 34, static_cast<uint32_t>(blocks - first), p);
  if (reduce_or(p.refused) != 0) return false;
  const int t_min = static_cast<int>(std::max<uint32_t>(reduce_min(p.scale_field), 1)) - 25;
  // Magnitude bounds: |q| <= 128 over 32 quants, q^2 <= 2^14; both sums are over the blocks.
  const double magnitude_bound = halving_lanes(p.scale_sum) * 0x1p12;
  const double square_bound = halving_lanes(p.scale_squares) * 0x1p19;
  if (magnitude_bound >= power_of_two(52 + t_min) || square_bound >= power_of_two(52 + 2 * t_min)) {
    return false;
  }
  const double exact_sum = halving_lanes(p.sum);
  const double exact_sq = halving_lanes(p.squares);
  if (exact_sum == 0 || exact_sq == 0) return false;
  sum = exact_sum;
  sum_sq = exact_sq;
  stats.min_key = min(stats.min_key, p.min_key);
  stats.max_key = max(stats.max_key, p.max_key);
  stats.minus_zeros += p.minus_zeros;
  return true;
}

/// Q8_0 items: the exact shortcut above where it holds, the tree elsewhere.
template <typename F32>
TM_CPU_INLINE void process_q8_0(const ItemSpec& item, KernelScratch& scratch) {
  process_exact_or_tree<F32, 32, 34>(
      item, scratch,
      [](const std::byte* src, uint64_t blocks, LaneStats& stats, double& sum, double& sum_sq) __attribute__((always_inline)) {
        return q8_0_exact_segment<typename F32::Cvt>(src, blocks, stats, sum, sum_sq);
      },
      [](const std::byte* src, uint64_t blocks, float* out) __attribute__((always_inline)) { decode_q8_0(src, blocks, out); });
}

}  // namespace tensormorph::cpu::tile_kernel

#pragma GCC diagnostic pop
