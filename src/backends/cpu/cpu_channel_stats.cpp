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
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "compute/ops/channel_stats.h"
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
    leaf.assign(width_, 0.0);
    ++count_;
  }
  /// The root, once a power of two of leaves was pushed.
  std::vector<double>& root() { return levels_.back(); }

 private:
  uint64_t width_;
  uint64_t count_ = 0;
  std::vector<std::vector<double>> levels_;
};

struct Scratch {
  std::vector<float> values;
  std::vector<double> row_sum, row_sq, leaf_sum, leaf_sq;
  std::vector<TM_TileStats> col_extremes;
  Status status;
};

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
  const uint64_t per_thread = cols * (sizeof(float) + 4 * sizeof(double) + sizeof(TM_TileStats)) +
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
        s.leaf_sum.assign(cols, 0.0);
        s.leaf_sq.assign(cols, 0.0);
        s.col_extremes.assign(cols, ops::empty_tile_stats());
        PairwiseCounter sums(cols), squares(cols);
        for (uint64_t k = 0; k < block_rows; ++k) {
          const uint64_t r = b * block_rows + k;
          if (r < matrix.rows) {  // rows past the matrix are +0.0 leaves
            Status status = decode_to_f32(matrix.dtype, matrix.bytes.subspan(r * row_bytes, row_bytes), cols, s.values.data());
            if (!status.ok()) {
              if (s.status.ok()) s.status = std::move(status);
              return;
            }
            TM_TileStats row = ops::empty_tile_stats();
            std::fill(s.row_sum.begin(), s.row_sum.end(), 0.0);
            std::fill(s.row_sq.begin(), s.row_sq.end(), 0.0);
            for (uint64_t c = 0; c < cols; ++c) {
              const float v = s.values[c];
              ops::add_to_extremes(row, v);
              ops::add_to_extremes(s.col_extremes[c], v);
              if (!std::isfinite(v)) continue;
              const double d = v;
              s.row_sum[c] = d;
              s.row_sq[c] = d * d;
              s.leaf_sum[c] = d;
              s.leaf_sq[c] = d * d;
            }
            row.sum = ops::halving_sum(s.row_sum);
            row.sum_sq = ops::halving_sum(s.row_sq);
            rows_out[r] = row;
          }
          sums.push(s.leaf_sum);
          squares.push(s.leaf_sq);
        }
        std::copy(sums.root().begin(), sums.root().end(), block_sum.begin() + static_cast<std::ptrdiff_t>(b * cols));
        std::copy(squares.root().begin(), squares.root().end(), block_sq.begin() + static_cast<std::ptrdiff_t>(b * cols));
        std::copy(s.col_extremes.begin(), s.col_extremes.end(), block_cols.begin() + static_cast<std::ptrdiff_t>(b * cols));
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
