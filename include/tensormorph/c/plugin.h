/* Tensormorph backend plugin ABI: the one contract every compute backend implements, built-in
 * or loaded from a shared library.
 *
 * Stability rules (read these before changing anything):
 *  - The host calls tm_plugin_abi_version() first and refuses the plugin, without calling any other
 *    function, when the major versions differ. Minor versions only append.
 *  - Every struct starts with `size_t struct_size`, set by whoever fills the struct to the size it
 *    knows. Readers never read past the struct_size they were given; fields beyond it are taken as
 *    zero. New fields are only ever appended; tables of functions likewise.
 *  - Every call that can fail returns a TM_Error* (NULL means success), owned by the plugin and
 *    released with the plugin's error_destroy. A plugin never aborts, exits or throws across the ABI.
 *  - Only plain C types cross the boundary: no C++ objects, no internal layouts of either side.
 *    Data layouts that do cross (TM_TileStats) are fixed here and versioned with the ABI.
 */
#ifndef TENSORMORPH_C_PLUGIN_H_
#define TENSORMORPH_C_PLUGIN_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TM_PLUGIN_ABI_MAJOR 1
/* Minor 4: tm.render_tile@1's colormap carries a palette above its scale (TM_COLORMAP_PALETTE_SHIFT);
 * a plugin built for 1.3 refuses those values, so the host does not send them to it. */
#define TM_PLUGIN_ABI_MINOR 5

/* Symbol names a plugin library exports. */
#define TM_PLUGIN_ABI_VERSION_SYMBOL "tm_plugin_abi_version"
#define TM_PLUGIN_GET_API_SYMBOL "tm_plugin_get_api"

/* ------------------------------------------------------------------------------------------------
 * Status and errors */

/** Error categories; values are stable. */
typedef enum TM_StatusCode {
  TM_STATUS_OK = 0,
  TM_STATUS_INVALID_ARGUMENT = 1,
  TM_STATUS_NOT_FOUND = 2,
  TM_STATUS_IO_ERROR = 3,
  TM_STATUS_FORMAT_ERROR = 4,
  TM_STATUS_UNSUPPORTED = 5,
  TM_STATUS_UNIMPLEMENTED = 6,       /* the backend lacks this operation/dtype: the host re-places it */
  TM_STATUS_RESOURCE_EXHAUSTED = 7,  /* out of device memory or over budget: the host re-places it */
  TM_STATUS_DEVICE_LOST = 8,         /* the device died: the host re-places and stops using it */
  TM_STATUS_INTERNAL = 9,
  TM_STATUS_OUTPUT_TOO_SMALL = 10    /* since 1.2: a data-dependent output needs more room (see below) */
} TM_StatusCode;

/** An error object owned by the plugin that produced it. */
typedef struct TM_Error TM_Error;

/* ------------------------------------------------------------------------------------------------
 * Data types (stable numeric ids; append only) */

/** Element types as they cross the ABI. */
typedef enum TM_DType {
  TM_DTYPE_INVALID = 0,
  TM_DTYPE_BOOL = 1, TM_DTYPE_U8 = 2, TM_DTYPE_I8 = 3, TM_DTYPE_U16 = 4, TM_DTYPE_I16 = 5,
  TM_DTYPE_U32 = 6, TM_DTYPE_I32 = 7, TM_DTYPE_U64 = 8, TM_DTYPE_I64 = 9,
  TM_DTYPE_F16 = 10, TM_DTYPE_BF16 = 11, TM_DTYPE_F32 = 12, TM_DTYPE_F64 = 13,
  TM_DTYPE_F8_E4M3 = 14, TM_DTYPE_F8_E5M2 = 15, TM_DTYPE_F8_E8M0 = 16,
  TM_DTYPE_F4_E2M1 = 17, TM_DTYPE_F6_E2M3 = 18, TM_DTYPE_F6_E3M2 = 19, TM_DTYPE_C64 = 20,
  TM_DTYPE_Q4_0 = 32, TM_DTYPE_Q4_1 = 33, TM_DTYPE_Q5_0 = 34, TM_DTYPE_Q5_1 = 35,
  TM_DTYPE_Q8_0 = 36, TM_DTYPE_Q8_1 = 37,
  TM_DTYPE_Q2_K = 38, TM_DTYPE_Q3_K = 39, TM_DTYPE_Q4_K = 40, TM_DTYPE_Q5_K = 41,
  TM_DTYPE_Q6_K = 42, TM_DTYPE_Q8_K = 43,
  TM_DTYPE_IQ2_XXS = 44, TM_DTYPE_IQ2_XS = 45, TM_DTYPE_IQ3_XXS = 46, TM_DTYPE_IQ1_S = 47,
  TM_DTYPE_IQ4_NL = 48, TM_DTYPE_IQ3_S = 49, TM_DTYPE_IQ2_S = 50, TM_DTYPE_IQ4_XS = 51,
  TM_DTYPE_IQ1_M = 52, TM_DTYPE_TQ1_0 = 53, TM_DTYPE_TQ2_0 = 54, TM_DTYPE_MXFP4 = 55
} TM_DType;

