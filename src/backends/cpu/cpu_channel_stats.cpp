// tm.channel_stats@1 on the CPU, in two passes over the matrix, each with its working set in cache
// however wide or tall the matrix:
//  - rows: a thread walks a row in segments of kStripCols slots, paired and ordered so that a
//    binary counter over the pairs builds the row's halving tree (RowPass says why that is the
//    same tree), and halves the last segment with the tile kernels' halving;
//  - columns: the matrix is cut into tiles of an aligned block of rows (a power of two: a subtree
//    of the columns' pairwise tree) by a strip of kStripCols columns. A thread walks a tile's rows
//    two at a time, reading only the strip, and builds the strip's column sums with a binary
//    counter over the rows (level l holds the sum of the last 2^l rows not yet merged). The tiles'
//    sums are merged in the same tree.
// One pass over whole rows would need the column counter's levels as wide as the matrix:
// megabytes per level for wide matrices, out of cache, which costs more than reading every
// element twice. F32 and BF16 are read where they lie, other dtypes decoded a segment or strip at
// a time. The inner loops are compiled per instruction set. Same bits as the reference for any
// thread count.
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "backends/cpu/cpu_dispatch.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_words.h"
#include "backends/cpu/tile_stats/tile_stats.h"
#include "compute/ops/channel_stats.h"
#include "compute/ops/radix_histogram.h"
#include "tensormorph/decode.h"
#include "tensormorph/dtype.h"

