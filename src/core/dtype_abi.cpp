#include "core/dtype_abi.h"

#include <array>
#include <string>
#include <utility>

namespace tensormorph {
namespace {

// One row per DType; the ABI ids are fixed in plugin.h and never reused.
constexpr std::array<std::pair<DType, TM_DType>, static_cast<size_t>(DType::kCount)> kPairs = {{
    {DType::kBool, TM_DTYPE_BOOL}, {DType::kU8, TM_DTYPE_U8}, {DType::kI8, TM_DTYPE_I8},
    {DType::kU16, TM_DTYPE_U16}, {DType::kI16, TM_DTYPE_I16}, {DType::kU32, TM_DTYPE_U32},
    {DType::kI32, TM_DTYPE_I32}, {DType::kU64, TM_DTYPE_U64}, {DType::kI64, TM_DTYPE_I64},
    {DType::kF16, TM_DTYPE_F16}, {DType::kBF16, TM_DTYPE_BF16}, {DType::kF32, TM_DTYPE_F32},
    {DType::kF64, TM_DTYPE_F64}, {DType::kF8E4M3, TM_DTYPE_F8_E4M3}, {DType::kF8E5M2, TM_DTYPE_F8_E5M2},
    {DType::kF8E8M0, TM_DTYPE_F8_E8M0}, {DType::kF4E2M1, TM_DTYPE_F4_E2M1}, {DType::kF6E2M3, TM_DTYPE_F6_E2M3},
    {DType::kF6E3M2, TM_DTYPE_F6_E3M2}, {DType::kC64, TM_DTYPE_C64},
    {DType::kQ4_0, TM_DTYPE_Q4_0}, {DType::kQ4_1, TM_DTYPE_Q4_1}, {DType::kQ5_0, TM_DTYPE_Q5_0},
    {DType::kQ5_1, TM_DTYPE_Q5_1}, {DType::kQ8_0, TM_DTYPE_Q8_0}, {DType::kQ8_1, TM_DTYPE_Q8_1},
    {DType::kQ2_K, TM_DTYPE_Q2_K}, {DType::kQ3_K, TM_DTYPE_Q3_K}, {DType::kQ4_K, TM_DTYPE_Q4_K},
    {DType::kQ5_K, TM_DTYPE_Q5_K}, {DType::kQ6_K, TM_DTYPE_Q6_K}, {DType::kQ8_K, TM_DTYPE_Q8_K},
    {DType::kIQ2_XXS, TM_DTYPE_IQ2_XXS}, {DType::kIQ2_XS, TM_DTYPE_IQ2_XS}, {DType::kIQ3_XXS, TM_DTYPE_IQ3_XXS},
    {DType::kIQ1_S, TM_DTYPE_IQ1_S}, {DType::kIQ4_NL, TM_DTYPE_IQ4_NL}, {DType::kIQ3_S, TM_DTYPE_IQ3_S},
    {DType::kIQ2_S, TM_DTYPE_IQ2_S}, {DType::kIQ4_XS, TM_DTYPE_IQ4_XS}, {DType::kIQ1_M, TM_DTYPE_IQ1_M},
    {DType::kTQ1_0, TM_DTYPE_TQ1_0}, {DType::kTQ2_0, TM_DTYPE_TQ2_0}, {DType::kMXFP4, TM_DTYPE_MXFP4},
}};

constexpr bool pairs_follow_enum() {
  for (size_t i = 0; i < kPairs.size(); ++i) {
    if (static_cast<size_t>(kPairs[i].first) != i) return false;
  }
  return true;
}
static_assert(pairs_follow_enum(), "kPairs rows must follow the DType enum order");

}  // namespace

TM_DType to_abi_dtype(DType dtype) { return kPairs[static_cast<size_t>(dtype)].second; }

std::optional<DType> from_abi_dtype(TM_DType dtype) {
  for (const auto& [ours, abi] : kPairs) {
    if (abi == dtype) return ours;
  }
  return std::nullopt;
}

std::string abi_dtype_name(TM_DType dtype) {
  auto ours = from_abi_dtype(dtype);
  return ours ? std::string(dtype_name(*ours)) : "unknown(" + std::to_string(static_cast<int>(dtype)) + ")";
}

}  // namespace tensormorph