/* ------------------------------------------------------------------------------------------------
 * Operations. Identified by stable versioned strings; every id and attribute name a plugin needs is
 * a constant below, and docs/COMPUTE.md defines each operation. Attributes are TM_Attribute values
 * looked up by name: integers in `i`, floating-point values in `f`.
 *
 *  "tm.decode@1"     in[0]: tensor (any decodable dtype, contiguous, whole blocks)
 *                    out[0]: F32, same element count.
 *  "tm.tile_stats@1" in[0]: 2-D tensor [rows, cols] (contiguous row-major), attributes
 *                    row_begin, row_end, col_begin, col_end (the view), tile (T, a power of two);
 *                    out[0]: TM_TileStats per T x T tile of the view, row-major over tiles.
 *  "tm.histogram@1"  in[0]: tensor; attributes lo, hi (f64), bins (i64);
 *                    out[0]: U64[bins + 3]: bins, then below-lo, above-hi, NaN counts.
 *  "tm.exact_summary@1" in[0]: tensor of F64, I32, U32, I64 or U64 (the scalar types whose values
 *                    float32 cannot all hold), contiguous; out[0]: one TM_ExactSummary.
 *  "tm.render_tile@1" in[0]: the matrix [rows, cols] (source TM_RENDER_SOURCE_VALUES, any decodable
 *                    dtype) or a row-major grid of TM_TileStats as U8[grid_rows, grid_cols, 72]
 *                    (source TM_RENDER_SOURCE_TILE_STATS); attributes source, row_begin, col_begin,
 *                    cell, magnify, stat, colormap (i64: scale | palette << 4), lo, hi (f64);
 *                    out[0]: U8[256, 256, 4], RGBA pixels, row-major.
 *  "tm.render_tile_sampled@1" the same, each pixel from the first row of its block (approximate).
 *  "tm.radix_histogram@1" in[0]: contiguous elements, any decodable dtype; in[1]: U64[P] prefixes,
 *                    P in [0, TM_RADIX_MAX_PREFIXES] (P = 0: no prefix, one histogram of all);
 *                    attributes key (a TM_RADIX_KEY_*), shift, bits (i64), center (f64, key
 *                    DEVIATION only); out[0]: U64[max(P, 1) * 2^bits], out[1]: U64[4].
 *                    Every finite element has an order key (32 or 64 bits, see TM_RADIX_KEY_*);
 *                    out[0][p * 2^bits + d] counts the finite elements whose key's digit
 *                    (key >> shift) & (2^bits - 1) is d and, when P > 0, whose key >> (shift +
 *                    bits) equals in[1][p]. out[1] counts the input's finite, NaN, +Inf and -Inf
 *                    elements. Counts are exact: radix selection of order statistics (quantiles,
 *                    the k-th largest magnitude) is a few of these passes on any backend.
 *  "tm.channel_stats@1" in[0]: the matrix [rows, cols], any decodable dtype; out[0]: one
 *                    TM_TileStats per row as U8[rows * 72], out[1]: one per column as
 *                    U8[cols * 72]. Row sums: the halving tree over bit_ceil(cols) slots; column
 *                    sums: the contiguous pairwise tree over bit_ceil(rows) row slots (slot r
 *                    holds row r's value when finite, else +0.0; docs/COMPUTE.md).
 *  "tm.top_k@1"      in[0]: contiguous elements, any decodable dtype; attribute k (i64, 1..
 *                    TM_TOP_K_MAX); out[0]: U64[k] flat element indices, out[1]: F32[k] values,
 *                    data-dependent: the min(k, finite elements) finite elements of largest
 *                    |value|, ordered by |value| descending, then by index ascending (so the
 *                    answer is one set in one order on every backend); each output reports the
 *                    bytes written, and the entries past them hold UINT64_MAX and the quiet NaN
 *                    0x7fc00000.
 *  "tm.diff_stats@1" in[0] A, in[1] B: contiguous elements, any decodable dtype each (they may
 *                    differ), the same element count n; attributes a_offset, b_offset (f64,
 *                    default 0: a non-zero offset turns that side's decoded value v into the
 *                    float32 sum v + (float)offset), element_offset (i64, default 0: the flat index
 *                    of in[0]'s first element in the whole tensor); out[0]: one TM_DiffStats per
 *                    chunk of TM_DIFF_CHUNK elements from in[0]'s start (the last may be partial),
 *                    U8[ceil(n / 65536) * 136]. A chunk's sums: lane l in [0, 256) adds the terms
 *                    of its elements 256 s + l, s ascending, from +0.0 (pairs not both finite
 *                    skipped), then the halving tree over the 256 lanes (docs/COMPUTE.md).
 *  "tm.subtract@1"   in[0], in[1] as for tm.diff_stats@1; attributes a_offset, b_offset;
 *                    out[0]: F32[n], the float32 difference a - b of each pair (after the
 *                    offsets), every NaN written as the quiet NaN 0x7fc00000.
 *  "tm.spectrum@1"   in[0] [rows, cols], any decodable dtype, contiguous row-major, every value
 *                    finite; out[0]: F64[r], r = min(rows, cols), its singular values in
 *                    descending order, computed in float64 by a backward-stable SVD; out[1]:
 *                    F64[r], each value's absolute error bound. Bounded: |s_i - sigma_i| <= out[1][i].
 *  "tm.spectrum_gram@1"  as tm.spectrum@1, from the eigenvalues of the float64 Gram matrix of
 *                    the smaller side (s_i = sqrt(max(lambda_i, 0))); the bound grows as
 *                    sigma_1^2 / sigma_i for small values.
 *  "tm.spectrum_randomized@1"  in[0] as tm.spectrum@1; attribute k; out[0], out[1]: F64[k], the k
 *                    largest singular values of a randomized range finder (seeded, oversampled,
 *                    with power iterations) and each one's a-posteriori bound:
 *                    s_i <= sigma_i <= s_i + out[1][i].
 *
 * Data-dependent outputs (since 1.2). An output whose size depends on the data (a top-k list, a
 * spectrum) is passed with a capacity: nbytes is the room the host made, from the bound the
 * operation's definition states. The backend writes a prefix and reports the bytes it wrote in
 * TM_ExecutionReport.output_nbytes[i]. When the room is too small it writes nothing, sets
 * output_nbytes[i] to the bytes it needs and returns TM_STATUS_OUTPUT_TOO_SMALL; the host grows the
 * buffer and runs the instance again on the same backend. Outputs of a determined size report
 * their nbytes. */