namespace tensormorph::cpu {
namespace {

/// Rows per block: at most kMaxBlockRows (the counter's depth), at least kMinBlockRows where the
/// matrix has them (each block keeps a partial record per column), kItemsWanted tiles between.
constexpr uint64_t kMaxBlockRows = 4096;
constexpr uint64_t kMinBlockRows = 256;
constexpr uint64_t kItemsWanted = 256;
/// Columns per strip: the counter's levels (at most 13 of them, sums and squares) stay in L2 and a
/// strip of one row is still several cache lines of storage.
constexpr uint64_t kStripCols = 512;
/// Rows ahead whose strip the column pass prefetches.
constexpr uint64_t kPrefetchRows = 4;
/// Rows per work item of the row pass.
constexpr uint64_t kRowGrain = 16;

constexpr uint32_t kNoMin = std::numeric_limits<uint32_t>::max();  // the key of a NaN: never finite
constexpr uint32_t kNoMax = 0;                                      // likewise

/// The extreme an order key (ops::value_order_key) stands for; `none` where no finite value was seen.
inline float from_order_key(uint32_t key, uint32_t none, float none_value) {
  return key == none ? none_value : ops::value_from_order_key(key);
}

/// A value's contribution to the sums: itself in float64 when finite, else +0.0 (as the reference).
/// Masks rather than selects, so that the loops using it vectorize.
[[gnu::always_inline]] inline double finite_or_zero(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof bits);
  const uint64_t keep = static_cast<uint64_t>((bits & 0x7f800000u) == 0x7f800000u) - 1;  // all ones when finite
  return std::bit_cast<double>(std::bit_cast<uint64_t>(static_cast<double>(x)) & keep);
}

/// The key, magnitude and flags of one value for the extremes: a non-finite value gets keys that
/// never win (min kNoMin, max kNoMax, magnitude 0), by masks (a select would keep GCC from
/// vectorizing the reductions).
struct ValueKeys {
  uint32_t low, high, abs, zero, special;
};
[[gnu::always_inline]] inline ValueKeys keys_of(uint32_t bits) {
  const uint32_t special = (bits & 0x7f800000u) == 0x7f800000u;
  const uint32_t finite_mask = special - 1;  // all ones when finite
  const uint32_t magnitude = bits & 0x7fffffffu;
  const uint32_t key = ops::value_order_key(std::bit_cast<float>(bits));
  return {key | ~finite_mask, key & finite_mask, magnitude & finite_mask, magnitude == 0, special};
}

/// Extremes and counts of finite values as unsigned order keys (so that min and max vectorize).
struct Extremes {
  uint32_t min_key = kNoMin, max_key = kNoMax, abs_bits = 0, zeros = 0, special = 0;
};

/// Adds n values to row extremes `e`.
template <typename Raw>
[[gnu::always_inline]] inline void add_extremes(const std::byte* __restrict v, uint64_t n, Extremes& e) {
  uint32_t row_min = e.min_key, row_max = e.max_key, row_abs = e.abs_bits, row_zeros = e.zeros, row_special = e.special;
  for (uint64_t c = 0; c < n; ++c) {
    const ValueKeys x = keys_of(float_bits<Raw>(v, c));
    row_min = std::min(row_min, x.low);
    row_max = std::max(row_max, x.high);
    row_abs = std::max(row_abs, x.abs);
    row_zeros += x.zero;
    row_special += x.special;
  }
  e = {row_min, row_max, row_abs, row_zeros, row_special};
}

/// One leaf of a row's halving tree over segments of `width` slots: segment a (wa values, the
/// rest padding) alone, or, when `paired`, merged with segment b (wb <= wa values), its partner
/// n/2 slots on, as the tree's first level merges them. Adds the values to `e`.
template <typename Raw>
[[gnu::always_inline]] inline void segment_body(const std::byte* __restrict a, uint64_t wa, const std::byte* __restrict b,
                                                uint64_t wb, uint64_t width, bool paired, Extremes& e,
                                                double* __restrict leaf_sum, double* __restrict leaf_sq) {
  add_extremes<Raw>(a, wa, e);
  add_extremes<Raw>(b, wb, e);
  for (uint64_t i = 0; i < wb; ++i) {
    const double x = finite_or_zero(value_at<Raw>(a, i)), y = finite_or_zero(value_at<Raw>(b, i));
    leaf_sum[i] = x + y;
    leaf_sq[i] = x * x + y * y;
  }
  // Past b's values the partner is a padding slot's +0.0: adding it turns -0.0 into +0.0, as in
  // the reference, so it is added, not skipped.
  const double pad = paired ? 0.0 : -0.0;  // x + -0.0 is x for every x
  for (uint64_t i = wb; i < wa; ++i) {
    const double x = finite_or_zero(value_at<Raw>(a, i));
    leaf_sum[i] = x + pad;
    leaf_sq[i] = x * x + pad;
  }
  for (uint64_t i = wa; i < width; ++i) {
    leaf_sum[i] = 0.0;
    leaf_sq[i] = 0.0;
  }
}

/// One block's extremes and counts per column of a strip (at most kStripCols).
struct StripColumns {
  uint32_t min_key[kStripCols], max_key[kStripCols], abs_bits[kStripCols], zeros[kStripCols];
  uint32_t nan[kStripCols], pos_inf[kStripCols], neg_inf[kStripCols];
  void reset(uint64_t w) {
    std::fill_n(min_key, w, kNoMin);
    std::fill_n(max_key, w, kNoMax);
    for (uint32_t* a : {abs_bits, zeros, nan, pos_inf, neg_inf}) std::fill_n(a, w, 0u);
  }
};

/// Adds one row's strip of `w` values to the strip's column extremes and writes their sum leaves;
/// returns how many were NaN or +-Inf (counted per column by the caller, rarely).
template <typename Raw>
[[gnu::always_inline]] inline uint32_t strip_body(const std::byte* __restrict v, uint64_t w, StripColumns& col,
                                                  double* __restrict leaf_sum, double* __restrict leaf_sq) {
  uint32_t* __restrict const col_min = col.min_key;
  uint32_t* __restrict const col_max = col.max_key;
  uint32_t* __restrict const col_abs = col.abs_bits;
  uint32_t* __restrict const col_zeros = col.zeros;
  uint32_t specials = 0;
  for (uint64_t c = 0; c < w; ++c) {
    const ValueKeys x = keys_of(float_bits<Raw>(v, c));
    col_min[c] = std::min(col_min[c], x.low);
    col_max[c] = std::max(col_max[c], x.high);
    col_abs[c] = std::max(col_abs[c], x.abs);
    col_zeros[c] += x.zero;
    specials += x.special;
  }
  for (uint64_t c = 0; c < w; ++c) {
    const double d = finite_or_zero(value_at<Raw>(v, c));
    leaf_sum[c] = d;
    leaf_sq[c] = d * d;
  }
  return specials;
}

/// strip_body for two consecutive rows at once: the leaf is their sum (the tree's first merge),
/// and the column extremes are read and written once for both.
template <typename Raw>
[[gnu::always_inline]] inline uint32_t strip_pair_body(const std::byte* __restrict v0, const std::byte* __restrict v1,
                                                       uint64_t w, StripColumns& col, double* __restrict leaf_sum,
                                                       double* __restrict leaf_sq) {
  uint32_t* __restrict const col_min = col.min_key;
  uint32_t* __restrict const col_max = col.max_key;
  uint32_t* __restrict const col_abs = col.abs_bits;
  uint32_t* __restrict const col_zeros = col.zeros;
  uint32_t specials = 0;
  for (uint64_t c = 0; c < w; ++c) {
    const ValueKeys x = keys_of(float_bits<Raw>(v0, c)), y = keys_of(float_bits<Raw>(v1, c));
    col_min[c] = std::min(col_min[c], std::min(x.low, y.low));
    col_max[c] = std::max(col_max[c], std::max(x.high, y.high));
    col_abs[c] = std::max(col_abs[c], std::max(x.abs, y.abs));
    col_zeros[c] += x.zero + y.zero;
    specials += x.special + y.special;
  }
  for (uint64_t c = 0; c < w; ++c) {
    const double a = finite_or_zero(value_at<Raw>(v0, c)), b = finite_or_zero(value_at<Raw>(v1, c));
    leaf_sum[c] = a + b;
    leaf_sq[c] = a * a + b * b;
  }
  return specials;
}

/// leaf = left + leaf, elementwise (a merge of the binary counter: left is the earlier subtree).
[[gnu::always_inline]] inline void merge_body(const double* __restrict left, double* __restrict leaf, uint64_t w) {
  for (uint64_t c = 0; c < w; ++c) leaf[c] = left[c] + leaf[c];
}

using SegmentFn = void (*)(const std::byte*, uint64_t, const std::byte*, uint64_t, uint64_t, bool, Extremes&, double*,
                          double*);
using StripFn = uint32_t (*)(const std::byte*, uint64_t, StripColumns&, double*, double*);
using StripPairFn = uint32_t (*)(const std::byte*, const std::byte*, uint64_t, StripColumns&, double*, double*);
using MergeFn = void (*)(const double*, double*, uint64_t);

/// The inner loops of one instruction set, for one stored word (float32, or BF16 read in place).
struct ChannelKernels {
  SegmentFn segment;
  StripFn strip;
  StripPairFn strip_pair;
  MergeFn merge;
  HalvingKernel halving;
};

#define TM_CHANNEL_KERNELS(name, target)                                                                 \
  template <typename Raw>                                                                               \
  target void segment_##name(const std::byte* a, uint64_t wa, const std::byte* b, uint64_t wb, uint64_t width, \
                             bool paired, Extremes& e, double* sum, double* sq) {                       \
    segment_body<Raw>(a, wa, b, wb, width, paired, e, sum, sq);                                         \
  }                                                                                                     \
  template <typename Raw>                                                                               \
  target uint32_t strip_##name(const std::byte* v, uint64_t w, StripColumns& col, double* sum, double* sq) { \
    return strip_body<Raw>(v, w, col, sum, sq);                                                         \
  }                                                                                                     \
  template <typename Raw>                                                                               \
  target uint32_t strip_pair_##name(const std::byte* v0, const std::byte* v1, uint64_t w, StripColumns& col, \
                                    double* sum, double* sq) {                                          \
    return strip_pair_body<Raw>(v0, v1, w, col, sum, sq);                                               \
  }                                                                                                     \
  target void merge_##name(const double* left, double* leaf, uint64_t w) { merge_body(left, leaf, w); }

