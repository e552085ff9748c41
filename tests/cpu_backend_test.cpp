// Tests of the core operations' reference implementations (against hand-computed answers) and of
// the CPU backend, called through its TM_PluginApi table, against the references bit for bit.
#include <gtest/gtest.h>

#include <bit>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_calibration.h"
#include "backends/cpu/cpu_device.h"
#include "backends/cpu/cpu_dispatch.h"
#include "backends/cpu/tile_stats/tile_stats.h"
#include "compute/op_registry.h"
#include "core/dtype_abi.h"
#include "core/quantize/quantize.h"
#include "compute/ops/definitions.h"
#include "compute/ops/op_instance.h"
#include "compute/ops/reference.h"
#include "tensormorph/decode.h"
#include "tensormorph/mapped_file.h"
#include "test_util.h"

namespace tensormorph {
namespace {

using ops::MatrixView;
using ops::TensorView;
using ops::ViewRange;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// ---- Helpers ----------------------------------------------------------------------------------

std::vector<std::byte> f32_bytes(const std::vector<float>& values) {
  std::vector<std::byte> bytes(values.size() * 4);
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

MatrixView f32_matrix(const std::vector<std::byte>& bytes, uint64_t rows, uint64_t cols) {
  return MatrixView{DType::kF32, bytes, rows, cols};
}

std::vector<TM_TileStats> reference_stats(const MatrixView& m, const ViewRange& range, uint32_t tile) {
  std::vector<TM_TileStats> out(ops::tile_grid(range, tile).count());
  const Status status = ops::tile_stats_reference(m, range, tile, out);
  EXPECT_TRUE(status.ok()) << status.to_string();
  return out;
}

ViewRange whole(uint64_t rows, uint64_t cols) { return {0, rows, 0, cols}; }

bool same_bits(double a, double b) { return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b); }
bool same_bits(float a, float b) { return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); }

/// Compares every field bit for bit and names the first difference.
::testing::AssertionResult same_stats(const std::vector<TM_TileStats>& expected, const std::vector<TM_TileStats>& actual) {
  if (expected.size() != actual.size()) {
    return ::testing::AssertionFailure() << "sizes " << expected.size() << " vs " << actual.size();
  }
  for (size_t i = 0; i < expected.size(); ++i) {
    const TM_TileStats& e = expected[i];
    const TM_TileStats& a = actual[i];
    if (e.count != a.count || e.nan != a.nan || e.pos_inf != a.pos_inf || e.neg_inf != a.neg_inf ||
        e.zeros != a.zeros || !same_bits(e.sum, a.sum) || !same_bits(e.sum_sq, a.sum_sq) || !same_bits(e.min, a.min) ||
        !same_bits(e.max, a.max) || !same_bits(e.absmax, a.absmax) || a.reserved != 0) {
      return ::testing::AssertionFailure()
             << "tile " << i << ": expected count " << e.count << " nan " << e.nan << " +inf " << e.pos_inf << " -inf "
             << e.neg_inf << " zeros " << e.zeros << " sum " << e.sum << " sum_sq " << e.sum_sq << " min " << e.min
             << " max " << e.max << " absmax " << e.absmax << "; got count " << a.count << " nan " << a.nan
             << " +inf " << a.pos_inf << " -inf " << a.neg_inf << " zeros " << a.zeros << " sum " << a.sum
             << " sum_sq " << a.sum_sq << " min " << a.min << " max " << a.max << " absmax " << a.absmax;
    }
  }
  return ::testing::AssertionSuccess();
}

// ---- Test data ---------------------------------------------------------------------------------

/// Offsets of the fp16 scale fields inside one block of each quantized dtype (others: none).
std::vector<uint32_t> half_scale_offsets(DType dtype) {
  switch (dtype) {
    case DType::kQ4_0: case DType::kQ5_0: case DType::kQ8_0: case DType::kIQ4_NL: case DType::kIQ4_XS: return {0};
    case DType::kQ4_1: case DType::kQ5_1: case DType::kQ8_1: case DType::kQ4_K: case DType::kQ5_K: return {0, 2};
    case DType::kQ2_K: return {80, 82};
    case DType::kQ3_K: return {108};
    case DType::kQ6_K: return {208};
    case DType::kTQ1_0: return {52};
    case DType::kTQ2_0: return {64};
    default: return {};
  }
}

/// A small finite fp16 (magnitude 2^-10 .. 2^-2), random sign.
uint16_t sane_half(std::mt19937_64& rng) {
  const uint32_t exponent = 5 + static_cast<uint32_t>(rng() % 9);
  return static_cast<uint16_t>((rng() & 1) << 15 | exponent << 10 | (rng() & 0x3ff));
}

/// Random storage for `elems` elements. `finite` keeps scalar floats finite (the fast path);
/// otherwise scalar types get raw random bits (NaN and Inf included). Quantized blocks are
/// random bytes with sane scales, so they are valid blocks.
std::vector<std::byte> random_storage(DType dtype, uint64_t elems, bool finite, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const DTypeInfo& info = dtype_info(dtype);
  std::vector<std::byte> bytes(*dtype_storage_bytes(dtype, elems));
  for (auto& b : bytes) b = static_cast<std::byte>(rng());
  if (info.is_quantized) {
    const uint64_t blocks = elems / info.block_elems;
    for (uint64_t k = 0; k < blocks; ++k) {
      std::byte* block = bytes.data() + k * info.block_bytes;
      for (uint32_t offset : half_scale_offsets(dtype)) {
        const uint16_t h = sane_half(rng);
        std::memcpy(block + offset, &h, 2);
      }
      if (dtype == DType::kQ8_K) {
        const float d = std::ldexp(static_cast<float>(rng() % 1000) + 1.0f, -16);
        std::memcpy(block, &d, 4);
      }
      if (dtype == DType::kMXFP4) block[0] = static_cast<std::byte>(100 + rng() % 40);
    }
    return bytes;
  }
  if (finite && (dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16)) {
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> values(elems);
    for (auto& v : values) v = rng() % 17 == 0 ? (rng() % 2 ? 0.0f : -0.0f) : normal(rng);
    if (dtype == DType::kF32) return f32_bytes(values);
    for (uint64_t i = 0; i < elems; ++i) {
      const uint16_t h = dtype == DType::kF16 ? f32_to_f16(values[i]) : f32_to_bf16(values[i]);
      std::memcpy(bytes.data() + 2 * i, &h, 2);
    }
  }
  return bytes;
}

std::vector<DType> decodable_dtypes() {
  std::vector<DType> out;
  for (size_t i = 0; i < static_cast<size_t>(DType::kCount); ++i) {
    if (dtype_decodable(static_cast<DType>(i))) out.push_back(static_cast<DType>(i));
  }
  return out;
}

// ---- The backend through its ABI ---------------------------------------------------------------

/// Owns one CPU backend instance created through the function table.
class CpuApi {
 public:
  explicit CpuApi(const std::string& options = "bandwidth_gbps=10") : api_(tm_cpu_backend_get_api(1, 0)) {
    TM_BackendCreateArgs args{};
    args.struct_size = sizeof args;
    args.options = options.c_str();
    status_ = take(api_->backend_create(&args, &backend_));
  }
  ~CpuApi() {
    if (backend_ != nullptr) api_->backend_destroy(backend_);
  }
  CpuApi(const CpuApi&) = delete;
  CpuApi& operator=(const CpuApi&) = delete;

  const TM_PluginApi& api() const { return *api_; }
  TM_Backend* backend() const { return backend_; }
  const Status& create_status() const { return status_; }

  /// Converts (and frees) a plugin error.
  Status take(TM_Error* error) const {
    if (error == nullptr) return Status::Ok();
    Status s(static_cast<StatusCode>(api_->error_code(error)), api_->error_message(error));
    api_->error_destroy(error);
    return s;
  }

  Status execute(const TM_OpInstance& op, uint32_t max_threads = 0, TM_Exactness floor = TM_EXACT_BITWISE,
                 TM_ExecutionReport* report = nullptr) const {
    TM_ExecutionPolicy policy{};
    policy.struct_size = sizeof policy;
    policy.exactness_floor = floor;
    policy.max_threads = max_threads;
    return take(api_->execute(backend_, &op, &policy, report));
  }

  TM_OpSupport query(const char* op, TM_DType dtype, TM_ShapeClass shape) const {
    TM_OpQuery q{};
    q.struct_size = sizeof q;
    q.op = op;
    q.input_dtype = dtype;
    q.shape_class = shape;
    TM_OpSupport support{};
    support.struct_size = sizeof support;
    EXPECT_TRUE(take(api_->query(backend_, &q, &support)).ok());
    return support;
  }

 private:
  const TM_PluginApi* api_;
  TM_Backend* backend_ = nullptr;
  Status status_;
};

TM_TensorArg tensor_arg(DType dtype, std::vector<uint64_t> shape, uint64_t nbytes) {
  TM_TensorArg a{};
  a.struct_size = sizeof a;
  a.dtype = to_abi_dtype(dtype);
  a.rank = static_cast<uint32_t>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) a.shape[i] = shape[i];
  a.nbytes = nbytes;
  return a;
}

TM_Attribute int_attr(const char* name, int64_t v) {
  TM_Attribute a{};
  a.struct_size = sizeof a;
  a.name = name;
  a.i = v;
  return a;
}

TM_Attribute float_attr(const char* name, double v) {
  TM_Attribute a{};
  a.struct_size = sizeof a;
  a.name = name;
  a.f = v;
  return a;
}

/// A tm.tile_stats@1 instance whose pointers stay valid while it lives.
struct TileStatsCall {
  TM_TensorArg input{}, output{};
  std::vector<TM_Attribute> attrs;
  std::vector<TM_TileStats> out;
  TM_OpInstance op{};

