// The tm.tile_stats@1 row-block kernels, shared by the dtype families (tile_stats_float.cu,
// tile_stats_ggml.cu). Both follow docs/COMPUTE.md's canonical order exactly:
//
// A row of a tile has T slots s = e + 4 * (k0 + G * r): e picks the element of a 4-element word,
// k0 the lane among the G lanes sharing the row, r the lane's word. The halving order adds the
// highest slot bits first, so each lane first reduces its N words (r, halving over r) for each
// e, the G lanes then combine with shuffles (xor G/2, ..., 1), and the word's elements last:
// (e0 + e2) + (e1 + e3). The tile's rows are slots too: a block reduces rows
// k1 + K1 * u (u < R) by halving over u in shared memory; the K1 block partials of a tile are
// merged by tile_stats_finalize.cu, halving over k1. Every step is one of the canonical additions.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#if !defined(__HIP_PLATFORM_AMD__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif

#include "backends/cuda/device_decode.cuh"

namespace tm_gpu {

/// Counts, extremes and absmax of the finite values a lane (then a warp, a block) has seen.
/// A plain aggregate (it also lives in shared memory): start from empty().
struct LaneCounts {
  uint32_t nan;
  uint32_t pos_inf;
  uint32_t neg_inf;
  uint32_t zeros;
  int32_t min_key;
  int32_t max_key;
  uint32_t absmax;

  /// No values seen.
  __device__ __forceinline__ static LaneCounts empty() { return {0, 0, 0, 0, kKeyPosInf, kKeyNegInf, 0}; }

  /// Counts one decoded value; returns its slot (the value widened, +0.0 when not finite).
  __device__ __forceinline__ double classify(uint32_t bits) {
    const uint32_t magnitude = bits & 0x7fffffffu;
    if (magnitude >= 0x7f800000u) {
      if (magnitude > 0x7f800000u) {
        ++nan;
      } else if (bits >> 31) {
        ++neg_inf;
      } else {
        ++pos_inf;
      }
      return 0.0;
    }
    zeros += magnitude == 0 ? 1u : 0u;
    const int32_t key = order_key(bits);
    min_key = min(min_key, key);
    max_key = max(max_key, key);
    absmax = max(absmax, magnitude);
    return static_cast<double>(__uint_as_float(bits));
  }

  /// Folds `other` in (exact in any order).
  __device__ __forceinline__ void merge(const LaneCounts& other) {
    nan += other.nan;
    pos_inf += other.pos_inf;
    neg_inf += other.neg_inf;
    zeros += other.zeros;
    min_key = min(min_key, other.min_key);
    max_key = max(max_key, other.max_key);
    absmax = max(absmax, other.absmax);
  }

  /// Merges the counts of the 32 lanes of a warp; every lane ends with the total.
  __device__ __forceinline__ void merge_warp() {
#pragma unroll
    for (int m = kLanes / 2; m >= 1; m /= 2) {
      LaneCounts other;
      other.nan = shuffle_xor(nan, m);
      other.pos_inf = shuffle_xor(pos_inf, m);
      other.neg_inf = shuffle_xor(neg_inf, m);
      other.zeros = shuffle_xor(zeros, m);
      other.min_key = shuffle_xor(min_key, m);
      other.max_key = shuffle_xor(max_key, m);
      other.absmax = shuffle_xor(absmax, m);
      merge(other);
    }
  }
};

/// docs/COMPUTE.md's halving_sum over the first N (a power of two) values at `a`. Recursion on
/// N keeps every index a compile-time constant, so the values stay in registers.
template <int N>
__device__ __forceinline__ double halving_n(double* a) {
  if constexpr (N == 1) {
    return a[0];
  } else {
#pragma unroll
    for (int i = 0; i < N / 2; ++i) a[i] = a[i] + a[i + N / 2];
    return halving_n<N / 2>(a);
  }
}

/// halving_n over a whole array; destroys `a`.
template <int N>
__device__ __forceinline__ double halving(double (&a)[N]) {
  return halving_n<N>(a);
}

// ---- Fast accumulators: zeros and extremes of words known to be complete ---------------------
// They assume every value is finite; the caller proves it afterwards from the lane's sums of
// squares (a non-finite value makes them Inf or NaN, finite values cannot: a float's square is
// below 2^256) and takes the careful path otherwise. Their min/max may pick either zero when
// both signs occur, so a zero extreme is recomputed exactly from the words. absmax is not
// tracked: for finite values it is the larger magnitude of the two extremes.

/// Per-element accumulator on float bits (F32, F8, the block types, and 16-bit types on HIP).
struct FastFloat {
  float lo = __builtin_huge_valf();
  float hi = -__builtin_huge_valf();
  uint32_t zero_count = 0;