#define TM_NO_TARGET
TM_CHANNEL_KERNELS(baseline, TM_NO_TARGET)
#if TM_CPU_X86_TARGETS
TM_CHANNEL_KERNELS(avx2, TM_TARGET_AVX2)
TM_CHANNEL_KERNELS(avx512, TM_TARGET_AVX512)
#endif

template <typename Raw>
ChannelKernels kernels_for(Isa isa) {
  const HalvingKernel halving = tile_stats_kernels(isa).halving;
#if TM_CPU_X86_TARGETS
  if (isa == Isa::kAvx512) return {segment_avx512<Raw>, strip_avx512<Raw>, strip_pair_avx512<Raw>, merge_avx512, halving};
  if (isa == Isa::kAvx2) return {segment_avx2<Raw>, strip_avx2<Raw>, strip_pair_avx2<Raw>, merge_avx2, halving};
#endif
  return {segment_baseline<Raw>, strip_baseline<Raw>, strip_pair_baseline<Raw>, merge_baseline, halving};
}

/// A binary counter of `width`-wide vectors: the contiguous pairwise tree over the leaves pushed.
class PairwiseCounter {
 public:
  PairwiseCounter(uint64_t width, uint64_t max_leaves, MergeFn merge)
      : width_(width),
        merge_(merge),
        levels_(static_cast<size_t>(std::bit_width(std::max<uint64_t>(max_leaves, 1))), std::vector<double>(width)),
        leaf_(width) {}
  /// A leaf to fill before push(): width doubles.
  double* leaf() { return leaf_.data(); }
  /// Adds the filled leaf (and hands out a new one to fill, of unspecified contents).
  void push() {
    uint64_t level = 0;
    for (uint64_t n = count_; n & 1; n >>= 1, ++level) merge_(levels_[level].data(), leaf_.data(), width_);
    levels_[level].swap(leaf_);
    ++count_;
  }
  /// The root, once a power of two of leaves was pushed.
  const double* root() const { return levels_[static_cast<size_t>(std::countr_zero(count_))].data(); }
  /// Starts over (the same width).
  void clear() { count_ = 0; }