#define TM_OP_DECODE "tm.decode@1"
#define TM_OP_TILE_STATS "tm.tile_stats@1"
#define TM_OP_HISTOGRAM "tm.histogram@1"
#define TM_OP_EXACT_SUMMARY "tm.exact_summary@1"
#define TM_OP_RENDER_TILE "tm.render_tile@1"
#define TM_OP_RENDER_TILE_SAMPLED "tm.render_tile_sampled@1"
#define TM_OP_RADIX_HISTOGRAM "tm.radix_histogram@1"
#define TM_OP_TOP_K "tm.top_k@1"
#define TM_OP_CHANNEL_STATS "tm.channel_stats@1"
#define TM_OP_DIFF_STATS "tm.diff_stats@1"
#define TM_OP_SUBTRACT "tm.subtract@1"
#define TM_OP_SPECTRUM "tm.spectrum@1"
#define TM_OP_SPECTRUM_GRAM "tm.spectrum_gram@1"
#define TM_OP_SPECTRUM_RANDOMIZED "tm.spectrum_randomized@1"

/* Attribute names. */
#define TM_ATTR_ROW_BEGIN "row_begin" /* tile_stats, render_tile: first row of the view / tile */
#define TM_ATTR_ROW_END "row_end"     /* tile_stats: one past the last row of the view */
#define TM_ATTR_COL_BEGIN "col_begin" /* tile_stats, render_tile: first column */
#define TM_ATTR_COL_END "col_end"     /* tile_stats: one past the last column of the view */
#define TM_ATTR_TILE "tile"           /* tile_stats: the tile size T */
#define TM_ATTR_LO "lo"               /* histogram: lower edge; render_tile: lower end of the colour range */
#define TM_ATTR_HI "hi"               /* histogram: upper edge; render_tile: upper end of the colour range */
#define TM_ATTR_BINS "bins"           /* histogram: number of bins */
#define TM_ATTR_SOURCE "source"       /* render_tile: a TM_RENDER_SOURCE_* value */
#define TM_ATTR_CELL "cell"           /* render_tile: elements per pixel side (values), 1 for statistics */
#define TM_ATTR_MAGNIFY "magnify"     /* render_tile: pixels per element side */
#define TM_ATTR_STAT "stat"           /* render_tile: a TM_PIXEL_STAT_* value */
#define TM_ATTR_COLORMAP "colormap"   /* render_tile: TM_COLORMAP(scale, palette), see below */
#define TM_ATTR_KEY "key"             /* radix_histogram: a TM_RADIX_KEY_* value */
#define TM_ATTR_SHIFT "shift"         /* radix_histogram: the lowest bit of the digit counted */
#define TM_ATTR_BITS "bits"           /* radix_histogram: the digit's width, 1..TM_RADIX_MAX_BITS */
#define TM_ATTR_CENTER "center"       /* radix_histogram: the centre of TM_RADIX_KEY_DEVIATION */
#define TM_ATTR_K "k"                 /* top_k: how many elements; spectrum_randomized: how many singular values */
#define TM_ATTR_A_OFFSET "a_offset"   /* diff_stats, subtract: added to in[0]'s decoded values (f64, default 0) */
#define TM_ATTR_B_OFFSET "b_offset"   /* diff_stats, subtract: added to in[1]'s decoded values (f64, default 0) */
#define TM_ATTR_ELEMENT_OFFSET "element_offset" /* diff_stats: flat index of in[0]'s first element (i64, default 0) */