  __device__ __forceinline__ void add_bits(uint32_t bits) {
    const float v = __uint_as_float(bits);
    lo = fminf(lo, v);
    hi = fmaxf(hi, v);
    zero_count += v == 0.0f ? 1u : 0u;
  }
  template <class D>
  __device__ __forceinline__ void add_word(const typename D::Word& w, const float* table) {
#pragma unroll
    for (int e = 0; e < 4; ++e) add_bits(D::bits(w, e, table));
  }
  __device__ __forceinline__ uint32_t zeros() const { return zero_count; }
  __device__ __forceinline__ uint32_t min_bits() const { return __float_as_uint(lo); }
  __device__ __forceinline__ uint32_t max_bits() const { return __float_as_uint(hi); }
};

#if !defined(__HIP_PLATFORM_AMD__)
/// Packed accumulator for two 16-bit floats per register (bf16x2 / half2 instructions).
template <bool kBrain>
struct Fast16 {
  using Pair = std::conditional_t<kBrain, __nv_bfloat162, __half2>;
  static constexpr uint32_t kInf = kBrain ? 0x7f80u : 0x7c00u;
  uint32_t lo = kInf | (kInf << 16);
  uint32_t hi = (kInf | 0x8000u) | ((kInf | 0x8000u) << 16);
  uint32_t zero_count = 0;  // two 16-bit float counters (exact: a lane counts at most 64 per half)