 private:
  uint64_t width_;
  MergeFn merge_;
  uint64_t count_ = 0;
  std::vector<std::vector<double>> levels_;
  std::vector<double> leaf_;
};

/// Rows per block of a rows x cols matrix: a power of two dividing the tree's padded height, low
/// enough for kItemsWanted tiles, high enough that the blocks' partial records stay small beside
/// the matrix.
uint64_t block_rows_of(uint64_t rows, uint64_t cols) {
  const uint64_t tree_rows = std::bit_ceil(std::max<uint64_t>(rows, 1));
  const uint64_t strips = std::max<uint64_t>(1, (cols + kStripCols - 1) / kStripCols);
  const uint64_t wanted = std::bit_ceil(std::max<uint64_t>(1, tree_rows * strips / kItemsWanted));
  return std::min(tree_rows, std::clamp(wanted, kMinBlockRows, kMaxBlockRows));
}

struct RowScratch {
  std::vector<float> values[2];  // decoded segments of a pair
  std::unique_ptr<PairwiseCounter> sums, squares;
  std::vector<double> root_sum, root_sq;  // the segment-wide root, which the last halving destroys
  Status status;
};

struct StripScratch {
  std::vector<float> values[2];  // decoded strips of a pair of rows
  std::unique_ptr<StripColumns> columns = std::make_unique<StripColumns>();
  std::unique_ptr<PairwiseCounter> sums, squares;
  Status status;
};

/// One call's matrix as the column pass reads it, and where its tiles' partial records go.
struct ColumnPass {
  const ops::MatrixView& matrix;
  uint64_t row_bytes;
  const DTypeInfo& info;
  bool in_place;  // F32 and BF16: words read where they lie; else decoded to float32 first
  bool bf16;
  const ChannelKernels& k;
  uint64_t block_rows, strip_cols, strips;
  double* block_sum;          // [blocks][cols]
  double* block_sq;           // [blocks][cols]
  TM_TileStats* block_cols;   // [blocks][cols]
};

/// Counts the NaN and +-Inf of a strip of w words per column.
void count_specials(const std::byte* words, uint64_t w, bool bf16, StripColumns& col) {
  for (uint64_t c = 0; c < w; ++c) {
    const float x = word_value(words, c, bf16);
    if (std::isnan(x)) {
      ++col.nan[c];
    } else if (std::isinf(x)) {
      ++(x > 0 ? col.pos_inf[c] : col.neg_inf[c]);
    }
  }
}

