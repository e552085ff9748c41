// The tile-statistics item kernels, written once over portable vectors and compiled per
// instruction set by the kernels_*.cpp units (TM_DEFINE_TILE_KERNELS at the end). Include only
// from there (and from tests that call a kernel piece directly).
//
// Fast path: it assumes every value is finite. Each row segment's slots are summed with the
// canonical halving tree of docs/COMPUTE.md (vector k of T/8 pairs with vector k + T/16, the
// first two levels fused into the load loop, the last three inside one vector), min/max are
// tracked as monotone integer keys, which also reveal any NaN/Inf: such a tile is recomputed
// by the reference code afterwards, so the fast path never needs to be right about it.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <type_traits>

#include "backends/cpu/tile_stats/quantized.h"
#include "backends/cpu/tile_stats/simd.h"
#include "backends/cpu/tile_stats/tile_stats.h"
#include "compute/ops/reference.h"
#include "core/decode/decode_internal.h"
#include "tensormorph/decode.h"

// See simd.h: vectors only travel between always_inline functions.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace tensormorph::cpu::tile_kernel {

using namespace simd;  // NOLINT(google-build-using-namespace): the vocabulary of this file

/// Lane-wise partial statistics of one tile, observed on the widened float32 values at the
/// tree's leaves (float32 storage and decoded blocks).
struct LaneStats {
  i32x8 min_key;
  i32x8 max_key;
  i32x8 minus_zeros;  ///< minus the number of zeros seen in each lane

  static constexpr bool kAtLeaves = true;  ///< observes the tree's leaves

  TM_CPU_INLINE static LaneStats fresh() { return {i32x8{} + INT32_MAX, i32x8{} + INT32_MIN, i32x8{}}; }

  /// Observes a leaf of the tree.
  TM_CPU_INLINE void leaf(const f32x8& v) {
    const i32x8 key = order_key(v);
    min_key = min(min_key, key);
    max_key = max(max_key, key);
    minus_zeros += (v == 0.0f);
  }

  /// Like leaf() for lanes where `valid` is all ones; other lanes are ignored.
  TM_CPU_INLINE void leaf_masked(const f32x8& v, const i32x8& valid) {
    const i32x8 key = order_key(v);
    min_key = min(min_key, valid != 0 ? key : i32x8{} + INT32_MAX);
    max_key = max(max_key, valid != 0 ? key : i32x8{} + INT32_MIN);
    minus_zeros += (v == 0.0f) & valid;
  }

  /// Nothing to do ahead of a segment's tree: the leaves observe.
  template <typename Element>
  TM_CPU_INLINE void segment(const Element*, uint32_t) {}

  /// Folds the lanes into a tile's scalar partial.
  TM_CPU_INLINE void fold(TilePartial& partial) const {
    partial.min_key = std::min(partial.min_key, reduce_min(min_key));
    partial.max_key = std::max(partial.max_key, reduce_max(max_key));
    partial.zeros += reduce_add(bits<u32x8>(i32x8{} - minus_zeros));
  }
};

/// The float32 bits of stored 16-bit floats, for StoredStats.
struct BrainBits {
  TM_CPU_INLINE static uint32_t float_bits(uint16_t stored) { return uint32_t{stored} << 16; }
};
struct HalfBits {
  TM_CPU_INLINE static uint32_t float_bits(uint16_t stored) {
    return std::bit_cast<uint32_t>(decode_internal::half_bits_to_float(stored));
  }
};

/// Statistics of 16-bit float storage (bfloat16, half) observed on the stored bits, in one pass
/// over each segment ahead of its tree; the leaves then only widen. `Words` is the instruction
/// set's widest vector of 16-bit lanes (32 with AVX-512, 16 with AVX2) and `WordPairs` the same
/// bytes as 32-bit lanes: observing the widened floats at the leaves would take 8 lanes per
/// operation instead of 16 or 32. (Float32 storage keeps LaneStats: its keys are 32 bits, so a
/// separate pass would at most double the lanes and would read each segment twice.) Both formats
/// are sign-magnitude: order_key's formula on 16 bits orders them, NaN beyond ±Inf. `Words` is
/// never wider than the instruction set's registers: GCC lowers the selects of a wider vector
/// lane by lane through general registers.
template <typename Format, typename Words, typename WordPairs>
struct StoredStats {
  static constexpr int kWords = sizeof(Words) / sizeof(int16_t);  ///< 16-bit lanes per vector
  static_assert(sizeof(WordPairs) == sizeof(Words));

  Words min_key;
  Words max_key;
  WordPairs minus_zeros;  ///< minus the zeros seen, per pair of 16-bit lanes

  static constexpr bool kAtLeaves = false;  ///< observes whole segments ahead of the tree

  TM_CPU_INLINE static StoredStats fresh() {
    return {Words{} + int16_t{INT16_MAX}, Words{} + int16_t{INT16_MIN}, WordPairs{}};
  }