  TileStatsCall(const MatrixView& m, const ViewRange& range, uint32_t tile) {
    out.resize(ops::tile_grid(range, tile).count());
    input = tensor_arg(m.dtype, {m.rows, m.cols}, m.bytes.size());
    input.host_data = m.bytes.data();
    output = tensor_arg(DType::kU8, {out.size() * sizeof(TM_TileStats)}, out.size() * sizeof(TM_TileStats));
    output.host_out = out.data();
    attrs = {int_attr("row_begin", static_cast<int64_t>(range.row_begin)),
             int_attr("row_end", static_cast<int64_t>(range.row_end)),
             int_attr("col_begin", static_cast<int64_t>(range.col_begin)),
             int_attr("col_end", static_cast<int64_t>(range.col_end)), int_attr("tile", tile)};
    relink();
  }
  void relink() {
    op.struct_size = sizeof op;
    op.op = TM_OP_TILE_STATS;
    op.inputs = &input;
    op.input_count = 1;
    op.outputs = &output;
    op.output_count = 1;
    op.attributes = attrs.data();
    op.attribute_count = static_cast<uint32_t>(attrs.size());
  }
};

std::vector<TM_TileStats> backend_stats(const CpuApi& cpu, const MatrixView& m, const ViewRange& range, uint32_t tile,
                                        uint32_t threads = 0) {
  TileStatsCall call(m, range, tile);
  const Status status = cpu.execute(call.op, threads);
  EXPECT_TRUE(status.ok()) << status.to_string();
  return call.out;
}

// ================================================================================================
// Reference: hand-computed answers
// ================================================================================================

TEST(Reference, HalvingSumFollowsTheCanonicalOrder) {
  // (1e16 + -1e16) + (1 + 1) = 2; left-to-right would give 1.
  std::vector<double> slots = {1e16, 1.0, -1e16, 1.0};
  EXPECT_EQ(ops::halving_sum(slots), 2.0);
  std::vector<double> one = {-0.0};
  EXPECT_TRUE(std::signbit(ops::halving_sum(one)));
}

TEST(Reference, TileGridCountsRaggedTiles) {
  const ops::TileGrid g = ops::tile_grid({2, 12, 3, 3 + 17}, 8);
  EXPECT_EQ(g.rows, 2u);
  EXPECT_EQ(g.cols, 3u);
  EXPECT_EQ(ops::tile_grid({5, 5, 0, 100}, 8).count(), 0u);
}

TEST(Reference, SmallTileByHand) {
  // 3 x 5 in one 8 x 8 tile: rows sum 15, 40, 65 -> ((15 + 0) + (65 + 0)) + ((40 + 0) + (0 + 0)).
  std::vector<float> v(15);
  for (int i = 0; i < 15; ++i) v[static_cast<size_t>(i)] = static_cast<float>(i + 1);
  const auto bytes = f32_bytes(v);
  const auto stats = reference_stats(f32_matrix(bytes, 3, 5), whole(3, 5), 8);
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].count, 15u);
  EXPECT_EQ(stats[0].sum, 120.0);
  EXPECT_EQ(stats[0].sum_sq, 1240.0);
  EXPECT_EQ(stats[0].min, 1.0f);
  EXPECT_EQ(stats[0].max, 15.0f);
  EXPECT_EQ(stats[0].absmax, 15.0f);
  EXPECT_EQ(stats[0].zeros, 0u);
}

TEST(Reference, RaggedEdgeTiles) {
  // 10 x 10 of ones with tile 8: tiles of 64, 16, 16 and 4 elements.
  const auto bytes = f32_bytes(std::vector<float>(100, 1.0f));
  const auto stats = reference_stats(f32_matrix(bytes, 10, 10), whole(10, 10), 8);
  ASSERT_EQ(stats.size(), 4u);
  const uint64_t counts[] = {64, 16, 16, 4};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(stats[i].count, counts[i]);
    EXPECT_EQ(stats[i].sum, static_cast<double>(counts[i]));
    EXPECT_EQ(stats[i].sum_sq, static_cast<double>(counts[i]));
  }
}

TEST(Reference, RowAndColumnVectors) {
  std::vector<float> v(20);
  for (size_t i = 0; i < 20; ++i) v[i] = static_cast<float>(i) - 10.0f;
  const auto bytes = f32_bytes(v);
  const auto row = reference_stats(f32_matrix(bytes, 1, 20), whole(1, 20), 8);
  ASSERT_EQ(row.size(), 3u);
  EXPECT_EQ(row[0].sum, -10.0 - 9 - 8 - 7 - 6 - 5 - 4 - 3);
  EXPECT_EQ(row[2].count, 4u);
  EXPECT_EQ(row[2].sum, 6.0 + 7 + 8 + 9);
  EXPECT_EQ(row[1].zeros, 1u);
  const auto column = reference_stats(f32_matrix(bytes, 20, 1), whole(20, 1), 8);
  ASSERT_EQ(column.size(), 3u);
  EXPECT_EQ(column[1].sum, -2.0 - 1 + 0 + 1 + 2 + 3 + 4 + 5);
  EXPECT_EQ(column[1].min, -2.0f);
  EXPECT_EQ(column[1].max, 5.0f);
  EXPECT_EQ(column[1].absmax, 5.0f);
}

TEST(Reference, NonFiniteValuesAreCountedNotSummed) {
  const auto bytes = f32_bytes({kNaN, kInf, -kInf, -0.0f, 2.5f, -1.0f});
  const auto stats = reference_stats(f32_matrix(bytes, 2, 3), whole(2, 3), 8);
  ASSERT_EQ(stats.size(), 1u);
  const TM_TileStats& s = stats[0];
  EXPECT_EQ(s.count, 6u);
  EXPECT_EQ(s.nan, 1u);
  EXPECT_EQ(s.pos_inf, 1u);
  EXPECT_EQ(s.neg_inf, 1u);
  EXPECT_EQ(s.zeros, 1u);
  EXPECT_EQ(s.min, -1.0f);
  EXPECT_EQ(s.max, 2.5f);
  EXPECT_EQ(s.absmax, 2.5f);
  EXPECT_EQ(s.sum, 1.5);
  EXPECT_EQ(s.sum_sq, 7.25);
}

TEST(Reference, AllNanTileHasEmptyExtremes) {
  const auto bytes = f32_bytes(std::vector<float>(4, kNaN));
  const auto stats = reference_stats(f32_matrix(bytes, 2, 2), whole(2, 2), 8);
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].nan, 4u);
  EXPECT_EQ(stats[0].min, kInf);
  EXPECT_EQ(stats[0].max, -kInf);
  EXPECT_TRUE(same_bits(stats[0].absmax, 0.0f));
  EXPECT_TRUE(same_bits(stats[0].sum, 0.0));
  EXPECT_TRUE(same_bits(stats[0].sum_sq, 0.0));
}

TEST(Reference, SignedZerosFollowTheDefinition) {
  // A ragged tile pads with +0.0, so -0.0 sums to +0.0; a full tile of -0.0 keeps -0.0.
  const auto ragged = f32_bytes({-0.0f});
  const auto r = reference_stats(f32_matrix(ragged, 1, 1), whole(1, 1), 8);
  EXPECT_TRUE(same_bits(r[0].sum, 0.0));
  EXPECT_TRUE(same_bits(r[0].min, -0.0f));
  EXPECT_TRUE(same_bits(r[0].max, -0.0f));
  EXPECT_EQ(r[0].zeros, 1u);
  const auto full = f32_bytes(std::vector<float>(64, -0.0f));
  const auto f = reference_stats(f32_matrix(full, 8, 8), whole(8, 8), 8);
  EXPECT_TRUE(same_bits(f[0].sum, -0.0));
  // Both zeros: min is -0.0 and max +0.0 whatever the order they were seen in.
  for (const auto& values : {std::vector<float>{0.0f, -0.0f}, std::vector<float>{-0.0f, 0.0f}}) {
    const auto bytes = f32_bytes(values);
    const auto s = reference_stats(f32_matrix(bytes, 1, 2), whole(1, 2), 8);
    EXPECT_TRUE(same_bits(s[0].min, -0.0f));
    EXPECT_TRUE(same_bits(s[0].max, 0.0f));
    EXPECT_TRUE(same_bits(s[0].absmax, 0.0f));
  }
}

TEST(Reference, EmptyViewHasNoTiles) {
  const auto bytes = f32_bytes(std::vector<float>(12, 1.0f));
  std::vector<TM_TileStats> none;
  EXPECT_TRUE(ops::tile_stats_reference(f32_matrix(bytes, 3, 4), {1, 1, 0, 4}, 8, none).ok());
  EXPECT_TRUE(ops::tile_stats_reference(f32_matrix({}, 0, 0), {0, 0, 0, 0}, 8, none).ok());
}

TEST(Reference, QuantizedViewsDecodeCoveringBlocks) {
  // A Q8_0 row of 64: a view starting mid-block must see the decoded values of those columns.
  std::vector<float> values(128);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 64) - 31.0f;
  const auto q = *encode_from_f32(DType::kQ8_0, values);
  std::vector<float> decoded(128);
  ASSERT_TRUE(decode_to_f32(DType::kQ8_0, q, 128, decoded.data()).ok());
  const MatrixView m{DType::kQ8_0, q, 2, 64};
  const auto stats = reference_stats(m, {1, 2, 5, 13}, 8);
  ASSERT_EQ(stats.size(), 1u);
  std::vector<double> slots(8);
  for (size_t k = 0; k < 8; ++k) slots[k] = decoded[64 + 5 + k];
  EXPECT_EQ(stats[0].sum, ops::halving_sum(slots));
  EXPECT_EQ(stats[0].min, decoded[64 + 5]);
  EXPECT_EQ(stats[0].max, decoded[64 + 12]);
}