  __device__ static Pair as_pair(uint32_t w) {
    Pair p;
    memcpy(&p, &w, sizeof p);
    return p;
  }
  __device__ static uint32_t as_bits(Pair p) {
    uint32_t w;
    memcpy(&w, &p, sizeof w);
    return w;
  }
  __device__ static uint32_t to_float_bits(uint32_t h) {
    if constexpr (kBrain) return h << 16;
    return half_bits_to_float_bits(h);
  }
  __device__ __forceinline__ void add_pair(uint32_t w) {
    const Pair v = as_pair(w);
    lo = as_bits(__hmin2(as_pair(lo), v));
    hi = as_bits(__hmax2(as_pair(hi), v));
    zero_count = as_bits(__hadd2(as_pair(zero_count), __heq2(v, as_pair(0u))));
  }
  template <class D>
  __device__ __forceinline__ void add_word(const uint2& w, const float*) {
    add_pair(w.x);
    add_pair(w.y);
  }
  __device__ __forceinline__ uint32_t zeros() const {
    const Pair z = as_pair(zero_count);
    return static_cast<uint32_t>(__low2float(z)) + static_cast<uint32_t>(__high2float(z));
  }
  __device__ __forceinline__ uint32_t min_bits() const {
    const uint32_t a = to_float_bits(lo & 0xffffu), b = to_float_bits(lo >> 16);
    return order_key(a) <= order_key(b) ? a : b;
  }
  __device__ __forceinline__ uint32_t max_bits() const {
    const uint32_t a = to_float_bits(hi & 0xffffu), b = to_float_bits(hi >> 16);
    return order_key(a) >= order_key(b) ? a : b;
  }
};
#endif

/// The fast accumulator of a decoder.
template <class D>
struct FastOf {
  using type = FastFloat;
};
#if !defined(__HIP_PLATFORM_AMD__)
template <bool kBrain>
struct FastOf<Dec16<kBrain>> {
  using type = Fast16<kBrain>;
};
#endif

/// A finite element of a word, widened (the fast path's conversion).
template <class D>
__device__ __forceinline__ double widen(const typename D::Word& w, int e, const float* table) {
#if !defined(__HIP_PLATFORM_AMD__)
  if constexpr (std::is_same_v<D, DecF16> || std::is_same_v<D, DecBF16>) {
    // One conversion straight from the 16-bit half of the word (exact for every finite value;
    // the fast path sees no other).
    const uint32_t word = e < 2 ? w.x : w.y;
    const unsigned short h = static_cast<unsigned short>((e & 1) ? word >> 16 : word & 0xffffu);
    double x;
    if constexpr (std::is_same_v<D, DecF16>) {
      asm("cvt.f64.f16 %0, %1;" : "=d"(x) : "h"(h));
    } else {
      asm("cvt.f64.bf16 %0, %1;" : "=d"(x) : "h"(h));
    }
    return x;
  }
#endif
  return static_cast<double>(__uint_as_float(D::bits(w, e, table)));
}

// ---- The block epilogue shared by both kernels ------------------------------------------------

/// What a unit or a row block writes: its merged sums and counts.
__device__ __forceinline__ TilePartial make_partial(double sum, double sum_sq, const LaneCounts& counts) {
  TilePartial p;
  p.sum = sum;
  p.sum_sq = sum_sq;
  p.nan = counts.nan;
  p.pos_inf = counts.pos_inf;
  p.neg_inf = counts.neg_inf;
  p.zeros = counts.zeros;
  p.min_key = counts.min_key;
  p.max_key = counts.max_key;
  p.absmax_bits = counts.absmax;
  p.reserved = 0;
  return p;
}

/// Row sums of a block sit in row_sum/row_sq[0, rows); lane counts are per thread. Reduces the
/// rows by halving (the tile's row tree restricted to this block) and writes the block's partial.
__device__ __forceinline__ void finish_block(double* row_sum, double* row_sq, LaneCounts* warp_counts,
                                             LaneCounts counts, uint32_t rows, TilePartial* out) {
  counts.merge_warp();
  const uint32_t warp = threadIdx.x / kLanes;
  if (threadIdx.x % kLanes == 0) warp_counts[warp] = counts;
  __syncthreads();
  for (uint32_t p = rows / 2; p >= 1; p /= 2) {
    if (threadIdx.x < p) {
      row_sum[threadIdx.x] = row_sum[threadIdx.x] + row_sum[threadIdx.x + p];
      row_sq[threadIdx.x] = row_sq[threadIdx.x] + row_sq[threadIdx.x + p];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    LaneCounts total = warp_counts[0];
    for (uint32_t w = 1; w < blockDim.x / kLanes; ++w) total.merge(warp_counts[w]);
    *out = make_partial(row_sum[0], row_sq[0], total);
  }
}

/// Where a row block sits: its tile, its residue k1 and its first row.
struct BlockPlace {
  uint64_t tile_row;
  uint64_t tile_col;
  uint32_t k1;
};

__device__ __forceinline__ BlockPlace place_block(const TileJob& job) {
  const uint64_t block = job.block_base + blockIdx.x;
  const uint64_t tile = block / job.partials_per_tile;
  return {tile / job.tiles_across, tile % job.tiles_across, static_cast<uint32_t>(block % job.partials_per_tile)};
}

/// Loads the F8 table into shared memory (a no-op for other decoders).
template <class D>
__device__ __forceinline__ const float* stage_table(const TileJob& job, float* shared_table) {
  if constexpr (D::kTable) {
    for (uint32_t i = threadIdx.x; i < 256; i += blockDim.x) shared_table[i] = job.f8_table[i];
    __syncthreads();
    return shared_table;
  }
  return nullptr;
}

// ---- The fast kernel: whole words, vector loads ------------------------------------------------

/// Sums of one lane's N words whose elements are all finite. The first halving level is formed
/// as the values are widened, which keeps half as many float64 values live.
template <class D, int N>
__device__ __forceinline__ void fast_sums(const typename D::Word (&raw)[N], const float* table, double (&sum)[4],
                                          double (&sq)[4]) {
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    if constexpr (N == 1) {
      sum[e] = widen<D>(raw[0], e, table);
      sq[e] = sum[e] * sum[e];
    } else {
      double a[N / 2], q[N / 2];
#pragma unroll
      for (int r = 0; r < N / 2; ++r) {
        const double x = widen<D>(raw[r], e, table), y = widen<D>(raw[r + N / 2], e, table);
        a[r] = x + y;
        q[r] = __fma_rn(x, x, y * y);  // = x * x + y * y: both products are exact (<= 48 bits)
      }
      sum[e] = halving(a);
      sq[e] = halving(q);
    }
  }
}

/// Counts and sums of one lane's N words, element by element (some value is not finite).
template <class D, int N>
__device__ __forceinline__ void careful_sums(const typename D::Word (&raw)[N], const float* table,
                                             LaneCounts& counts, double (&sum)[4], double (&sq)[4]) {
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    double a[N], q[N];
#pragma unroll
    for (int r = 0; r < N; ++r) {
      a[r] = counts.classify(D::bits(raw[r], e, table));
      q[r] = a[r] * a[r];
    }
    sum[e] = halving(a);
    sq[e] = halving(q);
  }
}

