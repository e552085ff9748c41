// The level-of-detail pyramid of tile statistics: level k+1 merges 2x2 tiles of level k.
#pragma once

#include <span>
#include <vector>

#include "compute/ops/reference.h"

namespace tensormorph::engine {

/// One level of the pyramid: a grid of tiles, row-major.
struct PyramidLevel {
  ops::TileGrid grid;
  std::vector<TM_TileStats> tiles;
};

/// Merges 2x2 blocks of `level` (missing children are empty) into the next coarser level.
PyramidLevel coarser_level(const PyramidLevel& level);

/// Every level from `level0` up to a single tile (level0 first). An empty grid gives one empty tile.
std::vector<PyramidLevel> build_pyramid(PyramidLevel level0);

/// Exact per-tensor statistics derived from tile statistics.
struct TensorSummary {
  uint64_t count = 0, finite = 0, nan = 0, pos_inf = 0, neg_inf = 0, zeros = 0;
  double sum = 0, sum_sq = 0;
  double min = 0, max = 0, absmax = 0;  ///< over finite values (0 when none)
  /// Mean of finite values (0 when none).
  double mean() const;
  /// Population standard deviation of finite values (0 when none).
  double stddev() const;
};

/// The summary of a single merged tile (the pyramid's top).
TensorSummary summarize(const TM_TileStats& top);

}  // namespace tensormorph::engine
