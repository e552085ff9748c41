// ggml's k-quants: 256-element super-blocks with per-sub-block scales (Q2_K..Q6_K) and Q8_K.
//
// Bit-exactness with ggml needs its float operation order: every sub-block first forms its
// scale (and min) as one float product of the super-block fp16 scale and the small integer
// scale, and only then multiplies by the quant and subtracts the min product. Layout summary
// (byte offsets within a block):
//   Q2_K 84 B : scales[16] (lo nibble scale, hi nibble min) | qs[64] (2-bit) | d | dmin
//   Q3_K 110 B: hmask[32] | qs[64] (2-bit) | scales[12] (16 packed 6-bit) | d
//   Q4_K 144 B: d | dmin | scales[12] (8 packed 6-bit scale/min pairs) | qs[128] (4-bit)
//   Q5_K 176 B: d | dmin | scales[12] | qh[32] (5th bits) | qs[128]
//   Q6_K 210 B: ql[128] (low 4 bits) | qh[64] (high 2 bits) | scales[16] (int8) | d
//   Q8_K 292 B: d (float32) | qs[256] (int8) | bsums[16] (int16, unused here)
#include "core/decode/decode_internal.h"

namespace tensormorph::decode_internal {
namespace {

constexpr uint32_t kSuper = 256;

void decode_q2_k(const std::byte* __restrict src, uint64_t blocks, float* __restrict out) {
  for (uint64_t b = 0; b < blocks; ++b, src += 84, out += kSuper) {
    const std::byte* scales = src;
    const std::byte* qs = src + 16;
    const float d = half_bits_to_float(load_u16(src + 80));
    const float dmin = half_bits_to_float(load_u16(src + 82));
    // Element 128h + 32j + l takes bits 2j..2j+1 of qs[32h + l] and scale byte 8h + 2j + l/16.
    for (uint32_t h = 0; h < 2; ++h) {
      for (uint32_t j = 0; j < 4; ++j) {
        for (uint32_t half = 0; half < 2; ++half) {
          const uint8_t sc = byte_at(scales + 8 * h + 2 * j + half);
          const float dl = d * static_cast<float>(sc & 0xf);
          const float ml = dmin * static_cast<float>(sc >> 4);
          float* y = out + 128 * h + 32 * j + 16 * half;
          const std::byte* q = qs + 32 * h + 16 * half;
          for (uint32_t l = 0; l < 16; ++l) {
            y[l] = dl * static_cast<float>((byte_at(q + l) >> (2 * j)) & 3) - ml;
          }
        }
      }
    }
  }
}

/// Q3_K's sixteen 6-bit scales, minus their bias of 32: low nibbles in bytes 0..7 (scales 0..7
/// in the low halves, 8..15 in the high halves), the top two bits in bytes 8..11.
inline void q3_k_scales(const std::byte* packed, int (&scales)[16]) {
  for (uint32_t k = 0; k < 16; ++k) {
    const uint32_t low = k < 8 ? byte_at(packed + k) & 0xfu : byte_at(packed + k - 8) >> 4;
    const uint32_t high = (byte_at(packed + 8 + k % 4) >> (2 * (k / 4))) & 3u;
    scales[k] = static_cast<int>(low | (high << 4)) - 32;
  }
}

void decode_q3_k(const std::byte* __restrict src, uint64_t blocks, float* __restrict out) {
  for (uint64_t b = 0; b < blocks; ++b, src += 110, out += kSuper) {
    const std::byte* hmask = src;
    const std::byte* qs = src + 32;
    int scales[16];
    q3_k_scales(src + 96, scales);
    const float d = half_bits_to_float(load_u16(src + 108));
    // Element 128h + 32j + l: bits 2j..2j+1 of qs[32h + l], minus 4 unless bit 4h+j of hmask[l]
    // is set; scale 8h + 2j + l/16.
    for (uint32_t h = 0; h < 2; ++h) {
      for (uint32_t j = 0; j < 4; ++j) {
        const uint32_t mask_bit = 4 * h + j;
        for (uint32_t half = 0; half < 2; ++half) {
          const float dl = d * static_cast<float>(scales[8 * h + 2 * j + half]);
          float* y = out + 128 * h + 32 * j + 16 * half;
          const std::byte* q = qs + 32 * h + 16 * half;
          const std::byte* hm = hmask + 16 * half;
          for (uint32_t l = 0; l < 16; ++l) {
            const int low = (byte_at(q + l) >> (2 * j)) & 3;
            const int offset = ((byte_at(hm + l) >> mask_bit) & 1) != 0 ? 0 : 4;
            y[l] = dl * static_cast<float>(low - offset);
          }
        }
      }
    }
  }
}

/// Scale and min of sub-block j from the 12-byte packing shared by Q4_K and Q5_K: sub-blocks
/// 0..3 keep 6 bits in bytes j and j+4; sub-blocks 4..7 keep their low 4 bits in byte j+4 and
/// borrow the top 2 bits of bytes j-4 (scale) and j (min).
inline void k4_scale_min(const std::byte* packed, uint32_t j, uint32_t& scale, uint32_t& min) {
  if (j < 4) {
    scale = byte_at(packed + j) & 63u;
    min = byte_at(packed + j + 4) & 63u;
  } else {
    scale = (byte_at(packed + j + 4) & 0xfu) | ((byte_at(packed + j - 4) >> 6) << 4);
    min = (byte_at(packed + j + 4) >> 4) | ((byte_at(packed + j) >> 6) << 4);
  }
}

void decode_q4_k(const std::byte* __restrict src, uint64_t blocks, float* __restrict out) {
  for (uint64_t b = 0; b < blocks; ++b, src += 144, out += kSuper) {
    const float d = half_bits_to_float(load_u16(src));
    const float dmin = half_bits_to_float(load_u16(src + 2));
    const std::byte* packed = src + 4;
    const std::byte* qs = src + 16;
    // Pair p covers elements 64p..64p+63: low nibbles of qs[32p..] then their high nibbles.
    for (uint32_t p = 0; p < 4; ++p) {
      uint32_t sc = 0, m = 0;
      k4_scale_min(packed, 2 * p, sc, m);
      const float d_lo = d * static_cast<float>(sc);
      const float m_lo = dmin * static_cast<float>(m);
      k4_scale_min(packed, 2 * p + 1, sc, m);
      const float d_hi = d * static_cast<float>(sc);
      const float m_hi = dmin * static_cast<float>(m);
      const std::byte* q = qs + 32 * p;
      float* y = out + 64 * p;
      for (uint32_t l = 0; l < 32; ++l) y[l] = d_lo * static_cast<float>(byte_at(q + l) & 0xf) - m_lo;
      for (uint32_t l = 0; l < 32; ++l) y[32 + l] = d_hi * static_cast<float>(byte_at(q + l) >> 4) - m_hi;
    }
  }
}

void decode_q5_k(const std::byte* __restrict src, uint64_t blocks, float* __restrict out) {
  for (uint64_t b = 0; b < blocks; ++b, src += 176, out += kSuper) {
    const float d = half_bits_to_float(load_u16(src));
    const float dmin = half_bits_to_float(load_u16(src + 2));
    const std::byte* packed = src + 4;
    const std::byte* qh = src + 16;
    const std::byte* qs = src + 48;
    // As Q4_K, plus a fifth bit: bit 2p of qh[l] for the low nibbles, bit 2p+1 for the high.
    for (uint32_t p = 0; p < 4; ++p) {
      uint32_t sc = 0, m = 0;
      k4_scale_min(packed, 2 * p, sc, m);
      const float d_lo = d * static_cast<float>(sc);
      const float m_lo = dmin * static_cast<float>(m);
      k4_scale_min(packed, 2 * p + 1, sc, m);
      const float d_hi = d * static_cast<float>(sc);
      const float m_hi = dmin * static_cast<float>(m);
      const std::byte* q = qs + 32 * p;
      float* y = out + 64 * p;
      for (uint32_t l = 0; l < 32; ++l) {
        const uint32_t v = (byte_at(q + l) & 0xfu) | (((byte_at(qh + l) >> (2 * p)) & 1u) << 4);
        y[l] = d_lo * static_cast<float>(v) - m_lo;
      }
      for (uint32_t l = 0; l < 32; ++l) {
        const uint32_t v = (byte_at(q + l) >> 4) | (((byte_at(qh + l) >> (2 * p + 1)) & 1u) << 4);
        y[32 + l] = d_hi * static_cast<float>(v) - m_hi;
      }
    }
  }
}

void decode_q6_k(const std::byte* __restrict src, uint64_t blocks, float* __restrict out) {
  for (uint64_t b = 0; b < blocks; ++b, src += 210, out += kSuper) {
    const std::byte* ql = src;
    const std::byte* qh = src + 128;
    const std::byte* scales = src + 192;
    const float d = half_bits_to_float(load_u16(src + 208));
    // Element 128h + 32k + l: nibble (k < 2 ? low : high) of ql[64h + 32(k & 1) + l], with bits
    // 2k..2k+1 of qh[32h + l] on top, minus 32; scale byte 8h + 2k + l/16.
    for (uint32_t h = 0; h < 2; ++h) {
      for (uint32_t k = 0; k < 4; ++k) {
        const uint32_t nibble_shift = k < 2 ? 0 : 4;
        for (uint32_t half = 0; half < 2; ++half) {
          const float ds = d * static_cast<float>(int8_at(scales + 8 * h + 2 * k + half));
          const std::byte* low = ql + 64 * h + 32 * (k & 1) + 16 * half;
          const std::byte* high = qh + 32 * h + 16 * half;
          float* y = out + 128 * h + 32 * k + 16 * half;
          for (uint32_t l = 0; l < 16; ++l) {
            const int q = static_cast<int>(((byte_at(low + l) >> nibble_shift) & 0xfu) |
                                           (((byte_at(high + l) >> (2 * k)) & 3u) << 4)) - 32;
            y[l] = ds * static_cast<float>(q);
          }
        }
      }
    }
  }
}

void decode_q8_k(const std::byte* __restrict src, uint64_t blocks, float* __restrict out) {
  for (uint64_t b = 0; b < blocks; ++b, src += 292, out += kSuper) {
    const float d = load_f32(src);
    const std::byte* qs = src + 4;
    for (uint32_t j = 0; j < kSuper; ++j) out[j] = d * static_cast<float>(int8_at(qs + j));
  }
}

}  // namespace

std::optional<BlockDecoder> find_ggml_kquant_decoder(DType dtype) {
  switch (dtype) {
    case DType::kQ2_K: return BlockDecoder{kSuper, 84, &decode_q2_k, nullptr};
    case DType::kQ3_K: return BlockDecoder{kSuper, 110, &decode_q3_k, nullptr};
    case DType::kQ4_K: return BlockDecoder{kSuper, 144, &decode_q4_k, nullptr};
    case DType::kQ5_K: return BlockDecoder{kSuper, 176, &decode_q5_k, nullptr};
    case DType::kQ6_K: return BlockDecoder{kSuper, 210, &decode_q6_k, nullptr};
    case DType::kQ8_K: return BlockDecoder{kSuper, 292, &decode_q8_k, nullptr};
    default: return std::nullopt;
  }
}

}  // namespace tensormorph::decode_internal
