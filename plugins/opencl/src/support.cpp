#include "support.h"

#include <cstdio>

namespace tm_opencl {
namespace {

struct DTypeName {
  int value;
  const char* name;
};

constexpr DTypeName kDTypeNames[] = {
    {TM_DTYPE_BOOL, "BOOL"},       {TM_DTYPE_U8, "U8"},           {TM_DTYPE_I8, "I8"},
    {TM_DTYPE_U16, "U16"},         {TM_DTYPE_I16, "I16"},         {TM_DTYPE_U32, "U32"},
    {TM_DTYPE_I32, "I32"},         {TM_DTYPE_U64, "U64"},         {TM_DTYPE_I64, "I64"},
    {TM_DTYPE_F16, "F16"},         {TM_DTYPE_BF16, "BF16"},       {TM_DTYPE_F32, "F32"},
    {TM_DTYPE_F64, "F64"},         {TM_DTYPE_F8_E4M3, "F8_E4M3"}, {TM_DTYPE_F8_E5M2, "F8_E5M2"},
    {TM_DTYPE_F8_E8M0, "F8_E8M0"}, {TM_DTYPE_F4_E2M1, "F4_E2M1"}, {TM_DTYPE_F6_E2M3, "F6_E2M3"},
    {TM_DTYPE_F6_E3M2, "F6_E3M2"}, {TM_DTYPE_C64, "C64"},         {TM_DTYPE_Q4_0, "Q4_0"},
    {TM_DTYPE_Q4_1, "Q4_1"},       {TM_DTYPE_Q5_0, "Q5_0"},       {TM_DTYPE_Q5_1, "Q5_1"},
    {TM_DTYPE_Q8_0, "Q8_0"},       {TM_DTYPE_Q8_1, "Q8_1"},       {TM_DTYPE_Q2_K, "Q2_K"},
    {TM_DTYPE_Q3_K, "Q3_K"},       {TM_DTYPE_Q4_K, "Q4_K"},       {TM_DTYPE_Q5_K, "Q5_K"},
    {TM_DTYPE_Q6_K, "Q6_K"},       {TM_DTYPE_Q8_K, "Q8_K"},       {TM_DTYPE_IQ2_XXS, "IQ2_XXS"},
    {TM_DTYPE_IQ2_XS, "IQ2_XS"},   {TM_DTYPE_IQ3_XXS, "IQ3_XXS"}, {TM_DTYPE_IQ1_S, "IQ1_S"},
    {TM_DTYPE_IQ4_NL, "IQ4_NL"},   {TM_DTYPE_IQ3_S, "IQ3_S"},     {TM_DTYPE_IQ2_S, "IQ2_S"},
    {TM_DTYPE_IQ4_XS, "IQ4_XS"},   {TM_DTYPE_IQ1_M, "IQ1_M"},     {TM_DTYPE_TQ1_0, "TQ1_0"},
    {TM_DTYPE_TQ2_0, "TQ2_0"},     {TM_DTYPE_MXFP4, "MXFP4"},
};

const char* exactness_name(TM_Exactness exactness) {
  switch (exactness) {
    case TM_EXACT_BITWISE: return "BITWISE";
    case TM_EXACT_BOUNDED: return "BOUNDED";
    case TM_EXACT_APPROXIMATE: return "APPROXIMATE";
  }
  return "an unknown exactness";
}

Capability none(std::string reason) {
  Capability capability;
  capability.reason = std::move(reason);
  return capability;
}

Capability full(TM_Exactness exactness, double error_bound) {
  Capability capability;
  capability.level = TM_SUPPORT_FULL;
  capability.exactness = exactness;
  capability.error_bound = error_bound;
  return capability;
}

// Supported with a restriction that `reason` names.
Capability partial(TM_Exactness exactness, std::string reason) {
  Capability capability = full(exactness, 0.0);
  capability.level = TM_SUPPORT_PARTIAL;
  capability.reason = std::move(reason);
  return capability;
}

std::string format_bound(double bound) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g", bound);
  return text;
}

}  // namespace

bool is_known_dtype(int dtype) {
  for (const DTypeName& entry : kDTypeNames) {
    if (entry.value == dtype) return true;
  }
  return false;
}

std::string dtype_name(int dtype) {
  for (const DTypeName& entry : kDTypeNames) {
    if (entry.value == dtype) return entry.name;
  }
  return "dtype " + std::to_string(dtype);
}