TEST(Reference, MergeUsesTheCanonicalOrder) {
  TM_TileStats a = ops::empty_tile_stats(), b = a, c = a, d = a;
  a.sum = 1e16;
  b.sum = 1.0;
  c.sum = -1e16;
  d.sum = 1.0;
  a.count = b.count = c.count = d.count = 1;
  a.min = a.max = a.absmax = 1.0f;
  c.min = -3.0f;
  c.max = -3.0f;
  c.absmax = 3.0f;
  const TM_TileStats m = ops::merge_tile_stats(a, b, c, d);
  EXPECT_EQ(m.sum, 0.0);  // (1e16 + 1) + (-1e16 + 1); ((1e16 + 1) + -1e16) + 1 would be 1
  EXPECT_EQ(m.count, 4u);
  EXPECT_EQ(m.min, -3.0f);
  EXPECT_EQ(m.max, 1.0f);
  EXPECT_EQ(m.absmax, 3.0f);
  const TM_TileStats e = ops::empty_tile_stats();
  const TM_TileStats alone = ops::merge_tile_stats(a, e, e, e);
  EXPECT_EQ(alone.sum, 1e16);
  EXPECT_EQ(alone.min, 1.0f);
}

TEST(Reference, RejectsBadArguments) {
  const auto bytes = f32_bytes(std::vector<float>(64, 1.0f));
  const MatrixView m = f32_matrix(bytes, 8, 8);
  std::vector<TM_TileStats> one(1);
  for (uint32_t tile : {0u, 4u, 12u, 8192u}) {
    EXPECT_EQ(ops::tile_stats_reference(m, whole(8, 8), tile, one).code(), StatusCode::kInvalidArgument) << tile;
  }
  EXPECT_EQ(ops::tile_stats_reference(m, {0, 9, 0, 8}, 8, one).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ops::tile_stats_reference(m, {3, 2, 0, 8}, 8, one).code(), StatusCode::kInvalidArgument);
  std::vector<TM_TileStats> two(2);
  EXPECT_EQ(ops::tile_stats_reference(m, whole(8, 8), 8, two).code(), StatusCode::kInvalidArgument);
  const MatrixView short_bytes{DType::kF32, std::span<const std::byte>(bytes).first(60), 8, 8};
  EXPECT_EQ(ops::tile_stats_reference(short_bytes, whole(8, 8), 8, one).code(), StatusCode::kInvalidArgument);
  const MatrixView partial_block{DType::kQ8_0, bytes, 2, 20};  // 20 columns is not whole blocks
  EXPECT_EQ(ops::tile_stats_reference(partial_block, whole(2, 20), 8, one).code(), StatusCode::kInvalidArgument);
}

TEST(Reference, HistogramByHand) {
  const auto bytes = f32_bytes({-1.0f, 0.0f, 0.5f, 1.0f, 2.0f, kNaN, kInf, -kInf});
  std::vector<uint64_t> counts(5);
  ASSERT_TRUE(ops::histogram_reference({DType::kF32, bytes, 8}, 0.0, 1.0, 2, counts).ok());
  EXPECT_EQ(counts, (std::vector<uint64_t>{1, 2, 2, 2, 1}));  // bins 0, 1 (1.0 clamped), below, above, NaN
  EXPECT_EQ(ops::histogram_reference({DType::kF32, bytes, 8}, 1.0, 1.0, 2, counts).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ops::histogram_reference({DType::kF32, bytes, 8}, 0.0, kInf, 2, counts).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ops::histogram_reference({DType::kF32, bytes, 8}, 0.0, 1.0, 3, counts).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ops::histogram_reference({DType::kF32, bytes, 8}, 0.0, 1e-310, 2, counts).code(),
            StatusCode::kInvalidArgument);  // bins / (hi - lo) overflows
}

TEST(OpDefinitions, EveryBuiltinOperationIsCompleteData) {
  compute::OpRegistry registry = compute::OpRegistry::builtin();
  for (const char* id : {TM_OP_DECODE, TM_OP_TILE_STATS, TM_OP_HISTOGRAM, TM_OP_EXACT_SUMMARY, TM_OP_RENDER_TILE,
                         TM_OP_RENDER_TILE_SAMPLED, TM_OP_RADIX_HISTOGRAM, TM_OP_TOP_K, TM_OP_CHANNEL_STATS,
                         TM_OP_DIFF_STATS, TM_OP_SUBTRACT}) {
    EXPECT_NE(registry.find(id), nullptr) << id << " is not in the registry";
  }
  for (const auto& [id, definition] : registry.all()) {
    const compute::OpDefinition* d = &definition;
    EXPECT_FALSE(d->exactness_definition.empty()) << id;
    EXPECT_NE(d->reference, nullptr) << id;
    EXPECT_FALSE(d->cases.empty()) << id;
    EXPECT_GE(d->inputs.size(), 1u) << id;
    EXPECT_LE(d->inputs.size(), size_t{TM_MAX_OP_INPUTS}) << id;
    EXPECT_GE(d->outputs.size(), 1u) << id;
    EXPECT_LE(d->outputs.size(), size_t{TM_MAX_OP_OUTPUTS}) << id;
    for (const auto& input : d->inputs) EXPECT_FALSE(input.dtypes.empty()) << id;
    for (const auto& c : d->cases) {
      EXPECT_EQ(c.inputs.size(), d->inputs.size()) << id << " " << c.label;
      EXPECT_EQ(c.outputs.size(), d->outputs.size()) << id << " " << c.label;
      for (const auto& a : c.attributes) {
        EXPECT_TRUE(std::any_of(d->attributes.begin(), d->attributes.end(), [&](const auto& s) { return s.name == a.name; }))
            << id << " " << c.label << ": attribute " << a.name << " is not in the definition";
      }
    }
  }
  EXPECT_EQ(registry.all().size(), 14u);
  EXPECT_NE(registry.find(TM_OP_SPECTRUM)->within_bounds, nullptr) << "a bounded operation says how results are compared";
  EXPECT_EQ(registry.find(TM_OP_TILE_STATS)->attributes.size(), 5u);
  EXPECT_EQ(registry.find(TM_OP_RENDER_TILE)->ladder.size(), 1u);
  EXPECT_EQ(registry.find(TM_OP_RENDER_TILE)->ladder[0].op, TM_OP_RENDER_TILE_SAMPLED);
  EXPECT_EQ(registry.add(*registry.find(TM_OP_DECODE)).code(), StatusCode::kInternal);  // twice
}

TEST(DTypeAbi, EveryDTypeRoundTrips) {
  for (size_t i = 0; i < static_cast<size_t>(DType::kCount); ++i) {
    const auto dtype = static_cast<DType>(i);
    const TM_DType abi = to_abi_dtype(dtype);
    EXPECT_NE(abi, TM_DTYPE_INVALID);
    EXPECT_EQ(from_abi_dtype(abi), dtype);
    EXPECT_EQ(abi_dtype_name(abi), dtype_name(dtype));
  }
  EXPECT_FALSE(from_abi_dtype(static_cast<TM_DType>(63)).has_value());
}

// ================================================================================================
// CPU backend vs reference
// ================================================================================================

TEST(CpuBackend, TableAndDevice) {
  EXPECT_EQ(tm_cpu_backend_get_api(2, 0), nullptr);
  CpuApi cpu;
  ASSERT_TRUE(cpu.create_status().ok()) << cpu.create_status().to_string();
  EXPECT_STREQ(cpu.api().name, "cpu");
  TM_DeviceTraits traits{};
  traits.struct_size = sizeof traits;
  ASSERT_TRUE(cpu.take(cpu.api().device_traits(cpu.backend(), &traits)).ok());
  EXPECT_GT(std::strlen(traits.device_name), 0u);
  EXPECT_GT(traits.memory_bytes, 0u);
  EXPECT_EQ(traits.host_memory_visible, 1u);
  EXPECT_EQ(traits.memory_space_count, 0u);
  EXPECT_GE(traits.compute_units, 1u);
  uint32_t count = 0;
  ASSERT_TRUE(cpu.take(cpu.api().device_count(&count, nullptr, 0)).ok());
  EXPECT_EQ(count, 1u);
}

TEST(CpuBackend, OptionsComeFromTheCreateArgumentsOnly) {
  // No environment variable overrides a setting: one naming an option this CPU cannot honour
  // changes nothing.
  const testing::ScopedEnv options("TENSORMORPH_CPU_OPTIONS", "isa=neon");
  CpuApi cpu;
  EXPECT_TRUE(cpu.create_status().ok()) << cpu.create_status().to_string();
}