/// Counts and sums of one lane's words of a ragged edge tile, element by element with bounds.
template <class D, int N>
__device__ __forceinline__ void ragged_sums(const uint8_t* row, uint64_t first_col, uint64_t stride,
                                            uint64_t col_end, const float* table, LaneCounts& counts,
                                            double (&sum)[4], double (&sq)[4]) {
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    double a[N], q[N];
#pragma unroll
    for (int r = 0; r < N; ++r) {
      const uint64_t col = first_col + stride * r + e;
      a[r] = col < col_end ? counts.classify(D::element_bits(row, col, table)) : 0.0;
      q[r] = a[r] * a[r];
    }
    sum[e] = halving(a);
    sq[e] = halving(q);
  }
}

/// Exact order keys of the extremes of N complete finite words (the zero-sign fix-up).
template <class D, int N>
__device__ void exact_extremes(const typename D::Word (&raw)[N], const float* table, int32_t& min_key,
                               int32_t& max_key) {
  min_key = kKeyPosInf;
  max_key = kKeyNegInf;
#pragma unroll
  for (int r = 0; r < N; ++r) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int32_t key = order_key(D::bits(raw[r], e, table));
      min_key = min(min_key, key);
      max_key = max(max_key, key);
    }
  }
}

/// Where one warp unit of the fast path sits, as seen by one lane.
struct LaneUnit {
  const uint8_t* row = nullptr;  ///< the lane's row (valid when row_ok)
  uint64_t first_col = 0;        ///< column of the lane's first word
  bool row_ok = false;           ///< the lane's row lies inside the view
  bool full = false;             ///< the unit's tile lies wholly inside the view's columns (warp-uniform)
};

/// A warp unit (tile, k) = (unit / K, unit % K) with the tile split into row and column. A warp
/// walks units a fixed stride apart, so the cursor advances by adding a precomputed step with
/// carries instead of dividing per unit. 32 bits suffice: the fast path runs only when the
/// launch has fewer than 2^32 units.
struct UnitCursor {
  uint32_t tile_row = 0;
  uint32_t tile_col = 0;
  uint32_t k = 0;

  /// The cursor of `unit` (divides; also expresses the stride between a warp's units as a step).
  __device__ static UnitCursor at(const TileJob& job, uint32_t unit) {
    const uint32_t tile = unit / job.partials_per_tile;
    const uint32_t across = static_cast<uint32_t>(job.tiles_across);
    return {tile / across, tile % across, unit % job.partials_per_tile};
  }
  /// Moves on by `step` (a cursor made by at(job, stride)).
  __device__ __forceinline__ void advance(const TileJob& job, const UnitCursor& step) {
    const uint32_t across = static_cast<uint32_t>(job.tiles_across);
    k += step.k;
    uint32_t carry = 0;
    if (k >= job.partials_per_tile) {
      k -= job.partials_per_tile;
      carry = 1;
    }
    tile_row += step.tile_row;
    tile_col += step.tile_col + carry;  // < 2 * tiles_across
    if (tile_col >= across) {
      tile_col -= across;
      tile_row += 1;
    }
  }
};