/// Tile `item` (block item / strips, strip item % strips): its columns' extremes, counts and
/// the block's subtree of sums, walking its rows two at a time.
Status column_tile(const ColumnPass& p, uint64_t item, StripScratch& s) {
  const ops::MatrixView& m = p.matrix;
  const uint64_t cols = m.cols;
  const uint64_t b = item / p.strips, c0 = (item % p.strips) * p.strip_cols;
  const uint64_t w = std::min(p.strip_cols, cols - c0);
  const uint64_t offset = c0 / p.info.block_elems * p.info.block_bytes;
  const uint64_t strip_bytes = w / p.info.block_elems * p.info.block_bytes;
  // The words of row r's strip: in place, or decoded into buffer `slot`.
  auto words_of = [&](uint64_t r, int slot) -> Result<const std::byte*> {
    const std::byte* words = m.bytes.data() + r * p.row_bytes + offset;
    if (p.in_place) return words;
    TM_RETURN_IF_ERROR(decode_to_f32(m.dtype, m.bytes.subspan(r * p.row_bytes + offset, strip_bytes), w, s.values[slot].data()));
    return reinterpret_cast<const std::byte*>(s.values[slot].data());
  };
  StripColumns& col = *s.columns;
  col.reset(w);
  s.sums->clear();
  s.squares->clear();
  const uint64_t step = p.block_rows >= 2 ? 2 : 1;  // blocks are powers of two: pairs never straddle two
  uint64_t rows_here = 0;
  for (uint64_t i = 0; i < p.block_rows; i += step) {
    const uint64_t r = b * p.block_rows + i;
    for (uint64_t ahead = r + kPrefetchRows; ahead < r + kPrefetchRows + step; ++ahead) {
      // The strips of successive rows lie a row apart: too far for the hardware prefetchers.
      if (ahead >= m.rows || ahead >= (b + 1) * p.block_rows) break;
      const std::byte* line = m.bytes.data() + ahead * p.row_bytes + offset;
      for (uint64_t at = 0; at < strip_bytes; at += 64) __builtin_prefetch(line + at);
    }
    double* sum = s.sums->leaf();  // a new buffer after every push
    double* sq = s.squares->leaf();
    if (step == 2 && r + 1 < m.rows) {
      TM_ASSIGN_OR_RETURN(const std::byte* first, words_of(r, 0));
      TM_ASSIGN_OR_RETURN(const std::byte* second, words_of(r + 1, 1));
      if (p.k.strip_pair(first, second, w, col, sum, sq) != 0) {
        count_specials(first, w, p.bf16, col);
        count_specials(second, w, p.bf16, col);
      }
      rows_here += 2;
    } else if (r < m.rows) {
      TM_ASSIGN_OR_RETURN(const std::byte* only, words_of(r, 0));
      if (p.k.strip(only, w, col, sum, sq) != 0) count_specials(only, w, p.bf16, col);
      if (step == 2) {  // its partner is a padding row: the merge with its +0.0 leaf
        for (uint64_t c = 0; c < w; ++c) {
          sum[c] = sum[c] + 0.0;
          sq[c] = sq[c] + 0.0;
        }
      }
      rows_here += 1;
    } else {  // rows past the matrix are +0.0 leaves
      std::fill_n(sum, w, 0.0);
      std::fill_n(sq, w, 0.0);
    }
    s.sums->push();
    s.squares->push();
  }
  for (uint64_t c = 0; c < w; ++c) {
    TM_TileStats& t = p.block_cols[b * cols + c0 + c];
    t = ops::empty_tile_stats();
    t.count = rows_here;
    t.zeros = col.zeros[c];
    t.nan = col.nan[c];
    t.pos_inf = col.pos_inf[c];
    t.neg_inf = col.neg_inf[c];
    t.min = from_order_key(col.min_key[c], kNoMin, std::numeric_limits<float>::infinity());
    t.max = from_order_key(col.max_key[c], kNoMax, -std::numeric_limits<float>::infinity());
    t.absmax = std::bit_cast<float>(col.abs_bits[c]);
  }
  std::copy_n(s.sums->root(), w, p.block_sum + b * cols + c0);
  std::copy_n(s.squares->root(), w, p.block_sq + b * cols + c0);
  return Status::Ok();
}

