#include "core/quantize/quantize.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>

namespace tensormorph {
namespace {

template <typename T>
void put(std::vector<std::byte>& out, size_t at, T value) {
  std::memcpy(out.data() + at, &value, sizeof value);
}

// ggml's reference Q8_0: one half scale, 32 signed bytes.
void encode_q8_0(std::span<const float> x, std::vector<std::byte>& out) {
  constexpr size_t kBlock = 32, kBytes = 34;
  for (size_t b = 0; b < x.size() / kBlock; ++b) {
    const float* v = x.data() + b * kBlock;
    float amax = 0.0f;
    for (size_t i = 0; i < kBlock; ++i) amax = std::max(amax, std::fabs(v[i]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put(out, b * kBytes, f32_to_f16(d));
    for (size_t i = 0; i < kBlock; ++i) {
      out[b * kBytes + 2 + i] = static_cast<std::byte>(static_cast<int8_t>(std::lround(v[i] * id)));
    }
  }
}

// ggml's reference Q4_0: scale from the signed value of largest magnitude, nibbles split in halves.
void encode_q4_0(std::span<const float> x, std::vector<std::byte>& out) {
  constexpr size_t kBlock = 32, kBytes = 18;
  for (size_t b = 0; b < x.size() / kBlock; ++b) {
    const float* v = x.data() + b * kBlock;
    float amax = 0.0f, max = 0.0f;
    for (size_t i = 0; i < kBlock; ++i) {
      if (std::fabs(v[i]) > amax) {
        amax = std::fabs(v[i]);
        max = v[i];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    put(out, b * kBytes, f32_to_f16(d));
    for (size_t i = 0; i < kBlock / 2; ++i) {
      const auto lo = static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(v[i] * id + 8.5f))));
      const auto hi =
          static_cast<uint8_t>(std::min(15, static_cast<int>(static_cast<int8_t>(v[i + 16] * id + 8.5f))));
      out[b * kBytes + 2 + i] = static_cast<std::byte>(lo | (hi << 4));
    }
  }
}

}  // namespace

uint16_t f32_to_f16(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u); // rounds to inf
  if (abs < 0x38800000u) {
    // Subnormal half (or zero): add the value to 0.5 so the FPU does the rounding.
    const float shifted = std::bit_cast<float>(abs) + 0.5f;
    return static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(shifted) - 0x3f000000u));
  }
  const uint32_t mant_odd = (abs >> 13) & 1u;
  const uint32_t rounded = abs + 0xc8000fffu + mant_odd;  // rebias exponent and round to nearest even
  return static_cast<uint16_t>(sign | (rounded >> 13));
}

uint16_t f32_to_bf16(float value) {
  const uint32_t x = std::bit_cast<uint32_t>(value);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

bool dtype_encodable(DType dtype) {
  switch (dtype) {
    case DType::kF32: case DType::kF16: case DType::kBF16: case DType::kQ8_0: case DType::kQ4_0:
      return true;
    default:
      return false;
  }
}

Result<std::vector<std::byte>> encode_from_f32(DType dtype, std::span<const float> values) {
  if (!dtype_encodable(dtype)) {
    return Status::Unimplemented("encoding to " + std::string(dtype_name(dtype)) + " is not implemented");
  }
  TM_ASSIGN_OR_RETURN(uint64_t bytes, dtype_storage_bytes(dtype, values.size()));
  std::vector<std::byte> out(bytes);
  switch (dtype) {
    case DType::kF32: std::memcpy(out.data(), values.data(), bytes); break;
    case DType::kF16:
      for (size_t i = 0; i < values.size(); ++i) put(out, 2 * i, f32_to_f16(values[i]));
      break;
    case DType::kBF16:
      for (size_t i = 0; i < values.size(); ++i) put(out, 2 * i, f32_to_bf16(values[i]));
      break;
    case DType::kQ8_0: encode_q8_0(values, out); break;
    case DType::kQ4_0: encode_q4_0(values, out); break;
    default: break;
  }
  return out;
}

}  // namespace tensormorph