/// Unit (tile, k): S = 32 / G rows of the tile, rows k + K * s (s < S), a subtree of the tile's
/// row order; the lane takes row s = lane / G, words k0 + G * r with k0 = lane % G.
__device__ __forceinline__ LaneUnit locate_unit(const TileJob& job, const UnitCursor& c, uint32_t g) {
  const uint32_t lane = threadIdx.x % kLanes;
  const uint64_t row = static_cast<uint64_t>(c.tile_row) * job.tile + c.k +
                       static_cast<uint64_t>(job.partials_per_tile) * (lane / g);
  const uint64_t col = job.col_begin + static_cast<uint64_t>(c.tile_col) * job.tile;
  LaneUnit u;
  u.row_ok = row < job.view_rows;
  u.full = col + job.tile <= job.col_end;
  u.row = job.data + row * job.row_bytes;
  u.first_col = col + 4ull * (lane % g);
  return u;
}

/// Units a warp asks L2 for ahead of the one it reduces: one (measured on the H200: BF16 +5%,
/// F16 +6%, Q8_0 +13%), none for F32, whose lanes already load 256 bytes each (it was 20%
/// slower with the prefetch; two or four units ahead were slower for every dtype).
template <class D>
constexpr uint32_t kPrefetchAhead = std::is_same_v<D, DecF32> ? 0 : 1;

/// Prefetches the bytes of one row of a tile, columns [first_col, first_col + tile), into L2:
/// the G lanes sharing the row take every G-th 128-byte line.
template <class D>
__device__ __forceinline__ void prefetch_tile_row(const uint8_t* row, uint64_t first_col, uint32_t tile, uint32_t k0,
                                                  uint32_t g) {
  const uint8_t* begin = row + first_col / D::kBlockElems * D::kBlockBytes;
  const uint8_t* end = row + (first_col + tile - 1) / D::kBlockElems * D::kBlockBytes + D::kBlockBytes;
  const uint8_t* line = begin - (reinterpret_cast<uintptr_t>(begin) & 127u) + 128ull * k0;
  for (; line < end; line += 128ull * g) prefetch_l2(line);
}

/// Magnitude bits of the larger extreme (absmax of finite values; 0 when there are none).
__device__ __forceinline__ uint32_t absmax_of_keys(int32_t min_key, int32_t max_key) {
  if (min_key > max_key) return 0;
  return max(bits_from_key(min_key) & 0x7fffffffu, bits_from_key(max_key) & 0x7fffffffu);
}

/// Counts of finite values only: `zeros` zeros, extremes with keys min_key and max_key.
__device__ __forceinline__ LaneCounts finite_counts(uint32_t zeros, int32_t min_key, int32_t max_key) {
  return {0, 0, 0, zeros, min_key, max_key, absmax_of_keys(min_key, max_key)};
}

/// The warp's merged counts when no lane saw a NaN or Inf: three single-instruction reductions.
__device__ __forceinline__ LaneCounts finite_warp_counts(uint32_t zeros, int32_t min_key, int32_t max_key) {
  return finite_counts(warp_sum(zeros), warp_min(min_key), warp_max(max_key));
}

/// Adds a warp unit's S = segments row sums (rows s of lanes s·g …) by halving over s, xor
/// (S/2)·g … g; every lane ends with the unit's sums.
__device__ __forceinline__ void sum_unit_rows(double& sum, double& sq, uint32_t segments, uint32_t g) {
  for (uint32_t m = segments / 2; m >= 1; m /= 2) {
    sum = sum + shuffle_xor(sum, static_cast<int>(m * g));
    sq = sq + shuffle_xor(sq, static_cast<int>(m * g));
  }
}

/// A finite double (the fast path's proof that a lane saw no NaN or Inf).
__device__ __forceinline__ bool finite(double x) {
  return (__double_as_longlong(x) & 0x7ff0000000000000ll) != 0x7ff0000000000000ll;
}