/// One call's matrix as the row pass reads it: each row's halving tree over bit_ceil(cols) slots
/// is, for segments of `width` slots, a halving tree over the segments (segment t merged first
/// with t + segments/2, and so on), then the halving of the one segment left. Over the segments
/// that tree is the contiguous pairwise tree of their bit-reversed order, which a binary counter
/// builds visiting one pair at a time.
struct RowPass {
  const ops::MatrixView& matrix;
  uint64_t row_bytes;
  const DTypeInfo& info;
  bool in_place;
  bool bf16;
  const ChannelKernels& k;
  uint64_t width;     // slots per segment: a power of two, kStripCols or fewer
  uint64_t segments;  // bit_ceil(cols) / width
};

/// `x`'s lowest `bits` bits in reverse order.
uint64_t reverse_bits(uint64_t x, int bits) {
  uint64_t r = 0;
  for (int i = 0; i < bits; ++i, x >>= 1) r = (r << 1) | (x & 1);
  return r;
}

/// The record of row r.
Result<TM_TileStats> row_record(const RowPass& p, uint64_t r, RowScratch& s) {
  const ops::MatrixView& m = p.matrix;
  const uint64_t cols = m.cols;
  // The words of the n values from column c0: in place, or decoded into buffer `slot`.
  auto words_of = [&](uint64_t c0, uint64_t n, int slot) -> Result<const std::byte*> {
    const uint64_t offset = r * p.row_bytes + c0 / p.info.block_elems * p.info.block_bytes;
    if (n == 0 || p.in_place) return m.bytes.data() + offset;
    TM_RETURN_IF_ERROR(
        decode_to_f32(m.dtype, m.bytes.subspan(offset, n / p.info.block_elems * p.info.block_bytes), n, s.values[slot].data()));
    return reinterpret_cast<const std::byte*>(s.values[slot].data());
  };
  TM_TileStats row = ops::empty_tile_stats();
  row.count = cols;
  auto count_specials = [&](const std::byte* words, uint64_t n) {  // rare: NaN and +-Inf counted apart
    for (uint64_t c = 0; c < n; ++c) {
      const float x = word_value(words, c, p.bf16);
      if (std::isnan(x)) {
        ++row.nan;
      } else if (std::isinf(x)) {
        ++(x > 0 ? row.pos_inf : row.neg_inf);
      }
    }
  };
  Extremes e;
  if (p.segments == 1) {
    TM_ASSIGN_OR_RETURN(const std::byte* a, words_of(0, cols, 0));
    p.k.segment(a, cols, nullptr, 0, p.width, false, e, s.root_sum.data(), s.root_sq.data());
    if (e.special != 0) count_specials(a, cols);
  } else {
    const uint64_t half = p.segments / 2;
    const int bits = std::countr_zero(half);
    s.sums->clear();
    s.squares->clear();
    for (uint64_t q = 0; q < half; ++q) {
      const uint64_t ca = reverse_bits(q, bits) * p.width, cb = ca + half * p.width;
      const uint64_t wa = ca < cols ? std::min(p.width, cols - ca) : 0;
      const uint64_t wb = cb < cols ? std::min(p.width, cols - cb) : 0;
      TM_ASSIGN_OR_RETURN(const std::byte* a, words_of(ca, wa, 0));
      TM_ASSIGN_OR_RETURN(const std::byte* b, words_of(cb, wb, 1));
      const uint32_t specials_before = e.special;
      p.k.segment(a, wa, b, wb, p.width, true, e, s.sums->leaf(), s.squares->leaf());
      if (e.special != specials_before) {
        count_specials(a, wa);
        count_specials(b, wb);
      }
      s.sums->push();
      s.squares->push();
    }
    std::copy_n(s.sums->root(), p.width, s.root_sum.data());
    std::copy_n(s.squares->root(), p.width, s.root_sq.data());
  }
  row.sum = p.k.halving(s.root_sum.data(), p.width);
  row.sum_sq = p.k.halving(s.root_sq.data(), p.width);
  row.zeros = e.zeros;
  row.min = from_order_key(e.min_key, kNoMin, std::numeric_limits<float>::infinity());
  row.max = from_order_key(e.max_key, kNoMax, -std::numeric_limits<float>::infinity());
  row.absmax = std::bit_cast<float>(e.abs_bits);
  return row;
}

}  // namespace