  TM_CPU_INLINE void leaf(const f32x8&) {}
  TM_CPU_INLINE void leaf_masked(const f32x8&, const i32x8&) {}

  /// Observes the `w` stored elements of a segment.
  TM_CPU_INLINE void segment(const uint16_t* src, uint32_t w) {
    Words minus_zeros16 = {};  // per segment: at most 4096 / 8 per lane, no overflow
    uint32_t i = 0;
    for (; i + kWords <= w; i += kWords) observe(load<Words>(src + i), minus_zeros16);
    if (i < w) {
      Words lane;
      for (int k = 0; k < kWords; ++k) lane[k] = static_cast<int16_t>(k);
      const auto seen = static_cast<int16_t>(kWords - (w - i));
      if (w >= kWords) {
        // The segment's last kWords elements, of which the first `seen` were observed above.
        observe_masked(load<Words>(src + w - kWords), lane >= seen, minus_zeros16);
      } else {
        uint16_t tail[kWords] = {};
        std::memcpy(tail, src, w * sizeof(uint16_t));
        observe_masked(load<Words>(tail), lane < static_cast<int16_t>(w), minus_zeros16);
      }
    }
    const WordPairs pairs = bits<WordPairs>(minus_zeros16);
    minus_zeros += ((pairs << 16) >> 16) + (pairs >> 16);
  }

  /// Folds the lanes into a tile's scalar partial (keys become float32 order keys).
  TM_CPU_INLINE void fold(TilePartial& partial) const {
    int16_t lo = min_key[0], hi = max_key[0];
    for (int i = 1; i < kWords; ++i) {
      lo = std::min<int16_t>(lo, min_key[i]);
      hi = std::max<int16_t>(hi, max_key[i]);
    }
    partial.min_key = std::min(partial.min_key, float_key(lo));
    partial.max_key = std::max(partial.max_key, float_key(hi));
    int64_t zeros = 0;
    for (int i = 0; i < kWords / 2; ++i) zeros -= minus_zeros[i];
    partial.zeros += static_cast<uint64_t>(zeros);
  }

 private:
  TM_CPU_INLINE static Words key_of(const Words& x) { return x ^ ((x >> 15) & 0x7fff); }

  /// Extremes of the keys, and zeros (either sign).
  TM_CPU_INLINE void observe(const Words& x, Words& minus_zeros16) {
    const Words key = key_of(x);
    min_key = key < min_key ? key : min_key;
    max_key = key > max_key ? key : max_key;
    minus_zeros16 = (x & 0x7fff) == 0 ? minus_zeros16 - 1 : minus_zeros16;  // one masked subtract
  }

  /// Like observe() for lanes where `valid` is all ones; other lanes are ignored.
  TM_CPU_INLINE void observe_masked(const Words& x, const Words& valid, Words& minus_zeros16) {
    const Words key = key_of(x);
    const Words min_lane = valid != 0 ? key : Words{} + int16_t{INT16_MAX};
    const Words max_lane = valid != 0 ? key : Words{} + int16_t{INT16_MIN};
    min_key = min_lane < min_key ? min_lane : min_key;
    max_key = max_lane > max_key ? max_lane : max_key;
    minus_zeros16 += ((x & 0x7fff) == 0) & valid;
  }

  /// The float32 order key of the stored value whose key is `key` (monotone, so the extreme stays
  /// the extreme; NaN and Inf keep float32 keys at or beyond ±Inf).
  TM_CPU_INLINE static int32_t float_key(int16_t key) {
    const auto stored = static_cast<uint16_t>(key ^ ((key >> 15) & 0x7fff));
    const auto b = static_cast<int32_t>(Format::float_bits(stored));
    return b ^ ((b >> 31) & 0x7fffffff);
  }
};

/// How a tile kernel observes the values of source `Src` in the segments of large tiles (walked
/// row by row); small tiles observe leaf by leaf (tile_by_tile).
template <typename Src>
struct StatsOf {
  using type = LaneStats;
};

template <typename Convert>
struct StatsOf<BF16Source<Convert>> {
  using type = StoredStats<BrainBits, typename Convert::Words, typename Convert::WordPairs>;
};
template <typename Convert>
struct StatsOf<F16Source<Convert>> {
  using type = StoredStats<HalfBits, typename Convert::Words, typename Convert::WordPairs>;
};

/// One row segment of `w` (1..tile) stored elements.
template <typename Src>
struct Segment {
  const typename Src::Element* src;
  uint32_t full;                          ///< whole vectors of 8
  uint32_t rem;                           ///< elements in the last, partial vector
  typename Src::Element tail[kLanes];     ///< that partial vector, zero padded
  i32x8 tail_valid;

