// ggml's non-linear 4-bit types IQ4_NL and IQ4_XS. The other IQ types (IQ2_*, IQ3_*, IQ1_*)
// index ggml's large lattice grid tables, which this project does not carry; decode.cpp reports
// them as not decodable.
//
// Both decodable types map a nibble through a fixed 16-entry codebook and scale it:
//   IQ4_NL 18 B : d (fp16) | qs[16]                   value = d * book[nibble]
//   IQ4_XS 136 B: d (fp16) | scales_h (u16) | scales_l[4] | qs[128]
//                 8 sub-blocks of 32 with a 6-bit scale ls (low 4 bits in scales_l, nibble per
//                 sub-block; top 2 bits in scales_h, 2 bits per sub-block):
//                 value = (d * (ls - 32)) * book[nibble]
// Within each 32-element group, element j is the low nibble of qs[j], element j+16 the high one.
#include "core/decode/decode_internal.h"
#include "core/ggml_iq4_codebook.h"

namespace tensormorph::decode_internal {
namespace {

using ggml_tables::kIq4Book;

/// Decodes one group of 32 nibbles with the float scale `d`.
inline void iq4_group(const std::byte* qs, float d, float* y) {
  for (uint32_t j = 0; j < 16; ++j) {
    const uint8_t q = byte_at(qs + j);
    y[j] = d * kIq4Book[q & 0xf];
    y[j + 16] = d * kIq4Book[q >> 4];
  }
}

void decode_iq4_nl(const std::byte* __restrict src, uint64_t blocks, float* __restrict out) {
  for (uint64_t b = 0; b < blocks; ++b, src += 18, out += 32) {
    iq4_group(src + 2, half_bits_to_float(load_u16(src)), out);
  }
}

void decode_iq4_xs(const std::byte* __restrict src, uint64_t blocks, float* __restrict out) {
  for (uint64_t b = 0; b < blocks; ++b, src += 136, out += 256) {
    const float d = half_bits_to_float(load_u16(src));
    const uint32_t scales_high = load_u16(src + 2);
    const std::byte* scales_low = src + 4;
    const std::byte* qs = src + 8;
    for (uint32_t group = 0; group < 8; ++group) {
      const uint32_t low = (byte_at(scales_low + group / 2) >> (4 * (group % 2))) & 0xfu;
      const uint32_t high = (scales_high >> (2 * group)) & 3u;
      const int ls = static_cast<int>(low | (high << 4));
      iq4_group(qs + 16 * group, d * static_cast<float>(ls - 32), out + 32 * group);
    }
  }
}

}  // namespace

std::optional<BlockDecoder> find_ggml_iq_decoder(DType dtype) {
  switch (dtype) {
    case DType::kIQ4_NL: return BlockDecoder{32, 18, &decode_iq4_nl, nullptr};
    case DType::kIQ4_XS: return BlockDecoder{256, 136, &decode_iq4_xs, nullptr};
    default: return std::nullopt;
  }
}

}  // namespace tensormorph::decode_internal
