// tm.top_k@1: the k finite elements of largest magnitude, ordered by magnitude descending and then
// by position, so that the answer is one list on every backend however it was found.
#pragma once

#include <cstdint>
#include <span>

#include "compute/ops/radix_histogram.h"
#include "compute/ops/reference.h"
#include "tensormorph/status.h"

namespace tensormorph::ops {

/// One candidate: its magnitude key (the bits of |x|), position and value.
struct TopKEntry {
  uint32_t key = 0;
  uint64_t index = 0;
  float value = 0;
};

/// True when `a` comes before `b` in tm.top_k@1's order: larger |x|, then smaller index.
inline bool top_k_before(const TopKEntry& a, const TopKEntry& b) {
  return a.key > b.key || (a.key == b.key && a.index < b.index);
}

/// Bits of the value tm.top_k@1 writes past the entries it found (its index is UINT64_MAX).
inline constexpr uint32_t kTopKPaddingBits = 0x7fc00000u;

/// tm.top_k@1 as plain code over host memory: fills the first `*written` entries of `indices` and
/// `values` (their size is the capacity k), *written = min(k, finite elements), the rest padding.
Status top_k_reference(const TensorView& tensor, std::span<uint64_t> indices, std::span<float> values,
                       uint64_t* written);

}  // namespace tensormorph::ops
