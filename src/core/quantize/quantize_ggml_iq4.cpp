// ggml's encoders for the non-linear 4-bit types, byte for byte (layouts in decode_ggml_iq.cpp):
//   IQ4_NL 18 B : d | qs[16]                                 one 32-element block
//   IQ4_XS 136 B: d | scales_h | scales_l[4] | qs[128]       8 blocks of 32 with 6-bit scales
// ggml_quantize_chunk calls quantize_iq4_nl / quantize_iq4_xs, not the *_ref row functions: with
// no importance matrix they weight each value by x^2 and search 15 trial scales (ntry = 7), and
// IQ4_NL then re-picks every code against the fp32 block scale. (quantize_row_iq4_nl_ref, used
// only for activations, runs with ntry = -1 and gives different bytes.)
#include "core/ggml_iq4_codebook.h"
#include "core/quantize/quantize_internal.h"

namespace tensormorph::quantize_internal {
namespace {

using ggml_tables::kIq4Book;

constexpr int kBlock = 32;
constexpr int kNtry = 7;

/// ggml's best_index_int8: the codebook index nearest to x, ties to the upper entry. A binary
/// search, then a comparison of the two neighbours' distances, as ggml does it (NaN ends at 15).
int best_index(float x) {
  if (x <= kIq4Book[0]) return 0;
  if (x >= kIq4Book[15]) return 15;
  int ml = 0, mu = 15;
  while (mu - ml > 1) {
    const int mav = (ml + mu) / 2;
    if (x < kIq4Book[mav]) {
      mu = mav;
    } else {
      ml = mav;
    }
  }
  return x - kIq4Book[mu - 1] < kIq4Book[mu] - x ? mu - 1 : mu;
}

/// The weighted least-squares scale of one 32-value block (weights x^2), or 0 for an all-zero
/// block. Also returns the block's codes for that search's first trial in L (IQ4_NL and IQ4_XS
/// both re-pick them afterwards).
float block_scale(const float* xb, uint8_t* Lb) {
  float weight[kBlock];
  for (int j = 0; j < kBlock; ++j) weight[j] = xb[j] * xb[j];
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kBlock; ++j) {
    const float ax = std::fabs(xb[j]);
    if (ax > amax) {
      amax = ax;
      max = xb[j];
    }
  }
  if (amax < kGroupMaxEps) return 0.0f;
  float d = -max / kIq4Book[0];
  float id = 1.0f / d;
  float sumqx = 0.0f, sumq2 = 0.0f;
  for (int j = 0; j < kBlock; ++j) {
    const int l = best_index(id * xb[j]);
    Lb[j] = static_cast<uint8_t>(l);
    const float q = kIq4Book[l];
    const float w = weight[j];
    sumqx += w * q * xb[j];
    sumq2 += w * q * q;
  }
  d = sumqx / sumq2;
  float best = d * sumqx;
  for (int itry = -kNtry; itry <= kNtry; ++itry) {
    // (itry + values[0]) is an int sum in ggml; exact in float as well.
    id = (static_cast<float>(itry) + kIq4Book[0]) / max;
    sumqx = sumq2 = 0.0f;
    for (int j = 0; j < kBlock; ++j) {
      const float q = kIq4Book[best_index(id * xb[j])];
      const float w = weight[j];
      sumqx += w * q * xb[j];
      sumq2 += w * q * q;
    }
    if (sumq2 > 0.0f && sumqx * sumqx > best * sumq2) {
      d = sumqx / sumq2;
      best = d * sumqx;
    }
  }
  return d;
}

/// Packs 32 codes per group: element j in the low nibble of byte j, element j + 16 in the high.
void pack_nibbles(const uint8_t* L, int n, std::byte* q4) {
  for (int i = 0; i < n / 32; ++i) {
    for (int j = 0; j < 16; ++j) store_u8(q4 + 16 * i + j, L[32 * i + j] | (L[32 * i + 16 + j] << 4));
  }
}

void encode_iq4_nl(const float* __restrict x, uint64_t blocks, std::byte* __restrict out) {
  uint8_t L[kBlock];
  for (uint64_t b = 0; b < blocks; ++b, x += kBlock, out += 18) {
    const float d = block_scale(x, L);
    store_u16(out, to_half(d));
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < kBlock; ++j) L[j] = static_cast<uint8_t>(best_index(id * x[j]));
    pack_nibbles(L, kBlock, out + 2);
  }
}

void encode_iq4_xs(const float* __restrict x, uint64_t blocks, std::byte* __restrict out) {
  constexpr int kSuper = 256, kSub = kSuper / kBlock;
  uint8_t L[kSuper];
  float scales[kSub];
  for (uint64_t b = 0; b < blocks; ++b, x += kSuper, out += 136) {
    float max_scale = 0.0f, amax_scale = 0.0f;
    for (int ib = 0; ib < kSub; ++ib) {
      scales[ib] = block_scale(x + ib * kBlock, L + ib * kBlock);
      const float abs_d = std::fabs(scales[ib]);
      if (abs_d > amax_scale) {
        amax_scale = abs_d;
        max_scale = scales[ib];
      }
    }
    // An all-zero super-block gives d = -0.0, stored as 0x8000 exactly as in ggml.
    const float d = -max_scale / 32.0f;
    store_u16(out, to_half(d));
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint16_t scales_h = 0;
    uint8_t scales_l[kSub / 2] = {};
    for (int ib = 0; ib < kSub; ++ib) {
      int l = imax(-32, imin(31, nearest_int(id * scales[ib])));
      const float dl = d * static_cast<float>(l);
      const float idl = dl != 0.0f ? 1.0f / dl : 0.0f;
      const float* xb = x + ib * kBlock;
      for (int j = 0; j < kBlock; ++j) L[ib * kBlock + j] = static_cast<uint8_t>(best_index(idl * xb[j]));
      l += 32;
      const uint8_t l_l = static_cast<uint8_t>(l & 0xf);
      const uint8_t l_h = static_cast<uint8_t>(l >> 4);
      if (ib % 2 == 0) {
        scales_l[ib / 2] = l_l;
      } else {
        scales_l[ib / 2] = static_cast<uint8_t>(scales_l[ib / 2] | (l_l << 4));
      }
      scales_h = static_cast<uint16_t>(scales_h | (l_h << (2 * (ib % 8))));
    }
    store_u16(out + 2, scales_h);
    std::memcpy(out + 4, scales_l, sizeof scales_l);
    pack_nibbles(L, kSuper, out + 8);
  }
}

}  // namespace

std::optional<BlockEncoder> find_ggml_iq4_encoder(DType dtype) {
  switch (dtype) {
    case DType::kIQ4_NL: return BlockEncoder{32, 18, encode_iq4_nl};
    case DType::kIQ4_XS: return BlockEncoder{256, 136, encode_iq4_xs};
    default: return std::nullopt;
  }
}

}  // namespace tensormorph::quantize_internal