/* Values of tm.render_tile@1's attributes. */
#define TM_RENDER_TILE_PIXELS 256      /* tiles are this many pixels on a side */
#define TM_RENDER_MAX_CELL 4096        /* largest cell */
#define TM_RENDER_MAX_MAGNIFY 256      /* largest magnification */
#define TM_RENDER_SOURCE_VALUES 0      /* pixels from the matrix' values */
#define TM_RENDER_SOURCE_TILE_STATS 1  /* pixels from a grid of TM_TileStats, one per pixel */
#define TM_PIXEL_STAT_MEAN 0
#define TM_PIXEL_STAT_ABSMAX 1
#define TM_PIXEL_STAT_MIN 2
#define TM_PIXEL_STAT_MAX 3
#define TM_PIXEL_STAT_ENVELOPE 4       /* the signed extreme: min or max, whichever is larger in magnitude */
#define TM_PIXEL_STAT_STD 5
#define TM_PIXEL_STAT_NON_FINITE 6     /* a mask of NaN / +Inf / -Inf */
/* The colormap attribute is a scale (how a value becomes a position in [0, 1]) in its low 4 bits and,
 * since 1.4, a palette (the colours of those positions) above them. Palette 0 is the scale's own
 * table, the colours of 1.3, so a 1.3 value means what it meant. A sequential palette goes with the
 * sequential and log scales, a diverging one with the diverging scale; other pairs are invalid. */
