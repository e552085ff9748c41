#include "engine/locate.h"

#include <algorithm>
#include <cmath>

#include "engine/matrix_shape.h"
#include "engine/outliers.h"

namespace tensormorph::engine {
namespace {

// Decoded float32 per band when nothing says where to look: bounded memory, few operations.
constexpr uint64_t kScanBandBytes = uint64_t{64} << 20;

bool nonfinite_in(const TM_TileStats& s) { return s.nan + s.pos_inf + s.neg_inf > 0; }

// Decodes rows [begin, end) of the matrix view and returns the first non-finite element in them.
Result<std::optional<LocatedElement>> scan_rows(compute::Scheduler& scheduler, const Checkpoint& checkpoint,
                                                const TensorInfo& tensor, uint64_t cols, uint64_t begin, uint64_t end,
                                                Records* records) {
  TM_ASSIGN_OR_RETURN(auto values, decode_rows(scheduler, checkpoint, tensor, begin, end, records));
  const auto it = std::find_if(values.begin(), values.end(), [](float v) { return !std::isfinite(v); });
  if (it == values.end()) return std::optional<LocatedElement>();
  return std::optional<LocatedElement>(
      LocatedElement{begin * cols + static_cast<uint64_t>(it - values.begin()), *it});
}

}  // namespace

Result<std::optional<LocatedElement>> first_nonfinite(compute::Scheduler& scheduler, const Checkpoint& checkpoint,
                                                      const TensorInfo& tensor, const KnownTiles& known,
                                                      Records* records) {
  const MatrixShape m = as_matrix(tensor);
  if (tensor.elements() == 0) return std::optional<LocatedElement>();
  const ops::TileGrid expected =
      known.tile > 0 ? ops::tile_grid({0, m.rows, 0, m.cols}, known.tile) : ops::TileGrid{};
  if (known.level != nullptr && known.tile > 0 && known.level->grid.rows == expected.rows &&
      known.level->grid.cols == expected.cols && known.level->tiles.size() == expected.count()) {
    // The first non-finite element lies in the first tile row that holds one; rows without one are skipped.
    for (uint64_t ty = 0; ty < expected.rows; ++ty) {
      const auto row = std::span(known.level->tiles).subspan(ty * expected.cols, expected.cols);
      if (std::none_of(row.begin(), row.end(), nonfinite_in)) continue;
      const uint64_t begin = ty * known.tile, end = std::min(m.rows, begin + known.tile);
      TM_ASSIGN_OR_RETURN(auto found, scan_rows(scheduler, checkpoint, tensor, m.cols, begin, end, records));
      if (found) return found;
    }
    return std::optional<LocatedElement>();
  }
  // A strided view is gathered whole by every decode, so it is decoded once.
  const uint64_t band_rows =
      tensor.contiguous() ? std::max<uint64_t>(1, kScanBandBytes / sizeof(float) / std::max<uint64_t>(m.cols, 1)) : m.rows;
  for (uint64_t begin = 0; begin < m.rows; begin += band_rows) {
    TM_ASSIGN_OR_RETURN(auto found, scan_rows(scheduler, checkpoint, tensor, m.cols, begin,
                                              std::min(m.rows, begin + band_rows), records));
    if (found) return found;
  }
  return std::optional<LocatedElement>();
}

Result<std::optional<LocatedElement>> largest_magnitude(compute::Scheduler& scheduler, const Checkpoint& checkpoint,
                                                        const TensorInfo& tensor, Records* records) {
  if (tensor.elements() == 0) return std::optional<LocatedElement>();
  TM_ASSIGN_OR_RETURN(auto top, tensor_top_k(scheduler, checkpoint, tensor, 1, records));
  if (top.empty()) return std::optional<LocatedElement>();
  return std::optional<LocatedElement>(LocatedElement{top[0].index, top[0].value});
}

std::vector<uint64_t> coordinates_of(const std::vector<uint64_t>& shape, uint64_t index) {
  std::vector<uint64_t> coords(shape.size(), 0);
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] == 0) break;
    coords[i] = index % shape[i];
    index /= shape[i];
  }
  return coords;
}

}  // namespace tensormorph::engine
