// Element types of every supported checkpoint format, including ggml's block-quantized types.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "tensormorph/status.h"

namespace tensormorph {

/// Every element type Tensormorph knows. Values are internal; never persist them.
enum class DType : uint8_t {
  // Plain scalar types (safetensors names; ggml and PyTorch map onto these).
  kBool, kU8, kI8, kU16, kI16, kU32, kI32, kU64, kI64,
  kF16, kBF16, kF32, kF64,
  kF8E4M3, kF8E5M2, kF8E8M0,
  kF4E2M1, kF6E2M3, kF6E3M2,  // sub-byte floats, packed little-endian bit streams
  kC64,                       // complex64: two F32 per element
  // ggml block types (block_elems elements stored in block_bytes bytes).
  kQ4_0, kQ4_1, kQ5_0, kQ5_1, kQ8_0, kQ8_1,
  kQ2_K, kQ3_K, kQ4_K, kQ5_K, kQ6_K, kQ8_K,
  kIQ2_XXS, kIQ2_XS, kIQ3_XXS, kIQ1_S, kIQ4_NL, kIQ3_S, kIQ2_S, kIQ4_XS, kIQ1_M,
  kTQ1_0, kTQ2_0, kMXFP4,
  kCount,
};

/// Static facts about a dtype.
struct DTypeInfo {
  DType dtype;
  std::string_view name;   ///< canonical upper-case name: "BF16", "Q4_K", "F8_E4M3"
  uint32_t block_elems;    ///< elements per storage block (1 for byte-sized scalars)
  uint32_t block_bytes;    ///< bytes per storage block
  int32_t ggml_type_id;    ///< ggml type id, or -1 when ggml has none
  bool is_float;           ///< floating-point values (incl. quantized)
  bool is_quantized;       ///< a block format with shared scales
};

/// Facts about `dtype`; valid for every value below kCount.
const DTypeInfo& dtype_info(DType dtype);
/// Canonical name of `dtype`.
std::string_view dtype_name(DType dtype);
/// Looks up a dtype by its canonical name (also accepts safetensors' spellings).
std::optional<DType> dtype_from_name(std::string_view name);
/// Maps a ggml type id (as stored in GGUF tensor infos) to a dtype; nullopt for ids unknown or removed.
std::optional<DType> dtype_from_ggml_id(uint32_t ggml_type_id);
/// Name of a ggml type id that is known but no longer produced (e.g. 4 = "Q4_2"), else empty.
std::string_view ggml_removed_type_name(uint32_t ggml_type_id);

/// Bytes needed to store `elems` elements of `dtype`. Fails when `elems` is not a whole number of
/// blocks, or on 64-bit overflow.
Result<uint64_t> dtype_storage_bytes(DType dtype, uint64_t elems);

/// Multiplies dims, failing on 64-bit overflow. An empty shape is a scalar (1 element).
Result<uint64_t> checked_element_count(std::span<const uint64_t> shape);

}  // namespace tensormorph
