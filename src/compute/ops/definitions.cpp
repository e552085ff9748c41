// The built-in operations as data: signature, exactness, the CPU reference on an ABI instance, and
// the conformance cases every backend is checked on.
#include "compute/ops/definitions.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <span>
#include <vector>

#include "compute/ops/channel_stats.h"
#include "compute/ops/diff_stats.h"
#include "compute/ops/op_instance.h"
#include "compute/ops/radix_histogram.h"
#include "compute/ops/reference.h"
#include "compute/ops/render_tile.h"
#include "compute/ops/spectrum.h"
#include "compute/ops/top_k.h"
#include "tensormorph/decode.h"

namespace tensormorph::ops {
namespace {

// ---- The references on ABI instances -------------------------------------------------------------

Result<std::span<const std::byte>> host_input(const TensorArgument& t) {
  if (t.arg.nbytes == 0) return std::span<const std::byte>();
  if (t.arg.host_data == nullptr) return Status::InvalidArgument("the CPU reference reads host memory only");
  return std::span(static_cast<const std::byte*>(t.arg.host_data) + t.arg.byte_offset, t.arg.nbytes);
}

Result<std::span<std::byte>> host_output(const TensorArgument& t) {
  if (t.arg.nbytes == 0) return std::span<std::byte>();
  if (t.arg.host_out == nullptr) return Status::InvalidArgument("the CPU reference writes host memory only");
  return std::span(static_cast<std::byte*>(t.arg.host_out) + t.arg.byte_offset, t.arg.nbytes);
}

/// Runs `compute` on an aligned vector of T and copies it out (host outputs need not be aligned).
template <typename T, typename Compute>
Status into_output(std::span<std::byte> out, Compute&& compute) {
  std::vector<T> values(out.size() / sizeof(T));
  TM_RETURN_IF_ERROR(compute(std::span<T>(values)));
  if (!values.empty()) std::memcpy(out.data(), values.data(), values.size() * sizeof(T));
  return Status::Ok();
}

Status decode_on_instance(const TM_OpInstance& instance) {
  TM_ASSIGN_OR_RETURN(const DecodeArgs a, parse_decode(instance));
  TM_ASSIGN_OR_RETURN(const auto in, host_input(a.input));
  TM_ASSIGN_OR_RETURN(const auto out, host_output(a.output));
  return into_output<float>(out, [&](std::span<float> v) { return decode_reference({a.input.dtype, in, a.input.elems}, v); });
}

Status tile_stats_on_instance(const TM_OpInstance& instance) {
  TM_ASSIGN_OR_RETURN(const TileStatsArgs a, parse_tile_stats(instance));
  TM_ASSIGN_OR_RETURN(const auto in, host_input(a.input));
  TM_ASSIGN_OR_RETURN(const auto out, host_output(a.output));
  return into_output<TM_TileStats>(out, [&](std::span<TM_TileStats> v) {
    return tile_stats_reference({a.input.dtype, in, a.rows, a.cols}, a.range, a.tile, v);
  });
}

Status histogram_on_instance(const TM_OpInstance& instance) {
  TM_ASSIGN_OR_RETURN(const HistogramArgs a, parse_histogram(instance));
  TM_ASSIGN_OR_RETURN(const auto in, host_input(a.input));
  TM_ASSIGN_OR_RETURN(const auto out, host_output(a.output));
  return into_output<uint64_t>(out, [&](std::span<uint64_t> v) {
    return histogram_reference({a.input.dtype, in, a.input.elems}, a.lo, a.hi, a.bins, v);
  });
}

Status exact_summary_on_instance(const TM_OpInstance& instance) {
  TM_ASSIGN_OR_RETURN(const ExactSummaryArgs a, parse_exact_summary(instance));
  TM_ASSIGN_OR_RETURN(const auto in, host_input(a.input));
  TM_ASSIGN_OR_RETURN(const auto out, host_output(a.output));
  TM_ExactSummary summary{};
  TM_RETURN_IF_ERROR(exact_summary_reference({a.input.dtype, in, a.input.elems}, &summary));
  std::memcpy(out.data(), &summary, sizeof summary);
  return Status::Ok();
}

Status spectrum_on_instance(const TM_OpInstance& instance) {
  TM_ASSIGN_OR_RETURN(const SpectrumArgs a, parse_spectrum(instance));
  TM_ASSIGN_OR_RETURN(const auto in, host_input(a.input));
  TM_ASSIGN_OR_RETURN(const auto values_out, host_output(a.values));
  TM_ASSIGN_OR_RETURN(const auto bounds_out, host_output(a.bounds));
  std::vector<double> values(a.count), bounds(a.count);
  TM_RETURN_IF_ERROR(compute_spectrum({a.input.dtype, in, a.rows, a.cols}, a.method, values, bounds, 0));
  std::memcpy(values_out.data(), values.data(), values.size() * sizeof(double));
  std::memcpy(bounds_out.data(), bounds.data(), bounds.size() * sizeof(double));
  return Status::Ok();
}

/// Two spectra agree when each value lies within the sum of both results' bounds of the other.
Status spectra_within_bounds(std::span<const std::vector<std::byte>> got, std::span<const std::vector<std::byte>> want) {
  if (got.size() != 2 || want.size() != 2 || got[0].size() != want[0].size() || got[1].size() != want[1].size()) {
    return Status::InvalidArgument("spectrum outputs differ in size");
  }
  const size_t n = want[0].size() / sizeof(double);
  auto at = [](const std::vector<std::byte>& bytes, size_t i) {
    double v;
    std::memcpy(&v, bytes.data() + i * sizeof(double), sizeof v);
    return v;
  };
  for (size_t i = 0; i < n; ++i) {
    const double g = at(got[0], i), w = at(want[0], i), gb = at(got[1], i), wb = at(want[1], i);
    if (!(gb >= 0) || !std::isfinite(gb) || !(std::fabs(g - w) <= gb + wb) || (i > 0 && g > at(got[0], i - 1))) {
      return Status::Internal("value " + std::to_string(i) + " is " + std::to_string(g) + " (bound " + std::to_string(gb) +
                              "), the reference's " + std::to_string(w) + " (bound " + std::to_string(wb) + ")");
    }
  }
  return Status::Ok();
}

Status render_on_instance(const TM_OpInstance& instance) {
  TM_ASSIGN_OR_RETURN(const RenderArgs a, parse_render_tile(instance));
  TM_ASSIGN_OR_RETURN(const auto in, host_input(a.input));
  TM_ASSIGN_OR_RETURN(const auto out, host_output(a.output));
  auto rgba = std::span(reinterpret_cast<uint8_t*>(out.data()), out.size());
  if (a.params.source == RenderSource::kValues) {
    return render_values_reference({a.input.dtype, in, a.rows, a.cols}, a.params, rgba);
  }
  std::vector<TM_TileStats> grid(a.rows * a.cols);
  if (!grid.empty()) std::memcpy(grid.data(), in.data(), grid.size() * sizeof(TM_TileStats));
  return render_stats_reference(grid, a.rows, a.cols, a.params, rgba);
}

Status radix_histogram_on_instance(const TM_OpInstance& instance) {
  TM_ASSIGN_OR_RETURN(const RadixHistogramArgs a, parse_radix_histogram(instance));
  TM_ASSIGN_OR_RETURN(const auto in, host_input(a.input));
  TM_ASSIGN_OR_RETURN(const auto prefix_bytes, host_input(a.prefixes));
  TM_ASSIGN_OR_RETURN(const auto counts, host_output(a.counts));
  TM_ASSIGN_OR_RETURN(const auto classes, host_output(a.classes));
  std::vector<uint64_t> prefixes(a.prefixes.elems);
  if (!prefixes.empty()) std::memcpy(prefixes.data(), prefix_bytes.data(), prefix_bytes.size());
  std::array<uint64_t, kRadixClasses> class_counts{};
  TM_RETURN_IF_ERROR(into_output<uint64_t>(counts, [&](std::span<uint64_t> v) {
    return radix_histogram_reference({a.input.dtype, in, a.input.elems}, a.params, prefixes, v, class_counts);
  }));
  std::memcpy(classes.data(), class_counts.data(), sizeof class_counts);
  return Status::Ok();
}

Status top_k_on_instance(const TM_OpInstance& instance) {
  TM_ASSIGN_OR_RETURN(const TopKArgs a, parse_top_k(instance));
  TM_ASSIGN_OR_RETURN(const auto in, host_input(a.input));
  TM_ASSIGN_OR_RETURN(const auto indices, host_output(a.indices));
  TM_ASSIGN_OR_RETURN(const auto values, host_output(a.values));
  std::vector<uint64_t> index(a.k);
  std::vector<float> value(a.k);
  uint64_t written = 0;
  TM_RETURN_IF_ERROR(top_k_reference({a.input.dtype, in, a.input.elems}, index, value, &written));
  std::memcpy(indices.data(), index.data(), indices.size());
  std::memcpy(values.data(), value.data(), values.size());
  return Status::Ok();
}

Status channel_stats_on_instance(const TM_OpInstance& instance) {
  TM_ASSIGN_OR_RETURN(const ChannelStatsArgs a, parse_channel_stats(instance));
  TM_ASSIGN_OR_RETURN(const auto in, host_input(a.input));
  TM_ASSIGN_OR_RETURN(const auto rows, host_output(a.rows_out));
  TM_ASSIGN_OR_RETURN(const auto cols, host_output(a.cols_out));
  std::vector<TM_TileStats> row_stats(a.rows), col_stats(a.cols);
  TM_RETURN_IF_ERROR(channel_stats_reference({a.input.dtype, in, a.rows, a.cols}, row_stats, col_stats));
  if (!rows.empty()) std::memcpy(rows.data(), row_stats.data(), rows.size());
  if (!cols.empty()) std::memcpy(cols.data(), col_stats.data(), cols.size());
  return Status::Ok();
}

Status diff_stats_on_instance(const TM_OpInstance& instance) {
  TM_ASSIGN_OR_RETURN(const DiffArgs a, parse_diff_stats(instance));
  TM_ASSIGN_OR_RETURN(const auto in_a, host_input(a.a));
  TM_ASSIGN_OR_RETURN(const auto in_b, host_input(a.b));
  TM_ASSIGN_OR_RETURN(const auto out, host_output(a.output));
  return into_output<TM_DiffStats>(out, [&](std::span<TM_DiffStats> v) {
    return diff_stats_reference({{a.a.dtype, in_a, a.a.elems}, a.a_offset}, {{a.b.dtype, in_b, a.b.elems}, a.b_offset},
                                a.element_offset, v);
  });
}

Status subtract_on_instance(const TM_OpInstance& instance) {
  TM_ASSIGN_OR_RETURN(const DiffArgs a, parse_subtract(instance));
  TM_ASSIGN_OR_RETURN(const auto in_a, host_input(a.a));
  TM_ASSIGN_OR_RETURN(const auto in_b, host_input(a.b));
  TM_ASSIGN_OR_RETURN(const auto out, host_output(a.output));
  return into_output<float>(out, [&](std::span<float> v) {
    return subtract_reference({{a.a.dtype, in_a, a.a.elems}, a.a_offset}, {{a.b.dtype, in_b, a.b.elems}, a.b_offset}, v);
  });
}

// ---- The definitions -----------------------------------------------------------------------------

constexpr double kMaxI64 = 9.2233720368547758e18;

InputSpec decodable_input(std::string shape_rule, uint32_t min_rank, uint32_t max_rank) {
  return {"input", decodable_dtypes(), "any decodable", min_rank, max_rank, std::move(shape_rule)};
}

AttributeSpec int_attribute(const char* name, double min, double max, std::string description) {
  return {name, AttributeKind::kInt, false, 0, min, max, std::move(description)};
}

AttributeSpec float_attribute(const char* name, std::string description) {
  return {name, AttributeKind::kFloat, false, 0, -1.7976931348623157e308, 1.7976931348623157e308, std::move(description)};
}

// `spec`, whose range grew in ABI minor `minor`: before it, values went up to `max_before`.
AttributeSpec widened(AttributeSpec spec, uint32_t minor, double max_before) {
  spec.widened_in_minor = minor;
  spec.max_before = max_before;
  return spec;
}

CaseAttribute ci(const char* name, int64_t v) { return {name, v, 0}; }
CaseAttribute cf(const char* name, double v) { return {name, 0, v}; }

OpDefinition decode_definition() {
  OpDefinition d;
  d.id = TM_OP_DECODE;
  d.summary = "Decode a tensor of any decodable dtype to float32";
  d.inputs = {decodable_input("contiguous elements, a whole number of blocks", 0, 8)};
  d.outputs = {{"output", DType::kF32, "F32, the same element count as the input, any shape", OutputSize::kDetermined,
                "the decoded values"}};
  d.exactness_definition =
      "bitwise equal to the CPU reference decoder (which equals ggml's to_float for ggml types)";
  d.reference = decode_on_instance;
  for (const uint64_t elems : {uint64_t{256} * 67, uint64_t{256} * 1024}) {
    d.cases.push_back({"x" + std::to_string(elems), {{std::nullopt, {elems}}}, {}, {{DType::kF32, {elems}}}, true});
  }
  d.split = elementwise_split();
  return d;
}

OpDefinition tile_stats_definition() {
  OpDefinition d;
  d.id = TM_OP_TILE_STATS;
  d.summary = "Statistics of every T x T tile of a 2-D view";
  d.inputs = {decodable_input("[rows, cols], contiguous row-major; blocks never cross rows", 2, 2)};
  d.attributes = {
      int_attribute(TM_ATTR_ROW_BEGIN, 0, kMaxI64, "first row of the view"),
      int_attribute(TM_ATTR_ROW_END, 0, kMaxI64, "one past the last row of the view (<= rows)"),
      int_attribute(TM_ATTR_COL_BEGIN, 0, kMaxI64, "first column of the view"),
      int_attribute(TM_ATTR_COL_END, 0, kMaxI64, "one past the last column of the view (<= cols)"),
      int_attribute(TM_ATTR_TILE, kMinTile, kMaxTile, "tile size T, a power of two in [8, 4096]"),
  };
  d.outputs = {{"stats", DType::kU8, "U8[tiles * sizeof(TM_TileStats)]", OutputSize::kDetermined,
                "TM_TileStats per tile of the view, row-major over tiles (edge tiles are ragged)"}};
  d.exactness_definition =
      "counts, min, max, absmax exact (min orders -0.0 below +0.0, max +0.0 above -0.0); sum, sum_sq "
      "bitwise equal to the canonical order: per row halving_sum over T float64 slots (+0.0 padded), "
      "per tile halving_sum over T row slots (docs/COMPUTE.md)";
  d.reference = tile_stats_on_instance;
  constexpr uint64_t kRows = 300, kCols = 512;
  struct View {
    ViewRange range;
    uint32_t tile;
  };
  // Every tile size; views with ragged edges, unaligned starts (of 16-bit words too), a single row,
  // an empty column range; a last tile row of 14 rows; Q4_K's integer sums over two super-blocks per
  // row, from the second one, and with a ragged edge.
  const View views[] = {
      {{0, kRows, 0, kCols}, 8},    {{0, kRows, 0, kCols}, 16},    {{0, kRows, 0, kCols}, 32},
      {{0, kRows, 0, kCols}, 64},   {{0, kRows, 0, kCols}, 128},   {{0, kRows, 0, kCols}, 256},
      {{0, kRows, 0, kCols}, 4096}, {{3, 290, 4, 500}, 64},        {{3, 290, 5, 501}, 32},
      {{17, 18, 256, 512}, 8},      {{0, kRows, 100, 100}, 16},    {{0, 270, 0, kCols}, 256},
      {{0, kRows, 0, kCols}, 512},  {{0, kRows, 256, kCols}, 256}, {{0, kRows, 0, 500}, 256},
      {{3, 290, 5, 501}, 128},      {{0, kRows, 0, kCols}, 1024},
  };
  for (const View& v : views) {
    const uint64_t tiles = tile_grid(v.range, v.tile).count();
    d.cases.push_back({"view [" + std::to_string(v.range.row_begin) + ", " + std::to_string(v.range.row_end) +
                           ") x [" + std::to_string(v.range.col_begin) + ", " + std::to_string(v.range.col_end) +
                           ") tile " + std::to_string(v.tile),
                       {{std::nullopt, {kRows, kCols}}},
                       {ci(TM_ATTR_ROW_BEGIN, static_cast<int64_t>(v.range.row_begin)),
                        ci(TM_ATTR_ROW_END, static_cast<int64_t>(v.range.row_end)),
                        ci(TM_ATTR_COL_BEGIN, static_cast<int64_t>(v.range.col_begin)),
                        ci(TM_ATTR_COL_END, static_cast<int64_t>(v.range.col_end)), ci(TM_ATTR_TILE, v.tile)},
                       {{DType::kU8, {tiles * sizeof(TM_TileStats)}}},
                       true});
  }
  d.split = tile_stats_split();
  return d;
}

OpDefinition histogram_definition() {
  OpDefinition d;
  d.id = TM_OP_HISTOGRAM;
  d.summary = "Equal-width histogram of the decoded values";
  d.inputs = {decodable_input("contiguous elements, a whole number of blocks", 0, 8)};
  d.attributes = {
      float_attribute(TM_ATTR_LO, "lower edge of the first bin (finite, < hi)"),
      float_attribute(TM_ATTR_HI, "upper edge of the last bin (finite)"),
      int_attribute(TM_ATTR_BINS, 1, static_cast<double>(kMaxHistogramBins), "number of bins"),
  };
  d.outputs = {{"counts", DType::kU64, "U64[bins + 3]", OutputSize::kDetermined,
                "the bins, then below-lo, above-hi and NaN counts"}};
  d.exactness_definition =
      "exact counts; bin = floor((v - lo) * (bins / (hi - lo))) in float64, clamped to bins - 1 for v <= hi";
  d.reference = histogram_on_instance;
  struct Bins {
    double lo, hi;
    uint64_t bins;
  };
  for (const Bins& b : {Bins{-0.05, 0.05, 64}, Bins{-0.001, 0.002, 20000}, Bins{0.0, 1e-3, 7}}) {
    d.cases.push_back({std::to_string(b.bins) + " bins", {{std::nullopt, {256 * 300}}},
                       {cf(TM_ATTR_LO, b.lo), cf(TM_ATTR_HI, b.hi), ci(TM_ATTR_BINS, static_cast<int64_t>(b.bins))},
                       {{DType::kU64, {b.bins + 3}}}, true});
  }
  d.split = histogram_split();
  return d;
}

OpDefinition exact_summary_definition() {
  OpDefinition d;
  d.id = TM_OP_EXACT_SUMMARY;
  d.summary = "Statistics of a whole F64 or 32/64-bit integer tensor in its own domain";
  d.inputs = {{"input", {DType::kF64, DType::kI32, DType::kU32, DType::kI64, DType::kU64}, "F64|I32|U32|I64|U64", 0, 8,
               "contiguous elements"}};
  d.outputs = {{"summary", DType::kU8, "U8[sizeof(TM_ExactSummary)]", OutputSize::kDetermined, "one TM_ExactSummary"}};
  d.exactness_definition =
      "integers: counts, extremes and the 128-bit sum exact; mean = double(sum) / n; std = sqrt(double(n * "
      "sum(x^2) - sum(x)^2)) / n with the numerator exact in 256 bits. F64: counts and extremes exact (-0.0 below "
      "+0.0); with e = ilogb(absmax), mean and std from Neumaier-compensated sums, in element order, of x * 2^-e "
      "and of (x * 2^-e - mean * 2^-e)^2 (docs/COMPUTE.md)";
  d.reference = exact_summary_on_instance;
  for (const uint64_t elems : {uint64_t{1}, uint64_t{4099}}) {
    d.cases.push_back({"x" + std::to_string(elems), {{std::nullopt, {elems}}}, {},
                       {{DType::kU8, {sizeof(TM_ExactSummary)}}}, true});
  }
  d.split = never_split("its float64 sums run in one canonical order over the whole tensor");
  return d;
}

std::vector<AttributeSpec> render_attributes() {
  return {
      int_attribute(TM_ATTR_SOURCE, TM_RENDER_SOURCE_VALUES, TM_RENDER_SOURCE_TILE_STATS,
                    "0: values, 1: a grid of tile statistics"),
      int_attribute(TM_ATTR_ROW_BEGIN, 0, kMaxI64, "first element row (values) or grid row (statistics) of the tile"),
      int_attribute(TM_ATTR_COL_BEGIN, 0, kMaxI64, "first element column (values) or grid column (statistics)"),
      int_attribute(TM_ATTR_CELL, 1, TM_RENDER_MAX_CELL, "elements per pixel side, a power of two (1 for statistics)"),
      int_attribute(TM_ATTR_MAGNIFY, 1, TM_RENDER_MAX_MAGNIFY, "pixels per element side, a power of two (only with cell 1)"),
      int_attribute(TM_ATTR_STAT, TM_PIXEL_STAT_MEAN, TM_PIXEL_STAT_NON_FINITE,
                    "0 mean, 1 absmax, 2 min, 3 max, 4 envelope (signed extreme), 5 std, 6 non-finite mask"),
      widened(int_attribute(TM_ATTR_COLORMAP, 0, TM_COLORMAP_MAX,
                            "scale | palette << 4: scale 0 diverging around zero, 1 sequential, 2 log magnitude; "
                            "palette 0 the scale's own table, 1-5 sequential (viridis, cividis, magma, inferno, "
                            "greys), 6-7 diverging (coolwarm, rdbu), of the scale's kind"),
              4, TM_COLORMAP_LOG_MAGNITUDE),
      float_attribute(TM_ATTR_LO, "lower end of the colour range (log: 0 < lo)"),
      float_attribute(TM_ATTR_HI, "upper end of the colour range (> lo)"),
  };
}

std::vector<ConformanceCase> render_cases() {
  std::vector<ConformanceCase> cases;
  constexpr uint64_t kRows = 700, kCols = 768;  // whole blocks of every ggml type
  struct Values {
    uint64_t cell, row, col;
    int64_t stat;
    int64_t colormap = TM_COLORMAP_DIVERGING;
  };
  for (const Values& v : {Values{8, 0, 0, TM_PIXEL_STAT_ENVELOPE}, Values{16, 64, 96, TM_PIXEL_STAT_MEAN},
                          Values{32, 0, 0, TM_PIXEL_STAT_STD}, Values{8, 512, 512, TM_PIXEL_STAT_NON_FINITE},
                          Values{4, 0, 0, TM_PIXEL_STAT_MEAN},
                          Values{8, 64, 0, TM_PIXEL_STAT_MEAN, TM_COLORMAP(TM_COLORMAP_SEQUENTIAL, TM_PALETTE_CIVIDIS)}}) {
    const std::string map = v.colormap != TM_COLORMAP_DIVERGING ? ", colormap " + std::to_string(v.colormap) : "";
    cases.push_back({"values cell " + std::to_string(v.cell) + " at (" + std::to_string(v.row) + ", " +
                         std::to_string(v.col) + ")" + map,
                     {{std::nullopt, {kRows, kCols}}},
                     {ci(TM_ATTR_SOURCE, TM_RENDER_SOURCE_VALUES), ci(TM_ATTR_ROW_BEGIN, static_cast<int64_t>(v.row)),
                      ci(TM_ATTR_COL_BEGIN, static_cast<int64_t>(v.col)), ci(TM_ATTR_CELL, static_cast<int64_t>(v.cell)),
                      ci(TM_ATTR_MAGNIFY, 1), ci(TM_ATTR_STAT, v.stat), ci(TM_ATTR_COLORMAP, v.colormap),
                      cf(TM_ATTR_LO, -0.05), cf(TM_ATTR_HI, 0.05)},
                     {{DType::kU8, {kRenderTilePixels, kRenderTilePixels, 4}}},
                     true});
  }
  struct Stats {
    uint64_t row, col;
    int64_t magnify, stat, colormap;
    double lo, hi;
  };
  // The scales' own tables, then every named palette on a scale of its kind.
  constexpr int64_t kSeq = TM_COLORMAP_SEQUENTIAL, kLog = TM_COLORMAP_LOG_MAGNITUDE, kDiv = TM_COLORMAP_DIVERGING;
  for (const Stats& s : {Stats{0, 0, 1, TM_PIXEL_STAT_MEAN, kDiv, -0.05, 0.05},
                         Stats{3, 5, 4, TM_PIXEL_STAT_ABSMAX, kLog, 1e-4, 1.0},
                         Stats{0, 0, 2, TM_PIXEL_STAT_STD, kSeq, 0.0, 0.05},
                         Stats{0, 0, 1, TM_PIXEL_STAT_MEAN, TM_COLORMAP(kSeq, TM_PALETTE_VIRIDIS), -0.05, 0.05},
                         Stats{0, 0, 1, TM_PIXEL_STAT_MAX, TM_COLORMAP(kSeq, TM_PALETTE_CIVIDIS), -0.05, 0.05},
                         Stats{3, 5, 4, TM_PIXEL_STAT_ABSMAX, TM_COLORMAP(kLog, TM_PALETTE_MAGMA), 1e-4, 1.0},
                         Stats{3, 5, 4, TM_PIXEL_STAT_ABSMAX, TM_COLORMAP(kLog, TM_PALETTE_INFERNO), 1e-4, 1.0},
                         Stats{0, 0, 2, TM_PIXEL_STAT_STD, TM_COLORMAP(kSeq, TM_PALETTE_GREYS), 0.0, 0.05},
                         Stats{0, 0, 1, TM_PIXEL_STAT_MEAN, TM_COLORMAP(kDiv, TM_PALETTE_COOLWARM), -0.05, 0.05},
                         Stats{0, 0, 1, TM_PIXEL_STAT_ENVELOPE, TM_COLORMAP(kDiv, TM_PALETTE_RDBU), -0.05, 0.05}}) {
    cases.push_back({"statistics magnify " + std::to_string(s.magnify) + " at (" + std::to_string(s.row) + ", " +
                         std::to_string(s.col) + "), colormap " + std::to_string(s.colormap),
                     {{DType::kU8, {90, 300, sizeof(TM_TileStats)}}},
                     {ci(TM_ATTR_SOURCE, TM_RENDER_SOURCE_TILE_STATS), ci(TM_ATTR_ROW_BEGIN, static_cast<int64_t>(s.row)),
                      ci(TM_ATTR_COL_BEGIN, static_cast<int64_t>(s.col)), ci(TM_ATTR_CELL, 1),
                      ci(TM_ATTR_MAGNIFY, s.magnify), ci(TM_ATTR_STAT, s.stat), ci(TM_ATTR_COLORMAP, s.colormap),
                      cf(TM_ATTR_LO, s.lo), cf(TM_ATTR_HI, s.hi)},
                     {{DType::kU8, {kRenderTilePixels, kRenderTilePixels, 4}}},
                     true});
  }
  return cases;
}

OpDefinition render_definition() {
  OpDefinition d;
  d.id = TM_OP_RENDER_TILE;
  d.summary = "A 256 x 256 RGBA heatmap tile of a 2-D view, from values or from tile statistics";
  std::vector<DType> dtypes = decodable_dtypes();
  d.inputs = {{"input", dtypes, "any decodable (values) | U8 (statistics)", 2, 3,
               "the matrix [rows, cols] (source 0) or a grid of TM_TileStats as U8[grid_rows, grid_cols, 72] (source 1)"}};
  d.attributes = render_attributes();
  d.outputs = {{"rgba", DType::kU8, "U8[256, 256, 4]", OutputSize::kDetermined,
                "row-major RGBA pixels; outside the matrix transparent"}};
  d.exactness_definition =
      "bitwise equal to the CPU reference: each block's statistics as tm.tile_stats@1 with T = cell, then the "
      "documented float64 colour mapping (docs/VIEWER.md)";
  d.ladder = {{TM_OP_RENDER_TILE_SAMPLED, "each pixel from the first row of its block only (1/cell of its elements)",
               "approximate: min, max, absmax and non-finite elements in the block's other rows may be missed"}};
  d.reference = render_on_instance;
  d.cases = render_cases();
  d.split = never_split("one tile of pixels is small; parts would cost more than they save");
  return d;
}

OpDefinition sampled_definition() {
  OpDefinition d = render_definition();
  d.id = TM_OP_RENDER_TILE_SAMPLED;
  d.summary = "tm.render_tile@1 reading only the first row of each block (approximate, needs consent)";
  d.exactness_definition = "approximate: a block's statistics are those of its first row";
  d.ladder.clear();
  d.split = never_split("one tile of pixels is small; parts would cost more than they save");
  return d;
}

OpDefinition radix_histogram_definition() {
  OpDefinition d;
  d.id = TM_OP_RADIX_HISTOGRAM;
  d.summary = "Counts of one digit of the finite values' order keys, under up to 16 prefixes";
  d.inputs = {decodable_input("contiguous elements, a whole number of blocks", 0, 8),
              {"prefixes", {DType::kU64}, "U64", 1, 1,
               "U64[P], P in [0, 16]: the key bits above the digit of each histogram (P = 0: one, of all)"}};
  d.attributes = {
      int_attribute(TM_ATTR_KEY, TM_RADIX_KEY_VALUE, TM_RADIX_KEY_DEVIATION,
                    "0 value order (32 bits), 1 magnitude (32 bits), 2 |double(x) - center| (64 bits)"),
      int_attribute(TM_ATTR_SHIFT, 0, 63, "the digit's lowest key bit (shift + bits <= the key's width)"),
      int_attribute(TM_ATTR_BITS, 1, TM_RADIX_MAX_BITS, "the digit's width"),
      {TM_ATTR_CENTER, AttributeKind::kFloat, true, 0, -1.7976931348623157e308, 1.7976931348623157e308,
       "the centre of the deviation key (finite; 0 for the other keys)"},
  };
  d.outputs = {{"counts", DType::kU64, "U64[max(P, 1) * 2^bits]", OutputSize::kDetermined,
                "per prefix, the finite elements under it with each digit value"},
               {"classes", DType::kU64, "U64[4]", OutputSize::kDetermined, "finite, NaN, +Inf and -Inf elements"}};
  d.exactness_definition = "exact integer counts of the keys of docs/COMPUTE.md#order-statistics";
  d.reference = radix_histogram_on_instance;
  constexpr uint64_t kElems = 256 * 300;
  struct Case {
    const char* label;
    RadixKey key;
    uint32_t shift, bits;
    double center;
    std::vector<uint64_t> prefixes;
  };
  // Prefixes where the test's values are dense: keys of typical weights of either sign, and zero.
  std::vector<uint64_t> value_top, magnitude_high, deviation_top;
  for (const float m : {1e-4f, 5e-4f, 1e-3f, 2e-3f, 5e-3f, 0.01f, 0.02f, 0.03f}) {
    value_top.push_back(value_order_key(m) >> 16);
    value_top.push_back(value_order_key(-m) >> 16);
    magnitude_high.push_back(magnitude_key(m) >> 8);
    deviation_top.push_back(deviation_key(m, 0.0) >> 48);
  }
  value_top.resize(14);
  value_top.push_back(value_order_key(0.0f) >> 16);
  value_top.push_back(value_order_key(-0.0f) >> 16);
  const Case cases[] = {
      {"value key, top digit", RadixKey::kValue, 16, 16, 0, {}},
      {"magnitude key, top digit", RadixKey::kMagnitude, 16, 16, 0, {}},
      {"value key, low digit under 16 prefixes", RadixKey::kValue, 0, 16, 0, value_top},
      {"value key, 11-bit digit", RadixKey::kValue, 21, 11, 0, {}},
      {"magnitude key, 8-bit digit under 8 prefixes", RadixKey::kMagnitude, 0, 8, 0, magnitude_high},
      {"deviation key, top digit", RadixKey::kDeviation, 48, 16, 1e-3, {}},
      {"deviation key, second digit under 8 prefixes", RadixKey::kDeviation, 32, 16, -3e-3, deviation_top},
  };
  for (const Case& c : cases) {
    const uint64_t p = c.prefixes.size();
    d.cases.push_back({c.label,
                       {{std::nullopt, {kElems}}, {DType::kU64, {p}, c.prefixes}},
                       {ci(TM_ATTR_KEY, static_cast<int64_t>(c.key)), ci(TM_ATTR_SHIFT, c.shift),
                        ci(TM_ATTR_BITS, c.bits), cf(TM_ATTR_CENTER, c.center)},
                       {{DType::kU64, {std::max<uint64_t>(p, 1) << c.bits}}, {DType::kU64, {kRadixClasses}}},
                       true});
  }
  d.split = radix_histogram_split();
  return d;
}

OpDefinition top_k_definition() {
  OpDefinition d;
  d.id = TM_OP_TOP_K;
  d.summary = "The k finite elements of largest magnitude, with their positions";
  d.inputs = {decodable_input("contiguous elements, a whole number of blocks", 0, 8)};
  d.attributes = {int_attribute(TM_ATTR_K, 1, TM_TOP_K_MAX, "how many elements")};
  d.outputs = {{"indices", DType::kU64, "U64[k]", OutputSize::kDataDependent,
                "flat indices of min(k, finite elements) elements, then UINT64_MAX"},
               {"values", DType::kF32, "F32[k]", OutputSize::kDataDependent,
                "their values, then the quiet NaN 0x7fc00000"}};
  d.exactness_definition =
      "bitwise: the elements ordered by |value| descending (the bits of |x|), then by index ascending";
  d.reference = top_k_on_instance;
  constexpr uint64_t kElems = 256 * 300;
  for (const uint64_t k : {uint64_t{1}, uint64_t{100}, uint64_t{4096}, kElems + 100}) {
    d.cases.push_back({"k " + std::to_string(k), {{std::nullopt, {kElems}}}, {ci(TM_ATTR_K, static_cast<int64_t>(k))},
                       {{DType::kU64, {k}}, {DType::kF32, {k}}}, true});
  }
  d.split = never_split("its output is data-dependent: merging parts' candidates is not implemented");
  return d;
}

OpDefinition spectrum_definition(SpectrumMethod method) {
  OpDefinition d;
  d.id = spectrum_op_id(method);
  d.inputs = {decodable_input("[rows, cols], contiguous row-major, every value finite; blocks never cross rows", 2, 2)};
  const bool randomized = method == SpectrumMethod::kRandomized;
  const std::string count = randomized ? "k" : "min(rows, cols)";
  d.outputs = {{"values", DType::kF64, "F64[" + count + "]", OutputSize::kDetermined, "singular values, descending"},
               {"bounds", DType::kF64, "F64[" + count + "]", OutputSize::kDetermined, "each value's absolute error bound"}};
  switch (method) {
    case SpectrumMethod::kSvd:
      d.summary = "Singular values of a matrix in float64 by a backward-stable SVD";
      d.exactness_definition =
          "bounded: |s_i - sigma_i| <= bounds[i]; a backward-stable SVD's bound c eps max(rows, cols) s_1";
      break;
    case SpectrumMethod::kGram:
      d.summary = "Singular values from the eigenvalues of the float64 Gram matrix of the smaller side";
      d.exactness_definition =
          "bounded: |s_i - sigma_i| <= bounds[i] = min(sqrt(D), D / s_i), D = eps (max(rows, cols) ||A||_F^2 + c "
          "min(rows, cols) s_1^2): as the SVD's for the large values, weaker for the small ones";
      break;
    case SpectrumMethod::kRandomized:
      d.summary = "The k largest singular values by a randomized range finder";
      d.attributes = {int_attribute(TM_ATTR_K, 1, static_cast<int64_t>(kSpectrumMaxK), "how many singular values, at most min(rows, cols)")};
      d.exactness_definition =
          "approximate: s_i <= sigma_i <= s_i + bounds[i], bounds[i] = ||A - Q Q^T A||_F (a posteriori) plus rounding";
      break;
  }
  d.reference = spectrum_on_instance;
  d.within_bounds = spectra_within_bounds;
  const std::vector<std::vector<uint64_t>> shapes = {{40, 256}, {300, 256}, {8, 512}};
  for (const auto& shape : shapes) {
    const uint64_t r = std::min(shape[0], shape[1]);
    const uint64_t k = randomized ? std::min<uint64_t>(r, 12) : r;
    std::vector<CaseAttribute> attrs;
    if (randomized) attrs.push_back(ci(TM_ATTR_K, static_cast<int64_t>(k)));
    d.cases.push_back({std::to_string(shape[0]) + " x " + std::to_string(shape[1]), {{std::nullopt, shape}}, attrs,
                       {{DType::kF64, {k}}, {DType::kF64, {k}}}, false});
    d.cases.back().finite_only = true;
  }
  d.split = never_split("singular values of parts do not combine into the whole's");
  return d;
}

OpDefinition channel_stats_definition() {
  OpDefinition d;
  d.id = TM_OP_CHANNEL_STATS;
  d.summary = "Statistics of every row and every column of a matrix";
  d.inputs = {decodable_input("[rows, cols], contiguous row-major; blocks never cross rows", 2, 2)};
  d.outputs = {{"rows", DType::kU8, "U8[rows * sizeof(TM_TileStats)]", OutputSize::kDetermined, "one TM_TileStats per row"},
               {"columns", DType::kU8, "U8[cols * sizeof(TM_TileStats)]", OutputSize::kDetermined,
                "one TM_TileStats per column"}};
  d.exactness_definition =
      "counts, min, max, absmax exact (-0.0 below +0.0); row sums the halving tree over bit_ceil(cols) slots, column "
      "sums the contiguous pairwise tree over bit_ceil(rows) row slots, +0.0 padded (docs/COMPUTE.md)";
  d.reference = channel_stats_on_instance;
  for (const auto& [rows, cols] : {std::pair<uint64_t, uint64_t>{300, 512}, {1, 768}, {257, 256}, {64, 1024}}) {
    d.cases.push_back({std::to_string(rows) + " x " + std::to_string(cols), {{std::nullopt, {rows, cols}}}, {},
                       {{DType::kU8, {rows * sizeof(TM_TileStats)}}, {DType::kU8, {cols * sizeof(TM_TileStats)}}},
                       true});
  }
  d.split = channel_stats_split();
  return d;
}

AttributeSpec offset_attribute(const char* name, const char* side) {
  return {name, AttributeKind::kFloat, true, 0, -3.4028234663852886e38, 3.4028234663852886e38,
          std::string("added to ") + side + "'s decoded values as the float32 sum v + (float)offset when non-zero"};
}

std::vector<InputSpec> diff_inputs() {
  return {{"a", decodable_dtypes(), "any decodable", 0, 8, "contiguous elements, a whole number of blocks"},
          {"b", decodable_dtypes(), "any decodable", 0, 8,
           "contiguous elements, a whole number of blocks, as many as a (any shape, any dtype)"}};
}

struct DiffCase {
  const char* label;
  std::optional<DType> a, b;  // b nullopt: a's dtype
  uint64_t elems;
  ConformanceCase::LaterInput fill;
  double a_offset = 0, b_offset = 0;
  int64_t element_offset = 0;
};

std::vector<DiffCase> diff_cases() {
  using L = ConformanceCase::LaterInput;
  constexpr uint64_t kTwoChunks = 256 * 300;                 // one whole chunk and a ragged one
  constexpr uint64_t kSeveral = 3 * kDiffChunk + 256 * 7;    // three whole chunks and a ragged one
  return {
      {"two chunks, each side its own data", std::nullopt, std::nullopt, kTwoChunks, L::kOwnData},
      {"identical inputs (a byte copy)", std::nullopt, std::nullopt, kTwoChunks, L::kCopyOfFirst},
      {"B the values of A re-encoded as BF16", std::nullopt, DType::kBF16, kTwoChunks, L::kFirstReencoded},
      {"B the values of A re-encoded as F32 (equal values)", std::nullopt, DType::kF32, kTwoChunks, L::kFirstReencoded},
      {"B the values of A quantized to Q8_0", std::nullopt, DType::kQ8_0, kTwoChunks, L::kFirstReencoded},
      {"element_offset 5 chunks", std::nullopt, std::nullopt, kTwoChunks, L::kFirstReencoded, 0, 0, 5 * 65536},
      {"F32 vs BF16, several chunks, ragged last", DType::kF32, DType::kBF16, kSeveral, L::kFirstReencoded},
      {"F16 vs Q8_0", DType::kF16, DType::kQ8_0, kTwoChunks, L::kFirstReencoded},
      {"Q4_K vs F32", DType::kQ4_K, DType::kF32, kSeveral, L::kOwnData},
      {"Q4_K vs Q6_K", DType::kQ4_K, DType::kQ6_K, kTwoChunks, L::kFirstReencoded},
      {"BF16 vs F32 with a_offset 1 (Gemma's norm)", DType::kBF16, DType::kF32, kTwoChunks, L::kFirstReencoded, 1.0},
      {"F32 offsets on both sides", DType::kF32, DType::kF16, kTwoChunks, L::kFirstReencoded, -0.25, 0.0078125, 3},
      {"F32, 100 elements (fewer than the lanes)", DType::kF32, DType::kF32, 100, L::kOwnData},
      {"F32 vs F16, 1000 elements (not a multiple of 256)", DType::kF32, DType::kF16, 1000, L::kFirstReencoded},
      {"BF16, 1 element, identical", DType::kBF16, DType::kBF16, 1, L::kCopyOfFirst},
      {"F8_E4M3 vs F32", DType::kF8E4M3, DType::kF32, 70001, L::kOwnData},
      {"empty", DType::kF32, DType::kBF16, 0, L::kOwnData},
  };
}

ConformanceCase diff_case(const DiffCase& c, bool stats) {
  ConformanceCase cc;
  cc.label = c.label;
  cc.inputs = {{c.a, {c.elems}}, {c.b, {c.elems}}};
  if (c.a_offset != 0) cc.attributes.push_back(cf(TM_ATTR_A_OFFSET, c.a_offset));
  if (c.b_offset != 0) cc.attributes.push_back(cf(TM_ATTR_B_OFFSET, c.b_offset));
  if (stats && c.element_offset != 0) cc.attributes.push_back(ci(TM_ATTR_ELEMENT_OFFSET, c.element_offset));
  const uint64_t chunks = (c.elems + kDiffChunk - 1) / kDiffChunk;
  cc.outputs = {stats ? CaseTensor{DType::kU8, {chunks * sizeof(TM_DiffStats)}} : CaseTensor{DType::kF32, {c.elems}}};
  cc.with_non_finite = true;
  cc.later_inputs = c.fill;
  return cc;
}

OpDefinition diff_stats_definition() {
  OpDefinition d;
  d.id = TM_OP_DIFF_STATS;
  d.summary = "Statistics of the differences of two tensors of one element count, one record per 65536 elements";
  d.inputs = diff_inputs();
  d.attributes = {offset_attribute(TM_ATTR_A_OFFSET, "a"), offset_attribute(TM_ATTR_B_OFFSET, "b"),
                  {TM_ATTR_ELEMENT_OFFSET, AttributeKind::kInt, true, 0, 0, kMaxI64,
                   "the flat index of a's first element in the whole tensor (reported indices are global)"}};
  d.outputs = {{"stats", DType::kU8, "U8[ceil(n / 65536) * sizeof(TM_DiffStats)]", OutputSize::kDetermined,
                "one TM_DiffStats per chunk of 65536 elements from a's start, the last possibly partial"}};
  d.exactness_definition =
      "a, b the decoded float32 values after the offsets (v + (float)offset in float32); counts exact; over the pairs "
      "both finite, d = double(a) - double(b) and the terms d, d*d, a*a, b*b, a*b in float64 without FMA; in a chunk, "
      "lane l in [0, 256) adds from +0.0 the terms of its elements 256 s + l, s ascending, then the lanes combine by "
      "the halving tree (h = 128 .. 1: lane[l] += lane[l + h]); the maximum is fabs(d), ties to the lowest index "
      "(docs/COMPUTE.md#tmdiff_stats1)";
  d.reference = diff_stats_on_instance;
  for (const DiffCase& c : diff_cases()) d.cases.push_back(diff_case(c, true));
  d.split = diff_stats_split();
  return d;
}

OpDefinition subtract_definition() {
  OpDefinition d;
  d.id = TM_OP_SUBTRACT;
  d.summary = "The float32 differences a - b of two tensors of one element count";
  d.inputs = diff_inputs();
  d.attributes = {offset_attribute(TM_ATTR_A_OFFSET, "a"), offset_attribute(TM_ATTR_B_OFFSET, "b")};
  d.outputs = {{"difference", DType::kF32, "F32[n], any shape", OutputSize::kDetermined,
                "a - b in float32 after the offsets; every NaN as 0x7fc00000"}};
  d.exactness_definition =
      "bitwise: the IEEE float32 difference of the decoded values after the offsets (each v + (float)offset in "
      "float32), every NaN result written as the quiet NaN 0x7fc00000";
  d.reference = subtract_on_instance;
  for (const DiffCase& c : diff_cases()) {
    if (c.element_offset != 0) continue;  // diff_stats only
    d.cases.push_back(diff_case(c, false));
  }
  d.split = elementwise_split();
  return d;
}

}  // namespace

const std::vector<DType>& decodable_dtypes() {
  static const std::vector<DType> dtypes = [] {
    std::vector<DType> v;
    for (int d = 0; d < static_cast<int>(DType::kCount); ++d) {
      if (dtype_decodable(static_cast<DType>(d))) v.push_back(static_cast<DType>(d));
    }
    return v;
  }();
  return dtypes;
}

std::span<const OpDefinition> builtin_definitions() {
  static const std::vector<OpDefinition> definitions = [] {
    std::vector<OpDefinition> v = {decode_definition(),     tile_stats_definition(), histogram_definition(),
                                   exact_summary_definition(), render_definition(), sampled_definition(),
                                   radix_histogram_definition(), top_k_definition(),
                                   channel_stats_definition(), diff_stats_definition(), subtract_definition(),
                                   spectrum_definition(SpectrumMethod::kSvd), spectrum_definition(SpectrumMethod::kGram),
                                   spectrum_definition(SpectrumMethod::kRandomized)};
    std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
    return v;
  }();
  return definitions;
}

const OpDefinition* find_builtin_definition(std::string_view id) {
  for (const OpDefinition& d : builtin_definitions()) {
    if (d.id == id) return &d;
  }
  return nullptr;
}

}  // namespace tensormorph::ops