#define TM_COLORMAP_DIVERGING 0        /* position (v / max(|lo|, |hi|) + 1) / 2: zero in the middle; own table cool-warm */
#define TM_COLORMAP_SEQUENTIAL 1       /* position (v - lo) / (hi - lo); own table viridis */
#define TM_COLORMAP_LOG_MAGNITUDE 2    /* position of log10 |v| in [log10 lo, log10 hi]; own table magma */
#define TM_COLORMAP_SCALE_MASK 0xF     /* since 1.4: colormap & TM_COLORMAP_SCALE_MASK is the scale */
#define TM_COLORMAP_PALETTE_SHIFT 4    /* since 1.4: colormap >> TM_COLORMAP_PALETTE_SHIFT is the palette */
#define TM_PALETTE_DEFAULT 0           /* the scale's own table (drawn from 7 to 10 points) */
#define TM_PALETTE_VIRIDIS 1           /* sequential, perceptually uniform */
#define TM_PALETTE_CIVIDIS 2           /* sequential, perceptually uniform, designed for colour-vision deficiency */
#define TM_PALETTE_MAGMA 3             /* sequential, perceptually uniform */
#define TM_PALETTE_INFERNO 4           /* sequential, perceptually uniform */
#define TM_PALETTE_GREYS 5             /* sequential, white to black (ColorBrewer) */
#define TM_PALETTE_COOLWARM 6          /* diverging, blue to red (Moreland) */
#define TM_PALETTE_RDBU 7              /* diverging, red to blue (ColorBrewer) */
#define TM_PALETTE_LAST TM_PALETTE_RDBU
/** The colormap attribute of a scale and a palette. */
#define TM_COLORMAP(scale, palette) ((int64_t)(scale) | ((int64_t)(palette) << TM_COLORMAP_PALETTE_SHIFT))
/** The largest colormap value (not every value below it is valid). */
#define TM_COLORMAP_MAX TM_COLORMAP(TM_COLORMAP_LOG_MAGNITUDE, TM_PALETTE_LAST)

/* Order keys of tm.radix_histogram@1 (of a finite element x decoded to float32, u its bits). */
#define TM_RADIX_KEY_VALUE 0      /* 32 bits: u ^ 0x80000000 for x >= +0, ~u below: orders x, -0 below +0 */
#define TM_RADIX_KEY_MAGNITUDE 1  /* 32 bits: u & 0x7fffffff, the bits of |x|: orders |x| */
#define TM_RADIX_KEY_DEVIATION 2  /* 64 bits: the bits of the float64 |(double)x - center| */
#define TM_RADIX_MAX_BITS 16      /* widest digit */
#define TM_RADIX_MAX_PREFIXES 16  /* most prefixes of one instance */
#define TM_TOP_K_MAX 1048576      /* largest k of tm.top_k@1 */
#define TM_DIFF_CHUNK 65536       /* elements of one TM_DiffStats record of tm.diff_stats@1 */

/** Most inputs and outputs an operation has (the sizes of the per-argument arrays below). */
#define TM_MAX_OP_INPUTS 4
#define TM_MAX_OP_OUTPUTS 4

/** Statistics of one tile. NaN and +-Inf are counted and excluded from min/max/sum/sum_sq.
 *  Sums follow the canonical order of docs/COMPUTE.md, so bitwise-exact backends agree. */
typedef struct TM_TileStats {
  uint64_t count;    /* elements in the tile */
  uint64_t nan;      /* NaN elements */
  uint64_t pos_inf;  /* +Inf elements */
  uint64_t neg_inf;  /* -Inf elements */
  uint64_t zeros;    /* elements equal to zero (either sign) */
  double sum;        /* sum of finite elements */
  double sum_sq;     /* sum of squares of finite elements */
  float min;         /* smallest finite element (+Inf when none) */
  float max;         /* largest finite element (-Inf when none) */
  float absmax;      /* largest |finite element| (0 when none) */
  uint32_t reserved; /* zero */
} TM_TileStats;

/** The output of "tm.exact_summary@1": a whole tensor's statistics in the tensor's own domain.
 *  Integer extremes and sums are exact integers; F64 extremes are the stored doubles. The float64
 *  fields follow docs/COMPUTE.md's definition of the operation (bitwise reproducible). The layout
 *  is fixed by the operation's id: a changed layout is a new id. */
