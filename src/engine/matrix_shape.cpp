#include "engine/matrix_shape.h"

#include <algorithm>
#include <optional>

namespace tensormorph::engine {
namespace {

uint64_t long_side(uint64_t rows, uint64_t cols) { return std::max(rows, cols); }
uint64_t short_side(uint64_t rows, uint64_t cols) { return std::min(rows, cols); }

bool is_thin(uint64_t rows, uint64_t cols) { return long_side(rows, cols) > kThinRatio * short_side(rows, cols); }

// True when rows_a x cols_a is nearer square than rows_b x cols_b (sides at most 2^22, so the
// cross products fit), or as near and wider.
bool nearer_square(uint64_t rows_a, uint64_t cols_a, uint64_t rows_b, uint64_t cols_b) {
  const uint64_t a = long_side(rows_a, cols_a) * short_side(rows_b, cols_b);
  const uint64_t b = long_side(rows_b, cols_b) * short_side(rows_a, cols_a);
  if (a != b) return a < b;
  return cols_a >= rows_a && cols_b < rows_b;
}

}  // namespace

MatrixShape as_matrix(const TensorInfo& tensor) {
  MatrixShape m;
  if (tensor.shape.empty()) return m;
  m.cols = tensor.shape.back();
  for (size_t i = 0; i + 1 < tensor.shape.size(); ++i) m.rows *= tensor.shape[i];
  return m;
}

DisplayView display_view(const TensorInfo& tensor) {
  const MatrixShape m = as_matrix(tensor);
  DisplayView view;
  view.rows = m.rows;
  view.cols = m.cols;
  const uint64_t n = tensor.elements();
  if (n == 0 || n > kMaxFoldedElements || !tensor.contiguous() || !is_thin(m.rows, m.cols) ||
      short_side(m.rows, m.cols) > kMaxFoldedShortSide) {
    return view;
  }
  const uint64_t block = std::max<uint32_t>(1, dtype_info(tensor.dtype).block_elems);
  // A width the fold may take: whole rows side by side or rows cut evenly, in whole blocks, less thin.
  auto allowed = [&](uint64_t width) {
    return width > 0 && width != m.cols && n % width == 0 && width % block == 0 &&
           (width % m.cols == 0 || m.cols % width == 0) &&
           long_side(n / width, width) * short_side(m.rows, m.cols) < long_side(m.rows, m.cols) * short_side(n / width, width);
  };
  std::optional<uint64_t> best;
  auto consider = [&](uint64_t width) {
    if (allowed(width) && (!best || nearer_square(n / width, width, n / *best, *best))) best = width;
  };
  // Trailing dims first (a conv's in_channels x kh x kw), when they make the view no longer thin.
  uint64_t trailing = m.cols;
  for (size_t i = tensor.shape.size() - 1; i-- > 1;) {
    trailing *= tensor.shape[i];
    if (!is_thin(n / trailing, trailing)) consider(trailing);
  }
  if (!best) {
    for (uint64_t d = 1; d * d <= n; ++d) {
      if (n % d != 0) continue;
      consider(d);
      consider(n / d);
    }
  }
  if (!best) return view;
  view.rows = n / *best;
  view.cols = *best;
  view.folded = true;
  view.rule = *best > m.cols ? std::to_string(*best / m.cols) + " consecutive rows side by side"
                             : "each row wrapped into rows of " + std::to_string(*best);
  return view;
}

TensorInfo as_displayed(const TensorInfo& tensor, const DisplayView& view) {
  TensorInfo shown = tensor;
  if (view.folded) {
    shown.shape = {view.rows, view.cols};
    shown.strides.clear();  // a PyTorch tensor's row-major strides would not fit the new rank
  }
  return shown;
}

}  // namespace tensormorph::engine
