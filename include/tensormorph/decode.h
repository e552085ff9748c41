// Conversion of stored elements of any dtype to float32 / float64 on the CPU.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "tensormorph/dtype.h"
#include "tensormorph/status.h"

namespace tensormorph {

/// True when decode_to_f32 can convert `dtype`.
bool dtype_decodable(DType dtype);

/// Why `dtype` cannot be decoded (empty when it can), e.g. "C64 is complex-valued and has no real float decoding".
std::string_view dtype_not_decodable_reason(DType dtype);

/// Decodes `elems` elements stored at `src` into `out`.
/// `src` starts at a block boundary and holds exactly dtype_storage_bytes(dtype, elems) bytes;
/// `elems` must be a whole number of blocks. Integers convert with round-to-nearest; BOOL gives 0/1.
/// Quantized types follow ggml's operation order with no FMA contraction, so results match ggml bit
/// for bit. Returns UNSUPPORTED for a dtype that is not decodable (never garbage).
Status decode_to_f32(DType dtype, std::span<const std::byte> src, uint64_t elems, float* out);

/// Like decode_to_f32 but into float64, exact for every scalar type except U64/I64 beyond 2^53.
Status decode_to_f64(DType dtype, std::span<const std::byte> src, uint64_t elems, double* out);

/// IEEE half -> float (exact).
float f16_to_f32(uint16_t bits);
/// bfloat16 -> float (exact).
float bf16_to_f32(uint16_t bits);

}  // namespace tensormorph
