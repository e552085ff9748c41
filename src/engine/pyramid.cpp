#include "engine/pyramid.h"

#include <algorithm>
#include <cmath>

namespace tensormorph::engine {

PyramidLevel coarser_level(const PyramidLevel& level) {
  PyramidLevel next;
  next.grid = {(level.grid.rows + 1) / 2, (level.grid.cols + 1) / 2};
  next.tiles.resize(next.grid.count());
  const TM_TileStats empty = ops::empty_tile_stats();
  auto at = [&](uint64_t r, uint64_t c) -> const TM_TileStats& {
    return (r < level.grid.rows && c < level.grid.cols) ? level.tiles[r * level.grid.cols + c] : empty;
  };
  for (uint64_t r = 0; r < next.grid.rows; ++r) {
    for (uint64_t c = 0; c < next.grid.cols; ++c) {
      next.tiles[r * next.grid.cols + c] =
          ops::merge_tile_stats(at(2 * r, 2 * c), at(2 * r, 2 * c + 1), at(2 * r + 1, 2 * c), at(2 * r + 1, 2 * c + 1));
    }
  }
  return next;
}

std::vector<PyramidLevel> build_pyramid(PyramidLevel level0) {
  std::vector<PyramidLevel> levels;
  if (level0.grid.count() == 0) {
    level0.grid = {1, 1};
    level0.tiles = {ops::empty_tile_stats()};
  }
  levels.push_back(std::move(level0));
  while (levels.back().grid.rows > 1 || levels.back().grid.cols > 1) levels.push_back(coarser_level(levels.back()));
  return levels;
}

double TensorSummary::mean() const { return finite ? sum / static_cast<double>(finite) : 0.0; }

double TensorSummary::stddev() const {
  if (finite == 0) return 0.0;
  const double m = mean();
  return std::sqrt(std::max(0.0, sum_sq / static_cast<double>(finite) - m * m));
}

TensorSummary summarize(const TM_TileStats& top) {
  TensorSummary s;
  s.count = top.count;
  s.nan = top.nan;
  s.pos_inf = top.pos_inf;
  s.neg_inf = top.neg_inf;
  s.zeros = top.zeros;
  s.finite = top.count - top.nan - top.pos_inf - top.neg_inf;
  s.sum = top.sum;
  s.sum_sq = top.sum_sq;
  if (s.finite > 0) {
    s.min = top.min;
    s.max = top.max;
    s.absmax = top.absmax;
  }
  return s;
}

}  // namespace tensormorph::engine
