#include "compute/ops/op_split.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "compute/ops/channel_stats.h"
#include "compute/ops/diff_stats.h"
#include "compute/ops/reference.h"
#include "core/dtype_abi.h"

namespace tensormorph::ops {

int64_t SplitInstance::int_attribute(const std::string& name, int64_t fallback) const {
  for (const auto& a : attributes) {
    if (a.name == name) return a.i;
  }
  return fallback;
}

namespace {

static_assert(kSplitChunkElements == kDiffChunk, "element granules are diff_stats' chunks");

// Granules of kSplitChunkElements over the first `split_inputs` inputs: each holds as many elements
// as the first, stored whole, in blocks that divide a granule. Otherwise 1: the instance runs whole
// and the backend's own validation says what is wrong with it.
uint64_t element_granules(const SplitInstance& whole, size_t split_inputs) {
  if (whole.inputs.empty() || whole.inputs.size() < split_inputs) return 1;
  const auto elems = checked_element_count(whole.inputs[0].shape);
  if (!elems.ok()) return 1;
  for (size_t i = 0; i < split_inputs; ++i) {
    const SplitTensor& in = whole.inputs[i];
    const auto dtype = from_abi_dtype(in.dtype);
    const auto count = checked_element_count(in.shape);
    if (!dtype || !count.ok() || *count != *elems || kSplitChunkElements % dtype_info(*dtype).block_elems != 0) return 1;
    const auto bytes = dtype_storage_bytes(*dtype, *elems);
    if (!bytes.ok() || *bytes != in.nbytes) return 1;
  }
  return (*elems + kSplitChunkElements - 1) / kSplitChunkElements;
}

Result<uint64_t> first_input_granules(const SplitInstance& whole) { return element_granules(whole, 1); }
Result<uint64_t> every_input_granules(const SplitInstance& whole) { return element_granules(whole, whole.inputs.size()); }

// The slice of elements [begin, end) of `t` (a tensor element_granules accepted).
Result<Slice> element_slice(const SplitTensor& t, uint64_t begin, uint64_t end) {
  const DType dtype = *from_abi_dtype(t.dtype);
  TM_ASSIGN_OR_RETURN(const uint64_t offset, dtype_storage_bytes(dtype, begin));
  TM_ASSIGN_OR_RETURN(const uint64_t nbytes, dtype_storage_bytes(dtype, end - begin));
  return Slice{offset, nbytes, {end - begin}};
}

// Elements [begin, end) of the granule range, clipped to the first input's elements.
std::pair<uint64_t, uint64_t> element_range(const SplitInstance& whole, uint64_t begin, uint64_t end) {
  const uint64_t elems = *checked_element_count(whole.inputs[0].shape);
  return {std::min(elems, begin * kSplitChunkElements), std::min(elems, end * kSplitChunkElements)};
}

Status merge_nothing(const SplitInstance&, std::span<const PartResult>, std::span<const std::span<std::byte>>) {
  return Status::Ok();
}

// Adds every part's scratch of output `index`, as U64 counts, into `out`.
Status add_counts(std::span<const PartResult> parts, size_t index, std::span<std::byte> out) {
  std::vector<uint64_t> total(out.size() / sizeof(uint64_t), 0);
  for (const auto& p : parts) {
    if (p.scratch.size() <= index || p.scratch[index].size() != out.size()) {
      return Status::Internal("a split part's counts differ in size from the whole's");
    }
    for (size_t i = 0; i < total.size(); ++i) {
      uint64_t v;
      std::memcpy(&v, p.scratch[index].data() + i * sizeof v, sizeof v);
      total[i] += v;
    }
  }
  if (!total.empty()) std::memcpy(out.data(), total.data(), total.size() * sizeof(uint64_t));
  return Status::Ok();
}

// ---- tm.tile_stats@1 ----------------------------------------------------------------------------

ViewRange view_of(const SplitInstance& w) {
  return {static_cast<uint64_t>(w.int_attribute(TM_ATTR_ROW_BEGIN)), static_cast<uint64_t>(w.int_attribute(TM_ATTR_ROW_END)),
          static_cast<uint64_t>(w.int_attribute(TM_ATTR_COL_BEGIN)), static_cast<uint64_t>(w.int_attribute(TM_ATTR_COL_END))};
}

Result<uint64_t> tile_stats_granules(const SplitInstance& w) {
  if (w.inputs.size() != 1 || w.inputs[0].shape.size() != 2) return uint64_t{1};
  const ViewRange v = view_of(w);
  const auto tile = static_cast<uint32_t>(w.int_attribute(TM_ATTR_TILE));
  const auto dtype = from_abi_dtype(w.inputs[0].dtype);
  if (!dtype || !check_tile_stats_view(*dtype, w.inputs[0].shape[0], w.inputs[0].shape[1], v, tile).ok()) {
    return uint64_t{1};  // the backend's own validation reports what is wrong, unsplit
  }
  const TileGrid grid = tile_grid(v, tile);
  return grid.count() == 0 ? 1 : grid.rows;
}

Result<PartInstance> tile_stats_part(const SplitInstance& w, uint64_t begin, uint64_t end) {
  const ViewRange v = view_of(w);
  const auto tile = static_cast<uint64_t>(w.int_attribute(TM_ATTR_TILE));
  const uint64_t cols = w.inputs[0].shape[1];
  TM_ASSIGN_OR_RETURN(const uint64_t row_bytes, matrix_row_bytes(*from_abi_dtype(w.inputs[0].dtype), cols));
  const uint64_t r0 = v.row_begin + begin * tile, r1 = std::min(v.row_end, v.row_begin + end * tile);
  const uint64_t grid_cols = tile_grid(v, static_cast<uint32_t>(tile)).cols;
  PartInstance p;
  p.inputs.push_back({r0 * row_bytes, (r1 - r0) * row_bytes, {r1 - r0, cols}});
  const uint64_t tile_bytes = grid_cols * sizeof(TM_TileStats);
  p.outputs.push_back({begin * tile_bytes, (end - begin) * tile_bytes, {(end - begin) * tile_bytes}});
  p.merged = {false};
  p.attributes = {{TM_ATTR_ROW_BEGIN, 0, 0},
                  {TM_ATTR_ROW_END, static_cast<int64_t>(r1 - r0), 0},
                  {TM_ATTR_COL_BEGIN, static_cast<int64_t>(v.col_begin), 0},
                  {TM_ATTR_COL_END, static_cast<int64_t>(v.col_end), 0},
                  {TM_ATTR_TILE, static_cast<int64_t>(tile), 0}};
  return p;
}

// ---- Counting operations ------------------------------------------------------------------------

Result<PartInstance> counting_part(const SplitInstance& w, uint64_t begin, uint64_t end) {
  const auto [e0, e1] = element_range(w, begin, end);
  PartInstance p;
  TM_ASSIGN_OR_RETURN(Slice in, element_slice(w.inputs[0], e0, e1));
  p.inputs.push_back(std::move(in));
  for (size_t i = 1; i < w.inputs.size(); ++i) p.inputs.push_back({0, w.inputs[i].nbytes, w.inputs[i].shape});
  for (const auto& out : w.outputs) {
    p.outputs.push_back({0, out.nbytes, out.shape});
    p.merged.push_back(true);
  }
  p.attributes = w.attributes;
  return p;
}

Status merge_counts(const SplitInstance&, std::span<const PartResult> parts, std::span<const std::span<std::byte>> outputs) {
  for (size_t i = 0; i < outputs.size(); ++i) TM_RETURN_IF_ERROR(add_counts(parts, i, outputs[i]));
  return Status::Ok();
}

// ---- Element-wise operations (one output element, or record, per granule span) -------------------

// Bytes of output per input element (decode, subtract: F32) or per granule (diff_stats).
Result<PartInstance> elementwise_part(const SplitInstance& w, uint64_t begin, uint64_t end) {
  const auto [e0, e1] = element_range(w, begin, end);
  PartInstance p;
  for (const auto& in : w.inputs) {
    TM_ASSIGN_OR_RETURN(Slice s, element_slice(in, e0, e1));
    p.inputs.push_back(std::move(s));
  }
  p.outputs.push_back({e0 * sizeof(float), (e1 - e0) * sizeof(float), {e1 - e0}});
  p.merged = {false};
  p.attributes = w.attributes;
  return p;
}

Result<PartInstance> diff_stats_part(const SplitInstance& w, uint64_t begin, uint64_t end) {
  TM_ASSIGN_OR_RETURN(PartInstance p, elementwise_part(w, begin, end));
  constexpr uint64_t kRecord = sizeof(TM_DiffStats);
  p.outputs[0] = {begin * kRecord, (end - begin) * kRecord, {(end - begin) * kRecord}};
  const int64_t first = w.int_attribute(TM_ATTR_ELEMENT_OFFSET) + static_cast<int64_t>(begin * kSplitChunkElements);
  std::erase_if(p.attributes, [](const SplitAttribute& a) { return a.name == TM_ATTR_ELEMENT_OFFSET; });
  p.attributes.push_back({TM_ATTR_ELEMENT_OFFSET, first, 0});
  return p;
}

// ---- tm.channel_stats@1 -------------------------------------------------------------------------

// Column sums are a contiguous pairwise tree over bit_ceil(rows) row slots: an aligned block of
// kBlock = bit_ceil(rows) / kChannelBlocks rows is one of its subtrees, so one part per block and
// the tree's upper levels over the blocks give the whole's sums.
constexpr uint64_t kChannelBlocks = 16;

uint64_t channel_block_rows(uint64_t rows) {
  return std::max<uint64_t>(1, std::bit_ceil(std::max<uint64_t>(rows, 1)) / kChannelBlocks);
}

Result<uint64_t> channel_granules(const SplitInstance& w) {
  if (w.inputs.size() != 1 || w.inputs[0].shape.size() != 2 || w.inputs[0].shape[0] < 2) return uint64_t{1};
  const uint64_t rows = w.inputs[0].shape[0];
  const uint64_t block = channel_block_rows(rows);
  return (rows + block - 1) / block;
}

Result<PartInstance> channel_part(const SplitInstance& w, uint64_t begin, uint64_t end) {
  if (end != begin + 1) return Status::Internal(std::string(TM_OP_CHANNEL_STATS) + " parts are one block each");
  const uint64_t rows = w.inputs[0].shape[0], cols = w.inputs[0].shape[1];
  TM_ASSIGN_OR_RETURN(const uint64_t row_bytes, matrix_row_bytes(*from_abi_dtype(w.inputs[0].dtype), cols));
  const uint64_t block = channel_block_rows(rows);
  const uint64_t r0 = begin * block, r1 = std::min(rows, r0 + block);
  constexpr uint64_t kRecord = sizeof(TM_TileStats);
  PartInstance p;
  p.inputs.push_back({r0 * row_bytes, (r1 - r0) * row_bytes, {r1 - r0, cols}});
  p.outputs.push_back({r0 * kRecord, (r1 - r0) * kRecord, {(r1 - r0) * kRecord}});
  p.outputs.push_back({0, cols * kRecord, {cols * kRecord}});
  p.merged = {false, true};
  return p;
}

Status channel_merge(const SplitInstance& w, std::span<const PartResult> parts, std::span<const std::span<std::byte>> outputs) {
  const uint64_t rows = w.inputs[0].shape[0], cols = w.inputs[0].shape[1];
  const uint64_t block = channel_block_rows(rows);
  const uint64_t slots = std::bit_ceil(rows) / block;
  if (outputs.size() != 2 || outputs[1].size() != cols * sizeof(TM_TileStats) || parts.size() > slots) {
    return Status::Internal(std::string(TM_OP_CHANNEL_STATS) + ": the parts do not match the whole");
  }
  std::vector<TM_TileStats> part_cols(parts.size() * cols);
  for (size_t j = 0; j < parts.size(); ++j) {
    if (parts[j].scratch.size() != 2 || parts[j].scratch[1].size() != cols * sizeof(TM_TileStats) ||
        parts[j].begin != j) {
      return Status::Internal(std::string(TM_OP_CHANNEL_STATS) + ": a part's column records are missing");
    }
    std::memcpy(part_cols.data() + j * cols, parts[j].scratch[1].data(), cols * sizeof(TM_TileStats));
  }
  // A short last block's tree is over bit_ceil(its rows) slots: raise it to `block` slots the way
  // the whole's tree does, adding the all-padding sibling (+0.0) once per missing level.
  const uint64_t last_rows = rows - (parts.size() - 1) * block;
  std::vector<double> sum(slots), sq(slots);
  std::vector<TM_TileStats> merged(cols);
  for (uint64_t c = 0; c < cols; ++c) {
    TM_TileStats m = empty_tile_stats();
    std::fill(sum.begin(), sum.end(), 0.0);
    std::fill(sq.begin(), sq.end(), 0.0);
    for (size_t j = 0; j < parts.size(); ++j) {
      const TM_TileStats& s = part_cols[j * cols + c];
      add_counts_and_extremes(m, s);
      double total = s.sum, squares = s.sum_sq;
      if (j + 1 == parts.size()) {
        for (uint64_t width = std::bit_ceil(last_rows); width < block; width *= 2) {
          total = total + 0.0;
          squares = squares + 0.0;
        }
      }
      sum[j] = total;
      sq[j] = squares;
    }
    m.sum = pairwise_sum(sum);
    m.sum_sq = pairwise_sum(sq);
    merged[c] = m;
  }
  std::memcpy(outputs[1].data(), merged.data(), outputs[1].size());
  return Status::Ok();
}

}  // namespace

SplitRule tile_stats_split() {
  return {"", "each part computes whole tile rows of the view; its tiles are the whole's, in place", tile_stats_granules,
          true, tile_stats_part, merge_nothing};
}

SplitRule histogram_split() {
  return {"", "parts count runs of 65536 elements; the counts add (integers: any order is exact)", first_input_granules, true,
          counting_part, merge_counts};
}

SplitRule radix_histogram_split() {
  return {"", "parts count runs of 65536 elements under the same prefixes; counts and classes add (integers)",
          first_input_granules, true, counting_part, merge_counts};
}

SplitRule channel_stats_split() {
  return {"",
          "one part per aligned block of bit_ceil(rows)/16 rows (a subtree of the column tree); row records in place; "
          "column counts add, extremes combine, sums finish the pairwise tree over the blocks (+0.0 padded)",
          channel_granules, false, channel_part, channel_merge};
}

SplitRule diff_stats_split() {
  return {"", "parts take whole 65536-element chunks with element_offset moved along; records in place",
          every_input_granules, true, diff_stats_part, merge_nothing};
}

SplitRule elementwise_split() {
  return {"", "parts take runs of 65536 elements; values in place", every_input_granules, true, elementwise_part,
          merge_nothing};
}

SplitRule never_split(std::string because) { return {std::move(because), "", nullptr, true, nullptr, nullptr}; }

}  // namespace tensormorph::ops
