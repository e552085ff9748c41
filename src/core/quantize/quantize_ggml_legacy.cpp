// ggml's reference encoders for the 32-element legacy types, byte for byte:
//   Q4_0 18 B: d | qs[16]            symmetric, d from the signed value of largest magnitude / -8
//   Q4_1 20 B: d | m | qs[16]        affine over [min, max], 15 steps
//   Q5_0 22 B: d | qh[4] | qs[16]    as Q4_0 with 16 levels each side, 5th bits in qh
//   Q5_1 24 B: d | m | qh[4] | qs[16]
//   Q8_0 34 B: d | qs[32]            amax / 127, round half away from zero
// Element j sits in the low nibble of qs[j], element j + 16 in the high nibble. Without an
// importance matrix ggml_quantize_chunk takes exactly these reference paths (quantize_q4_0 etc.
// fall through to quantize_row_*_ref), which is what llama-quantize writes without --imatrix.
#include "core/quantize/quantize_internal.h"

namespace tensormorph::quantize_internal {
namespace {

constexpr int kBlock = 32;

/// The signed value of largest magnitude, first one wins on ties (ggml's `amax < |v|` scan).
float signed_absmax(const float* x) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kBlock; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  return max;
}

/// ggml's min/max scan for the affine types; starts from +-FLT_MAX like the reference.
void min_max(const float* x, float& min, float& max) {
  min = std::numeric_limits<float>::max();
  max = -std::numeric_limits<float>::max();
  for (int j = 0; j < kBlock; ++j) {
    if (x[j] < min) min = x[j];
    if (x[j] > max) max = x[j];
  }
}

void encode_q4_0(const float* __restrict x, uint64_t blocks, std::byte* __restrict out) {
  for (uint64_t b = 0; b < blocks; ++b, x += kBlock, out += 18) {
    const float d = signed_absmax(x) / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_u16(out, to_half(d));
    for (int j = 0; j < kBlock / 2; ++j) {
      // ggml casts to int8_t and then clamps; the +8.5 and truncation round half up.
      const int lo = imin(15, static_cast<int8_t>(cvtt_i32(x[j] * id + 8.5f)));
      const int hi = imin(15, static_cast<int8_t>(cvtt_i32(x[j + 16] * id + 8.5f)));
      store_u8(out + 2 + j, static_cast<uint8_t>(lo) | (static_cast<uint8_t>(hi) << 4));
    }
  }
}

void encode_q4_1(const float* __restrict x, uint64_t blocks, std::byte* __restrict out) {
  for (uint64_t b = 0; b < blocks; ++b, x += kBlock, out += 20) {
    float min, max;
    min_max(x, min, max);
    const float d = (max - min) / 15.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_u16(out, to_half(d));
    store_u16(out + 2, to_half(min));
    for (int j = 0; j < kBlock / 2; ++j) {
      const int lo = imin(15, static_cast<int8_t>(cvtt_i32((x[j] - min) * id + 0.5f)));
      const int hi = imin(15, static_cast<int8_t>(cvtt_i32((x[j + 16] - min) * id + 0.5f)));
      store_u8(out + 4 + j, static_cast<uint8_t>(lo) | (static_cast<uint8_t>(hi) << 4));
    }
  }
}

/// Packs 32 five-bit codes: low nibbles into qs, the 5th bits into the 32-bit qh word.
void pack_q5(const uint8_t* q, std::byte* qh_out, std::byte* qs_out) {
  uint32_t qh = 0;
  for (int j = 0; j < kBlock / 2; ++j) {
    store_u8(qs_out + j, (q[j] & 0x0Fu) | ((q[j + 16] & 0x0Fu) << 4));
    qh |= ((q[j] & 0x10u) >> 4) << j;
    qh |= ((q[j + 16] & 0x10u) >> 4) << (j + 16);
  }
  store_u32(qh_out, qh);
}

void encode_q5_0(const float* __restrict x, uint64_t blocks, std::byte* __restrict out) {
  uint8_t q[kBlock];
  for (uint64_t b = 0; b < blocks; ++b, x += kBlock, out += 22) {
    const float d = signed_absmax(x) / -16.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_u16(out, to_half(d));
    for (int j = 0; j < kBlock; ++j) {
      q[j] = static_cast<uint8_t>(imin(31, static_cast<int8_t>(cvtt_i32(x[j] * id + 16.5f))));
    }
    pack_q5(q, out + 2, out + 6);
  }
}

void encode_q5_1(const float* __restrict x, uint64_t blocks, std::byte* __restrict out) {
  uint8_t q[kBlock];
  for (uint64_t b = 0; b < blocks; ++b, x += kBlock, out += 24) {
    float min, max;
    min_max(x, min, max);
    const float d = (max - min) / 31.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_u16(out, to_half(d));
    store_u16(out + 2, to_half(min));
    // Unlike Q4_1, ggml converts straight to uint8_t here, without a clamp.
    for (int j = 0; j < kBlock; ++j) q[j] = static_cast<uint8_t>(cvtt_i32((x[j] - min) * id + 0.5f));
    pack_q5(q, out + 4, out + 8);
  }
}

void encode_q8_0(const float* __restrict x, uint64_t blocks, std::byte* __restrict out) {
  for (uint64_t b = 0; b < blocks; ++b, x += kBlock, out += 34) {
    float amax = 0.0f;
    for (int j = 0; j < kBlock; ++j) amax = ggml_max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    store_u16(out, to_half(d));
    for (int j = 0; j < kBlock; ++j) store_u8(out + 2 + j, static_cast<uint32_t>(cvtt_i32(std::round(x[j] * id))));
  }
}

}  // namespace

std::optional<BlockEncoder> find_ggml_legacy_encoder(DType dtype) {
  switch (dtype) {
    case DType::kQ4_0: return BlockEncoder{32, 18, encode_q4_0};
    case DType::kQ4_1: return BlockEncoder{32, 20, encode_q4_1};
    case DType::kQ5_0: return BlockEncoder{32, 22, encode_q5_0};
    case DType::kQ5_1: return BlockEncoder{32, 24, encode_q5_1};
    case DType::kQ8_0: return BlockEncoder{32, 34, encode_q8_0};
    default: return std::nullopt;
  }
}

}  // namespace tensormorph::quantize_internal
