// The built-in operations' definitions (see op_definition.h), and the attribute names their
// instances use (the TM_ATTR_* constants of plugin.h under C++ names).
#pragma once

#include <span>
#include <string_view>

#include "compute/ops/op_definition.h"

namespace tensormorph::ops {

/// Attribute names of tm.tile_stats@1 (integers).
inline constexpr const char* kAttrRowBegin = TM_ATTR_ROW_BEGIN;
inline constexpr const char* kAttrRowEnd = TM_ATTR_ROW_END;
inline constexpr const char* kAttrColBegin = TM_ATTR_COL_BEGIN;
inline constexpr const char* kAttrColEnd = TM_ATTR_COL_END;
inline constexpr const char* kAttrTile = TM_ATTR_TILE;
/// Attribute names of tm.histogram@1 (lo, hi floating-point; bins integer).
inline constexpr const char* kAttrLo = TM_ATTR_LO;
inline constexpr const char* kAttrHi = TM_ATTR_HI;
inline constexpr const char* kAttrBins = TM_ATTR_BINS;
/// Attribute names of tm.render_tile@1 besides row_begin, col_begin, lo and hi (integers).
inline constexpr const char* kAttrSource = TM_ATTR_SOURCE;
inline constexpr const char* kAttrCell = TM_ATTR_CELL;
inline constexpr const char* kAttrMagnify = TM_ATTR_MAGNIFY;
inline constexpr const char* kAttrStat = TM_ATTR_STAT;
inline constexpr const char* kAttrColormap = TM_ATTR_COLORMAP;

/// Attribute names of tm.radix_histogram@1 (key, shift, bits integers; center floating-point).
inline constexpr const char* kAttrKey = TM_ATTR_KEY;
inline constexpr const char* kAttrShift = TM_ATTR_SHIFT;
inline constexpr const char* kAttrBits = TM_ATTR_BITS;
inline constexpr const char* kAttrCenter = TM_ATTR_CENTER;
/// Attribute name of tm.top_k@1 (integer).
inline constexpr const char* kAttrK = TM_ATTR_K;

/// Every built-in operation, ordered by id. Adding an operation adds its definition here.
std::span<const OpDefinition> builtin_definitions();

/// The built-in definition of `id`, or nullptr.
const OpDefinition* find_builtin_definition(std::string_view id);

/// Every dtype tm.decode@1 and the other "any decodable" inputs accept.
const std::vector<DType>& decodable_dtypes();

}  // namespace tensormorph::ops
