// Shared plumbing of the dtype decoders: block geometry, little-endian loads, exact F16.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>

#include "tensormorph/dtype.h"

namespace tensormorph::decode_internal {

// Stored tensors are little-endian; the loads below read them in host order.
static_assert(std::endian::native == std::endian::little, "decoders assume a little-endian host");

/// Converts `blocks` whole storage blocks at `src` into `blocks * block_elems` values at `out`.
/// Implementations mark both pointers __restrict (the output never overlaps the input), which
/// lets GCC vectorise their inner loops at -O2 without runtime alias checks.
using ToF32Fn = void (*)(const std::byte* src, uint64_t blocks, float* out);
/// Same, into float64.
using ToF64Fn = void (*)(const std::byte* src, uint64_t blocks, double* out);

/// How one dtype's blocks are laid out and decoded.
struct BlockDecoder {
  uint32_t block_elems = 0;  ///< elements per block, as the decoder assumes
  uint32_t block_bytes = 0;  ///< bytes per block, as the decoder assumes
  ToF32Fn to_f32 = nullptr;  ///< the float32 decoder
  ToF64Fn to_f64 = nullptr;  ///< an exact float64 decoder; nullptr widens the float32 result
};

/// Decoder for the plain scalar types (BOOL, ints, F16..F64, F8, F6, F4); nullopt for others.
std::optional<BlockDecoder> find_scalar_decoder(DType dtype);
/// Decoder for Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1; nullopt for others.
std::optional<BlockDecoder> find_ggml_legacy_decoder(DType dtype);
/// Decoder for Q2_K..Q6_K and Q8_K; nullopt for others.
std::optional<BlockDecoder> find_ggml_kquant_decoder(DType dtype);
/// Decoder for the IQ types (IQ1_S, IQ1_M, IQ2_*, IQ3_*, IQ4_NL, IQ4_XS); nullopt for others.
std::optional<BlockDecoder> find_ggml_iq_decoder(DType dtype);
/// Decoder for TQ1_0 and TQ2_0; nullopt for others.
std::optional<BlockDecoder> find_ggml_ternary_decoder(DType dtype);
/// Decoder for MXFP4; nullopt for others.
std::optional<BlockDecoder> find_mxfp4_decoder(DType dtype);

/// Reads a little-endian u16 at `p` (any alignment).
inline uint16_t load_u16(const std::byte* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

/// Reads a little-endian u32 at `p` (any alignment).
inline uint32_t load_u32(const std::byte* p) {
  uint32_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

/// Reads a little-endian IEEE float32 at `p` (any alignment).
inline float load_f32(const std::byte* p) {
  float v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

/// The byte at `p` as an unsigned value.
inline uint8_t byte_at(const std::byte* p) { return static_cast<uint8_t>(*p); }

/// The byte at `p` reinterpreted as a two's-complement int8.
inline int8_t int8_at(const std::byte* p) { return static_cast<int8_t>(static_cast<uint8_t>(*p)); }

/// Exact IEEE half -> float, written with masks instead of branches so that loops over it
/// vectorise. Normal halves only need their exponent rebiased (15 -> 127, i.e. +112); inf/NaN
/// need the exponent field widened to all ones (another +112); zeros and subnormals are
/// m * 2^-24, which float represents exactly.
inline float half_bits_to_float(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t magnitude = half & 0x7fffu;
  const uint32_t inf_nan_mask = 0u - static_cast<uint32_t>(magnitude >= 0x7c00u);
  const uint32_t small_mask = 0u - static_cast<uint32_t>(magnitude < 0x0400u);
  const uint32_t small =
      std::bit_cast<uint32_t>(static_cast<float>(static_cast<int32_t>(magnitude)) * 0x1p-24f);
  const uint32_t large = (magnitude << 13) + (112u << 23) + (inf_nan_mask & (112u << 23));
  return std::bit_cast<float>(sign | (large & ~small_mask) | (small & small_mask));
}

}  // namespace tensormorph::decode_internal
