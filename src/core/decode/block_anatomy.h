// The fields of one ggml quantization block, decoded exactly as the decoders use them: the block's
// fp16 scale d (and offset m, or super-block min scale dmin), each sub-block's integer scale and
// min with the float scale and min the decoder forms from them, and every element's integer quant.
// Each value is scale * quant (+ m) (- min) of its sub-block, in float and in the decoders'
// operation order, so a caller can show how a value came about.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tensormorph/dtype.h"
#include "tensormorph/status.h"

namespace tensormorph {

/// One sub-block: the elements [first, first + count) of the block sharing one scale.
struct BlockSubScale {
  uint32_t first = 0, count = 0;
  int scale_q = 0;                 ///< the stored integer scale (Q3_K/IQ4_XS: minus its bias of 32)
  std::optional<int> min_q;        ///< the stored integer min (Q2_K, Q4_K, Q5_K)
  float scale = 0;                 ///< the float scale the decoder multiplies quants by
  float min = 0;                   ///< with min_q: dmin * min_q, which the decoder subtracts
};

/// The anatomy of one block.
struct BlockAnatomy {
  DType dtype = DType::kF32;
  uint32_t block_elements = 0, block_bytes = 0;
  bool described = false;          ///< false: only what `note` says is known (no sub-blocks, no quants)
  std::optional<float> d;          ///< the block (super-block) scale
  std::optional<float> m;          ///< Q4_1/Q5_1: the block's offset
  std::optional<float> dmin;       ///< Q2_K, Q4_K, Q5_K: the super-block scale of the mins
  std::vector<BlockSubScale> sub_blocks;  ///< covering the block, in element order
  /// Per element: the integer the decoder multiplies by its sub-block's scale (legacy types: q - 8
  /// or q - 16 for the _0 types; IQ4: the codebook entry of the nibble).
  std::vector<int> quants;
  std::string note;                ///< how the value is formed, or why the block is not described
};

/// The anatomy of the block of `dtype` stored in `block` (exactly one block's bytes).
/// INVALID_ARGUMENT when `dtype` is not block-quantized or `block` has the wrong size.
Result<BlockAnatomy> block_anatomy(DType dtype, std::span<const std::byte> block);

/// The value of element `i` of a described block, formed as the decoder does.
float block_anatomy_value(const BlockAnatomy& anatomy, uint32_t i);

}  // namespace tensormorph
