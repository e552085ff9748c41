// How any tensor is seen as a 2-D matrix (for tile statistics, the pyramid and rendering).
#pragma once

#include <cstdint>

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

}  // namespace tensormorph::engine