  TM_CPU_INLINE Segment(const typename Src::Element* p, uint32_t w) : src(p), full(w / kLanes), rem(w % kLanes) {
    std::memset(tail, 0, sizeof tail);
    if (rem != 0) std::memcpy(tail, p + full * kLanes, rem * sizeof(typename Src::Element));
    const i32x8 lane = {0, 1, 2, 3, 4, 5, 6, 7};
    tail_valid = lane < static_cast<int32_t>(rem);
  }

  /// Vector `index` widened to float64, observed into `stats`; zero beyond the segment.
  template <typename Stats>
  TM_CPU_INLINE f64x8 fetch(uint32_t index, Stats& stats) const {
    if (index < full) {
      const f32x8 v = Src::load8(src + index * kLanes);
      stats.leaf(v);
      return Src::Cvt::widen(v);
    }
    if (index == full && rem != 0) {
      const f32x8 v = Src::load8(tail);
      stats.leaf_masked(v, tail_valid);
      return Src::Cvt::widen(v);
    }
    return f64x8{};
  }

  /// Vector `index`, known to be whole.
  template <typename Stats>
  TM_CPU_INLINE f64x8 fetch_full(uint32_t index, Stats& stats) const {
    const f32x8 v = Src::load8(src + index * kLanes);
    stats.leaf(v);
    return Src::Cvt::widen(v);
  }
};

/// The row sum and sum of squares of a segment of `w` elements in a tile of `tile` slots.
/// `tree` holds at least tile / 2 doubles (2 * tile / 32 vectors of 8). Only the first
/// P = max(8, bit_ceil(w)) slots can be non-zero; the halving tree over the T - P zero slots
/// only turns a -0.0 result into +0.0, so it is replaced by one "+ 0.0" when P < T.
/// The halving tree over the kCount vectors kFirst, kFirst + kStride, ... of a whole segment, each
/// observed into `stats`: sum in `s`, sum of squares in `q`. Evaluated depth first (the tree over
/// x_0..x_{n-1} is the tree over the even x plus the tree over the odd x), so only log2(kCount)
/// partial sums are live and everything stays in registers.
template <typename Src, uint32_t kFirst, uint32_t kStride, uint32_t kCount, typename Stats>
TM_CPU_INLINE void vector_tree(const typename Src::Element* src, Stats& stats, f64x8& s, f64x8& q) {
  if constexpr (kCount == 1) {
    const f32x8 v = Src::load8(src + kFirst * kLanes);
    stats.leaf(v);
    s = Src::Cvt::widen(v);
    q = s * s;
  } else {
    f64x8 even_s, even_q, odd_s, odd_q;
    vector_tree<Src, kFirst, 2 * kStride, kCount / 2>(src, stats, even_s, even_q);
    vector_tree<Src, kFirst + kStride, 2 * kStride, kCount / 2>(src, stats, odd_s, odd_q);
    s = even_s + odd_s;
    // Over two leaves, even_q + odd_q is even_s² + odd_q: one FMA (the unused square is dropped).
    if constexpr (kCount == 2) {
      q = Src::Cvt::square_add(even_s, odd_q);
    } else {
      q = even_q + odd_q;
    }
  }
}

/// row_segment for a whole segment of kVectors vectors (tile = 8 kVectors): the same operations in
/// the same tree as the generic code below, in registers instead of its scratch array.
/// The four quarter trees are kept apart by compiler barriers: GCC would otherwise hoist every
/// load of the segment to the top and spill most of them.
template <typename Src, uint32_t kVectors, typename Stats>
TM_CPU_INLINE void whole_segment(const typename Src::Element* src, Stats& stats, double& sum, double& sum_sq) {
  static_assert(kVectors >= 4);
  constexpr uint32_t kQuarter = kVectors / 4;
  f64x8 s0, q0, s1, q1, s2, q2, s3, q3;
  vector_tree<Src, 0, 4, kQuarter>(src, stats, s0, q0);
  asm volatile("" ::: "memory");
  vector_tree<Src, 2, 4, kQuarter>(src, stats, s2, q2);
  asm volatile("" ::: "memory");
  vector_tree<Src, 1, 4, kQuarter>(src, stats, s1, q1);
  asm volatile("" ::: "memory");
  vector_tree<Src, 3, 4, kQuarter>(src, stats, s3, q3);
  sum = halving_lanes((s0 + s2) + (s1 + s3));
  sum_sq = halving_lanes((q0 + q2) + (q1 + q3));
}