/// The fast path: persistent warps, each reducing unit after unit (S rows of one tile); the other
/// warps of the SM hide a unit's load latency (holding the next unit's words in registers as
/// well measured no faster: it costs occupancy). No block-wide synchronisation: a unit's partial
/// (rows merged by halving over s with shuffles, xor (S/2)G ... G) goes straight to global memory.
/// Units whose values are all finite (the common case, decided for the whole warp) merge their
/// counts with three warp reductions; the others take the element-wise careful path.
template <class D, int N, uint32_t kG = 0>
__global__ void __launch_bounds__(kTileBlockThreads, 2) tile_rows_fast(TileJob job, uint32_t lanes_per_row,
                                                                       uint32_t units) {
  const uint32_t g = kG != 0 ? kG : lanes_per_row;  // G: a constant in the default tile's instance
  __shared__ float shared_table[D::kTable ? 256 : 1];
  const float* table = stage_table<D>(job, shared_table);
  const uint32_t lane = threadIdx.x % kLanes;
  const uint32_t segments = kLanes / g;
  const uint32_t warps = gridDim.x * (blockDim.x / kLanes);
  const uint64_t stride = 4ull * g;
  uint32_t unit = blockIdx.x * (blockDim.x / kLanes) + threadIdx.x / kLanes;
  if (unit >= units) return;  // warp-uniform
  const UnitCursor step = UnitCursor::at(job, warps);
  UnitCursor cursor = UnitCursor::at(job, unit);
  UnitCursor ahead = cursor;
  if constexpr (kPrefetchAhead<D> > 0) {
    for (uint32_t i = 0; i < kPrefetchAhead<D>; ++i) ahead.advance(job, step);
  }

  for (; unit < units; unit += warps, cursor.advance(job, step), ahead.advance(job, step)) {
    const LaneUnit u = locate_unit(job, cursor, g);
    const bool loaded = u.row_ok && u.full;
    typename D::Word raw[N];
    if (loaded) {
#pragma unroll
      for (int r = 0; r < N; ++r) raw[r] = D::template load_word<true>(u.row, u.first_col + stride * r);
    }
    // Start DRAM on a later unit while this one computes (L2 holds it; no registers needed).
    if constexpr (kPrefetchAhead<D> > 0) {
      if (units - unit > kPrefetchAhead<D> * warps) {
        const LaneUnit a = locate_unit(job, ahead, g);
        if (a.row_ok && a.full) prefetch_tile_row<D>(a.row, a.first_col - 4ull * (lane % g), job.tile, lane % g, g);
      }
    }
    double sum[4] = {0.0, 0.0, 0.0, 0.0}, sq[4] = {0.0, 0.0, 0.0, 0.0};
    typename FastOf<D>::type fast;
    bool lane_fast = false;
    int32_t min_key = kKeyPosInf, max_key = kKeyNegInf;
    uint32_t zeros = 0;
    if (loaded) {
#pragma unroll
      for (int r = 0; r < N; ++r) fast.template add_word<D>(raw[r], table);
      fast_sums<D, N>(raw, table, sum, sq);
      lane_fast = finite((sq[0] + sq[1]) + (sq[2] + sq[3]));
      if (lane_fast) {
        zeros = fast.zeros();
        const uint32_t lo = fast.min_bits(), hi = fast.max_bits();
        if ((lo & 0x7fffffffu) == 0 || (hi & 0x7fffffffu) == 0) {
          exact_extremes<D, N>(raw, table, min_key, max_key);
        } else {
          min_key = order_key(lo);
          max_key = order_key(hi);
        }
      }
    }
    LaneCounts counts = LaneCounts::empty();
    if (warp_all(lane_fast || !u.row_ok)) {
      counts = finite_warp_counts(zeros, min_key, max_key);
    } else {
      if (lane_fast) {
        counts = finite_counts(zeros, min_key, max_key);
      } else if (loaded) {
        careful_sums<D, N>(raw, table, counts, sum, sq);
      } else if (u.row_ok) {
        ragged_sums<D, N>(u.row, u.first_col, stride, job.col_end, table, counts, sum, sq);
      }
      counts.merge_warp();
    }
    for (uint32_t m = g / 2; m >= 1; m /= 2) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        sum[e] = sum[e] + shuffle_xor(sum[e], static_cast<int>(m));
        sq[e] = sq[e] + shuffle_xor(sq[e], static_cast<int>(m));
      }
    }
    double row_sum = (sum[0] + sum[2]) + (sum[1] + sum[3]);
    double row_sq = (sq[0] + sq[2]) + (sq[1] + sq[3]);
    sum_unit_rows(row_sum, row_sq, segments, g);
    if (lane == 0) job.partials[unit] = make_partial(row_sum, row_sq, counts);
  }
}