TEST(CpuBackend, RejectsBadOptionsAndDevices) {
  EXPECT_EQ(CpuApi("color=blue").create_status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CpuApi("bandwidth_gbps=-3").create_status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(CpuApi("isa=neon").create_status().code(), StatusCode::kInvalidArgument);
  // No option chooses how files are read: the host hands the backend host memory, never a file.
  EXPECT_EQ(CpuApi("file_reads=mapping").create_status().code(), StatusCode::kInvalidArgument);
  const TM_PluginApi* api = tm_cpu_backend_get_api(1, 0);
  TM_BackendCreateArgs args{};
  args.struct_size = sizeof args;
  args.device_index = 1;
  TM_Backend* backend = nullptr;
  TM_Error* error = api->backend_create(&args, &backend);
  ASSERT_NE(error, nullptr);
  EXPECT_EQ(api->error_code(error), TM_STATUS_NOT_FOUND);
  api->error_destroy(error);
  EXPECT_EQ(backend, nullptr);
}

/// The estimate of tile_stats over 256 x 256 F32 (64 x 64 tiles) by a CPU backend created
/// without a bandwidth option, so that it calibrates.
TM_CostEstimate calibrated_estimate() {
  CpuApi cpu("");
  EXPECT_TRUE(cpu.create_status().ok());
  const auto bytes = f32_bytes(std::vector<float>(1 << 16, 1.0f));
  TileStatsCall call(f32_matrix(bytes, 256, 256), whole(256, 256), 64);
  TM_CostEstimate cost{};
  cost.struct_size = sizeof cost;
  EXPECT_TRUE(cpu.take(cpu.api().estimate(cpu.backend(), &call.op, &cost)).ok());
  return cost;
}

TEST(CpuBackend, CalibratesBandwidthWhenNotGiven) {
  const TM_CostEstimate cost = calibrated_estimate();
  EXPECT_EQ(cost.bytes_read, (uint64_t{1} << 16) * sizeof(float));
  EXPECT_EQ(cost.bytes_written, 16 * sizeof(TM_TileStats));
  EXPECT_GT(cost.compute_ns, 0.0);
  EXPECT_TRUE(std::isfinite(cost.compute_ns));
}

TEST(CpuBackend, MeasuresItsBandwidthOnceAndThenUsesWhatItRemembered) {
  testing::TempDir dir;
  const testing::ScopedEnv cache_home("XDG_CACHE_HOME", dir.path().string());
  const auto path = dir.path() / "tensormorph" / "cpu-calibration";
  ASSERT_EQ(cpu::calibration_path(), path);
  EXPECT_GT(calibrated_estimate().compute_ns, 0.0);  // measured, and remembered
  const cpu::MachineIdentity here{cpu::cpu_model_name(), cpu::hardware_threads(), cpu::physical_memory_bytes()};
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  EXPECT_GT(cpu::remembered_read_bandwidth_gbps(path, here, now), 0.0);
  // A remembered figure no measurement here would give: the estimate follows it.
  cpu::remember_read_bandwidth_gbps(path, here, 0.5, now);
  const TM_CostEstimate cost = calibrated_estimate();
  const auto bytes = static_cast<double>(cost.bytes_read + cost.bytes_written);
  EXPECT_NEAR(cost.compute_ns, bytes / 0.5, 1e-6 * bytes);
}

TEST(CpuBackend, EstimatesQuantizedAsSlowerPerByte) {
  CpuApi cpu("bandwidth_gbps=10");
  auto ns_per_byte = [&](DType dtype) {
    const auto bytes = random_storage(dtype, 256 * 256, true, 1);
    TileStatsCall call(MatrixView{dtype, bytes, 256, 256}, whole(256, 256), 64);
    TM_CostEstimate cost{};
    cost.struct_size = sizeof cost;
    EXPECT_TRUE(cpu.take(cpu.api().estimate(cpu.backend(), &call.op, &cost)).ok());
    EXPECT_EQ(cost.bytes_read, bytes.size());
    return (cost.compute_ns - static_cast<double>(cost.bytes_written) / 10.0) / static_cast<double>(cost.bytes_read);
  };
  EXPECT_DOUBLE_EQ(ns_per_byte(DType::kF32), 0.1);  // 10 GB/s
  EXPECT_GT(ns_per_byte(DType::kQ4_K), ns_per_byte(DType::kQ8_0));
  EXPECT_GT(ns_per_byte(DType::kQ8_0), ns_per_byte(DType::kF32));
}

TEST(CpuBackend, QueryAnswersForEveryDType) {
  CpuApi cpu;
  for (size_t i = 0; i < static_cast<size_t>(DType::kCount); ++i) {
    const auto dtype = static_cast<DType>(i);
    for (const char* op : {TM_OP_DECODE, TM_OP_TILE_STATS, TM_OP_HISTOGRAM}) {
      const TM_OpSupport s = cpu.query(op, to_abi_dtype(dtype), TM_SHAPE_MATRIX);
      if (dtype_decodable(dtype)) {
        EXPECT_EQ(s.level, TM_SUPPORT_FULL) << dtype_name(dtype) << " " << op;
        EXPECT_EQ(s.exactness, TM_EXACT_BITWISE);
      } else {
        EXPECT_EQ(s.level, TM_SUPPORT_NONE) << dtype_name(dtype) << " " << op;
        EXPECT_EQ(std::string(s.reason).rfind(std::string(dtype_name(dtype)) + " is not decodable yet: ", 0), 0u)
            << s.reason;
      }
    }
  }
  const TM_OpSupport complex = cpu.query(TM_OP_TILE_STATS, TM_DTYPE_C64, TM_SHAPE_MATRIX);
  EXPECT_EQ(complex.level, TM_SUPPORT_NONE);
  EXPECT_NE(std::string(complex.reason).find("C64 is not decodable yet"), std::string::npos);
  EXPECT_EQ(cpu.query(TM_OP_TILE_STATS, TM_DTYPE_IQ2_XXS, TM_SHAPE_MATRIX).level, TM_SUPPORT_FULL);
  EXPECT_EQ(cpu.query("tm.render@1", TM_DTYPE_F32, TM_SHAPE_MATRIX).level, TM_SUPPORT_NONE);
  EXPECT_EQ(cpu.query(TM_OP_TILE_STATS, TM_DTYPE_F32, TM_SHAPE_TENSOR).level, TM_SUPPORT_NONE);
  EXPECT_EQ(cpu.query(TM_OP_HISTOGRAM, TM_DTYPE_F32, TM_SHAPE_TENSOR).level, TM_SUPPORT_FULL);
  EXPECT_EQ(cpu.query(TM_OP_DECODE, static_cast<TM_DType>(63), TM_SHAPE_VECTOR).level, TM_SUPPORT_NONE);
}

TEST(CpuBackend, QueryRespectsAnOlderSmallerStruct) {
  CpuApi cpu;
  // A caller that knows TM_OpSupport only up to error_bound: nothing past it may be written.
  struct {
    TM_OpSupport support;
    char guard[8];
  } memory;
  std::memset(&memory, 0x5a, sizeof memory);
  memory.support.struct_size = offsetof(TM_OpSupport, reason);
  TM_OpQuery q{};
  q.struct_size = sizeof q;
  q.op = TM_OP_DECODE;
  q.input_dtype = TM_DTYPE_C64;
  ASSERT_TRUE(cpu.take(cpu.api().query(cpu.backend(), &q, &memory.support)).ok());
  EXPECT_EQ(memory.support.level, TM_SUPPORT_NONE);
  EXPECT_EQ(memory.support.struct_size, offsetof(TM_OpSupport, reason));
  EXPECT_EQ(static_cast<unsigned char>(memory.support.reason[0]), 0x5a);
  EXPECT_EQ(static_cast<unsigned char>(memory.guard[0]), 0x5a);
}

/// Views that exercise ragged edges, offsets, vectors and (for the backend) both work splits.
std::vector<std::pair<ViewRange, uint32_t>> views_for(uint64_t rows, uint64_t cols) {
  return {{whole(rows, cols), 8},
          {whole(rows, cols), 16},
          {whole(rows, cols), 64},
          {whole(rows, cols), 256},
          {{3, rows - 1, 5, cols - 3}, 8},
          {{1, rows, 7, cols}, 32},
          {{2, 3, 0, cols}, 128},   // one row
          {{0, rows, 9, 10}, 16},   // one column
          {{4, 4, 0, cols}, 8}};    // empty
}

TEST(CpuBackend, MatchesReferenceForEveryDecodableDType) {
  CpuApi cpu;
  ASSERT_TRUE(cpu.create_status().ok());
  for (DType dtype : decodable_dtypes()) {
    const uint64_t block = dtype_info(dtype).block_elems;
    const uint64_t rows = 37;
    const uint64_t cols = block >= 32 ? 3 * std::max<uint64_t>(block, 128) : 300;
    for (bool finite : {true, false}) {
      const auto bytes = random_storage(dtype, rows * cols, finite, 7 + static_cast<uint64_t>(dtype));
      const MatrixView m{dtype, bytes, rows, cols};
      for (const auto& [range, tile] : views_for(rows, cols)) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + (finite ? " finite" : " raw") + " tile " + std::to_string(tile) +
                     " view [" + std::to_string(range.row_begin) + "," + std::to_string(range.row_end) + ")x[" +
                     std::to_string(range.col_begin) + "," + std::to_string(range.col_end) + ")");
        EXPECT_TRUE(same_stats(reference_stats(m, range, tile), backend_stats(cpu, m, range, tile)));
      }
    }
  }
}

TEST(CpuBackend, HotDTypesMatchReferenceOnLargerMatrices) {
  CpuApi cpu;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16, DType::kQ8_0, DType::kQ4_K}) {
    const uint64_t rows = 300, cols = 1280;
    const auto bytes = random_storage(dtype, rows * cols, true, 99);
    const MatrixView m{dtype, bytes, rows, cols};
    for (uint32_t tile : {8u, 32u, 64u, 128u, 512u, 4096u}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " tile " + std::to_string(tile));
      EXPECT_TRUE(same_stats(reference_stats(m, whole(rows, cols), tile), backend_stats(cpu, m, whole(rows, cols), tile)));
    }
  }
}