template <typename Src, typename Stats>
TM_CPU_INLINE void row_segment(const typename Src::Element* src, uint32_t w, uint32_t tile, Stats& stats,
                               double* tree, double& sum, double& sum_sq) {
  stats.segment(src, w);
  // Whole segments of the usual tile sizes: the tree in registers.
  if (w == tile) {
    switch (tile) {
      case 32: return whole_segment<Src, 4>(src, stats, sum, sum_sq);
      case 64: return whole_segment<Src, 8>(src, stats, sum, sum_sq);
      case 128: return whole_segment<Src, 16>(src, stats, sum, sum_sq);
      case 256: return whole_segment<Src, 32>(src, stats, sum, sum_sq);
      default: break;
    }
  }
  const Segment<Src> seg(src, w);
  const uint32_t slots = std::max<uint32_t>(kLanes, std::bit_ceil(w));
  const uint32_t vectors = slots / kLanes;
  f64x8 s, q;
  if (vectors == 1) {
    s = seg.fetch(0, stats);
    q = s * s;
  } else if (vectors == 2) {
    // w > 8, so vector 0 is whole.
    const f64x8 a = seg.fetch_full(0, stats);
    const f64x8 b = seg.fetch(1, stats);
    s = a + b;
    q = a * a + b * b;
  } else {
    // Levels P -> P/2 -> P/4 fused: vector k + k+quarter*2, k+quarter + k+quarter*3. Since
    // w > P/2, the first two quarters are whole; the loop splits where the last quarter is.
    const uint32_t quarter = vectors / 4;
    const uint32_t all_whole = seg.full > 3 * quarter ? std::min(quarter, seg.full - 3 * quarter) : 0;
    double* ts = tree;
    double* tq = tree + quarter * kLanes;
    uint32_t k = 0;
    for (; k < all_whole; ++k) {
      const f64x8 a0 = seg.fetch_full(k, stats);
      const f64x8 a1 = seg.fetch_full(k + quarter, stats);
      const f64x8 a2 = seg.fetch_full(k + 2 * quarter, stats);
      const f64x8 a3 = seg.fetch_full(k + 3 * quarter, stats);
      store(ts + k * kLanes, (a0 + a2) + (a1 + a3));
      store(tq + k * kLanes, (a0 * a0 + a2 * a2) + (a1 * a1 + a3 * a3));
    }
    for (; k < quarter; ++k) {
      const f64x8 a0 = seg.fetch_full(k, stats);
      const f64x8 a1 = seg.fetch_full(k + quarter, stats);
      const f64x8 a2 = seg.fetch(k + 2 * quarter, stats);
      const f64x8 a3 = seg.fetch(k + 3 * quarter, stats);
      store(ts + k * kLanes, (a0 + a2) + (a1 + a3));
      store(tq + k * kLanes, (a0 * a0 + a2 * a2) + (a1 * a1 + a3 * a3));
    }
    for (uint32_t n = quarter; n > 1;) {
      n /= 2;
      for (uint32_t i = 0; i < n; ++i) {
        store(ts + i * kLanes, load<f64x8>(ts + i * kLanes) + load<f64x8>(ts + (i + n) * kLanes));
        store(tq + i * kLanes, load<f64x8>(tq + i * kLanes) + load<f64x8>(tq + (i + n) * kLanes));
      }
    }
    s = load<f64x8>(ts);
    q = load<f64x8>(tq);
  }
  sum = halving_lanes(s);
  sum_sq = halving_lanes(q);
  if (slots < tile) {
    sum += 0.0;
    sum_sq += 0.0;
  }
}

/// Where row r's segment of tile t starts, for storage read in place (`Src` elements).
template <typename Src>
struct DirectRows {
  const ItemSpec& item;
  TM_CPU_INLINE const typename Src::Element* segment(uint64_t row, uint64_t col) const {
    return reinterpret_cast<const typename Src::Element*>(item.data + row * item.row_bytes) + col;
  }
};

/// Rows decoded to float32 into a scratch block of `rows` x `span` values.
struct DecodedRows {
  const float* values;
  uint64_t first_row;
  uint64_t first_col;  ///< column of values[0] in each row (block aligned, <= the item's first column)
  uint64_t span;
  TM_CPU_INLINE const float* segment(uint64_t row, uint64_t col) const {
    return values + (row - first_row) * span + (col - first_col);
  }
};


/// Width of tile column `t` of the item (the last one may be ragged).
TM_CPU_INLINE uint32_t tile_width(const ItemSpec& item, uint32_t t) {
  const uint64_t col = item.col_begin + uint64_t{t} * item.tile;
  return static_cast<uint32_t>(std::min<uint64_t>(item.tile, item.col_end - col));
}

/// Small tiles: tiles [t_begin, t_end) one after the other, all rows of each.
template <typename Src, typename Rows>
TM_CPU_INLINE void tile_by_tile(const ItemSpec& item, double* tree, const Rows& rows, uint32_t t_begin, uint32_t t_end) {
  for (uint32_t t = t_begin; t < t_end; ++t) {
    const uint64_t col = item.col_begin + uint64_t{t} * item.tile;
    const uint32_t w = tile_width(item, t);
    double* sums = item.row_sums + uint64_t{t} * item.slot_stride;
    double* squares = item.row_squares + uint64_t{t} * item.slot_stride;
    // Leaf by leaf: a pass over the stored words of segments this short costs more than it saves.
    LaneStats stats = LaneStats::fresh();
    for (uint64_t r = item.row_begin; r < item.row_end; ++r) {
      const uint64_t slot = r - item.band_row_begin;
      row_segment<Src>(rows.segment(r, col), w, item.tile, stats, tree, sums[slot], squares[slot]);
    }
    stats.fold(item.partials[t]);
  }
}