// ---- The generic kernel: one element at a time, any alignment, any tile ----------------------

/// One lane's share of a row's canonical tree, element by element: of the row's `lanes` lanes,
/// lane l takes slots l + lanes·m (m < per_lane, a power of two), visited in bit-reversed m so that
/// a binary-counter stack builds the halving tree over m; the caller then combines the lanes by
/// shuffles (xor lanes/2 … 1).
template <class D>
__device__ __forceinline__ void strided_tree_sums(const uint8_t* row, uint64_t first_col, uint32_t lanes,
                                                  uint32_t per_lane, uint32_t l, uint64_t col_end, const float* table,
                                                  LaneCounts& counts, double& sum, double& sq) {
  const uint32_t log_per_lane = 31 - __clz(per_lane);
  double stack_sum[13], stack_sq[13];
  int depth = 0;
  for (uint32_t t = 0; t < per_lane; ++t) {
    const uint32_t m = log_per_lane == 0 ? 0 : __brev(t) >> (32 - log_per_lane);
    const uint64_t col = first_col + l + static_cast<uint64_t>(lanes) * m;
    const double v = col < col_end ? counts.classify(D::element_bits(row, col, table)) : 0.0;
    stack_sum[depth] = v;
    stack_sq[depth] = v * v;
    ++depth;
    for (uint32_t bits = t; bits & 1u; bits >>= 1) {
      --depth;
      stack_sum[depth - 1] = stack_sum[depth - 1] + stack_sum[depth];
      stack_sq[depth - 1] = stack_sq[depth - 1] + stack_sq[depth];
    }
  }
  sum = stack_sum[0];
  sq = stack_sq[0];
}

/// Row blocks of the generic path: L = min(32, T) lanes per row, lane l takes slots l + L * m,
/// visited in bit-reversed m so that a binary-counter stack builds the halving tree over m.
template <class D>
__global__ void __launch_bounds__(kTileBlockThreads) tile_rows_generic(TileJob job) {
  __shared__ double row_sum[kTileBlockThreads];
  __shared__ double row_sq[kTileBlockThreads];
  __shared__ LaneCounts warp_counts[kTileBlockThreads / kLanes];
  __shared__ float shared_table[D::kTable ? 256 : 1];
  const float* table = stage_table<D>(job, shared_table);

  const BlockPlace place = place_block(job);
  const uint32_t lanes = min(job.tile, static_cast<uint32_t>(kLanes));
  const uint32_t per_lane = job.tile / lanes;
  const uint32_t lane = threadIdx.x % kLanes, warp = threadIdx.x / kLanes;
  const uint32_t segments = kLanes / lanes;
  const uint32_t rows = (blockDim.x / kLanes) * segments;
  const uint32_t u = warp * segments + lane / lanes, l = lane % lanes;
  const uint64_t row = place.tile_row * job.tile + place.k1 + static_cast<uint64_t>(job.partials_per_tile) * u;
  const uint64_t tile_col = job.col_begin + place.tile_col * job.tile;

  double sum = 0.0, sq = 0.0;
  LaneCounts counts = LaneCounts::empty();
  if (row < job.view_rows) {
    strided_tree_sums<D>(job.data + row * job.row_bytes, tile_col, lanes, per_lane, l, job.col_end, table, counts, sum,
                         sq);
  }
  for (uint32_t m = lanes / 2; m >= 1; m /= 2) {
    sum = sum + shuffle_xor(sum, static_cast<int>(m));
    sq = sq + shuffle_xor(sq, static_cast<int>(m));
  }
  if (l == 0) {
    row_sum[u] = sum;
    row_sq[u] = sq;
  }
  finish_block(row_sum, row_sq, warp_counts, counts, rows, job.partials + job.block_base + blockIdx.x);
}