typedef struct TM_ExactSummary {
  uint64_t count;       /* elements */
  uint64_t nan;         /* NaN elements (F64 only) */
  uint64_t pos_inf;     /* +Inf elements (F64 only) */
  uint64_t neg_inf;     /* -Inf elements (F64 only) */
  uint64_t zeros;       /* elements equal to zero (either sign) */
  int64_t min_int;      /* I32/I64: the smallest element, exact (0 when empty or not signed) */
  int64_t max_int;      /* I32/I64: the largest element, exact */
  uint64_t min_uint;    /* U32/U64: the smallest element, exact (0 when empty or not unsigned) */
  uint64_t max_uint;    /* U32/U64: the largest element, exact */
  uint64_t absmax_uint; /* integer types: the largest |element|, exact (2^63 for INT64_MIN) */
  uint64_t sum_low;     /* integer types: the exact sum, a 128-bit two's-complement integer: low half */
  int64_t sum_high;     /* ... and high half */
  double min;           /* smallest finite element as float64 (integers rounded to nearest); +Inf when none */
  double max;           /* largest finite element as float64; -Inf when none */
  double absmax;        /* largest |finite element| as float64; 0 when none */
  double mean;          /* mean of the finite elements; 0 when none */
  double std;           /* population standard deviation of the finite elements; 0 when none */
} TM_ExactSummary;

/** The output of "tm.diff_stats@1": one chunk of TM_DIFF_CHUNK pairs (a, b), the decoded float32
 *  values after the offsets. The sums follow docs/COMPUTE.md's order, so bitwise-exact backends
 *  agree. The layout is fixed by the operation's id: a changed layout is a new id. */
typedef struct TM_DiffStats {
  uint64_t pairs;           /* elements in the chunk */
  uint64_t finite_pairs;    /* pairs with both values finite */
  uint64_t differing;       /* finite pairs with a != b as numbers (+0 == -0), plus class mismatches */
  uint64_t bits_differing;  /* pairs whose float32 bit patterns differ (NaN payloads included) */
  uint64_t class_mismatch;  /* pairs whose classes differ (finite / NaN / +Inf / -Inf) */
  uint64_t nan_a, nan_b, inf_a, inf_b;  /* non-finite counts per side */
  uint64_t max_abs_index;   /* global flat index of the first finite pair of largest |a-b|; UINT64_MAX if none */
  double max_abs_diff;      /* that |(double)a - (double)b| (0 if none) */
  double sum_diff, sum_sq_diff, sum_sq_a, sum_sq_b, sum_ab;  /* over finite pairs */
  float a_at_max, b_at_max; /* the pair at max_abs_index (0 if none) */
} TM_DiffStats;

#ifdef __cplusplus
static_assert(sizeof(TM_DiffStats) == 136, "TM_DiffStats is 136 bytes");
#else
_Static_assert(sizeof(TM_DiffStats) == 136, "TM_DiffStats is 136 bytes");
#endif

/** How a backend supports an (operation, dtype, shape class). */
typedef enum TM_SupportLevel {
  TM_SUPPORT_NONE = 0,
  TM_SUPPORT_PARTIAL = 1, /* supported with a restriction, explained in `reason` */
  TM_SUPPORT_FULL = 2
} TM_SupportLevel;

/** What a result is guaranteed to be; ordered from strongest to weakest. */
typedef enum TM_Exactness {
  TM_EXACT_BITWISE = 0,     /* identical bits to the CPU reference */
  TM_EXACT_BOUNDED = 1,     /* within a stated relative error bound of the reference */
  TM_EXACT_APPROXIMATE = 2  /* an approximation (sampling, sketches): needs the user's consent */
} TM_Exactness;

/** Broad shape classes so that query answers can be cached. */
typedef enum TM_ShapeClass {
  TM_SHAPE_VECTOR = 0, /* rank 0 or 1 */
  TM_SHAPE_MATRIX = 1, /* rank 2 */
  TM_SHAPE_TENSOR = 2  /* rank 3 and above */
} TM_ShapeClass;