/// Element k of 8 rows `stride` elements apart (p[0], p[stride], ...) as floats, lane i from row i.
template <typename Src>
TM_CPU_INLINE f32x8 column_of_rows(const typename Src::Element* p, uint64_t stride) {
  if (stride == 1) return Src::load8(p);  // a one-column matrix: the rows are one vector
  const typename Src::Elements8 e = {p[0],          p[stride],     p[2 * stride], p[3 * stride],
                                     p[4 * stride], p[5 * stride], p[6 * stride], p[7 * stride]};
  return Src::convert8(e);
}

/// The sums and squares of 8 narrow rows (w <= 8 elements, `stride` apart) into sums[0..8) and
/// squares[0..8): each row's 8 slots are halving_lanes' tree, here run across vectors whose lane
/// i is row i (slot k of the 8 rows is one vector), so no lane shuffles are needed.
template <typename Src>
TM_CPU_INLINE void eight_narrow_rows(const typename Src::Element* p, uint64_t stride, uint32_t w, bool pad,
                                     LaneStats& stats, double* sums, double* squares) {
  f64x8 x[kLanes], xx[kLanes];
#pragma GCC unroll 8
  for (uint32_t k = 0; k < kLanes; ++k) {
    if (k < w) {
      const f32x8 v = column_of_rows<Src>(p + k, stride);
      stats.leaf(v);
      x[k] = Src::Cvt::widen(v);
      xx[k] = x[k] * x[k];
    } else {
      x[k] = f64x8{};
      xx[k] = f64x8{};
    }
  }
  // halving_lanes: slots i + i+4, then i + i+2, then 0 + 1 (every "+ 0.0" of the padding kept).
  f64x8 sum = ((x[0] + x[4]) + (x[2] + x[6])) + ((x[1] + x[5]) + (x[3] + x[7]));
  f64x8 sum_sq = ((xx[0] + xx[4]) + (xx[2] + xx[6])) + ((xx[1] + xx[5]) + (xx[3] + xx[7]));
  if (pad) {
    sum += 0.0;
    sum_sq += 0.0;
  }
  store(sums, sum);
  store(squares, sum_sq);
}

/// Narrow tiles: one tile column at most kLanes wide and narrower than the tile (the [n, 3] view
/// of a 3x3 convolution, an [n, 1] column). Each row is one vector of the tree's 8 slots, so
/// row_segment would take its one-vector case: these are the same operations (the lanes past w
/// zero, a widen, a square, the lane halvings and the "+ 0.0" of the slots past the vector),
/// eight rows at a time with a row per lane, statistics held in registers across the item's
/// rows. The last (at most 7) rows go through row_segment itself.
template <typename Src, typename Rows>
TM_CPU_INLINE void narrow_rows(const ItemSpec& item, double* tree, const Rows& rows, uint32_t w) {
  LaneStats stats = LaneStats::fresh();
  uint64_t r = item.row_begin;
  if (item.row_end - item.row_begin >= kLanes) {
    const typename Src::Element* first = rows.segment(r, item.col_begin);
    const auto stride = static_cast<uint64_t>(rows.segment(r + 1, item.col_begin) - first);
    for (; r + kLanes <= item.row_end; r += kLanes) {
      eight_narrow_rows<Src>(rows.segment(r, item.col_begin), stride, w, kLanes < item.tile, stats,
                             item.row_sums + (r - item.band_row_begin), item.row_squares + (r - item.band_row_begin));
    }
  }
  for (; r < item.row_end; ++r) {
    const uint64_t slot = r - item.band_row_begin;
    row_segment<Src>(rows.segment(r, item.col_begin), w, item.tile, stats, tree, item.row_sums[slot],
                     item.row_squares[slot]);
  }
  stats.fold(item.partials[0]);
}

/// Whether `item` is narrow_rows' case.
TM_CPU_INLINE bool narrow_item(const ItemSpec& item) {
  return item.tile > kTileByTileMax && item.tiles == 1 && tile_width(item, 0) <= kLanes;
}

/// Tile t's statistics among those fresh_lanes<Stats> made.
template <typename Stats>
TM_CPU_INLINE Stats& lane_stats(std::byte* lanes, uint32_t t) {
  return *std::launder(reinterpret_cast<Stats*>(lanes + t * sizeof(Stats)));
}

