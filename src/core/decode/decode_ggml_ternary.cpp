// ggml's ternary types for BitNet-style weights: every quant is -1, 0 or +1 times an fp16 scale.
//
//   TQ2_0 66 B: qs[64] | d. Two bits per value (stored value + 1); in each 32-byte half,
//               bits 2l..2l+1 of byte m hold element 128*half + 32l + m.
//   TQ1_0 54 B: qs[48] | qh[4] | d. Base-3 packing: a byte b holds 5 (qs) or 4 (qh) trits as a
//               fixed-point fraction b/256 ~ t0/3 + t1/9 + ...; trit n is the integer part of
//               3 * frac(b * 3^n / 256), i.e. ((b * 3^n mod 256) * 3) >> 8. Element order: bytes
//               0..31 give trit n of byte m at 32n + m (160 values), bytes 32..47 give trit n of
//               byte m at 160 + 16n + m (80 values), and qh byte m gives trit n at 240 + 4n + m.
// Values are (float)(trit - 1) * d, as ggml computes them.
#include "core/decode/decode_internal.h"

namespace tensormorph::decode_internal {
namespace {

/// Trit `n` of a base-3 fixed-point byte.
inline int trit(uint8_t packed, uint32_t power_of_three) {
  const uint8_t shifted = static_cast<uint8_t>(packed * power_of_three);  // mod 256 on purpose
  return (shifted * 3) >> 8;
}

constexpr uint32_t kPow3[5] = {1, 3, 9, 27, 81};

/// Decodes `count` bytes, `trits` trits each, into trits * count values (trit-major order).
inline void tq1_run(const std::byte* bytes, uint32_t count, uint32_t trits, float d, float* y) {
  for (uint32_t n = 0; n < trits; ++n) {
    for (uint32_t m = 0; m < count; ++m) {
      y[n * count + m] = static_cast<float>(trit(byte_at(bytes + m), kPow3[n]) - 1) * d;
    }
  }
}

void decode_tq1_0(const std::byte* __restrict src, uint64_t blocks, float* __restrict out) {
  for (uint64_t b = 0; b < blocks; ++b, src += 54, out += 256) {
    const float d = half_bits_to_float(load_u16(src + 52));
    tq1_run(src, 32, 5, d, out);
    tq1_run(src + 32, 16, 5, d, out + 160);
    tq1_run(src + 48, 4, 4, d, out + 240);
  }
}

void decode_tq2_0(const std::byte* __restrict src, uint64_t blocks, float* __restrict out) {
  for (uint64_t b = 0; b < blocks; ++b, src += 66, out += 256) {
    const float d = half_bits_to_float(load_u16(src + 64));
    for (uint32_t half = 0; half < 2; ++half) {
      const std::byte* qs = src + 32 * half;
      for (uint32_t l = 0; l < 4; ++l) {
        float* y = out + 128 * half + 32 * l;
        for (uint32_t m = 0; m < 32; ++m) {
          y[m] = static_cast<float>(static_cast<int>((byte_at(qs + m) >> (2 * l)) & 3u) - 1) * d;
        }
      }
    }
  }
}

}  // namespace

std::optional<BlockDecoder> find_ggml_ternary_decoder(DType dtype) {
  switch (dtype) {
    case DType::kTQ1_0: return BlockDecoder{256, 54, &decode_tq1_0, nullptr};
    case DType::kTQ2_0: return BlockDecoder{256, 66, &decode_tq2_0, nullptr};
    default: return std::nullopt;
  }
}

}  // namespace tensormorph::decode_internal
