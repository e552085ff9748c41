// How any tensor is seen as a 2-D matrix (for tile statistics, the pyramid and rendering), and how
// the viewer displays it: thin matrices folded into a squarer reshape of the same bytes.
#pragma once

#include <cstdint>
#include <string>

#include "tensormorph/checkpoint.h"

namespace tensormorph::engine {

/// Rows and columns of a tensor seen as a matrix.
struct MatrixShape {
  uint64_t rows = 1;
  uint64_t cols = 1;
};

/// The rule: 2-D as is; N-D as [product of leading dims, last dim]; 1-D as [1, n]; a scalar as
/// [1, 1]. Shapes are row-major for every format (GGUF dims are reversed on read), so a GGUF
/// matrix with ne = [ne0, ne1] is ne1 rows of ne0 columns.
MatrixShape as_matrix(const TensorInfo& tensor);

/// Tensors with more elements than this are always displayed as their matrix.
inline constexpr uint64_t kMaxFoldedElements = uint64_t{1} << 22;
/// A matrix is thin when its long side is more than this many times its short side.
inline constexpr uint64_t kThinRatio = 8;
/// Only matrices whose short side is at most this many elements are folded: a wider one (an
/// embedding [vocab, dim]) has rows that mean something and stays as stored, opened at a
/// readable width instead.
inline constexpr uint64_t kMaxFoldedShortSide = 16;

/// How the viewer displays a tensor: rows x cols of its row-major elements.
struct DisplayView {
  uint64_t rows = 1;
  uint64_t cols = 1;
  bool folded = false;        ///< false: the matrix view (as_matrix)
  std::string rule = "as stored";  ///< in words: "4 consecutive rows side by side", "each row wrapped into rows of 48"
};

/// The display view. A contiguous tensor of at most kMaxFoldedElements whose matrix view is thin
/// with a short side of at most kMaxFoldedShortSide elements (vectors, LoRA factors, conv kernels
/// seen as [out·in·kh, kw]) is folded: reshaped to [R', C'] with C' a whole number of dtype blocks and either C' = k·cols (k
/// consecutive rows side by side) or cols = k·C' (each row wrapped into k display rows). A C' that
/// is a product of trailing dims and leaves the view no longer thin is preferred (a conv
/// [64, 32, 3, 3] shows as [64, 288]); otherwise the candidate nearest square (width >= height on
/// ties). Folded only when the result is less thin; strided views are never folded.
DisplayView display_view(const TensorInfo& tensor);

/// `tensor` with the view's shape [rows, cols] when the view is folded (the same bytes: a folded
/// tensor is contiguous, so display row r is its elements [r·cols, (r+1)·cols)), else `tensor`.
TensorInfo as_displayed(const TensorInfo& tensor, const DisplayView& view);

}  // namespace tensormorph::engine
