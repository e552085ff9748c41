#include "engine/tensor_ops.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <optional>

#include "core/dtype_abi.h"
#include "core/printable.h"
#include "engine/matrix_shape.h"
#include "engine/value_histogram.h"
#include "tensormorph/decode.h"

namespace tensormorph::engine {
namespace {

// Bands keep one operation's input under this many bytes, so progress and residency are granular.
constexpr uint64_t kBandBytes = 256ull << 20;

// A tensor's stored bytes as one contiguous row-major run (all rows of its matrix).
using ContiguousBytes = MatrixRows;

Result<ContiguousBytes> contiguous_bytes(const Checkpoint& checkpoint, const TensorInfo& tensor) {
  return matrix_rows(checkpoint, tensor, 0, as_matrix(tensor).rows);
}

}  // namespace

// Callers never pass consent: tile statistics, decoding and histograms are always exact on a
// backend that follows the contract, unless constraints or the memory budget exclude every such
// backend (then the scheduler's refusal says which, and what to change).
Status run_exact(compute::Scheduler& scheduler, const compute::OpRequest& request, Records* records) {
  TM_ASSIGN_OR_RETURN(auto placement, scheduler.run(request));
  if (!placement.executed) {
    std::string rungs;
    for (const auto& r : placement.ladder) rungs += "\n  rung '" + r.id + "' on " + r.backend + ": " + r.computes + " (" + r.error_bound + ")";
    const Status& refused = placement.refusal;
    return Status(refused.code(), refused.message() + "; approximate rungs need consent:" + rungs).with_hint(refused.hint());
  }
  if (records) placement.take_records(*records);
  return Status::Ok();
}

namespace {

uint64_t rows_per_band(uint64_t row_bytes, uint64_t align) {
  uint64_t rows = std::max<uint64_t>(1, kBandBytes / std::max<uint64_t>(row_bytes, 1));
  if (rows >= align) rows -= rows % align;
  return std::max<uint64_t>(rows, align);
}

}  // namespace

uint64_t residency_key(const Checkpoint& checkpoint, const TensorInfo& tensor, uint64_t begin, uint64_t count) {
  uint64_t h = std::hash<std::string>{}(checkpoint.files()[tensor.file].path.string());
  const auto mix = [&h](uint64_t part) { h ^= (part + 0x9e3779b97f4a7c15ull) + (h << 6) + (h >> 2); };
  // Views of one storage (a weight and its transpose) share offset and size: their strides differ.
  for (const uint64_t part : {tensor.offset, tensor.nbytes, uint64_t{tensor.chunks.size()}, begin, count}) mix(part);
  for (const uint64_t extent : tensor.shape) mix(extent);
  for (const int64_t stride : tensor.strides) mix(static_cast<uint64_t>(stride));
  return h == 0 ? 1 : h;
}

Result<std::optional<ReadExtent>> tile_stats_extent(const Checkpoint& checkpoint, const TensorInfo& tensor,
                                                    uint32_t tile) {
  // A tensor in chunks has no one extent; planning it would gather it (tensor_tile_stats reads its bands).
  if (tensor.elements() == 0 || !tensor.contiguous() || !tensor.chunks.empty()) return std::optional<ReadExtent>();
  const MatrixShape m = as_matrix(tensor);
  TM_ASSIGN_OR_RETURN(TensorStorage storage, checkpoint.storage(tensor));
  TM_ASSIGN_OR_RETURN(const uint64_t need, dtype_storage_bytes(tensor.dtype, tensor.elements()));
  TM_ASSIGN_OR_RETURN(const uint64_t row_bytes, dtype_storage_bytes(tensor.dtype, m.cols));
  if (tensor.nbytes < need) {
    return Status::FormatError(checkpoint.files()[tensor.file].path.string() + ": tensor " + quoted_name(tensor.name) +
                               " at offset " + std::to_string(tensor.offset) + ": storage shorter than its shape");
  }
  return std::optional<ReadExtent>(ReadExtent{std::move(storage.map), storage.offset, need,
                                              rows_per_band(row_bytes, tile) * row_bytes,
                                              "tensor " + quoted_name(tensor.name)});
}

namespace {

/// Adds the value histogram of `elems` stored values to `histogram` (one tm.radix_histogram@1).
Status count_value_histogram(compute::Scheduler& scheduler, const std::string& subject, TM_DType dtype,
                             std::span<const std::byte> bytes, uint64_t elems, uint64_t residency, uint32_t max_threads,
                             std::vector<uint64_t>& histogram, Records* records) {
  const ops::RadixParams params = value_histogram_params();
  std::vector<uint64_t> counts(kValueHistogramBins);
  std::array<uint64_t, ops::kRadixClasses> classes{};
  compute::OpRequest req;
  req.op = TM_OP_RADIX_HISTOGRAM;
  req.subject = subject;
  req.inputs.push_back({dtype, {elems}, bytes, residency});
  req.inputs.push_back({TM_DTYPE_U64, {0}, {}, 0});
  req.outputs.push_back({TM_DTYPE_U64, {counts.size()}, std::as_writable_bytes(std::span(counts))});
  req.outputs.push_back({TM_DTYPE_U64, {classes.size()}, std::as_writable_bytes(std::span(classes))});
  req.attributes = {{TM_ATTR_KEY, static_cast<int64_t>(params.key), 0},
                    {TM_ATTR_SHIFT, params.shift, 0},
                    {TM_ATTR_BITS, params.bits, 0},
                    {TM_ATTR_CENTER, 0, 0}};
  req.max_threads = max_threads;
  TM_RETURN_IF_ERROR(run_exact(scheduler, req, records));
  for (size_t i = 0; i < counts.size(); ++i) histogram[i] += counts[i];
  return Status::Ok();
}

}  // namespace

Result<PyramidLevel> tensor_tile_stats(compute::Scheduler& scheduler, const Checkpoint& checkpoint,
                                       const TensorInfo& tensor, uint32_t tile, Records* records,
                                       uint32_t max_threads, const BandDone& band_done, const BandInput& input,
                                       std::vector<uint64_t>* value_histogram) {
  const MatrixShape m = as_matrix(tensor);
  PyramidLevel level;
  level.grid = ops::tile_grid({0, m.rows, 0, m.cols}, tile);
  level.tiles.assign(level.grid.count(), ops::empty_tile_stats());
  if (value_histogram != nullptr) value_histogram->assign(kValueHistogramBins, 0);
  if (tensor.elements() == 0) return level;
  if (!dtype_decodable(tensor.dtype)) {
    return Status::Unsupported(checkpoint.files()[tensor.file].path.string() + ": tensor " + quoted_name(tensor.name) + ": " +
                               std::string(dtype_not_decodable_reason(tensor.dtype)));
  }
  TM_ASSIGN_OR_RETURN(uint64_t row_bytes, dtype_storage_bytes(tensor.dtype, m.cols));
  const uint64_t band_rows = rows_per_band(row_bytes, tile);
  // One operation on rows [r0, r0 + rows), whose stored bytes are `bytes`.
  auto run_band = [&](std::span<const std::byte> bytes, uint64_t r0, uint64_t rows, uint64_t residency) -> Status {
    const ops::TileGrid grid = ops::tile_grid({0, rows, 0, m.cols}, tile);
    // Bands hold whole tile rows, so each band's tiles are a run of the level's.
    const auto out = std::span(level.tiles).subspan(r0 / tile * level.grid.cols, grid.count());
    compute::OpRequest req;
    req.op = TM_OP_TILE_STATS;
    req.subject = tensor.name;
    req.inputs.push_back({to_abi_dtype(tensor.dtype), {rows, m.cols}, bytes, residency});
    req.outputs.push_back({TM_DTYPE_U8, {out.size() * sizeof(TM_TileStats)}, std::as_writable_bytes(std::span(out))});
    req.max_threads = max_threads;
    req.attributes = {{TM_ATTR_ROW_BEGIN, 0, 0}, {TM_ATTR_ROW_END, static_cast<int64_t>(rows), 0}, {TM_ATTR_COL_BEGIN, 0, 0},
                      {TM_ATTR_COL_END, static_cast<int64_t>(m.cols), 0}, {TM_ATTR_TILE, tile, 0}};
    TM_RETURN_IF_ERROR(run_exact(scheduler, req, records).with_context("tensor " + quoted_name(tensor.name)));
    if (value_histogram != nullptr) {
      TM_RETURN_IF_ERROR(count_value_histogram(scheduler, tensor.name, to_abi_dtype(tensor.dtype), bytes, rows * m.cols, residency,
                                               max_threads, *value_histogram, records)
                             .with_context("tensor " + quoted_name(tensor.name)));
    }
    if (band_done) band_done(rows * row_bytes);
    return Status::Ok();
  };
  if (!tensor.contiguous() || !tensor.chunks.empty()) {
    // A strided view or a tensor stored in chunks: each band's rows on their own (matrix_rows: in
    // place where one row-band chunk holds them), so the whole tensor is never copied for its bands.
    for (uint64_t r0 = 0; r0 < m.rows; r0 += band_rows) {
      const uint64_t rows = std::min(band_rows, m.rows - r0);
      TM_ASSIGN_OR_RETURN(const MatrixRows band, matrix_rows(checkpoint, tensor, r0, r0 + rows));
      TM_RETURN_IF_ERROR(run_band(band.bytes, r0, rows, 0));
    }
    return level;
  }
  std::unique_ptr<BandReader> own;
  BandInput from = input;
  if (from.reader == nullptr) {
    TM_ASSIGN_OR_RETURN(auto extent, tile_stats_extent(checkpoint, tensor, tile));
    std::vector<ReadExtent> one;
    one.push_back(std::move(extent).value());
    TM_ASSIGN_OR_RETURN(own, BandReader::open(std::move(one)));
    from = {own.get(), 0};
  }
  uint64_t r0 = 0;
  for (;;) {
    TM_ASSIGN_OR_RETURN(auto bytes, from.reader->next(from.extent));
    if (!bytes) break;
    const uint64_t rows = bytes->bytes.size() / row_bytes;
    if (bytes->offset != r0 * row_bytes || bytes->bytes.size() != std::min(band_rows, m.rows - r0) * row_bytes) {
      return Status::Internal("tensor " + quoted_name(tensor.name) + ": band at byte " + std::to_string(bytes->offset) +
                              " is not the tile statistics band of rows from " + std::to_string(r0));
    }
    TM_RETURN_IF_ERROR(run_band(bytes->bytes, r0, rows, residency_key(checkpoint, tensor, bytes->offset, bytes->bytes.size())));
    r0 += rows;
  }
  if (r0 != m.rows) {
    return Status::Internal("tensor " + quoted_name(tensor.name) + ": bands ended at row " + std::to_string(r0) + " of " +
                            std::to_string(m.rows));
  }
  return level;
}

Result<std::vector<float>> decode_tensor(compute::Scheduler& scheduler, const Checkpoint& checkpoint,
                                         const TensorInfo& tensor, Records* records) {
  return decode_rows(scheduler, checkpoint, tensor, 0, as_matrix(tensor).rows, records);
}

Result<std::vector<float>> decode_rows(compute::Scheduler& scheduler, const Checkpoint& checkpoint,
                                       const TensorInfo& tensor, uint64_t row_begin, uint64_t row_end,
                                       Records* records) {
  const MatrixShape m = as_matrix(tensor);
  if (row_begin > row_end || row_end > m.rows) {
    return Status::InvalidArgument("tensor " + quoted_name(tensor.name) + ": rows [" + std::to_string(row_begin) + ", " +
                                   std::to_string(row_end) + ") are outside its " + std::to_string(m.rows) + " rows");
  }
  std::vector<float> values((row_end - row_begin) * m.cols);
  if (values.empty()) return values;
  TM_ASSIGN_OR_RETURN(auto data, contiguous_bytes(checkpoint, tensor));
  TM_ASSIGN_OR_RETURN(uint64_t row_bytes, dtype_storage_bytes(tensor.dtype, m.cols));
  const uint64_t band_rows = rows_per_band(row_bytes, 1);
  for (uint64_t r0 = row_begin; r0 < row_end; r0 += band_rows) {
    const uint64_t rows = std::min(band_rows, row_end - r0);
    compute::OpRequest req;
    req.op = TM_OP_DECODE;
    req.subject = tensor.name;
    req.inputs.push_back({to_abi_dtype(tensor.dtype), {rows * m.cols}, data.bytes.subspan(r0 * row_bytes, rows * row_bytes),
                          data.owned.empty() ? residency_key(checkpoint, tensor, r0 * row_bytes, rows * row_bytes) : 0});
    req.outputs.push_back({TM_DTYPE_F32, {rows * m.cols},
                           std::as_writable_bytes(std::span(values).subspan((r0 - row_begin) * m.cols, rows * m.cols))});
    TM_RETURN_IF_ERROR(run_exact(scheduler, req, records).with_context("tensor " + quoted_name(tensor.name)));
  }
  return values;
}

Result<std::vector<uint64_t>> tensor_histogram(compute::Scheduler& scheduler, const Checkpoint& checkpoint,
                                               const TensorInfo& tensor, double lo, double hi, uint64_t bins,
                                               Records* records) {
  std::vector<uint64_t> counts(bins + 3, 0);
  TM_ASSIGN_OR_RETURN(auto data, contiguous_bytes(checkpoint, tensor));
  compute::OpRequest req;
  req.op = TM_OP_HISTOGRAM;
  req.subject = tensor.name;
  req.inputs.push_back({to_abi_dtype(tensor.dtype), {tensor.elements()}, data.bytes,
                        data.owned.empty() ? residency_key(checkpoint, tensor, 0, data.bytes.size()) : 0});
  req.outputs.push_back({TM_DTYPE_U64, {bins + 3}, std::as_writable_bytes(std::span(counts))});
  req.attributes = {{TM_ATTR_LO, 0, lo}, {TM_ATTR_HI, 0, hi}, {TM_ATTR_BINS, static_cast<int64_t>(bins), 0}};
  TM_RETURN_IF_ERROR(run_exact(scheduler, req, records).with_context("tensor " + quoted_name(tensor.name)));
  return counts;
}

Result<TM_ExactSummary> tensor_exact_summary(compute::Scheduler& scheduler, const Checkpoint& checkpoint,
                                             const TensorInfo& tensor, Records* records) {
  TM_ExactSummary summary{};
  TM_ASSIGN_OR_RETURN(auto data, contiguous_bytes(checkpoint, tensor));
  compute::OpRequest req;
  req.op = TM_OP_EXACT_SUMMARY;
  req.subject = tensor.name;
  req.inputs.push_back({to_abi_dtype(tensor.dtype), {tensor.elements()}, data.bytes,
                        data.owned.empty() ? residency_key(checkpoint, tensor, 0, data.bytes.size()) : 0});
  req.outputs.push_back({TM_DTYPE_U8, {sizeof summary}, std::as_writable_bytes(std::span(&summary, 1))});
  TM_RETURN_IF_ERROR(run_exact(scheduler, req, records).with_context("tensor " + quoted_name(tensor.name)));
  return summary;
}

ExactView exact_view(const TM_ExactSummary& e, DType dtype) {
  ExactView v;
  TensorSummary& s = v.summary;
  s.count = e.count;
  s.nan = e.nan;
  s.pos_inf = e.pos_inf;
  s.neg_inf = e.neg_inf;
  s.zeros = e.zeros;
  s.finite = e.count - e.nan - e.pos_inf - e.neg_inf;
  s.min = s.finite ? e.min : 0;
  s.max = s.finite ? e.max : 0;
  s.absmax = e.absmax;
  v.mean = e.mean;
  v.std = e.std;
  if (s.finite == 0) return v;
  if (dtype == DType::kI32 || dtype == DType::kI64) {
    v.min = e.min_int;
    v.max = e.max_int;
    v.absmax = e.absmax_uint;
  } else if (dtype == DType::kU32 || dtype == DType::kU64) {
    v.min = e.min_uint;
    v.max = e.max_uint;
    v.absmax = e.absmax_uint;
  }
  return v;
}

namespace {

// A tensor stored in chunks that each hold whole slices of its leading dimension (a Distributed
// Checkpoint shard on dim 0) gives any band of its matrix rows from the chunks themselves: in place
// when one chunk holds the band, copied from the chunks that do otherwise; never gathered whole.
// nullopt when the chunks are not such row bands (the caller gathers the tensor).
std::optional<Result<MatrixRows>> rows_from_row_chunks(const Checkpoint& checkpoint, const TensorInfo& tensor,
                                                      uint64_t row_begin, uint64_t row_end, uint64_t row_bytes) {
  const MatrixShape m = as_matrix(tensor);
  if (tensor.chunks.empty() || tensor.shape.size() < 2 || tensor.shape[0] == 0) return std::nullopt;
  const uint64_t rows_per_slice = m.rows / tensor.shape[0];
  struct Band {
    const TensorChunk* chunk;
    uint64_t first_row, rows;
  };
  std::vector<Band> bands;
  for (const TensorChunk& c : tensor.chunks) {
    if (!c.strides.empty() || c.start.size() != tensor.shape.size()) return std::nullopt;
    for (size_t d = 1; d < tensor.shape.size(); ++d) {
      if (c.start[d] != 0 || c.sizes[d] != tensor.shape[d]) return std::nullopt;
    }
    bands.push_back({&c, c.start[0] * rows_per_slice, c.sizes[0] * rows_per_slice});
  }
  std::sort(bands.begin(), bands.end(), [](const Band& a, const Band& b) { return a.first_row < b.first_row; });
  MatrixRows out;
  std::vector<std::pair<std::span<const std::byte>, std::shared_ptr<const MappedFile>>> pieces;
  for (const Band& band : bands) {
    const uint64_t from = std::max(row_begin, band.first_row), to = std::min(row_end, band.first_row + band.rows);
    if (from >= to) continue;
    const TensorChunk& c = *band.chunk;
    auto where = [&] {
      return checkpoint.files()[c.file].path.string() + ": tensor " + quoted_name(tensor.name) + ", chunk at offset " +
             std::to_string(c.offset);
    };
    if (c.nbytes / row_bytes < band.rows) return Result<MatrixRows>(Status::FormatError(where() + ": shorter than its rows"));
    auto map = checkpoint.mapped(c.file);
    if (!map.ok()) return Result<MatrixRows>(map.status());
    const auto bytes = (*map)->bytes();
    const uint64_t at = c.offset + (from - band.first_row) * row_bytes, size = (to - from) * row_bytes;
    if (at > bytes.size() || size > bytes.size() - at) {
      return Result<MatrixRows>(Status::FormatError(where() + ": reaches past the end of its file"));
    }
    pieces.emplace_back(bytes.subspan(at, size), std::move(map).value());
  }
  if (pieces.size() == 1) {
    out.bytes = pieces.front().first;
    out.keep = std::move(pieces.front().second);
    return Result<MatrixRows>(std::move(out));
  }
  out.owned.reserve((row_end - row_begin) * row_bytes);
  for (const auto& piece : pieces) out.owned.insert(out.owned.end(), piece.first.begin(), piece.first.end());
  if (out.owned.size() != (row_end - row_begin) * row_bytes) return std::nullopt;  // the chunks leave a gap: gather
  out.bytes = out.owned;
  return Result<MatrixRows>(std::move(out));
}

}  // namespace

Result<MatrixRows> matrix_rows(const Checkpoint& checkpoint, const TensorInfo& tensor, uint64_t row_begin,
                               uint64_t row_end) {
  MatrixRows out;
  const MatrixShape m = as_matrix(tensor);
  auto where = [&] {
    return checkpoint.files()[tensor.file].path.string() + ": tensor " + quoted_name(tensor.name) + " at offset " +
           std::to_string(tensor.offset);
  };
  if (row_begin > row_end || row_end > m.rows) return Status::InvalidArgument(where() + ": rows out of range");
  if (row_begin < row_end && dtype_info(tensor.dtype).block_elems == 1) {
    TM_ASSIGN_OR_RETURN(const uint64_t chunk_row_bytes, dtype_storage_bytes(tensor.dtype, m.cols));
    if (chunk_row_bytes > 0) {
      if (auto rows = rows_from_row_chunks(checkpoint, tensor, row_begin, row_end, chunk_row_bytes)) return std::move(*rows);
    }
  }
  TM_ASSIGN_OR_RETURN(TensorStorage held, checkpoint.storage(tensor));
  const auto stored = held.map->bytes().subspan(held.offset, tensor.nbytes);
  out.keep = std::move(held.map);
  TM_ASSIGN_OR_RETURN(const uint64_t need, dtype_storage_bytes(tensor.dtype, tensor.elements()));
  TM_ASSIGN_OR_RETURN(const uint64_t row_bytes, dtype_storage_bytes(tensor.dtype, m.cols));
  if (tensor.contiguous()) {
    if (stored.size() < need) return Status::FormatError(where() + ": storage shorter than its shape");
    out.bytes = stored.subspan(row_begin * row_bytes, (row_end - row_begin) * row_bytes);
    return out;
  }
  const DTypeInfo& info = dtype_info(tensor.dtype);
  if (info.block_elems != 1) return Status::Unsupported(where() + ": strided view of a block type");
  const uint64_t size = info.block_bytes, storage = stored.size() / size;
  const uint64_t first = row_begin * m.cols, count = (row_end - row_begin) * m.cols;
  out.owned.resize(count * size);
  // The multi-index of flat element `first`, then odometer steps in row-major order.
  std::vector<uint64_t> index(tensor.shape.size(), 0);
  for (uint64_t rest = first, d = index.size(); d-- > 0;) {
    index[d] = rest % tensor.shape[d];
    rest /= tensor.shape[d];
  }
  for (uint64_t i = 0; i < count; ++i) {
    int64_t at = 0;
    for (size_t d = 0; d < index.size(); ++d) at += static_cast<int64_t>(index[d]) * tensor.strides[d];
    if (at < 0 || static_cast<uint64_t>(at) >= storage) {
      return Status::FormatError(where() + ": strided view reaches outside its storage (element " +
                                 std::to_string(first + i) + ")");
    }
    std::memcpy(out.owned.data() + i * size, stored.data() + static_cast<uint64_t>(at) * size, size);
    for (size_t d = index.size(); d-- > 0;) {
      if (++index[d] < tensor.shape[d]) break;
      index[d] = 0;
    }
  }
  out.bytes = out.owned;
  return out;
}

}  // namespace tensormorph::engine