TEST(CpuBackend, SignedZeroAndNonFiniteEdgeCases) {
  CpuApi cpu;
  // A full 8 x 8 tile of -0.0 sums to -0.0; a ragged one to +0.0; both zeros order min/max.
  std::vector<float> values(16 * 12, -0.0f);
  values[5] = 0.0f;
  values[16 * 9 + 3] = kNaN;
  values[16 * 10 + 11] = -kInf;
  const auto bytes = f32_bytes(values);
  const MatrixView m = f32_matrix(bytes, 12, 16);
  for (uint32_t tile : {8u, 16u}) {
    EXPECT_TRUE(same_stats(reference_stats(m, whole(12, 16), tile), backend_stats(cpu, m, whole(12, 16), tile)));
  }
  const auto nan_bytes = f32_bytes(std::vector<float>(64 * 64, kNaN));
  const MatrixView all_nan = f32_matrix(nan_bytes, 64, 64);
  const auto stats = backend_stats(cpu, all_nan, whole(64, 64), 32);
  EXPECT_TRUE(same_stats(reference_stats(all_nan, whole(64, 64), 32), stats));
  EXPECT_EQ(stats[0].nan, 32u * 32u);
}

TEST(CpuBackend, ThreadCountsGiveIdenticalBits) {
  CpuApi cpu;
  const auto bytes = random_storage(DType::kF32, 512 * 700, true, 5);
  const MatrixView m = f32_matrix(bytes, 512, 700);
  for (uint32_t tile : {8u, 64u, 512u}) {
    const auto one = backend_stats(cpu, m, whole(512, 700), tile, 1);
    EXPECT_TRUE(same_stats(one, backend_stats(cpu, m, whole(512, 700), tile, 2)));
    EXPECT_TRUE(same_stats(one, backend_stats(cpu, m, whole(512, 700), tile, 16)));
    EXPECT_TRUE(same_stats(reference_stats(m, whole(512, 700), tile), one));
  }
}

TEST(CpuBackend, EveryInstructionSetAndWorkSplitGivesIdenticalBits) {
  cpu::ScratchPool pool;  // kept between the calls, as a backend instance keeps it
  const uint64_t rows = 130, cols = 1024;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K}) {
    const auto bytes = random_storage(dtype, rows * cols, true, 11);
    const MatrixView m{dtype, bytes, rows, cols};
    // The last tile column 1019, 5, 12 or 20 wide: segments past, and short of, every instruction
    // set's vector of 16-bit words (8, 16 or 32 lanes).
    for (uint64_t width : {cols - 5, uint64_t{128 + 5}, uint64_t{128 + 12}, uint64_t{128 + 20}}) {
      for (uint32_t tile : {8u, 128u, 1024u}) {
        const ViewRange range{1, rows, 3, 3 + width};
        const auto expected = reference_stats(m, range, tile);
        for (cpu::Isa isa : {cpu::Isa::kBaseline, cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
          if (!cpu::isa_supported(isa)) continue;
          for (uint64_t item_bytes : {uint64_t{0}, uint64_t{1} << 10, uint64_t{1} << 14}) {
            SCOPED_TRACE(std::string(dtype_name(dtype)) + " width " + std::to_string(width) + " tile " +
                         std::to_string(tile) + " " + std::string(cpu::isa_name(isa)) + " item bytes " +
                         std::to_string(item_bytes));
            std::vector<TM_TileStats> out(expected.size());
            ASSERT_TRUE(cpu::tile_stats(pool, m, range, tile, out, 2, isa, {item_bytes}).ok());
            EXPECT_TRUE(same_stats(expected, out));
          }
        }
      }
    }
  }
}

TEST(CpuBackend, ScratchKeptBetweenCallsLeavesNoTrace) {
  cpu::ScratchPool pool;  // kept between the calls, as a backend instance keeps it
  // Calls reuse the slot arrays and kernel buffers of earlier calls without clearing them: a call
  // that leaves large sums everywhere must not leak into a smaller, ragged call after it, in
  // either work split (items owning whole tiles, or rows shared between items).
  // The first call's extremes (±1e30) and zeros would show in any statistic they leaked into.
  std::vector<std::byte> loud(1024 * 1024 * sizeof(float));
  for (size_t i = 0; i < 1024 * 1024; ++i) {
    const float v = i % 3 == 0 ? 0.0f : (i % 2 == 0 ? 1e30f : -1e30f);
    std::memcpy(loud.data() + i * sizeof v, &v, sizeof v);
  }
  const MatrixView big = f32_matrix(loud, 1024, 1024);
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kQ8_0}) {
    const uint64_t rows = 300, cols = 768;
    const auto bytes = random_storage(dtype, rows * cols, true, 22);
    const MatrixView m{dtype, bytes, rows, cols};
    const ViewRange range{5, rows, 32, cols};
    const auto expected = reference_stats(m, range, 256);
    for (uint64_t item_bytes : {uint64_t{0}, uint64_t{1} << 10}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " item bytes " + std::to_string(item_bytes));
      std::vector<TM_TileStats> dirty(16);
      ASSERT_TRUE(cpu::tile_stats(pool, big, whole(1024, 1024), 256, dirty, 2, cpu::Isa::kBaseline, {item_bytes}).ok());
      std::vector<TM_TileStats> out(expected.size());
      ASSERT_TRUE(cpu::tile_stats(pool, m, range, 256, out, 2, cpu::Isa::kBaseline, {item_bytes}).ok());
      EXPECT_TRUE(same_stats(expected, out));
    }
  }
}

