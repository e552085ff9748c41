// The kernel families as the host sees them: plain structs describing one launch, and launch
// functions returning the runtime's error code. Included by host C++ files (no device code here)
// and by the kernel sources (*.cu), which define the launch functions.
#pragma once

#include <cstdint>

#include "backends/cuda/gpu_runtime.h"
#include "tensormorph/c/plugin.h"

namespace tm_gpu {

/// The input dtypes the kernels decode (every other dtype is answered NONE by query).
enum class KernelDType : uint8_t { kF32, kF16, kBF16, kF8E4M3, kF8E5M2, kQ8_0, kQ4_0, kQ4_K, kQ6_K };

/// Threads of a tile_stats row block (8 warps of 32 lanes).
constexpr uint32_t kTileBlockThreads = 256;

/// One row block's contribution to a tile: its rows' sums already merged in the canonical order.
struct TilePartial {
  double sum;            ///< halving sum of the block's row sums
  double sum_sq;         ///< same for the squares
  uint32_t nan;          ///< NaN elements
  uint32_t pos_inf;      ///< +Inf elements
  uint32_t neg_inf;      ///< -Inf elements
  uint32_t zeros;        ///< finite zeros (either sign)
  int32_t min_key;       ///< order key of the smallest finite value (key of +Inf when none)
  int32_t max_key;       ///< order key of the largest finite value (key of -Inf when none)
  uint32_t absmax_bits;  ///< float bits of the largest |finite value| (0 when none)
  uint32_t reserved;     ///< zero
};

/// One launch of tile statistics over a band of tile rows of a view.
///
/// Tile (i, j) of the band covers rows [i*tile, (i+1)*tile) of the band (clipped to view_rows)
/// and columns [col_begin + j*tile, ...) clipped to col_end. A tile is split among
/// `partials_per_tile` row blocks: block k takes the tile's rows k, k + partials_per_tile, ...,
/// which is a subtree of the canonical halving order over the tile's rows.
struct TileJob {
  const uint8_t* data = nullptr;  ///< first row of the band (column 0 of the matrix)
  uint64_t row_bytes = 0;         ///< bytes of one matrix row
  uint64_t view_rows = 0;         ///< rows of the band inside the view
  uint64_t col_begin = 0;         ///< first column of the view
  uint64_t col_end = 0;           ///< one past its last column
  uint64_t tiles_across = 0;      ///< tiles per tile row
  uint64_t block_base = 0;        ///< index of this launch's first row block
  uint32_t tile = 0;              ///< T, a power of two in [8, 4096]
  uint32_t partials_per_tile = 0; ///< row blocks per tile (T / rows per block)
  TilePartial* partials = nullptr;  ///< [tiles * partials_per_tile], indexed by row block
  const float* f8_table = nullptr;  ///< 256 decoded values, for the F8 dtypes
};

/// How a tile_stats launch maps lanes onto the tile.
struct TilePlan {
  bool fast = false;               ///< aligned vector path (else the element-wise generic path)
  uint32_t lanes_per_segment = 0;  ///< G: lanes sharing one row of one tile
  uint32_t words_per_lane = 0;     ///< N: 4-element words each lane loads (fast path)
  uint32_t rows_per_block = 0;     ///< rows one partial covers: a warp unit's 32 / G (fast), a block's R (generic)
  uint32_t block_threads = 0;      ///< threads per block
  uint32_t max_blocks = 0;         ///< fast path: persistent blocks to launch at most (0: one per 8 units)
  bool q4_k_sums = false;          ///< Q4_K tiles of whole super-blocks: tile_stats_q4_k.cu's exact integer sums
};

/// Chooses the launch shape for `tile` over a view starting at column `col_begin`. `aligned`: the
/// data and every row start are aligned for the dtype's word loads and col_begin is a multiple
/// of 4, so the fast path may load whole words. `force_generic` selects the generic path
/// regardless (tests, benchmarks).
TilePlan plan_tile_stats(KernelDType dtype, uint32_t tile, uint64_t col_begin, bool aligned, bool force_generic);

/// Launches `partials` = tiles * (T / plan.rows_per_block) partial reductions of `plan`: row blocks
/// [job.block_base, job.block_base + partials) on the generic path, warp units on the fast path.
cudaError_t launch_tile_rows(KernelDType dtype, const TilePlan& plan, const TileJob& job, uint64_t partials,
                             cudaStream_t stream);

/// Merges each tile's partials (in the canonical order) into `out[first_tile + t]` for the
/// `tiles` tiles of `job` (tile t of the band is row block range [t * ppt, (t + 1) * ppt)).
cudaError_t launch_tile_finalize(const TileJob& job, uint64_t tiles, TM_TileStats* out, cudaStream_t stream);

/// How NaN results of float arithmetic look on the host CPU (decode reproduces its bits).
struct HostNan {
  uint32_t default_nan = 0x7fc00000u;  ///< bits of 0.0f * Inf
  bool propagate = true;               ///< an operand NaN comes through (quieted)
};

/// One launch of tm.decode@1 over `elems` elements.
struct DecodeJob {
  const uint8_t* in = nullptr;      ///< first block
  float* out = nullptr;             ///< elems floats
  uint64_t elems = 0;               ///< whole blocks
  bool aligned = false;             ///< `in` and `out` are 16-byte aligned
  HostNan nan;                      ///< host NaN conventions
  const float* f8_table = nullptr;  ///< for the F8 dtypes
};

/// Decodes job.elems elements.
cudaError_t launch_decode(KernelDType dtype, const DecodeJob& job, cudaStream_t stream);

/// One launch of tm.histogram@1 over `elems` elements, adding into `counts` (bins + 3).
struct HistogramJob {
  const uint8_t* in = nullptr;       ///< first block
  uint64_t elems = 0;                ///< whole blocks
  double lo = 0;                     ///< range start
  double hi = 0;                     ///< range end
  double scale = 0;                  ///< bins / (hi - lo), computed once on the host
  uint64_t bins = 0;                 ///< bins inside [lo, hi]
  unsigned long long* counts = nullptr;  ///< bins + 3 counters, added to
  bool aligned = false;              ///< `in` is 16-byte aligned
  const float* f8_table = nullptr;   ///< for the F8 dtypes
};

/// Bins job.elems elements.
cudaError_t launch_histogram(KernelDType dtype, const HistogramJob& job, cudaStream_t stream);

/// One launch of tm.radix_histogram@1 over `elems` elements, adding into `counts` and `classes`.
struct RadixJob {
  const uint8_t* in = nullptr;          ///< first block
  uint64_t elems = 0;                   ///< whole blocks
  uint32_t key = 0;                     ///< a TM_RADIX_KEY_* value
  uint32_t shift = 0;                   ///< the digit's lowest key bit
  uint32_t bits = 0;                    ///< the digit's width
  uint32_t prefix_count = 0;            ///< P (0: every finite element counts into row 0)
  double center = 0;                    ///< of the deviation key
  uint64_t prefixes[TM_RADIX_MAX_PREFIXES] = {};  ///< the key bits above the digit, per row
  unsigned long long* counts = nullptr;   ///< max(P, 1) << bits counters, added to
  unsigned long long* classes = nullptr;  ///< finite, NaN, +Inf, -Inf counters, added to
  /// Zeroed device memory for kRadixCopies copies of the counters as 32-bit values, or null: with
  /// it, blocks count into copy blockIdx % kRadixCopies and a second kernel adds the copies into
  /// `counts`, which spreads the atomics of a top digit over many addresses where a few hot bins
  /// would serialise them.
  unsigned int* private_counts = nullptr;
  bool aligned = false;                 ///< `in` is 16-byte aligned
  const float* f8_table = nullptr;      ///< for the F8 dtypes
};

/// Copies of the counters a radix histogram spreads its atomics over (RadixJob::private_counts).
constexpr uint32_t kRadixCopies = 64;
/// Counters above which a radix histogram no longer fits a block's shared memory.
constexpr uint64_t kRadixSharedCounters = 12288;

/// Counts job.elems elements (into the private copies when the job has them).
cudaError_t launch_radix_histogram(KernelDType dtype, const RadixJob& job, cudaStream_t stream);
/// Adds the job's private copies into job.counts, once every launch over the input is enqueued.
cudaError_t launch_radix_merge_copies(const RadixJob& job, cudaStream_t stream);

/// One candidate of tm.top_k@1 (top_k.cu): its magnitude key, value and flat index.
struct TopKCandidate {
  uint32_t key;    ///< bits of |x|
  float value;     ///< the decoded value
  uint64_t index;  ///< flat element index
};

/// Elements of one tie segment of tm.top_k@1: ties at the threshold key are taken by position,
/// so the elements equal to it are counted per aligned run of this many elements.
constexpr uint64_t kTopKSegmentElems = uint64_t{1} << 16;

/// One launch of tm.top_k@1's collection over `elems` elements starting at flat index `base`:
/// every finite element with key >= `lo`, and (when `tie`) those with key == `tie_key` whose
/// segment ((base + i) / kTopKSegmentElems) is at most `tie_segment`, are appended to
/// `out[atomicAdd(count)]` (order unspecified; the host sorts). Entries past `capacity` are dropped.
struct TopKJob {
  const uint8_t* in = nullptr;
  uint64_t elems = 0;
  uint64_t base = 0;
  uint32_t lo = 0;
  bool tie = false;
  uint32_t tie_key = 0;
  uint64_t tie_segment = 0;
  TopKCandidate* out = nullptr;
  unsigned long long* count = nullptr;
  uint64_t capacity = 0;
  unsigned long long* segment_counts = nullptr;  ///< for launch_top_k_segment_counts: per segment, added to
  bool aligned = false;
  const float* f8_table = nullptr;
};

/// Appends the job's candidates.
cudaError_t launch_top_k_collect(KernelDType dtype, const TopKJob& job, cudaStream_t stream);
/// Adds to job.segment_counts[s] (s the absolute segment) the elements of segment s in this launch
/// whose key is job.tie_key (a finite key).
cudaError_t launch_top_k_segment_counts(KernelDType dtype, const TopKJob& job, cudaStream_t stream);

/// Per column of tm.channel_stats@1, what the column kernels accumulate with atomics.
struct ColumnCounts {
  unsigned long long nan, pos_inf, neg_inf, zeros;
  int32_t min_key, max_key;  ///< order keys (gpu_device.cuh)
  uint32_t absmax_bits;      ///< bits of the largest |finite value| (0 when none)
  uint32_t reserved;
};

/// One band of rows of tm.channel_stats@1 (channel_stats.cu). The band starts at matrix row
/// `first_row`, a multiple of `block_rows` (a power of two); row kernels write one TM_TileStats per
/// row; column kernels sum each column over the band's aligned blocks of `block_rows` rows (subtrees
/// of the pairwise tree) into `partial_sum/sq[block * cols + col]` and add counts and extremes to
/// `counts[col]`.
struct ChannelJob {
  const uint8_t* data = nullptr;  ///< the band's first row
  uint64_t row_bytes = 0;
  uint64_t rows = 0;              ///< rows in this band
  uint64_t cols = 0;
  uint64_t first_row = 0;         ///< matrix row of the band's first row
  uint64_t row_slots = 0;         ///< bit_ceil(cols): the halving tree of a row
  uint32_t block_rows = 0;        ///< rows per column partial, a power of two <= kChannelMaxBlockRows
  bool aligned = false;           ///< data and row_bytes aligned for the dtype's element loads
  TM_TileStats* row_stats = nullptr;  ///< [rows] of this band
  double* partial_sum = nullptr;      ///< [matrix blocks * cols]
  double* partial_sq = nullptr;
  ColumnCounts* counts = nullptr;     ///< [cols]
  const float* f8_table = nullptr;
};

/// Rows of a column partial at most (the column kernel's counter holds log2 of it levels in registers).
constexpr uint32_t kChannelMaxBlockRows = 1024;

/// Sets counts[0..cols) to their empty values.
cudaError_t launch_channel_init(ColumnCounts* counts, uint64_t cols, cudaStream_t stream);
/// Row statistics of the band.
cudaError_t launch_channel_rows(KernelDType dtype, const ChannelJob& job, cudaStream_t stream);
/// Column partials and counts of the band.
cudaError_t launch_channel_columns(KernelDType dtype, const ChannelJob& job, cudaStream_t stream);
/// Merges the `blocks` partials of each column (the pairwise tree over bit_ceil(rows) / block_rows
/// slots, the ones past `blocks` +0.0) with its counts into out[0..cols); `rows` is the matrix's.
cudaError_t launch_channel_merge(const ChannelJob& job, uint64_t rows, uint64_t blocks, TM_TileStats* out,
                                 cudaStream_t stream);

/// One input of tm.diff_stats@1 / tm.subtract@1 in a launch (diff.cu).
struct DiffSideJob {
  const uint8_t* data = nullptr;    ///< the launch's first element (whole blocks)
  KernelDType dtype = KernelDType::kF32;
  bool aligned = false;             ///< `data` 16-byte aligned
  bool offset = false;              ///< add `offset_value` to each decoded value
  float offset_value = 0;
  const float* f8_table = nullptr;  ///< for the F8 dtypes
};

/// One launch over `elems` pairs starting at a chunk boundary: diff_stats writes one TM_DiffStats
/// per chunk of TM_DIFF_CHUNK pairs into `stats`; subtract writes `elems` floats into `difference`.
struct DiffJob {
  DiffSideJob a, b;
  uint64_t elems = 0;
  uint64_t first_index = 0;          ///< global flat index of the launch's first pair
  HostNan nan;                       ///< NaN bits of the block types' arithmetic and the offsets, as on the host
  TM_DiffStats* stats = nullptr;     ///< diff_stats: [ceil(elems / TM_DIFF_CHUNK)]
  float* difference = nullptr;       ///< subtract: [elems]
  bool difference_aligned = false;   ///< `difference` 16-byte aligned
};

/// tm.diff_stats@1's records of the launch's chunks (one 256-thread block per chunk).
cudaError_t launch_diff_stats(const DiffJob& job, cudaStream_t stream);
/// tm.subtract@1's differences of the launch's pairs.
cudaError_t launch_subtract(const DiffJob& job, cudaStream_t stream);

/// Reads `bytes` (a multiple of 16) at `data` and folds them into `*sink` (device memory bandwidth probe).
cudaError_t launch_read_probe(const void* data, uint64_t bytes, unsigned long long* sink, cudaStream_t stream);

/// Elements per block and bytes per block of a kernel dtype.
struct KernelBlock {
  uint32_t elems;  ///< elements per storage block
  uint32_t bytes;  ///< bytes per storage block
};
/// The block geometry of `dtype` (scalars are blocks of one element).
KernelBlock kernel_block(KernelDType dtype);

/// Widens `n` float32 values to float64 and lowers *first_bad to the smallest index of a NaN or
/// an infinity among them (left as it was when there is none).
cudaError_t launch_widen_checked(const float* in, double* out, uint64_t n, unsigned long long* first_bad,
                                 cudaStream_t stream);

/// Copies the upper triangle of the column-major n x n block at `in` (leading dimension `ld`) to
/// `out` (n x n, leading dimension n) and zeros `out` below its diagonal: R of a QR factorization.
cudaError_t launch_upper_triangle(const double* in, uint64_t ld, double* out, uint64_t n, cudaStream_t stream);

}  // namespace tm_gpu
