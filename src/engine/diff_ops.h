// Comparing two tensors of one element count, placed by the scheduler: tm.diff_stats@1's chunk
// records (merge them with ops::merge_diff_stats, read them with ops::diff_metrics) and
// tm.subtract@1's float32 differences. Each side is any decodable dtype, optionally offset by a
// constant (a converter's known transform, such as Gemma's norm + 1).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "compute/ops/diff_stats.h"
#include "compute/scheduler.h"
#include "engine/tensor_ops.h"
#include "tensormorph/dtype.h"

namespace tensormorph::engine {

/// One side of a comparison: its stored bytes (contiguous, whole blocks), dtype and value offset.
struct DiffOperand {
  std::span<const std::byte> bytes;
  DType dtype = DType::kF32;
  double offset = 0;           ///< a_offset / b_offset: added to each decoded value (float32 sum) when non-zero
  uint64_t residency_key = 0;  ///< identity of the bytes for the scheduler's residency cache (0: none)
  std::string name;            ///< the tensor the bytes belong to, for placement records ("" when none)
};

/// The subject of an operation on a pair (OpRequest::subject): the name both sides share, else
/// "a vs b" (or the one name given).
std::string pair_subject(std::string_view a, std::string_view b);

/// Elements of one scheduled operation: a multiple of TM_DIFF_CHUNK, so that the records of the
/// bands are those of one instance over the whole run (docs/COMPUTE.md#tmdiff_stats1).
inline constexpr uint64_t kDiffBandElems = 64 * uint64_t{TM_DIFF_CHUNK};

/// tm.diff_stats@1 over `elements` pairs of `a` and `b`: one record per chunk of 65536 pairs,
/// indices counted from `element_offset` (the first pair's flat index in its tensor). Bands of
/// kDiffBandElems pairs are scheduled one by one. INVALID_ARGUMENT when an operand's bytes do not
/// hold `elements` elements (naming both sides' counts), UNSUPPORTED for a dtype not decodable.
Result<std::vector<TM_DiffStats>> run_diff_stats(compute::Scheduler& scheduler, const DiffOperand& a,
                                                 const DiffOperand& b, uint64_t elements, uint64_t element_offset,
                                                 Records* records = nullptr, uint32_t max_threads = 0);

/// The records of run_diff_stats merged into one (ops::merge_diff_stats).
Result<TM_DiffStats> diff_stats_total(compute::Scheduler& scheduler, const DiffOperand& a, const DiffOperand& b,
                                      uint64_t elements, uint64_t element_offset = 0, Records* records = nullptr,
                                      uint32_t max_threads = 0);

/// tm.subtract@1 over `elements` pairs: a - b in float32 after the offsets, NaN as 0x7fc00000.
Result<std::vector<float>> run_subtract(compute::Scheduler& scheduler, const DiffOperand& a, const DiffOperand& b,
                                        uint64_t elements, Records* records = nullptr, uint32_t max_threads = 0);

}  // namespace tensormorph::engine