/// Runs f on tile t's statistics: statistics the tree's leaves update go through a copy held in
/// registers (in memory each leaf's update would be a store); the others are updated in place
/// (copying StoredStats in and out once per segment stalls on store forwarding).
template <typename Stats, typename F>
TM_CPU_INLINE void with_lane_stats(std::byte* lanes, uint32_t t, const F& f) {
  if constexpr (Stats::kAtLeaves) {
    std::byte* slot = lanes + t * sizeof(Stats);
    Stats local = load<Stats>(slot);
    f(local);
    store(slot, local);
  } else {
    f(lane_stats<Stats>(lanes, t));
  }
}

/// Fresh statistics of type Stats for every tile of the item, in scratch (aligned for vectors).
template <typename Stats>
TM_CPU_INLINE std::byte* fresh_lanes(const ItemSpec& item, KernelScratch& scratch) {
  std::byte* lanes = scratch.lane_stats(item.tiles * sizeof(Stats));
  for (uint32_t t = 0; t < item.tiles; ++t) new (lanes + t * sizeof(Stats)) Stats(Stats::fresh());
  return lanes;
}

/// Folds every tile's statistics into the item's partials.
template <typename Stats>
TM_CPU_INLINE void fold_lanes(const ItemSpec& item, std::byte* lanes) {
  for (uint32_t t = 0; t < item.tiles; ++t) lane_stats<Stats>(lanes, t).fold(item.partials[t]);
}

/// Large tiles: row `r` across every tile of the item; `lanes` holds each tile's statistics.
/// With `ahead` > 0, each tile's segment of row r + ahead (when the item has that row) is
/// prefetched just before the same segment of row `r` is summed.
template <typename Src, typename Rows>
TM_CPU_INLINE void one_row(const ItemSpec& item, double* tree, const Rows& rows, uint64_t r, std::byte* lanes,
                           uint64_t ahead = 0) {
  const bool prefetch = ahead != 0 && r + ahead < item.row_end;
  for (uint32_t t = 0; t < item.tiles; ++t) {
    const uint64_t col = item.col_begin + uint64_t{t} * item.tile;
    const uint32_t w = tile_width(item, t);
    if (prefetch) {
      const auto* p = reinterpret_cast<const std::byte*>(rows.segment(r + ahead, col));
      for (uint64_t off = 0; off < w * sizeof(typename Src::Element); off += 64) __builtin_prefetch(p + off, 0, 3);
    }
    const uint64_t slot = uint64_t{t} * item.slot_stride + (r - item.band_row_begin);
    with_lane_stats<typename StatsOf<Src>::type>(lanes, t, [&](auto& stats) __attribute__((always_inline)) {
      row_segment<Src>(rows.segment(r, col), w, item.tile, stats, tree, item.row_sums[slot], item.row_squares[slot]);
    });
  }
}

/// How far ahead process_direct prefetches float32 storage: at least this many bytes, and at least
/// one row of the item.
inline constexpr uint64_t kPrefetchBytes = 16384;

/// Runs `item` over segments read in place from storage of `Src`. Float32 rows are prefetched
/// ahead: the hardware prefetcher's streams end at every 4 KiB page, and float32, the most bytes
/// per element, is the storage that waits for memory. The 16-bit floats are not: their kernels
/// run from DRAM close to their in-cache speed, and the prefetch instructions only add work.
template <typename Src>
TM_CPU_INLINE void process_direct(const ItemSpec& item, KernelScratch& scratch) {
  double* tree = scratch.tree(item.tile);
  const DirectRows<Src> rows{item};
  if (item.tile <= kTileByTileMax) {
    tile_by_tile<Src>(item, tree, rows, 0, item.tiles);
    return;
  }
  if (narrow_item(item)) {
    narrow_rows<Src>(item, tree, rows, tile_width(item, 0));
    return;
  }
  std::byte* lanes = fresh_lanes<typename StatsOf<Src>::type>(item, scratch);
  uint64_t ahead = 0;  // rows to prefetch ahead; 0: none
  if constexpr (std::is_same_v<typename Src::Element, float>) {
    const uint64_t span_bytes = (item.col_end - item.col_begin) * sizeof(float);
    ahead = std::max<uint64_t>(1, (kPrefetchBytes + span_bytes - 1) / span_bytes);
  }
  for (uint64_t r = item.row_begin; r < item.row_end; ++r) one_row<Src>(item, tree, rows, r, lanes, ahead);
  fold_lanes<typename StatsOf<Src>::type>(item, lanes);
}

