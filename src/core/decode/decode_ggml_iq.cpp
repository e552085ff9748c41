// ggml's IQ types: the non-linear 4-bit IQ4_NL / IQ4_XS, and the lattice types IQ2_XXS, IQ2_XS,
// IQ2_S, IQ3_XXS, IQ3_S, IQ1_S and IQ1_M, whose codes index ggml's grid tables
// (ggml_iq_grids.h). All super-blocks hold 256 elements in 8 sub-blocks of 32.
//
// IQ4 types map a nibble through a fixed 16-entry codebook and scale it:
//   IQ4_NL 18 B : d (fp16) | qs[16]                   value = d * book[nibble]
//   IQ4_XS 136 B: d (fp16) | scales_h (u16) | scales_l[4] | qs[128]
//                 6-bit sub-block scale ls (low 4 bits in scales_l, nibble per sub-block; top 2
//                 bits in scales_h, 2 bits per sub-block): value = (d * (ls - 32)) * book[nibble]
//   Within each 32-element group, element j is the low nibble of qs[j], element j+16 the high one.
//
// Lattice types code each run of 8 (IQ3: 4) elements as one grid entry (magnitudes) plus signs:
//   IQ2_XXS 66 B : d | per sub-block 8 bytes: 4 grid indices, then a u32 of 4 x 7 sign bits and a
//                  4-bit scale s in bits 28..31; scale (d * (0.5 + s)) * 0.25
//   IQ2_XS  74 B : d | qs u16[32] (9-bit index, 7 sign bits) | scales[8] (a nibble per 16 elements)
//   IQ2_S   82 B : d | qs[32] index low bits | signs[32] (8 explicit bits) | qh[8] index bits 8..9
//                  | scales[8]
//   IQ3_XXS 98 B : d | qs[64] indices (4-wide entries) | per sub-block a u32 as in IQ2_XXS; scale
//                  (d * (0.5 + s)) * 0.5
//   IQ3_S  110 B : d | qs[64] index low bits | qh[8] index bit 8 | signs[32] | scales[4]
//                  (a nibble per sub-block; scale d * (1 + 2 s))
//   IQ1_S   50 B : d | qs[32] index low bits | qh u16[8]: 4 x 3 index bits, 3-bit scale s, delta
//                  sign; value = (d * (2 s + 1)) * (grid + delta)
//   IQ1_M   56 B : qs[32] | qh[16] (per 8 elements 3 index bits and a delta sign) | scales[8]
//                  (3-bit scales per 16 elements, the fp16 d spread over the top nibbles)
// Every value is formed as ggml's scalar dequantize_row_* forms it, product by product, so that
// the output matches ggml bit for bit under -ffp-contract=off.
#include "core/decode/decode_internal.h"
#include "core/decode/ggml_iq_grids.h"
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

/// Writes `count` elements scale * magnitude, negated where `signs` has the element's bit; the
/// magnitudes are the bytes of `grid`, lowest first. ggml multiplies by -1.f, which is exactly a
/// negation (a zero scale gives -0.0 either way).
inline void signed_run(uint64_t grid, uint32_t signs, float scale, uint32_t count, float* y) {
  for (uint32_t j = 0; j < count; ++j) {
    const float v = scale * static_cast<float>((grid >> (8 * j)) & 0xffu);
    y[j] = ((signs >> j) & 1u) != 0 ? -v : v;
  }
}

/// ggml's two-level scale of the IQ2 types: (d * (0.5 + s)) * 0.25, in that order.
inline float iq2_scale(float d, uint32_t s) { return d * (0.5f + static_cast<float>(s)) * 0.25f; }

void decode_iq2_xxs(const std::byte* __restrict src, uint64_t blocks, float* __restrict out) {
  for (uint64_t b = 0; b < blocks; ++b, src += 66) {
    const float d = half_bits_to_float(load_u16(src));
    const std::byte* qs = src + 2;
    for (uint32_t sub = 0; sub < 8; ++sub, qs += 8) {
      const uint32_t meta = load_u32(qs + 4);
      const float db = iq2_scale(d, meta >> 28);
      for (uint32_t l = 0; l < 4; ++l, out += 8) {
        signed_run(kIq2XxsGrid[byte_at(qs + l)], kIq2XsSigns[(meta >> (7 * l)) & 127u], db, 8, out);
      }
    }
  }
}