/** The question `query` answers. */
typedef struct TM_OpQuery {
  size_t struct_size;
  const char* op;            /* e.g. TM_OP_TILE_STATS */
  TM_DType input_dtype;      /* dtype of in[0] */
  TM_ShapeClass shape_class; /* shape class of in[0] */
  /* Since 1.2: every input (in[0] repeated), for operations of more than one input. */
  uint32_t input_count;
  TM_DType input_dtypes[TM_MAX_OP_INPUTS];
  TM_ShapeClass input_shape_classes[TM_MAX_OP_INPUTS];
} TM_OpQuery;

/** The answer of `query`. Must depend only on the query (the host caches it). */
typedef struct TM_OpSupport {
  size_t struct_size;
  TM_SupportLevel level;
  TM_Exactness exactness;
  double error_bound;  /* relative bound for TM_EXACT_BOUNDED, else 0 */
  char reason[256];    /* why NONE/PARTIAL, NUL-terminated */
} TM_OpSupport;

/* ------------------------------------------------------------------------------------------------
 * Devices, memory and buffers */

/** Memory space id 0 is always host memory; a backend numbers its own spaces from 1. */
#define TM_MEMORY_SPACE_HOST 0u

/** Facts about the device a backend drives, as data. */
typedef struct TM_DeviceTraits {
  size_t struct_size;
  char device_name[128];            /* e.g. "pthread-x86_64 (PoCL)", NUL-terminated */
  uint64_t memory_bytes;            /* capacity of the backend's own memory (0 when it uses host memory) */
  uint32_t memory_space_count;      /* spaces it owns, numbered 1..count (0: it only uses host memory) */
  uint32_t host_memory_visible;     /* 1 when kernels read host memory directly (no copy needed) */
  double host_to_device_gbps;       /* link bandwidth host -> device (0 when host_memory_visible) */
  double device_to_host_gbps;       /* link bandwidth device -> host */
  uint32_t bandwidth_measured;      /* 1 when the bandwidths were measured, 0 when declared */
  uint32_t compute_units;           /* cores / SMs / CUs */
  /* Since 1.5: 1 when its kernels run on the host's own CPU cores (the CPU backend; a software
   * device such as PoCL or lavapipe). Such backends compete for those cores, so the scheduler never
   * splits one operation between two of them. 0 (and for older plugins): compute of its own. */
  uint32_t runs_on_host_cores;
} TM_DeviceTraits;

/** A buffer in one of the backend's memory spaces, owned by the plugin. */
typedef struct TM_Buffer TM_Buffer;

/** One tensor argument of an operation instance. Exactly one of host_data / buffer is set. */
typedef struct TM_TensorArg {
  size_t struct_size;
  TM_DType dtype;
  uint32_t rank;
  uint64_t shape[8];          /* row-major dims, rank of them */
  const void* host_data;      /* host memory (inputs) when the data has not been copied */
  void* host_out;             /* host memory to write (outputs) */
  TM_Buffer* buffer;          /* device buffer, when resident */
  uint64_t byte_offset;       /* into host_data/host_out/buffer */
  uint64_t nbytes;            /* bytes of the argument */
  /* Since 1.1, unused since 1.2: hosts set them to zero and backends ignore them. The host reads
   * files itself and hands backends host memory. */
  int32_t host_file;
  uint32_t host_file_valid;
  uint64_t host_file_offset;
} TM_TensorArg;

/** A named scalar attribute of an operation instance. */
typedef struct TM_Attribute {
  size_t struct_size;
  const char* name;
  int64_t i;  /* integer attributes */
  double f;   /* floating-point attributes */
} TM_Attribute;

/** One operation to estimate or execute. */
typedef struct TM_OpInstance {
  size_t struct_size;
  const char* op;
  const TM_TensorArg* inputs;
  uint32_t input_count;
  const TM_TensorArg* outputs;
  uint32_t output_count;
  const TM_Attribute* attributes;
  uint32_t attribute_count;
} TM_OpInstance;

/** What `estimate` returns: compute only; the host models transfers itself. */
typedef struct TM_CostEstimate {
  size_t struct_size;
  double compute_ns;
  uint64_t bytes_read;
  uint64_t bytes_written;
  /* Since 1.3: memory the execution needs beyond its inputs and outputs (per-thread counters,
   * staging, decode buffers), at its peak. The host checks outputs plus this against the memory
   * budget. Older backends leave it zero. */
  uint64_t working_bytes;
} TM_CostEstimate;

