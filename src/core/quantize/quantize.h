// Encoders from float32 to storage dtypes, used to write demo and benchmark checkpoints.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "tensormorph/dtype.h"
#include "tensormorph/status.h"

namespace tensormorph {

/// float -> IEEE half, round to nearest even (overflow to inf, NaN kept).
uint16_t f32_to_f16(float value);
/// float -> bfloat16, round to nearest even (NaN kept quiet).
uint16_t f32_to_bf16(float value);

/// True when encode_from_f32 can produce `dtype`.
bool dtype_encodable(DType dtype);

/// Encodes row-major `values` into `dtype` storage; quantized types take whole blocks per row
/// (`values.size()` must be a multiple of the block size). Quantizers follow ggml's reference
/// (non-imatrix) rounding so the bytes are what llama.cpp would write.
Result<std::vector<std::byte>> encode_from_f32(DType dtype, std::span<const float> values);

}  // namespace tensormorph