TEST(CpuBackend, NarrowAndOneRowViewsMatchTheReference) {
  cpu::ScratchPool pool;  // kept between the calls, as a backend instance keeps it
  // Views narrower than a vector in tiles walked row by row (a 3x3 convolution's [n, 3] view, an
  // [n, 1] column) take narrow_rows, one-row views the row-chunk-free plan: every elementwise
  // dtype, ragged bands, column slices, both work splits, one and two threads, every ISA.
  for (DType dtype : decodable_dtypes()) {
    if (dtype_info(dtype).block_elems != 1) continue;
    for (uint64_t cols : {1u, 2u, 3u, 5u, 8u, 9u}) {
      const uint64_t rows = 600;
      for (bool finite : {true, false}) {
        const auto bytes = random_storage(dtype, rows * cols, finite, 31 + cols);
        const MatrixView m{dtype, bytes, rows, cols};
        for (const ViewRange range : {whole(rows, cols), ViewRange{5, rows - 3, cols > 2 ? 1u : 0u, cols > 2 ? cols - 1 : cols}}) {
          for (uint32_t tile : {128u, 256u}) {
            const auto expected = reference_stats(m, range, tile);
            for (cpu::Isa isa : {cpu::Isa::kBaseline, cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
              if (!cpu::isa_supported(isa)) continue;
              for (uint64_t item_bytes : {uint64_t{0}, uint64_t{256}}) {
                for (uint32_t threads : {1u, 2u}) {
                  SCOPED_TRACE(std::string(dtype_name(dtype)) + (finite ? " finite" : " raw") + " cols " +
                               std::to_string(cols) + " tile " + std::to_string(tile) + " " +
                               std::string(cpu::isa_name(isa)) + " item bytes " + std::to_string(item_bytes) +
                               " threads " + std::to_string(threads));
                  std::vector<TM_TileStats> out(expected.size());
                  ASSERT_TRUE(cpu::tile_stats(pool, m, range, tile, out, threads, isa, {item_bytes}).ok());
                  EXPECT_TRUE(same_stats(expected, out));
                }
              }
            }
          }
        }
      }
    }
  }
  // One row (a 1-D tensor) of many tiles, and narrow columns of signed zeros (whose row sums the
  // tree's "+ 0.0" steps decide).
  const auto row_bytes = random_storage(DType::kF32, 70000, true, 3);
  const MatrixView row = f32_matrix(row_bytes, 1, 70000);
  for (uint64_t item_bytes : {uint64_t{0}, uint64_t{4096}}) {
    std::vector<TM_TileStats> out(274);
    ASSERT_TRUE(cpu::tile_stats(pool, row, whole(1, 70000), 256, out, 2, cpu::Isa::kBaseline, {item_bytes}).ok());
    EXPECT_TRUE(same_stats(reference_stats(row, whole(1, 70000), 256), out));
  }
  CpuApi cpu;
  for (uint64_t cols : {3u, 8u}) {
    // The first band all -0.0 (with 8 columns no padding lane turns a row's sum to +0.0: the tree's
    // "+ 0.0" for the slots past the vector does), the second with some +0.0.
    std::vector<float> zeros(300 * cols, -0.0f);
    for (size_t i = 256 * cols; i < zeros.size(); i += 7) zeros[i] = 0.0f;
    const auto zero_bytes = f32_bytes(zeros);
    const MatrixView narrow_zeros = f32_matrix(zero_bytes, 300, cols);
    const auto stats = backend_stats(cpu, narrow_zeros, whole(300, cols), 256);
    EXPECT_TRUE(same_stats(reference_stats(narrow_zeros, whole(300, cols), 256), stats));
    EXPECT_FALSE(std::signbit(stats[0].sum));
  }
}

TEST(CpuBackend, SixteenBitStorageIsObservedOnItsBits) {
  cpu::ScratchPool pool;  // kept between the calls, as a backend instance keeps it
  // In tiles walked row by row (T >= 128), BF16 and F16 extremes and zeros come from a pass over
  // the stored bits, 32 lanes at a time, with a masked tail: extremes of either sign, zeros of
  // both signs, denormals and non-finite values in every lane position.
  struct Palette {
    DType dtype;
    std::vector<uint16_t> finite;      // ±0, ±1, ±smallest denormal, ±largest finite
    std::vector<uint16_t> non_finite;  // ±Inf, ±NaN
  };
  const Palette palettes[] = {
      {DType::kBF16, {0x0000, 0x8000, 0x3f80, 0xbf80, 0x0001, 0x8001, 0x7f7f, 0xff7f}, {0x7f80, 0xff80, 0x7fc0, 0xffc0}},
      {DType::kF16, {0x0000, 0x8000, 0x3c00, 0xbc00, 0x0001, 0x8001, 0x7bff, 0xfbff}, {0x7c00, 0xfc00, 0x7e00, 0xfe00}},
  };
  const uint64_t rows = 9, cols = 70;
  for (const Palette& palette : palettes) {
    for (uint32_t variant = 0; variant < 4; ++variant) {
      std::mt19937_64 rng(variant);
      std::vector<uint16_t> values(rows * cols);
      for (auto& v : values) {
        // Variant 0: zeros only (both signs); 1: everything finite; 2 and 3: rare non-finite.
        const uint64_t pick = rng();
        if (variant == 0) v = palette.finite[pick % 2];
        else if (variant >= 2 && pick % 23 == 0) v = palette.non_finite[(pick >> 8) % 4];
        else v = palette.finite[(pick >> 8) % palette.finite.size()];
      }
      std::vector<std::byte> bytes(values.size() * 2);
      std::memcpy(bytes.data(), values.data(), bytes.size());
      const MatrixView m{palette.dtype, bytes, rows, cols};
      for (uint32_t tile : {8u, 32u, 64u, 128u, 256u}) {
        // Segments of 70, 66 and 20 columns: whole vectors plus an overlapping last vector, or
        // (20 < 32) a zero-padded copy.
        for (const ViewRange range : {whole(rows, cols), ViewRange{1, rows, 3, cols - 1}, ViewRange{0, rows, 5, 25}}) {
          const auto expected = reference_stats(m, range, tile);
          for (cpu::Isa isa : {cpu::Isa::kBaseline, cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
            if (!cpu::isa_supported(isa)) continue;
            SCOPED_TRACE(std::string(dtype_name(palette.dtype)) + " variant " + std::to_string(variant) + " tile " +
                         std::to_string(tile) + " " + std::string(cpu::isa_name(isa)) + " first column " +
                         std::to_string(range.col_begin));
            std::vector<TM_TileStats> out(expected.size());
            ASSERT_TRUE(cpu::tile_stats(pool, m, range, tile, out, 1, isa, {}).ok());
            EXPECT_TRUE(same_stats(expected, out));
          }
        }
      }
    }
  }
}

/// The range of one fp16 scale field of a block type: bytes [offset, offset + 2) of each block.
struct ScaleField {
  uint32_t offset;
  double lo, hi;
};

/// Random blocks of `dtype` whose scale fields lie in their ranges (each with a random sign when
/// `signs`), every other byte random.
std::vector<std::byte> scaled_blocks(DType dtype, uint64_t rows, uint64_t cols, std::initializer_list<ScaleField> fields,
                                     bool signs, uint64_t seed) {
  std::mt19937_64 rng(seed);
  const DTypeInfo& info = dtype_info(dtype);
  std::vector<std::byte> bytes(*dtype_storage_bytes(dtype, rows * cols));
  for (auto& b : bytes) b = static_cast<std::byte>(rng());
  for (uint64_t k = 0; k < rows * cols / info.block_elems; ++k) {
    for (const ScaleField& f : fields) {
      const double value = std::uniform_real_distribution<double>(f.lo, f.hi)(rng);
      const uint16_t h = static_cast<uint16_t>(f32_to_f16(static_cast<float>(value)) | (signs && rng() % 2 ? 0x8000u : 0u));
      std::memcpy(bytes.data() + k * info.block_bytes + f.offset, &h, 2);
    }
  }
  return bytes;
}

TEST(CpuBackend, AMappedCheckpointAtAnOddOffsetGivesTheReferenceBits) {
  // The host hands the CPU backend the mapped bytes of a checkpoint tensor, which start wherever
  // the format put them (here 40 bytes into the file: no multiple of a vector or a cache line).
  // Every storage kind with a kernel of its own (Q4_K with weight-like scales, so its exact
  // shortcut runs), a generic one (Q6_K), non-finite values, row and column offsets, both work
  // splits and every instruction set give the reference's bits.
  cpu::ScratchPool pool;  // kept between the calls, as a backend instance keeps it
  constexpr uint64_t kPrefix = 40;
  const uint64_t rows = 300, cols = 1024;
  testing::TempDir dir;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K}) {
    std::vector<std::byte> stored;
    if (dtype == DType::kQ4_K) {
      stored = scaled_blocks(dtype, rows, cols, {{0, 5e-5, 2e-4}, {2, 2e-4, 1.6e-3}}, false, 61);
    } else if (dtype == DType::kQ6_K) {
      stored = scaled_blocks(dtype, rows, cols, {{208, 1e-4, 1e-3}}, false, 67);
    } else {
      std::mt19937_64 rng(static_cast<uint64_t>(dtype) * 7919);
      std::normal_distribution<float> normal(0.0f, 0.02f);
      std::vector<float> values(rows * cols);
      for (size_t i = 0; i < values.size(); ++i) values[i] = i % 97 == 0 ? 0.0f : normal(rng);
      if (dtype == DType::kF32) {
        values[3] = kNaN;
        values[cols + 5] = kInf;
        values[2 * cols + 7] = -kInf;
      }
      auto encoded = encode_from_f32(dtype, values);
      ASSERT_TRUE(encoded.ok()) << encoded.status().to_string();
      stored = std::move(*encoded);
    }
    const std::filesystem::path path = dir / (std::string(dtype_name(dtype)) + ".bin");
    std::string file(kPrefix, 'h');
    file.append(reinterpret_cast<const char*>(stored.data()), stored.size());
    file.append(24, 't');
    testing::write_bytes(path, file);
    auto map = MappedFile::open(path);
    ASSERT_TRUE(map.ok()) << map.status().to_string();
    const MatrixView m{dtype, (*map)->bytes().subspan(kPrefix, stored.size()), rows, cols};
    for (uint32_t tile : {64u, 256u}) {
      for (const ViewRange range : {whole(rows, cols), ViewRange{7, rows, 0, cols}, ViewRange{0, rows, 256, cols}}) {
        const auto expected = reference_stats(m, range, tile);
        for (cpu::Isa isa : {cpu::Isa::kBaseline, cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
          if (!cpu::isa_supported(isa)) continue;
          for (uint64_t item_bytes : {uint64_t{0}, uint64_t{4096}, uint64_t{1} << 16}) {
            SCOPED_TRACE(std::string(dtype_name(dtype)) + " tile " + std::to_string(tile) + " rows from " +
                         std::to_string(range.row_begin) + " cols from " + std::to_string(range.col_begin) + " " +
                         std::string(cpu::isa_name(isa)) + " item bytes " + std::to_string(item_bytes));
            std::vector<TM_TileStats> out(expected.size());
            const Status status = cpu::tile_stats(pool, m, range, tile, out, 2, isa, {item_bytes});
            ASSERT_TRUE(status.ok()) << status.to_string();
            EXPECT_TRUE(same_stats(expected, out));
          }
        }
      }
    }
  }
}

TEST(CpuBackend, Q8_0ExactShortcutMatchesTheTreeBitForBit) {
  cpu::ScratchPool pool;  // kept between the calls, as a backend instance keeps it
  // Scales within a factor of 4 make every partial sum of the canonical tree exact, so the CPU
  // backend computes large tiles from integer quant sums instead of the tree (tile_stats/quantized.h);
  // wider scales, zero and non-finite scales, all-zero quants and -128 send segments back to the tree.
  const uint64_t rows = 70, cols = 1024 + 96;
  struct Case {
    const char* name;
    double lo, hi;
    bool signs;
    bool positive;  ///< every value positive (no edge blocks): no extreme is a zero
  };
  for (const Case& c : {Case{"narrow", 2.5e-4, 1e-3, false, false}, Case{"narrow signed", 2.5e-4, 1e-3, true, false},
                        Case{"wide", 1e-7, 1.0, true, false}, Case{"subnormal", 1e-7, 4e-7, false, false},
                        Case{"positive", 2.5e-4, 1e-3, false, true}}) {
    auto bytes = scaled_blocks(DType::kQ8_0, rows, cols, {{0, c.lo, c.hi}}, c.signs, 17);
    const uint64_t blocks_per_row = cols / 32;
    auto block = [&](uint64_t row, uint64_t b) { return bytes.data() + (row * blocks_per_row + b) * 34; };
    if (c.positive) {
      for (uint64_t k = 0; k < rows * blocks_per_row; ++k) {
        for (uint64_t i = 2; i < 34; ++i) bytes[k * 34 + i] = (bytes[k * 34 + i] & std::byte{0x7f}) | std::byte{1};
      }
    } else {
      // Edge blocks: zero scale, -0 scale, infinite and NaN scales, all-zero and -128 quants.
      const uint16_t specials[] = {0x0000, 0x8000, 0x7c00, 0x7e00};
      for (uint64_t i = 0; i < 4; ++i) std::memcpy(block(3 + i, 2 + i), &specials[i], 2);
      std::memset(block(9, 0) + 2, 0, 32);
      for (uint64_t b = 0; b < 8; ++b) std::memset(block(10, b) + 2, 0, 32);  // a whole zero segment
      std::memset(block(11, 5) + 2, 0x80, 32);
    }
    const MatrixView m{DType::kQ8_0, bytes, rows, cols};
    for (uint32_t tile : {128u, 256u, 512u, 1024u}) {
      for (const ViewRange& range : {whole(rows, cols), ViewRange{1, rows - 2, 32, cols - 32}, ViewRange{0, rows, 7, cols}}) {
        const auto expected = reference_stats(m, range, tile);
        for (cpu::Isa isa : {cpu::Isa::kBaseline, cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
          if (!cpu::isa_supported(isa)) continue;
          SCOPED_TRACE(std::string(c.name) + " tile " + std::to_string(tile) + " columns from " +
                       std::to_string(range.col_begin) + " " + std::string(cpu::isa_name(isa)));
          std::vector<TM_TileStats> out(expected.size());
          ASSERT_TRUE(cpu::tile_stats(pool, m, range, tile, out, 2, isa).ok());
          EXPECT_TRUE(same_stats(expected, out));
        }
      }
    }
  }
}

TEST(CpuBackend, Q4_KExactShortcutMatchesTheTreeBitForBit) {
  cpu::ScratchPool pool;  // kept between the calls, as a backend instance keeps it
  // When no float32 step of the decoder and no float64 addition of the canonical tree can round,
  // the CPU backend sums Q4_K segments from integer quant sums (tile_stats/quantized.h). dmin a
  // few times d (as ggml makes them) passes that proof; d well above dmin makes the decoder
  // round, and wide and non-finite scales, zero scales, sub-blocks with exact zeros and all-zero
  // segments exercise the proof's edges and the way back to the tree.
  const uint64_t rows = 40, cols = 256 * 5;
  struct Case {
    const char* name;
    double d_lo, d_hi, dmin_lo, dmin_hi;
    bool signs;
  };
  for (const Case& c : {Case{"weight-like", 5e-5, 2e-4, 2e-4, 1.6e-3, false}, Case{"signed", 1e-4, 4e-4, 1e-4, 4e-4, true},
                        Case{"d above dmin", 1e-3, 2e-3, 2e-5, 2e-4, false}, Case{"wide", 1e-7, 1.0, 1e-7, 1.0, true},
                        Case{"subnormal", 1e-7, 5e-5, 1e-7, 5e-5, false}}) {
    auto bytes = scaled_blocks(DType::kQ4_K, rows, cols, {{0, c.d_lo, c.d_hi}, {2, c.dmin_lo, c.dmin_hi}}, c.signs, 23);
    const uint64_t blocks_per_row = cols / 256;
    auto block = [&](uint64_t row, uint64_t b) { return bytes.data() + (row * blocks_per_row + b) * 144; };
    // d or dmin zero, negative zero, infinite, NaN.
    const uint16_t specials[] = {0x0000, 0x8000, 0x7c00, 0x7e00};
    for (uint64_t i = 0; i < 4; ++i) std::memcpy(block(2 + i, i % blocks_per_row) + 2 * (i % 2), &specials[i], 2);
    // Every minimum zero: quant 0 decodes to +0.0 (counted as zeros, and an extreme).
    std::memset(block(7, 1) + 8, 0, 4);
    for (int j = 0; j < 4; ++j) block(7, 1)[4 + j] &= std::byte{0x3f};
    for (int j = 0; j < 4; ++j) block(7, 1)[12 + j] &= std::byte{0x0f};
    // d = dmin, every scale 1 and minimum 5: quant 5 decodes to exactly zero.
    std::memcpy(block(8, 2) + 2, block(8, 2), 2);
    std::memset(block(8, 2) + 4, 1, 4);
    std::memset(block(8, 2) + 8, 5, 4);
    std::memset(block(8, 2) + 12, 0x51, 4);
    // All quants zero and every minimum zero: a zero segment, which the tree decides.
    std::memcpy(block(9, 0) + 4, block(7, 1) + 4, 12);
    std::memset(block(9, 0) + 16, 0, 128);
    // Negative d with positive dmin.
    block(10, 3)[1] |= std::byte{0x80};
    // One quant whose value needs 25 bits (so float32 rounds it) among small ones: only the
    // decode-exactness check refuses it (the squares stay far below 2^53).
    {
      std::byte* blk = block(11, 1);
      const uint16_t d = 0x1772, dmin = 0x037d;  // d_unit 30496, dmin_unit 893 (a subnormal)
      std::memcpy(blk, &d, 2);
      std::memcpy(blk + 2, &dmin, 2);
      std::memset(blk + 4, 249, 4);   // every scale 57 ...
      std::memset(blk + 8, 161, 4);   // ... and every minimum 33
      std::memset(blk + 12, 0x19, 4);
      std::memset(blk + 16, 0, 128);
      blk[16] = std::byte{0x0f};  // 15 * 30496 * 57 - 893 * 33 = 26044611: odd, above 2^24
    }
    const MatrixView m{DType::kQ4_K, bytes, rows, cols};
    for (uint32_t tile : {256u, 512u, 1024u}) {
      for (const ViewRange& range : {whole(rows, cols), ViewRange{1, rows - 2, 256, cols - 256}, ViewRange{0, rows, 7, cols}}) {
        const auto expected = reference_stats(m, range, tile);
        for (cpu::Isa isa : {cpu::Isa::kBaseline, cpu::Isa::kAvx2, cpu::Isa::kAvx512}) {
          if (!cpu::isa_supported(isa)) continue;
          SCOPED_TRACE(std::string(c.name) + " tile " + std::to_string(tile) + " columns from " +
                       std::to_string(range.col_begin) + " " + std::string(cpu::isa_name(isa)));
          std::vector<TM_TileStats> out(expected.size());
          ASSERT_TRUE(cpu::tile_stats(pool, m, range, tile, out, 2, isa).ok());
          EXPECT_TRUE(same_stats(expected, out));
        }
      }
    }
  }
}

TEST(CpuBackend, UnalignedOutputIsStaged) {
  CpuApi cpu;
  const auto bytes = random_storage(DType::kF32, 40 * 40, true, 3);
  const MatrixView m = f32_matrix(bytes, 40, 40);
  TileStatsCall call(m, whole(40, 40), 16);
  std::vector<std::byte> raw(call.out.size() * sizeof(TM_TileStats) + 1);
  call.output.host_out = raw.data() + 1;
  ASSERT_TRUE(cpu.execute(call.op).ok());
  std::vector<TM_TileStats> out(call.out.size());
  std::memcpy(out.data(), raw.data() + 1, out.size() * sizeof(TM_TileStats));
  EXPECT_TRUE(same_stats(reference_stats(m, whole(40, 40), 16), out));
}

TEST(CpuBackend, ReadsInputsFromItsBuffers) {
  CpuApi cpu;
  const auto bytes = random_storage(DType::kBF16, 64 * 96, true, 8);
  TM_Buffer* buffer = nullptr;
  ASSERT_TRUE(cpu.take(cpu.api().buffer_alloc(cpu.backend(), 0, bytes.size() + 16, &buffer)).ok());
  ASSERT_TRUE(cpu.take(cpu.api().buffer_write(cpu.backend(), buffer, 16, bytes.data(), bytes.size())).ok());
  std::vector<std::byte> back(bytes.size());
  ASSERT_TRUE(cpu.take(cpu.api().buffer_read(cpu.backend(), buffer, 16, back.data(), back.size())).ok());
  EXPECT_EQ(back, bytes);
  EXPECT_EQ(cpu.take(cpu.api().buffer_read(cpu.backend(), buffer, 17, back.data(), back.size())).code(),
            StatusCode::kInvalidArgument);
  TM_Buffer* elsewhere = nullptr;
  EXPECT_EQ(cpu.take(cpu.api().buffer_alloc(cpu.backend(), 1, 64, &elsewhere)).code(), StatusCode::kInvalidArgument);

  const MatrixView m{DType::kBF16, bytes, 64, 96};
  TileStatsCall call(m, whole(64, 96), 32);
  call.input.host_data = nullptr;
  call.input.buffer = buffer;
  call.input.byte_offset = 16;
  ASSERT_TRUE(cpu.execute(call.op).ok());
  EXPECT_TRUE(same_stats(reference_stats(m, whole(64, 96), 32), call.out));
  call.input.byte_offset = 17;  // past the end of the buffer
  EXPECT_EQ(cpu.execute(call.op).code(), StatusCode::kInvalidArgument);
  cpu.api().buffer_free(cpu.backend(), buffer);
}

TEST(CpuBackend, ReportsWhatItDid) {
  CpuApi cpu;
  const auto bytes = random_storage(DType::kF16, 32 * 64, true, 4);
  TileStatsCall call(MatrixView{DType::kF16, bytes, 32, 64}, whole(32, 64), 16);
  TM_ExecutionReport report{};
  report.struct_size = sizeof report;
  ASSERT_TRUE(cpu.execute(call.op, 0, TM_EXACT_BITWISE, &report).ok());
  EXPECT_EQ(report.exactness, TM_EXACT_BITWISE);
  EXPECT_EQ(report.bytes_read, bytes.size());
  EXPECT_EQ(report.bytes_written, call.out.size() * sizeof(TM_TileStats));
  EXPECT_GE(report.device_ns, 0.0);
}

// ---- Errors ------------------------------------------------------------------------------------

TEST(CpuBackend, RefusesMalformedInstances) {
  CpuApi cpu;
  const auto bytes = random_storage(DType::kF32, 16 * 16, true, 2);
  const MatrixView m = f32_matrix(bytes, 16, 16);
  {
    TileStatsCall call(m, whole(16, 16), 8);
    call.attrs[4].i = 12;
    EXPECT_EQ(cpu.execute(call.op).code(), StatusCode::kInvalidArgument);
    call.attrs[4].i = 4;
    EXPECT_EQ(cpu.execute(call.op).code(), StatusCode::kInvalidArgument);
  }
  {
    TileStatsCall call(m, whole(16, 16), 8);
    call.attrs[1].i = 17;  // row_end past the matrix
    EXPECT_EQ(cpu.execute(call.op).code(), StatusCode::kInvalidArgument);
  }
  {
    TileStatsCall call(m, whole(16, 16), 8);
    call.input.nbytes -= 4;
    const Status s = cpu.execute(call.op);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("nbytes"), std::string::npos) << s.message();
  }
  {
    TileStatsCall call(m, whole(16, 16), 8);
    call.output.nbytes -= 1;
    EXPECT_EQ(cpu.execute(call.op).code(), StatusCode::kInvalidArgument);
  }
  {
    TileStatsCall call(m, whole(16, 16), 8);
    call.output.shape[0] = sizeof(TM_TileStats);  // one tile's worth for a 2 x 2 grid
    call.output.nbytes = sizeof(TM_TileStats);
    EXPECT_EQ(cpu.execute(call.op).code(), StatusCode::kInvalidArgument);
  }
  {
    TileStatsCall call(m, whole(16, 16), 8);
    call.attrs.pop_back();  // no tile
    call.relink();
    EXPECT_EQ(cpu.execute(call.op).code(), StatusCode::kInvalidArgument);
    call.attrs.push_back(int_attr("colour", 1));
    call.relink();
    EXPECT_EQ(cpu.execute(call.op).code(), StatusCode::kInvalidArgument);
  }
  {
    TileStatsCall call(m, whole(16, 16), 8);
    call.input.rank = 1;
    call.input.shape[0] = 256;
    EXPECT_EQ(cpu.execute(call.op).code(), StatusCode::kInvalidArgument);
  }
  {
    TileStatsCall call(m, whole(16, 16), 8);
    call.op.op = "tm.render@1";
    EXPECT_EQ(cpu.execute(call.op).code(), StatusCode::kUnimplemented);
    TM_CostEstimate cost{};
    cost.struct_size = sizeof cost;
    EXPECT_EQ(cpu.take(cpu.api().estimate(cpu.backend(), &call.op, &cost)).code(), StatusCode::kUnimplemented);
  }
  {
    TileStatsCall call(m, whole(16, 16), 8);
    call.op.input_count = 2;
    EXPECT_EQ(cpu.execute(call.op).code(), StatusCode::kInvalidArgument);
  }
}

TEST(CpuBackend, NonDecodableDTypeIsUnimplemented) {
  CpuApi cpu;
  const std::vector<std::byte> bytes(8 * 2 * 256);
  const MatrixView m{DType::kC64, bytes, 2, 256};
  TileStatsCall call(m, whole(2, 256), 64);
  const Status s = cpu.execute(call.op);
  EXPECT_EQ(s.code(), StatusCode::kUnimplemented);
  EXPECT_NE(s.message().find("C64 is not decodable yet"), std::string::npos) << s.message();
}

TEST(CpuBackend, ExactnessFloor) {
  CpuApi cpu;
  const auto bytes = random_storage(DType::kF32, 8 * 8, true, 2);
  TileStatsCall call(f32_matrix(bytes, 8, 8), whole(8, 8), 8);
  // The CPU is always bitwise, so every floor is met; an unknown floor is an error.
  for (TM_Exactness floor : {TM_EXACT_BITWISE, TM_EXACT_BOUNDED, TM_EXACT_APPROXIMATE}) {
    EXPECT_TRUE(cpu.execute(call.op, 0, floor).ok());
  }
  EXPECT_EQ(cpu.execute(call.op, 0, static_cast<TM_Exactness>(3)).code(), StatusCode::kInvalidArgument);
  // The shared rule refuses a weaker result than the floor, never below it.
  TM_ExecutionPolicy policy{};
  policy.struct_size = sizeof policy;
  policy.exactness_floor = TM_EXACT_BITWISE;
  EXPECT_EQ(ops::check_exactness_floor(TM_EXACT_BOUNDED, 1e-6, policy).code(), StatusCode::kUnimplemented);
  EXPECT_EQ(ops::check_exactness_floor(TM_EXACT_APPROXIMATE, 0, policy).code(), StatusCode::kUnimplemented);
  policy.exactness_floor = TM_EXACT_BOUNDED;
  policy.max_error_bound = 1e-7;
  EXPECT_EQ(ops::check_exactness_floor(TM_EXACT_BOUNDED, 1e-6, policy).code(), StatusCode::kUnimplemented);
  EXPECT_TRUE(ops::check_exactness_floor(TM_EXACT_BOUNDED, 1e-8, policy).ok());
  EXPECT_TRUE(ops::check_exactness_floor(TM_EXACT_BITWISE, 0, policy).ok());
}

// ---- Histogram and decode through the ABI ------------------------------------------------------

struct HistogramCall {
  TM_TensorArg input{}, output{};
  std::vector<TM_Attribute> attrs;
  std::vector<uint64_t> counts;
  TM_OpInstance op{};

  HistogramCall(const TensorView& t, double lo, double hi, uint64_t bins) : counts(bins + 3, 12345) {
    input = tensor_arg(t.dtype, {t.elems}, t.bytes.size());
    input.host_data = t.bytes.data();
    output = tensor_arg(DType::kU64, {bins + 3}, (bins + 3) * 8);
    output.host_out = counts.data();
    attrs = {float_attr("lo", lo), float_attr("hi", hi), int_attr("bins", static_cast<int64_t>(bins))};
    op.struct_size = sizeof op;
    op.op = TM_OP_HISTOGRAM;
    op.inputs = &input;
    op.input_count = 1;
    op.outputs = &output;
    op.output_count = 1;
    op.attributes = attrs.data();
    op.attribute_count = static_cast<uint32_t>(attrs.size());
  }
};

TEST(CpuBackend, EstimatesCountWorkingMemory) {
  // Each thread keeps its own counters and a decoded chunk: the estimate says so, and grows with
  // the bins, so that a memory budget sees the kernel's need, not only its output.
  CpuApi cpu("bandwidth_gbps=10");
  const auto bytes = f32_bytes(std::vector<float>(1 << 12, 1.0f));
  const TensorView t{DType::kF32, bytes, 1 << 12};
  auto working = [&](uint64_t bins) {
    HistogramCall call(t, 0.0, 1.0, bins);
    TM_CostEstimate cost{};
    cost.struct_size = sizeof cost;
    EXPECT_TRUE(cpu.take(cpu.api().estimate(cpu.backend(), &call.op, &cost)).ok());
    EXPECT_EQ(cost.bytes_written, (bins + 3) * sizeof(uint64_t));
    return cost.working_bytes;
  };
  EXPECT_GE(working(1000), 1000 * sizeof(uint64_t) + (uint64_t{1} << 16) * sizeof(float));
  EXPECT_GT(working(60000), working(1000));
}

TEST(CpuBackend, HistogramCountsExactly) {
  CpuApi cpu;
  for (DType dtype : decodable_dtypes()) {
    const uint64_t elems = dtype_info(dtype).block_elems * 200;
    const auto bytes = random_storage(dtype, elems, false, 21);
    const TensorView t{dtype, bytes, elems};
    std::vector<float> values(elems);
    ASSERT_TRUE(decode_to_f32(dtype, bytes, elems, values.data()).ok());
    for (uint64_t bins : {uint64_t{1}, uint64_t{7}, uint64_t{100000}}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " bins " + std::to_string(bins));
      const double lo = -2.0, hi = 3.0;
      // Naive count, written independently of histogram_slot.
      std::vector<uint64_t> naive(bins + 3, 0);
      for (float v : values) {
        if (std::isnan(v)) {
          ++naive[bins + 2];
        } else if (static_cast<double>(v) < lo) {
          ++naive[bins];
        } else if (static_cast<double>(v) > hi) {
          ++naive[bins + 1];
        } else {
          const double b = std::floor((static_cast<double>(v) - lo) * (static_cast<double>(bins) / (hi - lo)));
          ++naive[std::min<uint64_t>(static_cast<uint64_t>(b), bins - 1)];
        }
      }
      HistogramCall call(t, lo, hi, bins);
      const Status s = cpu.execute(call.op, 2);
      ASSERT_TRUE(s.ok()) << s.to_string();
      EXPECT_EQ(call.counts, naive);
      std::vector<uint64_t> reference(bins + 3);
      ASSERT_TRUE(ops::histogram_reference(t, lo, hi, bins, reference).ok());
      EXPECT_EQ(reference, naive);
    }
  }
}

