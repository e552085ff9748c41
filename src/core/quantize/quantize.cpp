// Dispatch of encode_from_f32 and the scalar encoders (F16, BF16). The ggml block encoders live
// in quantize_ggml_{legacy,kquants,iq4,ternary}.cpp behind quantize_internal.h.
#include "core/quantize/quantize.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <optional>
#include <string>

#include "core/quantize/quantize_internal.h"

namespace tensormorph {
namespace {

template <typename T>
void put(std::vector<std::byte>& out, size_t at, T value) {
  std::memcpy(out.data() + at, &value, sizeof value);
}

/// The block encoder of a ggml quantized type; nullopt for scalar and unsupported types.
std::optional<quantize_internal::BlockEncoder> find_block_encoder(DType dtype) {
  using namespace quantize_internal;
  if (auto e = find_ggml_legacy_encoder(dtype)) return e;
  if (auto e = find_ggml_kquant_encoder(dtype)) return e;
  if (auto e = find_ggml_iq4_encoder(dtype)) return e;
  return find_ggml_ternary_encoder(dtype);
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
  return dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16 || find_block_encoder(dtype).has_value();
}

Result<std::vector<std::byte>> encode_from_f32(DType dtype, std::span<const float> values) {
  if (dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16) {
    TM_ASSIGN_OR_RETURN(uint64_t bytes, dtype_storage_bytes(dtype, values.size()));
    std::vector<std::byte> out(bytes);
    if (dtype == DType::kF32) {
      if (bytes != 0) std::memcpy(out.data(), values.data(), bytes);
    } else {
      const bool half = dtype == DType::kF16;
      for (size_t i = 0; i < values.size(); ++i) put(out, 2 * i, half ? f32_to_f16(values[i]) : f32_to_bf16(values[i]));
    }
    return out;
  }
  const auto encoder = find_block_encoder(dtype);
  if (!encoder) {
    return Status::Unimplemented("encoding to " + std::string(dtype_name(dtype)) + " is not implemented");
  }
  if (values.size() % encoder->block_elems != 0) {
    return Status::InvalidArgument("cannot encode " + std::to_string(values.size()) + " values as " +
                                   std::string(dtype_name(dtype)) + ": not a whole number of " +
                                   std::to_string(encoder->block_elems) + "-element blocks");
  }
  const uint64_t blocks = values.size() / encoder->block_elems;
  std::vector<std::byte> out(blocks * encoder->block_bytes);
  if (blocks != 0) encoder->encode(values.data(), blocks, out.data());
  return out;
}

}  // namespace tensormorph