/** Constraints on one execution. */
typedef struct TM_ExecutionPolicy {
  size_t struct_size;
  TM_Exactness exactness_floor; /* weakest exactness the user accepted; refuse anything weaker */
  double max_error_bound;       /* for TM_EXACT_BOUNDED results */
  uint32_t max_threads;         /* 0: the backend decides */
  uint64_t memory_budget_bytes; /* 0: no limit beyond the device's */
} TM_ExecutionPolicy;

/** What `execute` reports. */
typedef struct TM_ExecutionReport {
  size_t struct_size;
  TM_Exactness exactness;  /* what the result achieved */
  double error_bound;
  double device_ns;        /* time measured on the device (0 when unknown) */
  uint64_t bytes_read;
  uint64_t bytes_written;
  /* Since 1.2: bytes written to each output (data-dependent outputs: see "Data-dependent outputs";
   * after TM_STATUS_OUTPUT_TOO_SMALL, the bytes each output needs). */
  uint64_t output_nbytes[TM_MAX_OP_OUTPUTS];
} TM_ExecutionReport;

/** Opaque backend instance. */
typedef struct TM_Backend TM_Backend;

/** Arguments to backend_create. */
typedef struct TM_BackendCreateArgs {
  size_t struct_size;
  uint32_t device_index;  /* which device of this kind */
  const char* options;    /* "key=value;key=value" from the user's settings, may be NULL */
} TM_BackendCreateArgs;

/* ------------------------------------------------------------------------------------------------
 * The function table. Append only; a NULL entry means "not provided". */

typedef struct TM_PluginApi {
  size_t struct_size;
  uint32_t abi_major;
  uint32_t abi_minor;
  const char* name;       /* short stable name, e.g. "opencl": used in placement records and constraints */
  const char* version;    /* the plugin's own version string */

  TM_StatusCode (*error_code)(const TM_Error* error);
  const char* (*error_message)(const TM_Error* error);
  void (*error_destroy)(TM_Error* error);

  /* How many devices of this kind exist; 0 with a message in `why_none` (buffer of `why_len`). */
  TM_Error* (*device_count)(uint32_t* count, char* why_none, size_t why_len);
  TM_Error* (*backend_create)(const TM_BackendCreateArgs* args, TM_Backend** out);
  void (*backend_destroy)(TM_Backend* backend);
  TM_Error* (*device_traits)(TM_Backend* backend, TM_DeviceTraits* out);

  TM_Error* (*query)(TM_Backend* backend, const TM_OpQuery* query, TM_OpSupport* out);
  TM_Error* (*estimate)(TM_Backend* backend, const TM_OpInstance* op, TM_CostEstimate* out);

  TM_Error* (*buffer_alloc)(TM_Backend* backend, uint32_t memory_space, uint64_t bytes, TM_Buffer** out);
  void (*buffer_free)(TM_Backend* backend, TM_Buffer* buffer);
  TM_Error* (*buffer_write)(TM_Backend* backend, TM_Buffer* buffer, uint64_t offset, const void* src,
                            uint64_t bytes);
  TM_Error* (*buffer_read)(TM_Backend* backend, TM_Buffer* buffer, uint64_t offset, void* dst, uint64_t bytes);

  TM_Error* (*execute)(TM_Backend* backend, const TM_OpInstance* op, const TM_ExecutionPolicy* policy,
                       TM_ExecutionReport* report);
} TM_PluginApi;

/** Packs a version for tm_plugin_abi_version: major in the high 16 bits. */
#define TM_PLUGIN_ABI_VERSION_PACK(major, minor) (((uint32_t)(major) << 16) | (uint32_t)(minor))

/** Exported by every plugin: returns TM_PLUGIN_ABI_VERSION_PACK of the ABI it was built against.
 *  Must have no side effects; the host calls it before anything else. */
typedef uint32_t (*TM_PluginAbiVersionFn)(void);

/** Exported by every plugin: the function table for a host speaking `host_major.host_minor`,
 *  or NULL when the plugin cannot serve that host. */
typedef const TM_PluginApi* (*TM_PluginGetApiFn)(uint32_t host_major, uint32_t host_minor);

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* TENSORMORPH_C_PLUGIN_H_ */
