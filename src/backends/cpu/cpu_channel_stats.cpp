// tm.channel_stats@1 on the CPU. Rows are split into aligned blocks of a power of two rows, each a
// subtree of the column sums' pairwise tree: a thread takes a block, decodes its rows one by one
// (each row's own record as it goes) and builds the block's column sums with a binary counter over
// its rows (level l holds the sum of the last 2^l rows not yet merged, one double per column), so
// memory stays at a few rows of doubles however tall the block. The blocks' column sums are then
// merged in the same tree. Same bits as the reference for any thread count.
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "compute/ops/channel_stats.h"
#include "compute/ops/radix_histogram.h"
#include "tensormorph/decode.h"

namespace tensormorph::cpu {
namespace {

/// Rows per block at most: the blocks' column sums (blocks x cols doubles) stay small while there
/// are enough blocks to share among threads.
constexpr uint64_t kMaxBlockRows = 4096;
constexpr uint64_t kBlocksWanted = 64;

/// A pairwise tree built by adding equal-length vectors in order.
class PairwiseCounter {
 public:
  explicit PairwiseCounter(uint64_t width) : width_(width) {}
  /// Adds the next leaf (width doubles; consumed).
  void push(std::vector<double>& leaf) {
    uint64_t level = 0;
    for (uint64_t n = count_; n & 1; n >>= 1, ++level) {
      std::vector<double>& left = levels_[level];
      for (uint64_t c = 0; c < width_; ++c) leaf[c] = left[c] + leaf[c];
    }
    if (levels_.size() <= level) levels_.resize(level + 1);
    levels_[level].swap(leaf);
    leaf.resize(width_);  // every caller writes the whole next leaf: no need to clear it
    ++count_;
  }
  /// The root, once a power of two of leaves was pushed.
  std::vector<double>& root() { return levels_.back(); }