Capability capability_of(const TM_Backend& backend, std::string_view op, TM_DType dtype, TM_ShapeClass shape_class) {
  if (op == TM_OP_TILE_STATS) {
    if (dtype != TM_DTYPE_F32 && dtype != TM_DTYPE_F16) {
      return none("opencl plugin implements tile_stats for F32 and F16 only (not " + dtype_name(dtype) + ")");
    }
    if (shape_class != TM_SHAPE_MATRIX) return none("tile_stats takes a 2-D tensor (shape class MATRIX)");
    if (!backend.tile_stats_available) {
      return none("opencl plugin computes tile_stats only in float64 (the canonical order) and this device has no "
                  "cl_khr_fp64; a float32 path is not implemented");
    }
    return full(TM_EXACT_BITWISE, 0.0);
  }
  if (op == TM_OP_DECODE) {
    if (dtype != TM_DTYPE_Q8_0) {
      return none("opencl plugin implements decode for Q8_0 only (not " + dtype_name(dtype) + ")");
    }
    if (backend.decode_bitwise) return full(TM_EXACT_BITWISE, 0.0);
    return full(TM_EXACT_BOUNDED, kDecodeBoundWithoutIeeeMultiply);
  }
  if (op == TM_OP_RENDER_TILE) {
    // A U8 rank-3 input can only be a statistics grid, and that render is colouring alone.
    if (dtype == TM_DTYPE_U8 && shape_class == TM_SHAPE_TENSOR) return full(TM_EXACT_BITWISE, 0.0);
    if (dtype != TM_DTYPE_F32 && dtype != TM_DTYPE_F16) {
      return none("opencl plugin renders values of F32 and F16 only (not " + dtype_name(dtype) +
                  "), and statistics grids (U8, shape class TENSOR)");
    }
    if (shape_class != TM_SHAPE_MATRIX) return none("render_tile renders values of a 2-D tensor (shape class MATRIX)");
    if (!backend.tile_stats_available) {
      return none("opencl plugin renders values through tile_stats, which needs cl_khr_fp64 on this device");
    }
    return partial(TM_EXACT_BITWISE,
                   "values with cell >= 8 (magnify 1) only: estimate refuses cell < 8 and magnify > 1; statistics "
                   "grids are declared as U8 TENSOR; " TM_OP_RENDER_TILE_SAMPLED " and other dtypes are not implemented");
  }
  if (op == TM_OP_RENDER_TILE_SAMPLED) {
    return none("opencl plugin does not implement " TM_OP_RENDER_TILE_SAMPLED " (it renders exactly, with " TM_OP_RENDER_TILE
                ")");
  }
  return none("opencl plugin does not implement " + std::string(op) + " (it implements " TM_OP_TILE_STATS
              " for F32/F16, " TM_OP_DECODE " for Q8_0 and " TM_OP_RENDER_TILE " from F32/F16 values and statistics)");
}

Status check_policy(const Capability& achieved, const TM_ExecutionPolicy& policy, std::string_view op) {
  const int floor = raw_enum_value(policy.exactness_floor);
  if (floor < TM_EXACT_BITWISE || floor > TM_EXACT_APPROXIMATE) {
    return invalid_argument("opencl: policy exactness_floor " + std::to_string(floor) + " is not a TM_Exactness value");
  }
  if (achieved.exactness > policy.exactness_floor) {
    std::string message = "opencl: " + std::string(op) + " on this device is " + exactness_name(achieved.exactness);
    if (achieved.exactness == TM_EXACT_BOUNDED) message += " (relative error <= " + format_bound(achieved.error_bound) + ")";
    message += " but the policy requires " + std::string(exactness_name(policy.exactness_floor));
    return unimplemented(std::move(message));
  }
  if (achieved.exactness == TM_EXACT_BOUNDED && policy.exactness_floor != TM_EXACT_BITWISE &&
      policy.max_error_bound > 0.0 && achieved.error_bound > policy.max_error_bound) {
    return unimplemented("opencl: " + std::string(op) + " on this device has relative error <= " +
                         format_bound(achieved.error_bound) + ", above the policy's max_error_bound " +
                         format_bound(policy.max_error_bound));
  }
  return {};
}

}  // namespace tm_opencl
