// What this plugin can do, at which exactness: the single source of query's answers and of
// execute's refusals.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "backend.h"
#include "errors.h"
#include "tensormorph/c/plugin.h"

namespace tm_opencl {

/// The answer for one (operation, dtype, shape class) on one backend.
struct Capability {
  TM_SupportLevel level = TM_SUPPORT_NONE;  ///< NONE, PARTIAL or FULL
  TM_Exactness exactness = TM_EXACT_BITWISE;  ///< what results achieve when supported
  double error_bound = 0.0;                 ///< relative bound when BOUNDED
  std::string reason;                       ///< why NONE or PARTIAL (empty when FULL)
};

/// Relative error bound of the decode multiply on a device that is not round-to-nearest with
/// denormals: one float32 rounding of a product of exact operands, < 2^-23 relative.
constexpr double kDecodeBoundWithoutIeeeMultiply = 0x1p-23;

/// Smallest cell this plugin renders values with: below it a block is no tm.tile_stats@1 tile.
constexpr uint64_t kMinRenderCell = 8;

/// The integer stored in a host-filled enum field, read without loading it as the enum type (a
/// value outside the enum's range would be undefined behaviour to load in C++).
template <typename Enum>
int raw_enum_value(const Enum& field) {
  static_assert(sizeof(Enum) == sizeof(int), "ABI enums are int-sized");
  int value = 0;
  std::memcpy(&value, &field, sizeof value);
  return value;
}

/// True for the values the TM_DType enum defines.
bool is_known_dtype(int dtype);
/// The dtype's name as in docs ("F32", "Q8_0"); "dtype <n>" for unknown values.
std::string dtype_name(int dtype);

/// What `backend` achieves for `op` on `dtype` inputs of `shape_class`.
Capability capability_of(const TM_Backend& backend, std::string_view op, TM_DType dtype, TM_ShapeClass shape_class);

/// Refuses (UNIMPLEMENTED) when `achieved` is weaker than the policy's exactness floor or its
/// error bound exceeds the policy's max_error_bound (0: no bound stated).
Status check_policy(const Capability& achieved, const TM_ExecutionPolicy& policy, std::string_view op);

}  // namespace tm_opencl
