// Encoders from float32 to storage dtypes: demo and benchmark checkpoints, and what-if
// quantization (the error a type would cause). The ggml block types reproduce ggml's reference
// quantizers without an importance matrix (ggml_quantize_chunk with imatrix = NULL, i.e.
// llama-quantize without --imatrix) byte for byte: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K..Q6_K,
// IQ4_NL, IQ4_XS, TQ1_0, TQ2_0. Non-finite inputs are encoded as ggml's x86-64 build encodes them
// (deterministic, meaningless blocks); see quantize_internal.h.
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

/// Encodes row-major `values` into `dtype` storage, bytes equal to ggml's for the block types.
/// Blocks never cross rows, so a whole tensor encodes as its rows would; `values.size()` must be
/// a multiple of the block size (else INVALID_ARGUMENT), and other dtypes are UNIMPLEMENTED.
Result<std::vector<std::byte>> encode_from_f32(DType dtype, std::span<const float> values);

}  // namespace tensormorph
