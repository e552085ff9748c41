// Finding one element of a tensor for the viewer to jump to: the first non-finite value in
// row-major order, or the value of largest magnitude.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "compute/scheduler.h"
#include "engine/pyramid.h"
#include "engine/tensor_ops.h"
#include "tensormorph/checkpoint.h"

namespace tensormorph::engine {

/// An element found.
struct LocatedElement {
  uint64_t index = 0;  ///< flat, row-major over the tensor's shape
  float value = 0;     ///< as decoded (NaN, +Inf or -Inf for a non-finite one)
};

/// Tile statistics known for a tensor: level 0 of its index pyramid, over its matrix view.
struct KnownTiles {
  const PyramidLevel* level = nullptr;
  uint32_t tile = 0;
};

/// The first non-finite element in row-major order (nullopt when every element is finite),
/// decoding bands of rows through tm.decode@1. With `known` tiles that match the tensor's matrix
/// view, only the rows of tiles holding a non-finite value are decoded (none when the tiles prove
/// the tensor finite).
Result<std::optional<LocatedElement>> first_nonfinite(compute::Scheduler& scheduler, const Checkpoint& checkpoint,
                                                      const TensorInfo& tensor, const KnownTiles& known,
                                                      Records* records = nullptr);

/// The finite element of largest magnitude, the first in row-major order on ties (nullopt when no
/// element is finite), through tm.top_k@1.
Result<std::optional<LocatedElement>> largest_magnitude(compute::Scheduler& scheduler, const Checkpoint& checkpoint,
                                                        const TensorInfo& tensor, Records* records = nullptr);

/// The N-D coordinates of flat row-major element `index` of a tensor of `shape` (empty for a scalar).
std::vector<uint64_t> coordinates_of(const std::vector<uint64_t>& shape, uint64_t index);

}  // namespace tensormorph::engine