// ---- Host-side dispatch of one family ----------------------------------------------------------

/// Launches tile_stats_q4_k.cu's warp units (a plan with q4_k_sums).
cudaError_t launch_tile_rows_q4_k(const TilePlan& plan, const TileJob& job, uint64_t units, cudaStream_t stream);

/// The index's default tile (engine::kDefaultTile). With the most words per lane it has G = 256 / 4N
/// lanes per row; that instance is compiled with G constant (immediate load offsets, unrolled
/// shuffles), every other G passes it at run time.
constexpr uint32_t kDefaultTile = 256;

/// Launches the fast kernel with D's most words per lane N.
template <class D, int N>
void launch_widest(unsigned grid, const TileJob& job, uint32_t g, uint32_t units, cudaStream_t stream) {
  constexpr uint32_t kDefaultG = kDefaultTile / (4 * N);
  if (g == kDefaultG) {
    tile_rows_fast<D, N, kDefaultG><<<grid, kTileBlockThreads, 0, stream>>>(job, g, units);
  } else {
    tile_rows_fast<D, N><<<grid, kTileBlockThreads, 0, stream>>>(job, g, units);
  }
}

/// Launches decoder D's kernels: the generic row blocks, or the fast kernel's warp units for the
/// N that plan_tile_stats picks (1, 2, 4, 8, 16, up to D::kMaxWords).
template <class D>
cudaError_t launch_tile_rows_for(const TilePlan& plan, const TileJob& job, uint64_t blocks, cudaStream_t stream) {
  if (!plan.fast) {
    constexpr uint64_t kMaxGrid = 1u << 30;
    for (uint64_t done = 0; done < blocks; done += kMaxGrid) {
      TileJob part = job;
      part.block_base = job.block_base + done;
      const unsigned grid = static_cast<unsigned>(blocks - done < kMaxGrid ? blocks - done : kMaxGrid);
      tile_rows_generic<D><<<grid, plan.block_threads, 0, stream>>>(part);
      const cudaError_t error = cudaGetLastError();
      if (error != cudaSuccess) return error;
    }
    return cudaSuccess;
  }
  // Fast path: `blocks` counts warp units (fewer than 2^32: gpu_exec.cpp takes the generic path
  // otherwise); persistent blocks of 8 warps loop over them.
  if (blocks >> 32) return cudaErrorInvalidValue;
  const uint32_t units = static_cast<uint32_t>(blocks);
  const uint64_t wanted = (units + kTileBlockThreads / kLanes - 1) / (kTileBlockThreads / kLanes);
  const uint64_t limit = plan.max_blocks > 0 ? plan.max_blocks : wanted;
  const unsigned grid = static_cast<unsigned>(wanted < limit ? wanted : limit);
  const uint32_t g = plan.lanes_per_segment;
  switch (plan.words_per_lane) {
    case 1: tile_rows_fast<D, 1><<<grid, kTileBlockThreads, 0, stream>>>(job, g, units); break;
    case 2: tile_rows_fast<D, 2><<<grid, kTileBlockThreads, 0, stream>>>(job, g, units); break;
    case 4: tile_rows_fast<D, 4><<<grid, kTileBlockThreads, 0, stream>>>(job, g, units); break;
    case 8:
      if constexpr (D::kMaxWords == 8) {
        launch_widest<D, 8>(grid, job, g, units, stream);
      } else if constexpr (D::kMaxWords > 8) {
        tile_rows_fast<D, 8><<<grid, kTileBlockThreads, 0, stream>>>(job, g, units);
      }
      break;
    case 16:
      if constexpr (D::kMaxWords == 16) launch_widest<D, 16>(grid, job, g, units, stream);
      break;
    default: return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace tm_gpu