 private:
  uint64_t width_;
  uint64_t count_ = 0;
  std::vector<std::vector<double>> levels_;
};

/// The extreme an order key (ops::value_order_key) stands for; `none` where no finite value was seen.
inline float from_order_key(uint32_t key, uint32_t none, float none_value) {
  return key == none ? none_value : ops::value_from_order_key(key);
}
constexpr uint32_t kNoMin = std::numeric_limits<uint32_t>::max();  // the key of a NaN: never finite
constexpr uint32_t kNoMax = 0;                                      // likewise

/// One block's column extremes (as ops::value_order_key, so that they are unsigned min and max the
/// compiler vectorizes) and counts, as arrays (a block has at most kMaxBlockRows rows).
struct ColumnExtremes {
  std::vector<uint32_t> min_key, max_key, abs_bits, zeros, nan, pos_inf, neg_inf;
  void reset(uint64_t cols) {
    min_key.assign(cols, kNoMin);
    max_key.assign(cols, kNoMax);
    for (auto* v : {&abs_bits, &zeros, &nan, &pos_inf, &neg_inf}) v->assign(cols, 0);
  }
};

struct Scratch {
  std::vector<float> values;
  std::vector<double> row_sum, row_sq, leaf_sum, leaf_sq;
  ColumnExtremes col;
  Status status;
};

/// Adds one decoded row to its own record (extremes and counts), to the block's column extremes,
/// and writes its finite values (else +0.0) as float64 into the row's slots and the leaves.
void add_row(std::span<const float> values, TM_TileStats& row, Scratch& s) {
  const uint64_t cols = values.size();
  uint32_t row_min = kNoMin, row_max = kNoMax, row_abs = 0, row_zeros = 0, row_special = 0;
  uint32_t* __restrict const col_min = s.col.min_key.data();
  uint32_t* __restrict const col_max = s.col.max_key.data();
  uint32_t* __restrict const col_abs = s.col.abs_bits.data();
  uint32_t* __restrict const col_zeros = s.col.zeros.data();
  const float* __restrict const v = values.data();
  // The extremes, then the float64 slots, each a loop of its own. Every row reads and writes
  // 48 bytes of per-column scratch per element it decodes (docs/PERFORMANCE.md says what that costs).
  for (uint64_t c = 0; c < cols; ++c) {
    uint32_t bits;
    std::memcpy(&bits, &v[c], sizeof bits);
    const uint32_t special = (bits & 0x7f800000u) == 0x7f800000u;
    const uint32_t magnitude = bits & 0x7fffffffu;
    const uint32_t key = ops::value_order_key(std::bit_cast<float>(bits));
    const uint32_t low = special ? kNoMin : key;
    const uint32_t high = special ? kNoMax : key;
    const uint32_t abs = special ? 0u : magnitude;
    const uint32_t zero = magnitude == 0;
    row_min = std::min(row_min, low);
    row_max = std::max(row_max, high);
    row_abs = std::max(row_abs, abs);
    row_zeros += zero;
    row_special += special;
    col_min[c] = std::min(col_min[c], low);
    col_max[c] = std::max(col_max[c], high);
    col_abs[c] = std::max(col_abs[c], abs);
    col_zeros[c] += zero;
  }
  double* __restrict const row_sum = s.row_sum.data();
  double* __restrict const row_sq = s.row_sq.data();
  double* __restrict const leaf_sum = s.leaf_sum.data();
  double* __restrict const leaf_sq = s.leaf_sq.data();
  for (uint64_t c = 0; c < cols; ++c) {
    const float x = v[c];
    uint32_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    const double d = (bits & 0x7f800000u) != 0x7f800000u ? static_cast<double>(x) : 0.0;
    row_sum[c] = d;
    row_sq[c] = d * d;
    leaf_sum[c] = d;
    leaf_sq[c] = d * d;
  }
  row = ops::empty_tile_stats();
  row.count = cols;
  row.zeros = row_zeros;
  row.min = from_order_key(row_min, kNoMin, std::numeric_limits<float>::infinity());
  row.max = from_order_key(row_max, kNoMax, -std::numeric_limits<float>::infinity());
  row.absmax = std::bit_cast<float>(row_abs);
  if (row_special == 0) return;
  for (uint64_t c = 0; c < cols; ++c) {  // rare: NaN and +-Inf counted apart
    const float x = values[c];
    if (std::isnan(x)) {
      ++row.nan;
      ++s.col.nan[c];
    } else if (std::isinf(x)) {
      ++(x > 0 ? row.pos_inf : row.neg_inf);
      ++(x > 0 ? s.col.pos_inf[c] : s.col.neg_inf[c]);
    }
  }
}

/// Rows per block of a matrix of `rows` rows: a power of two dividing the tree's padded height.
uint64_t block_rows_of(uint64_t rows) {
  const uint64_t tree_rows = std::bit_ceil(std::max<uint64_t>(rows, 1));
  return std::min({tree_rows, kMaxBlockRows, std::max<uint64_t>(1, std::bit_ceil(tree_rows / kBlocksWanted))});
}

}  // namespace

uint64_t channel_stats_working_bytes(uint64_t rows, uint64_t cols, uint32_t threads) {
  const uint64_t block_rows = block_rows_of(rows);
  const uint64_t real_blocks = (rows + block_rows - 1) / block_rows;
  const uint64_t shared = real_blocks * cols * (2 * sizeof(double) + sizeof(TM_TileStats));
  const uint64_t tree_levels = static_cast<uint64_t>(std::bit_width(block_rows));
  const uint64_t per_thread = cols * (sizeof(float) + 4 * sizeof(double) + 7 * sizeof(uint32_t)) +
                              2 * tree_levels * cols * sizeof(double);
  return shared + per_thread * threads;
}

Status channel_stats(const ops::MatrixView& matrix, std::span<TM_TileStats> rows_out, std::span<TM_TileStats> cols_out,
                     uint32_t max_threads) {
  TM_ASSIGN_OR_RETURN(const uint64_t row_bytes, ops::matrix_row_bytes(matrix.dtype, matrix.cols));
  if (matrix.bytes.size() != matrix.rows * row_bytes || rows_out.size() != matrix.rows ||
      cols_out.size() != matrix.cols) {
    return Status::InvalidArgument(std::string(TM_OP_CHANNEL_STATS) + ": the matrix, its bytes and the outputs disagree");
  }
  if (!dtype_decodable(matrix.dtype)) return Status::Unsupported(std::string(dtype_not_decodable_reason(matrix.dtype)));
  const uint64_t cols = matrix.cols;
  const uint64_t tree_rows = std::bit_ceil(std::max<uint64_t>(matrix.rows, 1));
  const uint64_t block_rows = block_rows_of(matrix.rows);
  const uint64_t blocks = tree_rows / block_rows;  // the tree's blocks, the last ones all padding
  const uint64_t real_blocks = (matrix.rows + block_rows - 1) / block_rows;
  const uint64_t row_slots = std::bit_ceil(std::max<uint64_t>(cols, 1));
  std::vector<double> block_sum(real_blocks * cols), block_sq(real_blocks * cols);
  std::vector<TM_TileStats> block_cols(real_blocks * cols);
  tbb::enumerable_thread_specific<Scratch> locals;
  tbb::task_arena arena(max_threads == 0 ? tbb::task_arena::automatic : static_cast<int>(max_threads));
  arena.execute([&] {
    tbb::parallel_for(tbb::blocked_range<uint64_t>(0, real_blocks, 1), [&](const tbb::blocked_range<uint64_t>& range) {
      Scratch& s = locals.local();
      for (uint64_t b = range.begin(); b != range.end(); ++b) {
        s.values.resize(cols);
        s.row_sum.resize(row_slots);
        s.row_sq.resize(row_slots);
        s.leaf_sum.resize(cols);
        s.leaf_sq.resize(cols);
        s.col.reset(cols);
        PairwiseCounter sums(cols), squares(cols);
        uint64_t rows_here = 0;
        for (uint64_t k = 0; k < block_rows; ++k) {
          const uint64_t r = b * block_rows + k;
          if (r < matrix.rows) {
            Status status = decode_to_f32(matrix.dtype, matrix.bytes.subspan(r * row_bytes, row_bytes), cols, s.values.data());
            if (!status.ok()) {
              if (s.status.ok()) s.status = std::move(status);
              return;
            }
            TM_TileStats row;
            add_row(s.values, row, s);
            std::fill(s.row_sum.begin() + static_cast<std::ptrdiff_t>(cols), s.row_sum.end(), 0.0);
            std::fill(s.row_sq.begin() + static_cast<std::ptrdiff_t>(cols), s.row_sq.end(), 0.0);
            row.sum = ops::halving_sum(s.row_sum);
            row.sum_sq = ops::halving_sum(s.row_sq);
            rows_out[r] = row;
            ++rows_here;
          } else {  // rows past the matrix are +0.0 leaves
            std::fill(s.leaf_sum.begin(), s.leaf_sum.end(), 0.0);
            std::fill(s.leaf_sq.begin(), s.leaf_sq.end(), 0.0);
          }
          sums.push(s.leaf_sum);
          squares.push(s.leaf_sq);
        }
        for (uint64_t c = 0; c < cols; ++c) {
          TM_TileStats& t = block_cols[b * cols + c];
          t = ops::empty_tile_stats();
          t.count = rows_here;
          t.zeros = s.col.zeros[c];
          t.nan = s.col.nan[c];
          t.pos_inf = s.col.pos_inf[c];
          t.neg_inf = s.col.neg_inf[c];
          t.min = from_order_key(s.col.min_key[c], kNoMin, std::numeric_limits<float>::infinity());
          t.max = from_order_key(s.col.max_key[c], kNoMax, -std::numeric_limits<float>::infinity());
          t.absmax = std::bit_cast<float>(s.col.abs_bits[c]);
        }
        std::copy(sums.root().begin(), sums.root().end(), block_sum.begin() + static_cast<std::ptrdiff_t>(b * cols));
        std::copy(squares.root().begin(), squares.root().end(), block_sq.begin() + static_cast<std::ptrdiff_t>(b * cols));
      }
    });
  });
  for (const Scratch& s : locals) {
    if (!s.status.ok()) return s.status;
  }
  // The blocks' sums merged in the tree over `blocks` leaves (the padding blocks' are +0.0).
  PairwiseCounter sums(cols), squares(cols);
  std::vector<double> leaf(cols);
  for (uint64_t b = 0; b < blocks; ++b) {
    if (b < real_blocks) {
      std::copy_n(block_sum.begin() + static_cast<std::ptrdiff_t>(b * cols), cols, leaf.begin());
    } else {
      std::fill(leaf.begin(), leaf.end(), 0.0);
    }
    sums.push(leaf);
    if (b < real_blocks) {
      std::copy_n(block_sq.begin() + static_cast<std::ptrdiff_t>(b * cols), cols, leaf.begin());
    } else {
      std::fill(leaf.begin(), leaf.end(), 0.0);
    }
    squares.push(leaf);
  }
  for (uint64_t c = 0; c < cols; ++c) {
    TM_TileStats t = ops::empty_tile_stats();
    for (uint64_t b = 0; b < real_blocks; ++b) {
      const TM_TileStats& p = block_cols[b * cols + c];
      t.count += p.count;
      t.nan += p.nan;
      t.pos_inf += p.pos_inf;
      t.neg_inf += p.neg_inf;
      t.zeros += p.zeros;
      t.min = ops::ordered_min(t.min, p.min);
      t.max = ops::ordered_max(t.max, p.max);
      t.absmax = std::max(t.absmax, p.absmax);
    }
    t.sum = sums.root()[c];
    t.sum_sq = squares.root()[c];
    cols_out[c] = t;
  }
  return Status::Ok();
}

}  // namespace tensormorph::cpu