void decode_iq2_xs(const std::byte* __restrict src, uint64_t blocks, float* __restrict out) {
  for (uint64_t b = 0; b < blocks; ++b, src += 74) {
    const float d = half_bits_to_float(load_u16(src));
    const std::byte* qs = src + 2;
    const std::byte* scales = src + 66;
    for (uint32_t sub = 0; sub < 8; ++sub) {
      const uint32_t sc = byte_at(scales + sub);
      const float db[2] = {iq2_scale(d, sc & 0xfu), iq2_scale(d, sc >> 4)};
      for (uint32_t l = 0; l < 4; ++l, out += 8) {
        const uint32_t q = load_u16(qs + 2 * (4 * sub + l));
        signed_run(kIq2XsGrid[q & 511u], kIq2XsSigns[q >> 9], db[l / 2], 8, out);
      }
    }
  }
}

void decode_iq2_s(const std::byte* __restrict src, uint64_t blocks, float* __restrict out) {
  for (uint64_t b = 0; b < blocks; ++b, src += 82) {
    const float d = half_bits_to_float(load_u16(src));
    const std::byte* qs = src + 2;
    const std::byte* signs = src + 34;
    const std::byte* qh = src + 66;
    const std::byte* scales = src + 74;
    for (uint32_t sub = 0; sub < 8; ++sub) {
      const uint32_t sc = byte_at(scales + sub);
      const float db[2] = {iq2_scale(d, sc & 0xfu), iq2_scale(d, sc >> 4)};
      const uint32_t high = byte_at(qh + sub);
      for (uint32_t l = 0; l < 4; ++l, out += 8) {
        const uint32_t index = byte_at(qs + 4 * sub + l) | ((high << (8 - 2 * l)) & 0x300u);
        signed_run(kIq2SGrid[index], byte_at(signs + 4 * sub + l), db[l / 2], 8, out);
      }
    }
  }
}

void decode_iq3_xxs(const std::byte* __restrict src, uint64_t blocks, float* __restrict out) {
  for (uint64_t b = 0; b < blocks; ++b, src += 98) {
    const float d = half_bits_to_float(load_u16(src));
    const std::byte* qs = src + 2;
    const std::byte* meta_words = src + 66;
    for (uint32_t sub = 0; sub < 8; ++sub) {
      const uint32_t meta = load_u32(meta_words + 4 * sub);
      // IQ3 grids are coarser than IQ2's, hence the 0.5 where IQ2 has 0.25.
      const float db = d * (0.5f + static_cast<float>(meta >> 28)) * 0.5f;
      for (uint32_t l = 0; l < 4; ++l, out += 8) {
        const uint32_t signs = kIq2XsSigns[(meta >> (7 * l)) & 127u];
        signed_run(kIq3XxsGrid[byte_at(qs + 8 * sub + 2 * l)], signs, db, 4, out);
        signed_run(kIq3XxsGrid[byte_at(qs + 8 * sub + 2 * l + 1)], signs >> 4, db, 4, out + 4);
      }
    }
  }
}

void decode_iq3_s(const std::byte* __restrict src, uint64_t blocks, float* __restrict out) {
  for (uint64_t b = 0; b < blocks; ++b, src += 110) {
    const float d = half_bits_to_float(load_u16(src));
    const std::byte* qs = src + 2;
    const std::byte* qh = src + 66;
    const std::byte* signs = src + 74;
    const std::byte* scales = src + 106;
    for (uint32_t sub = 0; sub < 8; ++sub) {
      const uint32_t s = (byte_at(scales + sub / 2) >> (4 * (sub % 2))) & 0xfu;
      const float db = d * static_cast<float>(1 + 2 * s);
      const uint32_t high = byte_at(qh + sub);
      for (uint32_t l = 0; l < 4; ++l, out += 8) {
        const uint32_t index1 = byte_at(qs + 8 * sub + 2 * l) | ((high << (8 - 2 * l)) & 256u);
        const uint32_t index2 = byte_at(qs + 8 * sub + 2 * l + 1) | ((high << (7 - 2 * l)) & 256u);
        const uint32_t sign_bits = byte_at(signs + 4 * sub + l);
        signed_run(kIq3SGrid[index1], sign_bits, db, 4, out);
        signed_run(kIq3SGrid[index2], sign_bits >> 4, db, 4, out + 4);
      }
    }
  }
}

