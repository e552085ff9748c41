// The layouts read here are the decoders' (decode_ggml_legacy.cpp, decode_ggml_kquants.cpp,
// decode_ggml_iq.cpp), field by field, with the same integer arithmetic: block_anatomy_test
// checks that every value formed from the reported fields equals the decoder's, bit for bit.
#include "core/decode/block_anatomy.h"

#include "core/decode/decode_internal.h"

namespace tensormorph {
namespace {

using namespace decode_internal;

constexpr float kIq4Book[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

float half_at(const std::byte* p) { return half_bits_to_float(load_u16(p)); }

void legacy(BlockAnatomy& a, const std::byte* src) {
  const bool with_m = a.dtype == DType::kQ4_1 || a.dtype == DType::kQ5_1;
  const bool five = a.dtype == DType::kQ5_0 || a.dtype == DType::kQ5_1;
  a.d = half_at(src);
  if (with_m) a.m = half_at(src + 2);
  a.sub_blocks.push_back({0, 32, 1, std::nullopt, *a.d, 0});
  a.quants.resize(32);
  if (a.dtype == DType::kQ8_0 || a.dtype == DType::kQ8_1) {
    const std::byte* qs = src + (a.dtype == DType::kQ8_0 ? 2 : 4);
    for (uint32_t j = 0; j < 32; ++j) a.quants[j] = int8_at(qs + j);
    a.note = "value = q * d, q the int8 quant";
    return;
  }
  const uint32_t high_bits = five ? load_u32(src + (with_m ? 4 : 2)) : 0;
  const std::byte* qs = src + (with_m ? 4 : 2) + (five ? 4 : 0);
  const int bias = with_m ? 0 : five ? 16 : 8;
  for (uint32_t j = 0; j < 16; ++j) {
    const uint8_t q = byte_at(qs + j);
    const int lo = (q & 0xf) | (five ? static_cast<int>(((high_bits >> j) & 1u) << 4) : 0);
    const int hi = (q >> 4) | (five ? static_cast<int>(((high_bits >> (j + 16)) & 1u) << 4) : 0);
    a.quants[j] = lo - bias;
    a.quants[j + 16] = hi - bias;
  }
  a.note = with_m ? "value = q * d + m" : "value = (q - " + std::to_string(bias) + ") * d";
}

// Q4_K/Q5_K's 12-byte packing of eight 6-bit scale/min pairs.
void k4_scale_min(const std::byte* packed, uint32_t j, int& scale, int& min) {
  if (j < 4) {
    scale = byte_at(packed + j) & 63;
    min = byte_at(packed + j + 4) & 63;
  } else {
    scale = (byte_at(packed + j + 4) & 0xf) | ((byte_at(packed + j - 4) >> 6) << 4);
    min = (byte_at(packed + j + 4) >> 4) | ((byte_at(packed + j) >> 6) << 4);
  }
}

void kquant(BlockAnatomy& a, const std::byte* src) {
  a.quants.assign(256, 0);
  switch (a.dtype) {
    case DType::kQ2_K: {
      a.d = half_at(src + 80);
      a.dmin = half_at(src + 82);
      for (uint32_t s = 0; s < 16; ++s) {
        const uint8_t sc = byte_at(src + s);
        const int scale = sc & 0xf, min = sc >> 4;
        a.sub_blocks.push_back({16 * s, 16, scale, min, *a.d * static_cast<float>(scale), *a.dmin * static_cast<float>(min)});
      }
      // Element 128h + 32j + 16half + l: bits 2j..2j+1 of qs[32h + 16half + l].
      for (uint32_t e = 0; e < 256; ++e) {
        const uint32_t h = e / 128, j = e % 128 / 32, rest = e % 32;
        a.quants[e] = (byte_at(src + 16 + 32 * h + rest) >> (2 * j)) & 3;
      }
      a.note = "value = (d * scale) * q - (dmin * min), 16 sub-blocks of 16";
      return;
    }
    case DType::kQ3_K: {
      a.d = half_at(src + 108);
      const std::byte* packed = src + 96;
      for (uint32_t k = 0; k < 16; ++k) {
        const uint32_t low = k < 8 ? byte_at(packed + k) & 0xfu : byte_at(packed + k - 8) >> 4;
        const uint32_t high = (byte_at(packed + 8 + k % 4) >> (2 * (k / 4))) & 3u;
        const int scale = static_cast<int>(low | (high << 4)) - 32;
        a.sub_blocks.push_back({16 * k, 16, scale, std::nullopt, *a.d * static_cast<float>(scale), 0});
      }
      for (uint32_t e = 0; e < 256; ++e) {
        const uint32_t h = e / 128, j = e % 128 / 32, rest = e % 32, l = rest % 16, half = rest / 16;
        const int low = (byte_at(src + 32 + 32 * h + rest) >> (2 * j)) & 3;
        const int offset = ((byte_at(src + 16 * half + l) >> (4 * h + j)) & 1) != 0 ? 0 : 4;
        a.quants[e] = low - offset;
      }
      a.note = "value = (d * scale) * q, scale 6-bit minus 32, q 3-bit minus 4 (hmask bit clear)";
      return;
    }
    case DType::kQ4_K:
    case DType::kQ5_K: {
      const bool five = a.dtype == DType::kQ5_K;
      a.d = half_at(src);
      a.dmin = half_at(src + 2);
      const std::byte* packed = src + 4;
      const std::byte* qh = src + 16;
      const std::byte* qs = src + (five ? 48 : 16);
      for (uint32_t j = 0; j < 8; ++j) {
        int scale = 0, min = 0;
        k4_scale_min(packed, j, scale, min);
        a.sub_blocks.push_back({32 * j, 32, scale, min, *a.d * static_cast<float>(scale), *a.dmin * static_cast<float>(min)});
      }
      // Sub-block 2p: low nibbles of qs[32p..32p+31]; 2p + 1: their high nibbles (Q5_K: bit 2p
      // or 2p + 1 of qh[l] on top).
      for (uint32_t e = 0; e < 256; ++e) {
        const uint32_t p = e / 64, high = e % 64 / 32, l = e % 32;
        int q = high ? byte_at(qs + 32 * p + l) >> 4 : byte_at(qs + 32 * p + l) & 0xf;
        if (five) q |= ((byte_at(qh + l) >> (2 * p + high)) & 1) << 4;
        a.quants[e] = q;
      }
      a.note = "value = (d * scale) * q - (dmin * min), 8 sub-blocks of 32";
      return;
    }
    case DType::kQ6_K: {
      a.d = half_at(src + 208);
      for (uint32_t s = 0; s < 16; ++s) {
        const int scale = int8_at(src + 192 + s);
        a.sub_blocks.push_back({16 * s, 16, scale, std::nullopt, *a.d * static_cast<float>(scale), 0});
      }
      for (uint32_t e = 0; e < 256; ++e) {
        const uint32_t h = e / 128, k = e % 128 / 32, rest = e % 32;
        const uint32_t low = (byte_at(src + 64 * h + 32 * (k & 1) + rest) >> (k < 2 ? 0 : 4)) & 0xfu;
        const uint32_t high = (byte_at(src + 128 + 32 * h + rest) >> (2 * k)) & 3u;
        a.quants[e] = static_cast<int>(low | (high << 4)) - 32;
      }
      a.note = "value = (d * scale) * q, scale int8, q 6-bit minus 32";
      return;
    }
    case DType::kQ8_K: {
      a.d = load_f32(src);
      a.sub_blocks.push_back({0, 256, 1, std::nullopt, *a.d, 0});
      for (uint32_t e = 0; e < 256; ++e) a.quants[e] = int8_at(src + 4 + e);
      a.note = "value = d * q, d float32, q int8";
      return;
    }
    default: return;
  }
}

void iq4(BlockAnatomy& a, const std::byte* src) {
  a.d = half_at(src);
  const uint32_t groups = a.dtype == DType::kIQ4_NL ? 1 : 8;
  const std::byte* qs = src + (groups == 1 ? 2 : 8);
  a.quants.assign(32 * groups, 0);
  for (uint32_t g = 0; g < groups; ++g) {
    if (groups == 1) {
      a.sub_blocks.push_back({0, 32, 1, std::nullopt, *a.d, 0});
    } else {
      const uint32_t low = (byte_at(src + 4 + g / 2) >> (4 * (g % 2))) & 0xfu;
      const uint32_t high = (static_cast<uint32_t>(load_u16(src + 2)) >> (2 * g)) & 3u;
      const int ls = static_cast<int>(low | (high << 4)) - 32;
      a.sub_blocks.push_back({32 * g, 32, ls, std::nullopt, *a.d * static_cast<float>(ls), 0});
    }
    for (uint32_t j = 0; j < 16; ++j) {
      const uint8_t q = byte_at(qs + 16 * g + j);
      a.quants[32 * g + j] = static_cast<int>(kIq4Book[q & 0xf]);
      a.quants[32 * g + j + 16] = static_cast<int>(kIq4Book[q >> 4]);
    }
  }
  a.note = groups == 1 ? "value = d * book[nibble]" : "value = (d * (scale - 32)) * book[nibble], 8 sub-blocks of 32";
}

}  // namespace

Result<BlockAnatomy> block_anatomy(DType dtype, std::span<const std::byte> block) {
  const DTypeInfo& info = dtype_info(dtype);
  if (!info.is_quantized || info.block_elems <= 1) {
    return Status::InvalidArgument(std::string(info.name) + " is not a block-quantized type");
  }
  if (block.size() != info.block_bytes) {
    return Status::InvalidArgument(std::string(info.name) + " blocks are " + std::to_string(info.block_bytes) +
                                   " bytes, not " + std::to_string(block.size()));
  }
  BlockAnatomy a;
  a.dtype = dtype;
  a.block_elements = info.block_elems;
  a.block_bytes = info.block_bytes;
  const std::byte* src = block.data();
  switch (dtype) {
    case DType::kQ4_0: case DType::kQ4_1: case DType::kQ5_0: case DType::kQ5_1: case DType::kQ8_0: case DType::kQ8_1:
      legacy(a, src);
      break;
    case DType::kQ2_K: case DType::kQ3_K: case DType::kQ4_K: case DType::kQ5_K: case DType::kQ6_K: case DType::kQ8_K:
      kquant(a, src);
      break;
    case DType::kIQ4_NL: case DType::kIQ4_XS:
      iq4(a, src);
      break;
    case DType::kTQ1_0:
      a.d = half_at(src + 52);
      a.note = "ternary: value = (trit - 1) * d; trits not described";
      return a;
    case DType::kTQ2_0:
      a.d = half_at(src + 64);
      a.note = "ternary: value = (q - 1) * d; quants not described";
      return a;
    case DType::kMXFP4:
      a.note = "shared scale 2^(e - 127), e = " + std::to_string(byte_at(src)) + "; FP4 quants not described";
      return a;
    case DType::kIQ1_M:
      a.note = "IQ1_M keeps its scale packed in the sub-block scales: not described";
      return a;
    default:
      a.d = half_at(src);
      a.note = std::string(info.name) + " indexes ggml's lattice tables: only d is described";
      return a;
  }
  a.described = true;
  return a;
}

float block_anatomy_value(const BlockAnatomy& a, uint32_t i) {
  for (const auto& s : a.sub_blocks) {
    if (i < s.first || i >= s.first + s.count) continue;
    float v = s.scale * static_cast<float>(a.quants[i]);
    if (a.m) v = v + *a.m;
    if (s.min_q) v = v - s.min;
    return v;
  }
  return 0;
}

}  // namespace tensormorph
