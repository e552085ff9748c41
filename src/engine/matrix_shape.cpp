#include "engine/matrix_shape.h"

namespace tensormorph::engine {

MatrixShape as_matrix(const TensorInfo& tensor) {
  MatrixShape m;
  if (tensor.shape.empty()) return m;
  m.cols = tensor.shape.back();
  for (size_t i = 0; i + 1 < tensor.shape.size(); ++i) m.rows *= tensor.shape[i];
  return m;
}

}  // namespace tensormorph::engine