/// Writes the 8 elements scale * (grid value + delta) of one IQ1 grid entry.
inline void iq1_run(uint32_t index, float scale, float delta, float* y) {
  const uint64_t grid = kIq1SGrid[index];
  for (uint32_t j = 0; j < 8; ++j) {
    const auto value = static_cast<int8_t>(static_cast<uint8_t>(grid >> (8 * j)));
    y[j] = scale * (static_cast<float>(value) + delta);
  }
}

void decode_iq1_s(const std::byte* __restrict src, uint64_t blocks, float* __restrict out) {
  for (uint64_t b = 0; b < blocks; ++b, src += 50) {
    const float d = half_bits_to_float(load_u16(src));
    const std::byte* qs = src + 2;
    const std::byte* qh = src + 34;
    for (uint32_t sub = 0; sub < 8; ++sub) {
      const uint32_t high = load_u16(qh + 2 * sub);
      const float dl = d * static_cast<float>(2 * ((high >> 12) & 7u) + 1);
      const float delta = (high & 0x8000u) ? -kIq1Delta : kIq1Delta;
      for (uint32_t l = 0; l < 4; ++l, out += 8) {
        iq1_run(byte_at(qs + 4 * sub + l) | (((high >> (3 * l)) & 7u) << 8), dl, delta, out);
      }
    }
  }
}

void decode_iq1_m(const std::byte* __restrict src, uint64_t blocks, float* __restrict out) {
  for (uint64_t b = 0; b < blocks; ++b, src += 56) {
    const std::byte* qs = src;
    const std::byte* qh = src + 32;
    const uint32_t sc[4] = {load_u16(src + 48), load_u16(src + 50), load_u16(src + 52), load_u16(src + 54)};
    // The block has no room for a separate fp16 scale; its 16 bits ride in the top nibble of
    // each of the four scale words.
    const auto d_bits = static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0u) |
                                              ((sc[2] >> 4) & 0x0f00u) | (sc[3] & 0xf000u));
    const float d = half_bits_to_float(d_bits);
    for (uint32_t sub = 0; sub < 8; ++sub) {
      const uint32_t word = sc[sub / 2] >> (6 * (sub % 2));
      const float dl1 = d * static_cast<float>(2 * (word & 7u) + 1);
      const float dl2 = d * static_cast<float>(2 * ((word >> 3) & 7u) + 1);
      for (uint32_t l = 0; l < 4; ++l, out += 8) {
        // Each qh byte serves two runs of 8: the low nibble the first, the high nibble the second.
        const uint32_t nibble = (byte_at(qh + 2 * sub + l / 2) >> (4 * (l % 2))) & 0xfu;
        const uint32_t index = byte_at(qs + 4 * sub + l) | ((nibble & 7u) << 8);
        const float delta = (nibble & 8u) ? -kIq1Delta : kIq1Delta;
        iq1_run(index, l < 2 ? dl1 : dl2, delta, out);
      }
    }
  }
}

}  // namespace

std::optional<BlockDecoder> find_ggml_iq_decoder(DType dtype) {
  switch (dtype) {
    case DType::kIQ4_NL: return BlockDecoder{32, 18, &decode_iq4_nl, nullptr};
    case DType::kIQ4_XS: return BlockDecoder{256, 136, &decode_iq4_xs, nullptr};
    case DType::kIQ2_XXS: return BlockDecoder{256, 66, &decode_iq2_xxs, nullptr};
    case DType::kIQ2_XS: return BlockDecoder{256, 74, &decode_iq2_xs, nullptr};
    case DType::kIQ2_S: return BlockDecoder{256, 82, &decode_iq2_s, nullptr};
    case DType::kIQ3_XXS: return BlockDecoder{256, 98, &decode_iq3_xxs, nullptr};
    case DType::kIQ3_S: return BlockDecoder{256, 110, &decode_iq3_s, nullptr};
    case DType::kIQ1_S: return BlockDecoder{256, 50, &decode_iq1_s, nullptr};
    case DType::kIQ1_M: return BlockDecoder{256, 56, &decode_iq1_m, nullptr};
    default: return std::nullopt;
  }
}

}  // namespace tensormorph::decode_internal
