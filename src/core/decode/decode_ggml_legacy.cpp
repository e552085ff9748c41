// ggml's original 32-element block formats: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1.
//
// Every block starts with an fp16 scale d (and, for the _1 types, an fp16 offset m). The 4-bit
// types keep element j in the low nibble of qs[j] and element j+16 in its high nibble; the 5-bit
// types add a 32-bit mask qh whose bit j is bit 4 of element j. Values are q*d (or q*d + m),
// computed in float exactly as ggml does: convert q to float, multiply, then add m.
#include "core/decode/decode_internal.h"

namespace tensormorph::decode_internal {
namespace {

constexpr uint32_t kBlock = 32;

void decode_q4_0(const std::byte* __restrict src, uint64_t blocks, float* __restrict out) {
  for (uint64_t b = 0; b < blocks; ++b, src += 18, out += kBlock) {
    const float d = half_bits_to_float(load_u16(src));
    const std::byte* qs = src + 2;
    for (uint32_t j = 0; j < 16; ++j) {
      const uint8_t q = byte_at(qs + j);
      out[j] = static_cast<float>((q & 0xf) - 8) * d;
      out[j + 16] = static_cast<float>((q >> 4) - 8) * d;
    }
  }
}

void decode_q4_1(const std::byte* __restrict src, uint64_t blocks, float* __restrict out) {
  for (uint64_t b = 0; b < blocks; ++b, src += 20, out += kBlock) {
    const float d = half_bits_to_float(load_u16(src));
    const float m = half_bits_to_float(load_u16(src + 2));
    const std::byte* qs = src + 4;
    for (uint32_t j = 0; j < 16; ++j) {
      const uint8_t q = byte_at(qs + j);
      out[j] = static_cast<float>(q & 0xf) * d + m;
      out[j + 16] = static_cast<float>(q >> 4) * d + m;
    }
  }
}

/// Bit 4 of the 5-bit quant of element `e` (0..31), from the block's 32-bit high-bit mask.
inline int fifth_bit(uint32_t high_bits, uint32_t e) { return static_cast<int>(((high_bits >> e) & 1u) << 4); }

void decode_q5_0(const std::byte* __restrict src, uint64_t blocks, float* __restrict out) {
  for (uint64_t b = 0; b < blocks; ++b, src += 22, out += kBlock) {
    const float d = half_bits_to_float(load_u16(src));
    const uint32_t high_bits = load_u32(src + 2);
    const std::byte* qs = src + 6;
    for (uint32_t j = 0; j < 16; ++j) {
      const uint8_t q = byte_at(qs + j);
      out[j] = static_cast<float>(((q & 0xf) | fifth_bit(high_bits, j)) - 16) * d;
      out[j + 16] = static_cast<float>(((q >> 4) | fifth_bit(high_bits, j + 16)) - 16) * d;
    }
  }
}

void decode_q5_1(const std::byte* __restrict src, uint64_t blocks, float* __restrict out) {
  for (uint64_t b = 0; b < blocks; ++b, src += 24, out += kBlock) {
    const float d = half_bits_to_float(load_u16(src));
    const float m = half_bits_to_float(load_u16(src + 2));
    const uint32_t high_bits = load_u32(src + 4);
    const std::byte* qs = src + 8;
    for (uint32_t j = 0; j < 16; ++j) {
      const uint8_t q = byte_at(qs + j);
      out[j] = static_cast<float>((q & 0xf) | fifth_bit(high_bits, j)) * d + m;
      out[j + 16] = static_cast<float>((q >> 4) | fifth_bit(high_bits, j + 16)) * d + m;
    }
  }
}

/// Q8_0 and Q8_1 differ only in the header before the 32 int8 quants (Q8_1 adds fp16 s = d*sum,
/// which decoding does not need).
template <uint32_t kHeaderBytes>
void decode_q8(const std::byte* __restrict src, uint64_t blocks, float* __restrict out) {
  for (uint64_t b = 0; b < blocks; ++b, src += kHeaderBytes + kBlock, out += kBlock) {
    const float d = half_bits_to_float(load_u16(src));
    const std::byte* qs = src + kHeaderBytes;
    for (uint32_t j = 0; j < kBlock; ++j) out[j] = static_cast<float>(int8_at(qs + j)) * d;
  }
}

}  // namespace

std::optional<BlockDecoder> find_ggml_legacy_decoder(DType dtype) {
  switch (dtype) {
    case DType::kQ4_0: return BlockDecoder{kBlock, 18, &decode_q4_0, nullptr};
    case DType::kQ4_1: return BlockDecoder{kBlock, 20, &decode_q4_1, nullptr};
    case DType::kQ5_0: return BlockDecoder{kBlock, 22, &decode_q5_0, nullptr};
    case DType::kQ5_1: return BlockDecoder{kBlock, 24, &decode_q5_1, nullptr};
    case DType::kQ8_0: return BlockDecoder{kBlock, 34, &decode_q8<2>, nullptr};
    case DType::kQ8_1: return BlockDecoder{kBlock, 36, &decode_q8<4>, nullptr};
    default: return std::nullopt;
  }
}

}  // namespace tensormorph::decode_internal