uint64_t channel_stats_working_bytes(uint64_t rows, uint64_t cols, uint32_t threads) {
  const uint64_t block_rows = block_rows_of(rows, cols);
  const uint64_t real_blocks = (rows + block_rows - 1) / block_rows;
  const uint64_t blocks = std::bit_ceil(std::max<uint64_t>(rows, 1)) / block_rows;
  const uint64_t merge_levels = static_cast<uint64_t>(std::bit_width(blocks)) + 2;  // and the leaf
  const uint64_t shared = real_blocks * cols * (2 * sizeof(double) + sizeof(TM_TileStats)) +
                          2 * merge_levels * cols * sizeof(double);
  const uint64_t row_width = std::min<uint64_t>(std::bit_ceil(std::max<uint64_t>(cols, 1)), kStripCols);
  const uint64_t row_levels = static_cast<uint64_t>(std::bit_width(std::bit_ceil(std::max<uint64_t>(cols, 1)) / row_width)) + 2;
  const uint64_t row_pass = row_width * (2 * sizeof(float) + 2 * row_levels * sizeof(double));
  const uint64_t strip_levels = static_cast<uint64_t>(std::bit_width(block_rows)) + 2;
  const uint64_t strip_pass = sizeof(StripColumns) + kStripCols * (sizeof(float) + 2 * strip_levels * sizeof(double));
  return shared + (row_pass + strip_pass) * threads;
}

