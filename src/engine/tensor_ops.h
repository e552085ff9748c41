// Operations on checkpoint tensors, placed by the scheduler: the API the commands and the server use.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "compute/scheduler.h"
#include "core/band_reader.h"
#include "engine/pyramid.h"
#include "tensormorph/checkpoint.h"

namespace tensormorph::engine {

/// Placement records collected by one call (for --explain).
using Records = std::vector<compute::PlacementRecord>;

/// Default tile size of tile statistics and of the index pyramid.
inline constexpr uint32_t kDefaultTile = 256;

/// Stored bytes of some matrix rows of a tensor (see as_matrix) as one row-major run: the mapped
/// bytes when the tensor is contiguous, else a gathered copy (`owned`; a strided PyTorch view,
/// element bytes moved, not decoded).
struct MatrixRows {
  std::span<const std::byte> bytes;
  std::vector<std::byte> owned;
  std::shared_ptr<const MappedFile> keep;  ///< the mapping `bytes` points into, kept alive with them
};

/// Rows [row_begin, row_end) of `tensor`'s matrix; FORMAT_ERROR naming the file, tensor and offset
/// when the storage is too short or a view reaches outside it; UNSUPPORTED for a strided view of a
/// block type.
Result<MatrixRows> matrix_rows(const Checkpoint& checkpoint, const TensorInfo& tensor, uint64_t row_begin,
                               uint64_t row_end);

/// Runs one request that must be exact; "needs consent" is the scheduler's refusal (Placement::refusal)
/// naming the rungs.
Status run_exact(compute::Scheduler& scheduler, const compute::OpRequest& request, Records* records);

/// Called after each band of tile statistics with the stored bytes it covered.
using BandDone = std::function<void(uint64_t bytes)>;

/// The stored bytes tile statistics read for `tensor` at `tile`, as one extent in bands of whole
/// tile rows (one scheduled operation each); nullopt when there is nothing to read or the bytes are
/// not one run (a strided view or a tensor in chunks: tensor_tile_stats reads it band by band).
/// FORMAT_ERROR naming the file, tensor and offset when the storage is shorter than the shape.
Result<std::optional<ReadExtent>> tile_stats_extent(const Checkpoint& checkpoint, const TensorInfo& tensor,
                                                    uint32_t tile);

/// Where tensor_tile_stats takes a tensor's bands: extent `extent` of `reader`, made from
/// tile_stats_extent of the same tensor and tile, so that one reader spanning many tensors reads
/// ahead across them. No reader: a reader of this tensor alone.
struct BandInput {
  BandReader* reader = nullptr;
  size_t extent = 0;
};

/// Tile statistics of a whole tensor seen as a matrix (see as_matrix), level 0 of its pyramid.
/// Large tensors are processed in bands of rows, one scheduled operation per band, their bytes read
/// by the host (BandReader: the mapping when cached, reads kept in flight otherwise). With
/// `value_histogram`, each band also counts the value histogram (value_histogram.h) into it.
Result<PyramidLevel> tensor_tile_stats(compute::Scheduler& scheduler, const Checkpoint& checkpoint,
                                       const TensorInfo& tensor, uint32_t tile, Records* records = nullptr,
                                       uint32_t max_threads = 0, const BandDone& band_done = {},
                                       const BandInput& input = {}, std::vector<uint64_t>* value_histogram = nullptr);

/// The tensor's values decoded to float32 (row-major), through tm.decode@1.
Result<std::vector<float>> decode_tensor(compute::Scheduler& scheduler, const Checkpoint& checkpoint,
                                         const TensorInfo& tensor, Records* records = nullptr);

/// Rows [row_begin, row_end) of the tensor seen as a matrix, decoded to float32 (row-major),
/// through tm.decode@1.
Result<std::vector<float>> decode_rows(compute::Scheduler& scheduler, const Checkpoint& checkpoint,
                                       const TensorInfo& tensor, uint64_t row_begin, uint64_t row_end,
                                       Records* records = nullptr);

/// Counts per bin over [lo, hi], then below, above and NaN counts, through tm.histogram@1.
Result<std::vector<uint64_t>> tensor_histogram(compute::Scheduler& scheduler, const Checkpoint& checkpoint,
                                               const TensorInfo& tensor, double lo, double hi, uint64_t bins,
                                               Records* records = nullptr);

/// The tensor's statistics in its own domain, through tm.exact_summary@1 (F64, I32, U32, I64 and
/// U64 only: see exact_summary_supported).
Result<TM_ExactSummary> tensor_exact_summary(compute::Scheduler& scheduler, const Checkpoint& checkpoint,
                                             const TensorInfo& tensor, Records* records = nullptr);

/// A tm.exact_summary@1 result as the faces show it.
struct ExactView {
  TensorSummary summary;  ///< counts; min, max, absmax as float64 (0 when nothing is finite)
  double mean = 0;        ///< the operation's mean
  double std = 0;         ///< the operation's standard deviation
  /// Integer tensors with a finite element: the extremes as exact JSON integers.
  std::optional<nlohmann::ordered_json> min, max, absmax;
};

/// The view of `exact`, a summary of a tensor of `dtype`.
ExactView exact_view(const TM_ExactSummary& exact, DType dtype);

/// A key identifying bytes [begin, begin + count) of a tensor's stored bytes (row-major, as
/// matrix_rows gives them) for residency tracking: equal keys name the same bytes, so a device copy
/// made for one operation serves another only when it sent exactly that span.
uint64_t residency_key(const Checkpoint& checkpoint, const TensorInfo& tensor, uint64_t begin, uint64_t count);

}  // namespace tensormorph::engine
