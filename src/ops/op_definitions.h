// The core operations' definitions (signatures, exactness) and the names their instances use.
#pragma once

#include "compute/op_registry.h"
#include "tensormorph/status.h"

namespace tensormorph::ops {

/// Attribute names of tm.tile_stats@1 (integers).
inline constexpr const char* kAttrRowBegin = "row_begin";
inline constexpr const char* kAttrRowEnd = "row_end";
inline constexpr const char* kAttrColBegin = "col_begin";
inline constexpr const char* kAttrColEnd = "col_end";
inline constexpr const char* kAttrTile = "tile";
/// Attribute names of tm.histogram@1 (lo, hi floating-point; bins integer).
inline constexpr const char* kAttrLo = "lo";
inline constexpr const char* kAttrHi = "hi";
inline constexpr const char* kAttrBins = "bins";

/// Registers tm.decode@1, tm.tile_stats@1 and tm.histogram@1 (none has a ladder: each is
/// always computable exactly by streaming).
Status register_core_ops(compute::OpRegistry& registry);

}  // namespace tensormorph::ops