/// Runs `item` on float32 values decoded with `decode(src, blocks, out)` from the covering blocks
/// of its columns: small tiles decode a group of columns for all rows (it fits in L2), large
/// tiles one row at a time.
template <typename F32, typename DecodeBlocks>
TM_CPU_INLINE void process_decoded(const ItemSpec& item, KernelScratch& scratch, const DecodeBlocks& decode) {
  double* tree = scratch.tree(item.tile);
  const uint64_t be = item.block_elems;
  const uint32_t group = item.tile <= kTileByTileMax ? std::max<uint32_t>(1, 1024 / item.tile) : item.tiles;
  for (uint32_t t_begin = 0; t_begin < item.tiles; t_begin += group) {
    const uint32_t t_end = std::min(item.tiles, t_begin + group);
    const uint64_t col_begin = item.col_begin + uint64_t{t_begin} * item.tile;
    const uint64_t col_end = std::min<uint64_t>(item.col_end, item.col_begin + uint64_t{t_end} * item.tile);
    const uint64_t first_block = col_begin / be;
    const uint64_t blocks = (col_end + be - 1) / be - first_block;
    const uint64_t span = blocks * be;
    const std::byte* block_data = item.data + first_block * item.block_bytes;
    if (item.tile <= kTileByTileMax) {
      float* values = scratch.decoded((item.row_end - item.row_begin) * span);
      for (uint64_t r = item.row_begin; r < item.row_end; ++r) {
        decode(block_data + r * item.row_bytes, blocks, values + (r - item.row_begin) * span);
      }
      tile_by_tile<F32>(item, tree, DecodedRows{values, item.row_begin, first_block * be, span}, t_begin, t_end);
    } else if (narrow_item(item) && first_block == 0 && blocks * item.block_bytes == item.row_bytes) {
      // Narrow rows that are whole rows of the matrix lie back to back: one decode for the item.
      const uint64_t rows = item.row_end - item.row_begin;
      float* values = scratch.decoded(rows * span);
      decode(block_data + item.row_begin * item.row_bytes, rows * blocks, values);
      narrow_rows<F32>(item, tree, DecodedRows{values, item.row_begin, 0, span}, tile_width(item, 0));
    } else {
      float* values = scratch.decoded(span);
      std::byte* lanes = fresh_lanes<typename StatsOf<F32>::type>(item, scratch);
      for (uint64_t r = item.row_begin; r < item.row_end; ++r) {
        decode(block_data + r * item.row_bytes, blocks, values);
        one_row<F32>(item, tree, DecodedRows{values, r, first_block * be, span}, r, lanes);
      }
      fold_lanes<typename StatsOf<F32>::type>(item, lanes);
    }
  }
}

// ---- The exact-sum shortcuts' skeleton (the block types' policies: quantized.h) ---------------

/// The row sum and sum of squares of a segment of `blocks` whole blocks of `Blocks` by its exact
/// shortcut, observing its values into `stats`; false, with `stats` untouched, when the proof
/// does not hold for the segment (then the tree runs).
template <typename Blocks, typename Cvt>
TM_CPU_INLINE bool exact_segment(const std::byte* src, uint64_t blocks, LaneStats& stats, double& sum,
                                 double& sum_sq) {
  typename Blocks::Partial p;
  uint64_t first = 0;
  for (; first + Blocks::kGroup <= blocks; first += Blocks::kGroup) {
    if (!Blocks::template add<Cvt, true>(src + first * Blocks::kBytes, Blocks::kGroup, p)) return false;
  }
  if constexpr (Blocks::kGroup > 1) {
    if (first < blocks &&
        !Blocks::template add<Cvt, false>(src + first * Blocks::kBytes, static_cast<uint32_t>(blocks - first), p)) {
      return false;
    }
  }
  ExactSums exact;
  if (!Blocks::template finish<Cvt>(p, exact)) return false;
  if (exact.sum == 0 || exact.squares == 0) return false;  // the tree decides the sign of a zero
  sum = exact.sum;
  sum_sq = exact.squares;
  stats.min_key = min(stats.min_key, exact.min_key);
  stats.max_key = max(stats.max_key, exact.max_key);
  stats.minus_zeros += exact.minus_zeros;
  return true;
}

