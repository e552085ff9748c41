// ggml's reference encoders for the ternary types (layouts in decode_ggml_ternary.cpp). Both
// scale by the super-block's absmax and round every value to -1, 0 or +1 with lroundf.
#include "core/quantize/quantize_internal.h"

namespace tensormorph::quantize_internal {
namespace {

constexpr int kSuper = 256;

float absmax(const float* x) {
  float amax = 0.0f;
  for (int j = 0; j < kSuper; ++j) amax = ggml_max(amax, std::fabs(x[j]));
  return amax;
}

/// The trit code (0, 1, 2 for -1, 0, +1) of x * id; int truncation of lroundf + 1, as in ggml.
inline int trit(float v) { return static_cast<int>(lround_i64(v) + 1); }

/// Base-3 packing of `trits` trits into one byte as a fixed-point fraction: ggml multiplies the
/// base-3 number by 256 / 243, rounding up, so the decoder can read trits off the top bits.
inline uint8_t pack_trits(uint8_t q) { return static_cast<uint8_t>((q * 256 + (243 - 1)) / 243); }

void encode_tq1_0(const float* __restrict x, uint64_t blocks, std::byte* __restrict out) {
  for (uint64_t b = 0; b < blocks; ++b, x += kSuper, out += 54) {
    const float d = absmax(x);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    // Bytes 0..31: element 32n + m is trit n of byte m; bytes 32..47: element 160 + 16n + m.
    for (int m = 0; m < 32; ++m) {
      uint8_t q = 0;
      for (int n = 0; n < 5; ++n) q = static_cast<uint8_t>(q * 3 + trit(x[m + n * 32] * id));
      store_u8(out + m, pack_trits(q));
    }
    for (int m = 0; m < 16; ++m) {
      uint8_t q = 0;
      for (int n = 0; n < 5; ++n) q = static_cast<uint8_t>(q * 3 + trit(x[160 + m + n * 16] * id));
      store_u8(out + 32 + m, pack_trits(q));
    }
    // qh: 4 trits per byte (element 240 + 4n + m), then one trit's worth of shift so the first
    // trit is the most significant as in the 5-trit bytes.
    for (int m = 0; m < 4; ++m) {
      uint8_t q = 0;
      for (int n = 0; n < 4; ++n) q = static_cast<uint8_t>(q * 3 + trit(x[240 + m + n * 4] * id));
      q = static_cast<uint8_t>(q * 3);
      store_u8(out + 48 + m, pack_trits(q));
    }
    store_u16(out + 52, to_half(d));
  }
}

void encode_tq2_0(const float* __restrict x, uint64_t blocks, std::byte* __restrict out) {
  for (uint64_t b = 0; b < blocks; ++b, x += kSuper, out += 66) {
    const float d = absmax(x);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int half = 0; half < 2; ++half) {
      const float* xh = x + 128 * half;
      for (int m = 0; m < 32; ++m) {
        uint8_t q = 0;
        for (int n = 0; n < 4; ++n) q = static_cast<uint8_t>(q + ((trit(xh[m + n * 32] * id) & 3) << (2 * n)));
        store_u8(out + 32 * half + m, q);
      }
    }
    store_u16(out + 64, to_half(d));
  }
}

}  // namespace

std::optional<BlockEncoder> find_ggml_ternary_encoder(DType dtype) {
  switch (dtype) {
    case DType::kTQ1_0: return BlockEncoder{256, 54, encode_tq1_0};
    case DType::kTQ2_0: return BlockEncoder{256, 66, encode_tq2_0};
    default: return std::nullopt;
  }
}

}  // namespace tensormorph::quantize_internal
