// MXFP4 as stored by ggml (type 39): 32 FP4 E2M1 values sharing one E8M0 power-of-two scale.
//
//   17 B: e (u8, scale 2^(e-127)) | qs[16]; element j is the low nibble of qs[j], element j+16
//   the high nibble (the Q4_0 arrangement, not the low-nibble-first stream of plain F4).
//
// Like ggml, the product is formed as (2 * fp4 value, an integer) * 2^(e-128), which is exact
// and therefore equals fp4 * 2^(e-127) wherever that is finite. Also like ggml, e = 0xff is an
// ordinary exponent here (2^127), not the NaN that the OCP MX spec reserves it for, so GGUF files
// decode exactly as llama.cpp decodes them.
#include "core/decode/decode_internal.h"

namespace tensormorph::decode_internal {
namespace {

/// FP4 E2M1 code -> twice its value (an integer, so the table is exact in int8).
constexpr int8_t kDoubledFp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/// 2^(e-128) as float; e = 0 and 1 give the subnormals 2^-128 and 2^-127.
inline float half_e8m0_scale(uint8_t e) {
  const uint32_t bits = e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
  return std::bit_cast<float>(bits);
}

void decode_mxfp4(const std::byte* __restrict src, uint64_t blocks, float* __restrict out) {
  for (uint64_t b = 0; b < blocks; ++b, src += 17, out += 32) {
    const float d = half_e8m0_scale(byte_at(src));
    const std::byte* qs = src + 1;
    for (uint32_t j = 0; j < 16; ++j) {
      const uint8_t q = byte_at(qs + j);
      out[j] = static_cast<float>(kDoubledFp4[q & 0xf]) * d;
      out[j + 16] = static_cast<float>(kDoubledFp4[q >> 4]) * d;
    }
  }
}

}  // namespace

std::optional<BlockDecoder> find_mxfp4_decoder(DType dtype) {
  if (dtype != DType::kMXFP4) return std::nullopt;
  return BlockDecoder{32, 17, &decode_mxfp4, nullptr};
}

}  // namespace tensormorph::decode_internal