/// Items of a block type with an exact shortcut: segments of large, block-aligned tiles try
/// exact_segment; the others (and small tiles), and every segment the shortcut refuses, decode
/// and run the tree.
template <typename F32, typename Blocks>
TM_CPU_INLINE void process_quantized(const ItemSpec& item, KernelScratch& scratch) {
  constexpr uint32_t kElems = Blocks::kElems;
  const auto decode = [](const std::byte* src, uint64_t blocks, float* out) __attribute__((always_inline)) {
    Blocks::decode(src, blocks, out);
  };
  if (item.tile <= kTileByTileMax || item.tile % kElems != 0 || item.col_begin % kElems != 0) {
    process_decoded<F32>(item, scratch, decode);
    return;
  }
  double* tree = scratch.tree(item.tile);
  float* values = scratch.decoded(item.tile);
  std::byte* lanes = fresh_lanes<LaneStats>(item, scratch);
  for (uint64_t r = item.row_begin; r < item.row_end; ++r) {
    const std::byte* row = item.data + r * item.row_bytes;
    for (uint32_t t = 0; t < item.tiles; ++t) {
      const uint64_t col = item.col_begin + uint64_t{t} * item.tile;
      const uint32_t w = tile_width(item, t);
      const uint64_t slot = uint64_t{t} * item.slot_stride + (r - item.band_row_begin);
      const std::byte* src = row + col / kElems * Blocks::kBytes;
      // The shortcut merges three vectors into the tile's statistics in place; only the tree,
      // which updates them at every leaf, works on a copy in registers.
      if (w % kElems == 0 && exact_segment<Blocks, typename F32::Cvt>(src, w / kElems, lane_stats<LaneStats>(lanes, t),
                                                                     item.row_sums[slot], item.row_squares[slot])) {
        continue;
      }
      with_lane_stats<LaneStats>(lanes, t, [&](LaneStats& stats) __attribute__((always_inline)) {
        decode(src, (w + kElems - 1) / kElems, values);
        row_segment<F32>(values, w, item.tile, stats, tree, item.row_sums[slot], item.row_squares[slot]);
      });
    }
  }
  fold_lanes<LaneStats>(item, lanes);
}

// ---- What the kernel table holds besides the item kernels -----------------------------------

/// ops::halving_sum over `count` (a power of two) slots in place, the levels wider than a vector
/// in vectors (each level's additions are independent, so any grouping of them gives its bits),
/// the last ones by ops::halving_sum itself.
TM_CPU_INLINE double halving_slots(double* slots, uint64_t count) {
  for (; count > kLanes; count /= 2) {
    const uint64_t half = count / 2;
    for (uint64_t i = 0; i < half; i += kLanes) {
      store(slots + i, load<f64x8>(slots + i) + load<f64x8>(slots + i + half));
    }
  }
  return ops::halving_sum(std::span<double>(slots, count));
}

/// decode_to_f32 for the dtypes without a dedicated kernel.
inline void generic_decode(const ItemSpec& item, KernelScratch& scratch, const std::byte* src, uint64_t blocks,
                           float* out) {
  const uint64_t elems = blocks * item.block_elems;
  Status status = decode_to_f32(item.dtype, std::span<const std::byte>(src, blocks * item.block_bytes), elems, out);
  if (!status.ok()) scratch.fail(std::move(status));
}

}  // namespace tensormorph::cpu::tile_kernel

#pragma GCC diagnostic pop

/// Defines PREFIX_kernels, the TileStatsKernels of function attribute TARGET and converter CVT
/// (simd.h), inside namespace tensormorph::cpu: one expansion per instruction set, each of which
/// compiles the always_inline templates above for its own target.
#define TM_DEFINE_TILE_KERNELS(PREFIX, TARGET, CVT)                                                             \
  TARGET void PREFIX##_f32(const ItemSpec& item, KernelScratch& scratch) {                                    \
    tile_kernel::process_direct<simd::F32Source<CVT>>(item, scratch);                                         \
  }                                                                                                           \
  TARGET void PREFIX##_bf16(const ItemSpec& item, KernelScratch& scratch) {                                   \
    tile_kernel::process_direct<simd::BF16Source<CVT>>(item, scratch);                                        \
  }                                                                                                           \
  TARGET void PREFIX##_f16(const ItemSpec& item, KernelScratch& scratch) {                                    \
    tile_kernel::process_direct<simd::F16Source<CVT>>(item, scratch);                                         \
  }                                                                                                           \
  TARGET void PREFIX##_q8_0(const ItemSpec& item, KernelScratch& scratch) {                                   \
    tile_kernel::process_quantized<simd::F32Source<CVT>, tile_kernel::Q8_0Blocks>(item, scratch);             \
  }                                                                                                           \
  TARGET void PREFIX##_q4_k(const ItemSpec& item, KernelScratch& scratch) {                                   \
    tile_kernel::process_quantized<simd::F32Source<CVT>, tile_kernel::Q4_KBlocks>(item, scratch);             \
  }                                                                                                           \
  TARGET void PREFIX##_generic(const ItemSpec& item, KernelScratch& scratch) {                                \
    tile_kernel::process_decoded<simd::F32Source<CVT>>(                                                       \
        item, scratch, [&](const std::byte* src, uint64_t blocks, float* out) __attribute__((always_inline)) { \
          tile_kernel::generic_decode(item, scratch, src, blocks, out);                                       \
        });                                                                                                   \
  }                                                                                                           \
  TARGET double PREFIX##_halving(double* slots, uint64_t count) { return tile_kernel::halving_slots(slots, count); } \
  const TileStatsKernels PREFIX##_kernels = {&PREFIX##_f32,  &PREFIX##_bf16,    &PREFIX##_f16,    &PREFIX##_q8_0, \
                                             &PREFIX##_q4_k, &PREFIX##_generic, &PREFIX##_halving};
