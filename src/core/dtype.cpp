#include "tensormorph/dtype.h"

#include <array>
#include <string>

namespace tensormorph {
namespace {

constexpr uint32_t kQK = 32;    // ggml's small block
constexpr uint32_t kQK_K = 256; // ggml's k-quant super-block

// Indexed by DType. Block sizes follow ggml's block structs (see docs/FORMATS.md).
constexpr std::array<DTypeInfo, static_cast<size_t>(DType::kCount)> kTable = {{
    {DType::kBool, "BOOL", 1, 1, -1, false, false},
    {DType::kU8, "U8", 1, 1, -1, false, false},
    {DType::kI8, "I8", 1, 1, 24, false, false},
    {DType::kU16, "U16", 1, 2, -1, false, false},
    {DType::kI16, "I16", 1, 2, 25, false, false},
    {DType::kU32, "U32", 1, 4, -1, false, false},
    {DType::kI32, "I32", 1, 4, 26, false, false},
    {DType::kU64, "U64", 1, 8, -1, false, false},
    {DType::kI64, "I64", 1, 8, 27, false, false},
    {DType::kF16, "F16", 1, 2, 1, true, false},
    {DType::kBF16, "BF16", 1, 2, 30, true, false},
    {DType::kF32, "F32", 1, 4, 0, true, false},
    {DType::kF64, "F64", 1, 8, 28, true, false},
    {DType::kF8E4M3, "F8_E4M3", 1, 1, -1, true, false},
    {DType::kF8E5M2, "F8_E5M2", 1, 1, -1, true, false},
    {DType::kF8E8M0, "F8_E8M0", 1, 1, -1, true, false},
    {DType::kF4E2M1, "F4", 2, 1, -1, true, false},
    {DType::kF6E2M3, "F6_E2M3", 4, 3, -1, true, false},
    {DType::kF6E3M2, "F6_E3M2", 4, 3, -1, true, false},
    {DType::kC64, "C64", 1, 8, -1, true, false},
    {DType::kQ4_0, "Q4_0", kQK, 18, 2, true, true},
    {DType::kQ4_1, "Q4_1", kQK, 20, 3, true, true},
    {DType::kQ5_0, "Q5_0", kQK, 22, 6, true, true},
    {DType::kQ5_1, "Q5_1", kQK, 24, 7, true, true},
    {DType::kQ8_0, "Q8_0", kQK, 34, 8, true, true},
    {DType::kQ8_1, "Q8_1", kQK, 36, 9, true, true},
    {DType::kQ2_K, "Q2_K", kQK_K, 84, 10, true, true},
    {DType::kQ3_K, "Q3_K", kQK_K, 110, 11, true, true},
    {DType::kQ4_K, "Q4_K", kQK_K, 144, 12, true, true},
    {DType::kQ5_K, "Q5_K", kQK_K, 176, 13, true, true},
    {DType::kQ6_K, "Q6_K", kQK_K, 210, 14, true, true},
    {DType::kQ8_K, "Q8_K", kQK_K, 292, 15, true, true},
    {DType::kIQ2_XXS, "IQ2_XXS", kQK_K, 66, 16, true, true},
    {DType::kIQ2_XS, "IQ2_XS", kQK_K, 74, 17, true, true},
    {DType::kIQ3_XXS, "IQ3_XXS", kQK_K, 98, 18, true, true},
    {DType::kIQ1_S, "IQ1_S", kQK_K, 50, 19, true, true},
    {DType::kIQ4_NL, "IQ4_NL", kQK, 18, 20, true, true},
    {DType::kIQ3_S, "IQ3_S", kQK_K, 110, 21, true, true},
    {DType::kIQ2_S, "IQ2_S", kQK_K, 82, 22, true, true},
    {DType::kIQ4_XS, "IQ4_XS", kQK_K, 136, 23, true, true},
    {DType::kIQ1_M, "IQ1_M", kQK_K, 56, 29, true, true},
    {DType::kTQ1_0, "TQ1_0", kQK_K, 54, 34, true, true},
    {DType::kTQ2_0, "TQ2_0", kQK_K, 66, 35, true, true},
    {DType::kMXFP4, "MXFP4", kQK, 17, 39, true, true},
}};

constexpr bool table_is_indexed_by_dtype() {
  for (size_t i = 0; i < kTable.size(); ++i) {
    if (static_cast<size_t>(kTable[i].dtype) != i) return false;
  }
  return true;
}
static_assert(table_is_indexed_by_dtype(), "kTable rows must follow the DType enum order");

}  // namespace

const DTypeInfo& dtype_info(DType dtype) { return kTable[static_cast<size_t>(dtype)]; }

std::string_view dtype_name(DType dtype) { return dtype_info(dtype).name; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& row : kTable) {
    if (row.name == name) return row.dtype;
  }
  // Alternative spellings seen in the wild.
  if (name == "F4_E2M1") return DType::kF4E2M1;
  if (name == "F8_E4M3FN") return DType::kF8E4M3;
  return std::nullopt;
}

std::optional<DType> dtype_from_ggml_id(uint32_t ggml_type_id) {
  for (const auto& row : kTable) {
    if (row.ggml_type_id >= 0 && static_cast<uint32_t>(row.ggml_type_id) == ggml_type_id) return row.dtype;
  }
  return std::nullopt;
}

std::string_view ggml_removed_type_name(uint32_t ggml_type_id) {
  switch (ggml_type_id) {
    case 4: return "Q4_2";
    case 5: return "Q4_3";
    case 31: return "Q4_0_4_4";
    case 32: return "Q4_0_4_8";
    case 33: return "Q4_0_8_8";
    case 36: return "IQ4_NL_4_4";
    case 37: return "IQ4_NL_4_8";
    case 38: return "IQ4_NL_8_8";
    default: return {};
  }
}

Result<uint64_t> dtype_storage_bytes(DType dtype, uint64_t elems) {
  const DTypeInfo& info = dtype_info(dtype);
  if (elems % info.block_elems != 0) {
    return Status::FormatError(std::to_string(elems) + " elements is not a whole number of " +
                               std::string(info.name) + " blocks of " +
                               std::to_string(info.block_elems));
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(elems / info.block_elems, uint64_t{info.block_bytes}, &bytes)) {
    return Status::FormatError("byte size of " + std::to_string(elems) + " " + std::string(info.name) +
                               " elements overflows 64 bits");
  }
  return bytes;
}

Result<uint64_t> checked_element_count(std::span<const uint64_t> shape) {
  uint64_t count = 1;
  for (uint64_t dim : shape) {
    if (__builtin_mul_overflow(count, dim, &count)) {
      std::string dims;
      for (uint64_t d : shape) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
      return Status::FormatError("shape [" + dims + "] has more than 2^64 elements");
    }
  }
  return count;
}

}  // namespace tensormorph
