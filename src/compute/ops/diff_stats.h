// tm.diff_stats@1 and tm.subtract@1: two tensors of one element count compared pair by pair after
// decoding (each side any decodable dtype, optionally offset by a constant). diff_stats writes one
// TM_DiffStats per chunk of TM_DIFF_CHUNK elements whose sums follow a fixed order (256 lanes
// strided by 256, then the halving tree over the lanes), so every backend gets the same bits, and
// chunk records merge on the host into a whole tensor's (merge_diff_stats). subtract writes the
// float32 differences, NaN canonical. docs/COMPUTE.md defines both.
#pragma once

#include <bit>
#include <cstdint>
#include <span>

#include "compute/ops/op_instance.h"
#include "compute/ops/reference.h"
#include "tensormorph/c/plugin.h"
#include "tensormorph/status.h"

namespace tensormorph::ops {

/// Lanes of a chunk's canonical order.
inline constexpr uint64_t kDiffLanes = 256;
/// Elements of one chunk record.
inline constexpr uint64_t kDiffChunk = TM_DIFF_CHUNK;
/// The bits tm.subtract@1 writes for every NaN difference.
inline constexpr uint32_t kSubtractNanBits = 0x7fc00000u;

/// One side of a comparison: its elements and the offset applied to its decoded values.
struct DiffSide {
  TensorView tensor;
  DiffOffset offset;
};

/// The class of float bits: 0 finite, 1 NaN, 2 +Inf, 3 -Inf (branch-free).
inline uint32_t diff_class(uint32_t bits) {
  const uint32_t magnitude = bits & 0x7fffffffu;
  const uint32_t nan = magnitude > 0x7f800000u ? 1u : 0u;
  const uint32_t inf = magnitude == 0x7f800000u ? 1u : 0u;
  return nan | (inf << 1) | (inf & (bits >> 31));
}

/// A chunk record with nothing in it: zero counts, no maximum (index UINT64_MAX), sums +0.0.
TM_DiffStats empty_diff_stats();

/// tm.diff_stats@1 as plain code: one record per chunk of `a`/`b` in `out` (ceil(n / 65536) of
/// them); indices are reported from `element_offset`.
Status diff_stats_reference(const DiffSide& a, const DiffSide& b, uint64_t element_offset, std::span<TM_DiffStats> out);

/// tm.subtract@1 as plain code: out[i] = a[i] - b[i] in float32, NaN as kSubtractNanBits.
Status subtract_reference(const DiffSide& a, const DiffSide& b, std::span<float> out);

/// The records of consecutive chunks (in order) as one: counts add, each sum is the contiguous
/// pairwise tree over bit_ceil(chunks) slots (+0.0 past the last), the maximum the largest
/// max_abs_diff with the lowest index on ties. An empty span gives empty_diff_stats().
TM_DiffStats merge_diff_stats(std::span<const TM_DiffStats> chunks);

/// What a comparison report shows, derived from a (merged) record. Zero denominators give the
/// IEEE results the formulas produce: 0/0 is NaN, x/0 is +Inf (docs/COMPUTE.md#diff-metrics).
struct DiffMetrics {
  uint64_t pairs = 0;
  uint64_t finite_pairs = 0;
  uint64_t differing = 0;
  uint64_t bits_differing = 0;
  uint64_t class_mismatch = 0;
  double max_abs_diff = 0;                 ///< 0 when no finite pair
  uint64_t max_abs_index = ~uint64_t{0};   ///< UINT64_MAX when no finite pair
  float a_at_max = 0, b_at_max = 0;
  double mean_diff = 0;      ///< sum_diff / finite_pairs (NaN when no finite pair)
  double rmse = 0;           ///< sqrt(sum_sq_diff / finite_pairs) (NaN when no finite pair)
  double rel_frobenius = 0;  ///< sqrt(sum_sq_diff / sum_sq_a): NaN when both are 0, +Inf when only A's is
  double nmse = 0;           ///< sum_sq_diff / sum_sq_a (NaN / +Inf likewise)
  double cosine = 0;         ///< sum_ab / sqrt(sum_sq_a * sum_sq_b): NaN when either side is all zero
  double snr_db = 0;         ///< 10 log10(sum_sq_a / sum_sq_diff); +Inf when sum_sq_diff is 0 (no finite pair differs)
  bool identical = false;    ///< bits_differing == 0
};

/// The metrics of `s`.
DiffMetrics diff_metrics(const TM_DiffStats& s);

}  // namespace tensormorph::ops