TEST(CpuBackend, HistogramRefusesBadRanges) {
  CpuApi cpu;
  const auto bytes = f32_bytes({1.0f, 2.0f});
  HistogramCall call({DType::kF32, bytes, 2}, 1.0, 0.0, 4);
  EXPECT_EQ(cpu.execute(call.op).code(), StatusCode::kInvalidArgument);
  HistogramCall zero_bins({DType::kF32, bytes, 2}, 0.0, 1.0, 0);
  EXPECT_EQ(cpu.execute(zero_bins.op).code(), StatusCode::kInvalidArgument);
}

TEST(CpuBackend, DecodeMatchesReferenceForEveryDecodableDType) {
  CpuApi cpu;
  for (DType dtype : decodable_dtypes()) {
    const uint64_t elems = dtype_info(dtype).block_elems * 5000;
    const auto bytes = random_storage(dtype, elems, false, 33);
    std::vector<float> expected(elems), actual(elems);
    ASSERT_TRUE(ops::decode_reference({dtype, bytes, elems}, expected).ok());
    TM_TensorArg input = tensor_arg(dtype, {elems}, bytes.size());
    input.host_data = bytes.data();
    TM_TensorArg output = tensor_arg(DType::kF32, {elems / 2, 2}, elems * 4);
    output.host_out = actual.data();
    TM_OpInstance op{};
    op.struct_size = sizeof op;
    op.op = TM_OP_DECODE;
    op.inputs = &input;
    op.input_count = 1;
    op.outputs = &output;
    op.output_count = 1;
    ASSERT_TRUE(cpu.execute(op, 2).ok()) << dtype_name(dtype);
    EXPECT_EQ(std::memcmp(expected.data(), actual.data(), elems * 4), 0) << dtype_name(dtype);
    output.dtype = TM_DTYPE_F16;
    output.nbytes = elems * 2;
    EXPECT_EQ(cpu.execute(op).code(), StatusCode::kInvalidArgument) << dtype_name(dtype);
  }
}

}  // namespace
}  // namespace tensormorph