Status channel_stats(const ops::MatrixView& matrix, std::span<TM_TileStats> rows_out, std::span<TM_TileStats> cols_out,
                     uint32_t max_threads) {
  TM_ASSIGN_OR_RETURN(const uint64_t row_bytes, ops::matrix_row_bytes(matrix.dtype, matrix.cols));
  if (matrix.bytes.size() != matrix.rows * row_bytes || rows_out.size() != matrix.rows ||
      cols_out.size() != matrix.cols) {
    return Status::InvalidArgument(std::string(TM_OP_CHANNEL_STATS) + ": the matrix, its bytes and the outputs disagree");
  }
  if (!dtype_decodable(matrix.dtype)) return Status::Unsupported(std::string(dtype_not_decodable_reason(matrix.dtype)));
  // F32 and BF16 are read where they lie; every other dtype is decoded to float32 words first.
  const bool in_place = matrix.dtype == DType::kF32 || matrix.dtype == DType::kBF16;
  const bool bf16 = matrix.dtype == DType::kBF16;
  const ChannelKernels k = bf16 ? kernels_for<uint16_t>(best_isa()) : kernels_for<uint32_t>(best_isa());
  const DTypeInfo& info = dtype_info(matrix.dtype);
  const uint64_t cols = matrix.cols;
  const uint64_t tree_rows = std::bit_ceil(std::max<uint64_t>(matrix.rows, 1));
  const uint64_t block_rows = block_rows_of(matrix.rows, matrix.cols);
  const uint64_t blocks = tree_rows / block_rows;  // the tree's blocks, the last ones all padding
  const uint64_t real_blocks = (matrix.rows + block_rows - 1) / block_rows;
  if (kStripCols % info.block_elems != 0) {  // no dtype has such blocks; a new one must not read past its strips
    return Status::Unsupported(std::string(TM_OP_CHANNEL_STATS) + " on the CPU: " + std::string(info.name) + "'s blocks of " +
                               std::to_string(info.block_elems) + " elements do not divide its strips of " +
                               std::to_string(kStripCols) + " columns");
  }
  const uint64_t strip_cols = kStripCols;
  const uint64_t strips = (cols + strip_cols - 1) / strip_cols;
  const uint64_t row_slots = std::bit_ceil(std::max<uint64_t>(cols, 1));
  const uint64_t row_width = std::min(row_slots, kStripCols);
  std::vector<double> block_sum(real_blocks * cols), block_sq(real_blocks * cols);
  std::vector<TM_TileStats> block_cols(real_blocks * cols);
  tbb::enumerable_thread_specific<RowScratch> row_locals;
  tbb::enumerable_thread_specific<StripScratch> strip_locals;
  tbb::task_arena arena(max_threads == 0 ? tbb::task_arena::automatic : static_cast<int>(max_threads));
  arena.execute([&] {
    const RowPass rows{matrix, row_bytes, info, in_place, bf16, k, row_width, row_slots / row_width};
    tbb::parallel_for(tbb::blocked_range<uint64_t>(0, matrix.rows, kRowGrain), [&](const tbb::blocked_range<uint64_t>& range) {
      RowScratch& s = row_locals.local();
      if (!s.sums) {
        if (!in_place) {
          for (auto& v : s.values) v.resize(row_width);
        }
        const uint64_t leaves = std::max<uint64_t>(rows.segments / 2, 1);
        s.sums = std::make_unique<PairwiseCounter>(row_width, leaves, k.merge);
        s.squares = std::make_unique<PairwiseCounter>(row_width, leaves, k.merge);
        s.root_sum.resize(row_width);
        s.root_sq.resize(row_width);
      }
      for (uint64_t r = range.begin(); r != range.end() && s.status.ok(); ++r) {
        Result<TM_TileStats> record = row_record(rows, r, s);
        if (record.ok()) {
          rows_out[r] = *record;
        } else {
          s.status = record.status();
        }
      }
    });
    const ColumnPass pass{matrix,           row_bytes, info, in_place, bf16, k, block_rows, strip_cols, strips,
                          block_sum.data(), block_sq.data(), block_cols.data()};
    tbb::parallel_for(tbb::blocked_range<uint64_t>(0, real_blocks * strips, 1), [&](const tbb::blocked_range<uint64_t>& range) {
      StripScratch& s = strip_locals.local();
      if (!s.sums) {
        for (auto& v : s.values) v.resize(strip_cols);
        const uint64_t leaves = block_rows >= 2 ? block_rows / 2 : 1;
        s.sums = std::make_unique<PairwiseCounter>(strip_cols, leaves, k.merge);
        s.squares = std::make_unique<PairwiseCounter>(strip_cols, leaves, k.merge);
      }
      for (uint64_t item = range.begin(); item != range.end() && s.status.ok(); ++item) {
        s.status = column_tile(pass, item, s);
      }
    });
  });
  for (const RowScratch& s : row_locals) {
    if (!s.status.ok()) return s.status;
  }
  for (const StripScratch& s : strip_locals) {
    if (!s.status.ok()) return s.status;
  }
  // The blocks' sums merged in the tree over `blocks` leaves (the padding blocks' are +0.0).
  PairwiseCounter sums(cols, blocks, k.merge), squares(cols, blocks, k.merge);
  for (uint64_t b = 0; b < blocks; ++b) {
    if (b < real_blocks) {
      std::copy_n(block_sum.begin() + static_cast<std::ptrdiff_t>(b * cols), cols, sums.leaf());
      std::copy_n(block_sq.begin() + static_cast<std::ptrdiff_t>(b * cols), cols, squares.leaf());
    } else {
      std::fill_n(sums.leaf(), cols, 0.0);
      std::fill_n(squares.leaf(), cols, 0.0);
    }
    sums.push();
    squares.push();
  }
  for (uint64_t c = 0; c < cols; ++c) {
    TM_TileStats t = ops::empty_tile_stats();
    for (uint64_t b = 0; b < real_blocks; ++b) ops::add_counts_and_extremes(t, block_cols[b * cols + c]);
    t.sum = sums.root()[c];
    t.sum_sq = squares.root()[c];
    cols_out[c] = t;
  }
  return Status::Ok();
}

}  // namespace tensormorph::cpu
