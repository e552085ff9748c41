// Reading and validating TM_OpInstance arguments of the core operations, shared by backends so
// that every backend refuses exactly the same malformed instances with the same messages.
// Readers honour struct_size: they never read past it and take later fields as zero.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

#include "compute/ops/radix_histogram.h"
#include "compute/ops/reference.h"
#include "tensormorph/c/plugin.h"
#include "tensormorph/dtype.h"
#include "tensormorph/status.h"

namespace tensormorph::ops {

/// The core operations.
enum class CoreOp {
  kDecode, kTileStats, kHistogram, kExactSummary, kRadixHistogram, kTopK, kChannelStats, kDiffStats, kSubtract
};

/// The core operation named `id` ("tm.tile_stats@1"), or nullopt.
std::optional<CoreOp> core_op_from_id(std::string_view id);

/// A copy of `*source` that reads at most `source->struct_size` bytes (the rest zero) and
/// reports sizeof(T) as its struct_size.
template <typename T>
T read_abi_struct(const T* source) {
  T value{};
  std::memcpy(&value, source, std::min(source->struct_size, sizeof(T)));
  value.struct_size = sizeof(T);
  return value;
}

/// Copies `value` into `*dest` without writing past `dest->struct_size`, keeping that size.
template <typename T>
void write_abi_struct(const T& value, T* dest) {
  const size_t size = dest->struct_size;
  std::memcpy(static_cast<void*>(dest), &value, std::min(size, sizeof(T)));
  dest->struct_size = size;
}

/// Fills the host's execution report, if it passed one: what the result achieved, the measured
/// time and the bytes moved (never writing past the host's struct_size).
inline void write_execution_report(TM_ExecutionReport* dest, TM_Exactness exactness, double device_ns,
                                   uint64_t bytes_read, uint64_t bytes_written) {
  if (dest == nullptr) return;
  TM_ExecutionReport r{};
  r.struct_size = sizeof r;
  r.exactness = exactness;
  r.device_ns = device_ns;
  r.bytes_read = bytes_read;
  r.bytes_written = bytes_written;
  write_abi_struct(r, dest);
}

/// One validated tensor argument.
struct TensorArgument {
  TM_TensorArg arg{};   ///< the argument as read (struct_size normalised)
  DType dtype = DType::kF32;
  uint64_t elems = 0;   ///< product of the shape
};

/// tm.decode@1's validated arguments.
struct DecodeArgs {
  TensorArgument input;
  TensorArgument output;  ///< F32, same element count
};

/// tm.tile_stats@1's validated arguments.
struct TileStatsArgs {
  TensorArgument input;   ///< rank 2
  TensorArgument output;  ///< U8[tiles * sizeof(TM_TileStats)]
  uint64_t rows = 0;
  uint64_t cols = 0;
  ViewRange range;
  uint32_t tile = 0;
  TileGrid grid;
};

/// tm.histogram@1's validated arguments.
struct HistogramArgs {
  TensorArgument input;
  TensorArgument output;  ///< U64[bins + 3]
  double lo = 0;
  double hi = 0;
  uint64_t bins = 0;
};

/// tm.exact_summary@1's validated arguments.
struct ExactSummaryArgs {
  TensorArgument input;   ///< F64, I32, U32, I64 or U64
  TensorArgument output;  ///< U8[sizeof(TM_ExactSummary)]
};

/// tm.radix_histogram@1's validated arguments.
struct RadixHistogramArgs {
  TensorArgument input;     ///< any decodable, contiguous elements
  TensorArgument prefixes;  ///< U64[P]
  TensorArgument counts;    ///< U64[max(P, 1) * 2^bits]
  TensorArgument classes;   ///< U64[4]
  RadixParams params;
};

/// tm.top_k@1's validated arguments.
struct TopKArgs {
  TensorArgument input;    ///< any decodable, contiguous elements
  TensorArgument indices;  ///< U64[k]
  TensorArgument values;   ///< F32[k]
  uint64_t k = 0;
};

/// tm.channel_stats@1's validated arguments.
struct ChannelStatsArgs {
  TensorArgument input;  ///< rank 2
  TensorArgument rows_out;  ///< U8[rows * sizeof(TM_TileStats)]
  TensorArgument cols_out;  ///< U8[cols * sizeof(TM_TileStats)]
  uint64_t rows = 0;
  uint64_t cols = 0;
};

/// A value transform of one side of tm.diff_stats@1 / tm.subtract@1: decoded v becomes the float32
/// sum v + value when `active` (the attribute was non-zero).
struct DiffOffset {
  bool active = false;
  float value = 0;
};

/// tm.diff_stats@1's and tm.subtract@1's validated arguments.
struct DiffArgs {
  TensorArgument a;       ///< in[0], any decodable dtype
  TensorArgument b;       ///< in[1], any decodable dtype, the same element count
  TensorArgument output;  ///< diff_stats: U8[chunks * sizeof(TM_DiffStats)]; subtract: F32[n]
  DiffOffset a_offset, b_offset;
  uint64_t element_offset = 0;  ///< diff_stats: the flat index of in[0]'s first element
  uint64_t elems = 0;           ///< n
  uint64_t chunks = 0;          ///< diff_stats: ceil(n / TM_DIFF_CHUNK)
};

/// Largest k of tm.spectrum_randomized@1.
inline constexpr uint64_t kSpectrumMaxK = 65536;

/// How singular values are computed: one operation each.
enum class SpectrumMethod {
  kSvd,         ///< tm.spectrum@1: a Householder reduction to bidiagonal form and its values by dqds
  kGram,        ///< tm.spectrum_gram@1: eigenvalues of the float64 Gram matrix of the smaller side (dsyrk, dsyevd)
  kRandomized,  ///< tm.spectrum_randomized@1: the k largest, by a randomized range finder
};

/// The method an operation id names, or nullopt when it is not a spectrum operation.
std::optional<SpectrumMethod> spectrum_method_of(std::string_view op_id);
/// The operation id of `method`.
const char* spectrum_op_id(SpectrumMethod method);

/// A spectrum operation's validated arguments.
struct SpectrumArgs {
  SpectrumMethod method = SpectrumMethod::kSvd;
  TensorArgument input;   ///< [rows, cols], any decodable dtype
  TensorArgument values;  ///< F64[count]
  TensorArgument bounds;  ///< F64[count]
  uint64_t rows = 0;
  uint64_t cols = 0;
  uint64_t count = 0;  ///< min(rows, cols), or k
};

/// Checks a spectrum instance as every backend must: a matrix of whole blocks per row, no empty
/// side, k in [1, min(rows, cols, kSpectrumMaxK)] for the randomized rung, outputs F64[count].
Result<SpectrumArgs> parse_spectrum(const TM_OpInstance& op);

/// Checks the instance's operation, argument counts, dtypes, shapes, nbytes, data pointers and
/// attributes for tm.decode@1; INVALID_ARGUMENT naming what is wrong.
Result<DecodeArgs> parse_decode(const TM_OpInstance& op);
/// Same for tm.tile_stats@1 (including the tile size and that the view lies in the matrix).
Result<TileStatsArgs> parse_tile_stats(const TM_OpInstance& op);
/// Same for tm.histogram@1 (including lo < hi finite and bins >= 1).
Result<HistogramArgs> parse_histogram(const TM_OpInstance& op);

/// Same for tm.exact_summary@1 (an input dtype exact_summary_supported() accepts).
Result<ExactSummaryArgs> parse_exact_summary(const TM_OpInstance& op);

/// Same for tm.radix_histogram@1 (the digit inside the key, the prefix count, the outputs' sizes).
Result<RadixHistogramArgs> parse_radix_histogram(const TM_OpInstance& op);

/// Same for tm.top_k@1 (k in [1, TM_TOP_K_MAX], both outputs of k entries).
Result<TopKArgs> parse_top_k(const TM_OpInstance& op);

/// Same for tm.channel_stats@1 (a matrix of whole blocks per row, outputs of one record per row / column).
Result<ChannelStatsArgs> parse_channel_stats(const TM_OpInstance& op);

/// Same for tm.diff_stats@1 (two inputs of one element count, finite offsets, element_offset + n
/// representable, the output of one record per chunk).
Result<DiffArgs> parse_diff_stats(const TM_OpInstance& op);

/// Same for tm.subtract@1 (two inputs of one element count, finite offsets, an F32 output of n).
Result<DiffArgs> parse_subtract(const TM_OpInstance& op);

/// OK when a result of `achieved` exactness (with relative `achieved_bound` when BOUNDED) meets
/// `policy`'s floor; UNIMPLEMENTED when it is weaker; INVALID_ARGUMENT for an unknown floor.
Status check_exactness_floor(TM_Exactness achieved, double achieved_bound, const TM_ExecutionPolicy& policy);

}  // namespace tensormorph::ops
