// The CPU backend's decode, histogram, radix histogram, top-k and channel statistics kernels (tile statistics: tile_stats/tile_stats.h).
#pragma once

#include <cstdint>
#include <span>

#include "compute/ops/diff_stats.h"
#include "compute/ops/radix_histogram.h"
#include "compute/ops/reference.h"
#include "compute/ops/top_k.h"
#include "tensormorph/status.h"

namespace tensormorph::cpu {

/// tm.decode@1 over oneTBB (at most `max_threads`, 0: all), bit-identical to decode_reference.
Status decode(const ops::TensorView& tensor, std::span<float> out, uint32_t max_threads);

/// tm.histogram@1 over oneTBB, counts identical to histogram_reference.
Status histogram(const ops::TensorView& tensor, double lo, double hi, uint64_t bins, std::span<uint64_t> out,
                 uint32_t max_threads);

/// tm.radix_histogram@1 over oneTBB, counts identical to radix_histogram_reference.
Status radix_histogram(const ops::TensorView& tensor, const ops::RadixParams& params, std::span<const uint64_t> prefixes,
                       std::span<uint64_t> counts, std::span<uint64_t, ops::kRadixClasses> classes,
                       uint32_t max_threads);

/// tm.top_k@1 over oneTBB, identical to top_k_reference: `indices` and `values` hold k entries.
Status top_k(const ops::TensorView& tensor, std::span<uint64_t> indices, std::span<float> values, uint64_t* written,
             uint32_t max_threads);

/// tm.channel_stats@1 over oneTBB, identical to channel_stats_reference.
Status channel_stats(const ops::MatrixView& matrix, std::span<TM_TileStats> rows_out, std::span<TM_TileStats> cols_out,
                     uint32_t max_threads);

/// tm.diff_stats@1 over oneTBB (threads over chunks), identical to diff_stats_reference.
Status diff_stats(const ops::DiffSide& a, const ops::DiffSide& b, uint64_t element_offset, std::span<TM_DiffStats> out,
                  uint32_t max_threads);

/// tm.subtract@1 over oneTBB, identical to subtract_reference.
Status subtract(const ops::DiffSide& a, const ops::DiffSide& b, std::span<float> out, uint32_t max_threads);

// Peak memory each kernel needs beyond its inputs and outputs, on `threads` threads: what the
// estimate reports as working memory, so that the memory budget sees it before anything runs.

/// Working memory of histogram().
uint64_t histogram_working_bytes(uint64_t bins, uint32_t threads);
/// Working memory of radix_histogram() with `slots` counters.
uint64_t radix_histogram_working_bytes(uint64_t slots, bool with_prefixes, uint32_t threads);
/// Working memory of top_k().
uint64_t top_k_working_bytes(uint64_t k, uint32_t threads);
/// Working memory of channel_stats() on a rows x cols matrix.
uint64_t channel_stats_working_bytes(uint64_t rows, uint64_t cols, uint32_t threads);
/// Working memory of diff_stats() and subtract() (two decoded chunks and the lanes per thread).
uint64_t diff_working_bytes(uint32_t threads);

}  // namespace tensormorph::cpu
