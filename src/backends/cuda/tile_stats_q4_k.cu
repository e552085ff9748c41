// tm.tile_stats@1 for Q4_K tiles of whole super-blocks: exact integer sums instead of the tree.
//
// docs/COMPUTE.md: when no float32 step of the decoder and no float64 addition of the canonical
// tree can round, the tree's result is the exact sum. A Q4_K sub-block decodes to
// v = 2^c (A q - B) with integers A = D sc 2^(a-c), B = M m 2^(b-c) (d = D 2^a, dmin = M 2^b,
// c = min(a, b)), exactly so when |B| and |15A - B| are at most 2^24; then a row's sums are
// integer formulas in each sub-block's Σq and Σq², exact while Σ|v| and Σv² stay below 2^53 in
// units of 2^c_min. The CPU backend proves the same things (cpu/tile_stats/quantized.h); a row
// whose proof fails is summed element by element in the canonical order instead, so every row
// gives the CPU's bits either way.
//
// Layout: one lane per super-block. G = T / 256 lanes per row, S = 32 / G rows per warp unit (the
// fast kernel's units and partials); lane k0 of a row sums super-block k0 of the row's segment, a
// pair of sub-blocks at a time (quant bytes [32p, 32p + 32): sub-block 2p in the low nibbles,
// 2p + 1 in the high ones), so the header is decoded once and a row of the default tile needs no
// exchange between lanes at all.
#include "backends/cuda/tile_stats_kernel.cuh"

namespace tm_gpu {
namespace {

constexpr int64_t kDecodeLimit = int64_t{1} << 24;  // |A q - B| that float32 holds exactly
constexpr int64_t kSumLimit = int64_t{1} << 53;     // exact float64 partial sums

/// Per-byte sums of products (a · b over the 4 bytes, plus c).
__device__ __forceinline__ uint32_t dot_bytes(uint32_t a, uint32_t b, uint32_t c) {
#if defined(__HIP_PLATFORM_AMD__)
  for (int k = 0; k < 4; ++k) c += ((a >> (8 * k)) & 0xffu) * ((b >> (8 * k)) & 0xffu);
  return c;
#else
  return __dp4a(a, b, c);
#endif
}

/// Minimum / maximum of the two 16-bit halves of a and b, half by half.
__device__ __forceinline__ uint32_t min_halves(uint32_t a, uint32_t b) {
#if defined(__HIP_PLATFORM_AMD__) || __CUDA_ARCH__ < 900
  return min(a & 0xffffu, b & 0xffffu) | (min(a >> 16, b >> 16) << 16);
#else
  uint32_t r;
  asm("min.u16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
#endif
}
__device__ __forceinline__ uint32_t max_halves(uint32_t a, uint32_t b) {
#if defined(__HIP_PLATFORM_AMD__) || __CUDA_ARCH__ < 900
  return max(a & 0xffffu, b & 0xffffu) | (max(a >> 16, b >> 16) << 16);
#else
  uint32_t r;
  asm("max.u16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
#endif
}

/// Σq, Σq², smallest and largest q of one sub-block's 32 quants.
struct Quants {
  uint32_t sum = 0;
  uint32_t squares = 0;
  uint32_t low = 0;
  uint32_t high = 0;
};

/// The quant statistics of a lane's 32 bytes: low nibbles into `lo`, high nibbles into `hi`.
__device__ __forceinline__ void quant_stats(const uint32_t (&w)[8], Quants& lo, Quants& hi) {
  uint32_t low_min = 0x000f000fu, low_max = 0, high_min = 0x000f000fu, high_max = 0;
  uint32_t low_bytes = 0, high_bytes = 0;  // byte-wise sums: at most 8 · 15 per byte, no carries
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const uint32_t l = w[i] & 0x0f0f0f0fu, h = (w[i] >> 4) & 0x0f0f0f0fu;
    low_bytes += l;
    high_bytes += h;
    lo.squares = dot_bytes(l, l, lo.squares);
    hi.squares = dot_bytes(h, h, hi.squares);
    // Bytes 0 and 2, and bytes 1 and 3, as 16-bit halves.
    const uint32_t l_even = l & 0x00ff00ffu, l_odd = __byte_perm(l, 0u, 0x4341u);
    const uint32_t h_even = h & 0x00ff00ffu, h_odd = __byte_perm(h, 0u, 0x4341u);
    low_min = min_halves(low_min, min_halves(l_even, l_odd));
    low_max = max_halves(low_max, max_halves(l_even, l_odd));
    high_min = min_halves(high_min, min_halves(h_even, h_odd));
    high_max = max_halves(high_max, max_halves(h_even, h_odd));
  }
  lo.sum = dot_bytes(low_bytes, 0x01010101u, 0);
  hi.sum = dot_bytes(high_bytes, 0x01010101u, 0);
  lo.low = min(low_min & 0xffffu, low_min >> 16);
  lo.high = max(low_max & 0xffffu, low_max >> 16);
  hi.low = min(high_min & 0xffffu, high_min >> 16);
  hi.high = max(high_max & 0xffffu, high_max >> 16);
}

/// Quants equal to q0 among a lane's 32 nibbles (`shift` 0: low nibbles, 4: high).
__device__ __forceinline__ uint32_t count_quant(const uint32_t (&w)[8], int shift, uint32_t q0) {
  uint32_t n = 0;
  for (int i = 0; i < 8; ++i) {
    const uint32_t x = ((w[i] >> shift) & 0x0f0f0f0fu) ^ (q0 * 0x01010101u);
    // A byte of x is zero exactly when its bit 7 stays clear here (no borrow between bytes).
    const uint32_t t = ((x & 0x7f7f7f7fu) + 0x7f7f7f7fu) | x;
    n += __popc(~t & 0x80808080u);
  }
  return n;
}

/// A finite half float as mantissa · 2^exponent; false for Inf and NaN.
__device__ __forceinline__ bool half_scaled(uint32_t h, int64_t& mantissa, int& exponent) {
  const uint32_t field = (h >> 10) & 0x1fu, fraction = h & 0x3ffu;
  const int64_t magnitude = field == 0 ? fraction : (fraction | 0x400u);
  mantissa = (h & 0x8000u) ? -magnitude : magnitude;
  exponent = static_cast<int>(field == 0 ? 1u : field) - 25;
  return field != 0x1fu;
}

/// x · 2^s when that is at most 2^53 (x >= 0), else -1.
__device__ __forceinline__ int64_t scaled_within(int64_t x, int s) {
  if (s >= 54) return x == 0 ? 0 : -1;
  return x > (kSumLimit >> s) ? -1 : x * (int64_t{1} << s);
}

/// 2^e as a double (normal range).
__device__ __forceinline__ double power_of_two(int e) {
  return __longlong_as_double(static_cast<long long>(1023 + e) << 52);
}

/// A super-block's exact sums in units of 2^c (valid when `exact`).
struct BlockParts {
  int64_t sum = 0;        ///< Σ N
  int64_t magnitude = 0;  ///< an upper bound of Σ |N|
  int64_t squares = 0;    ///< Σ N²
  int c = 0;
  bool exact = true;
};

/// Smallest and largest N = A·q − B of a super-block's sub-blocks, in its units of 2^c, and the
/// keys of the extremes that are zero (their sign comes from the decoder's float operations).
struct Extremes {
  int32_t low = INT32_MAX;
  int32_t high = INT32_MIN;
  int32_t zero_min_key = kKeyPosInf;
  int32_t zero_max_key = kKeyNegInf;
};

/// Adds a sub-block with six-bit scale sc and minimum m to `parts` (A = d_unit·sc, B =
/// dmin_unit·m, both below 2^26 by the caller's check; `exact` drops when the decode could round),
/// its extremes to `ext` and its zeros to `zeros`.
__device__ __forceinline__ void sub_block(uint32_t sc, uint32_t m, int32_t d_unit, int32_t dmin_unit, float d,
                                          float dmin, const Quants& q, const uint32_t (&w)[8], int shift,
                                          BlockParts& parts, Extremes& ext, uint32_t& zeros) {
  const int32_t A = d_unit * static_cast<int32_t>(sc), B = dmin_unit * static_cast<int32_t>(m), top = 15 * A - B;
  parts.exact = parts.exact && abs(B) <= kDecodeLimit && abs(top) <= kDecodeLimit;
  // Unsigned arithmetic: the values are garbage (never used) when the check above failed.
  const auto q_sum = static_cast<uint32_t>(q.sum);
  parts.sum += static_cast<int32_t>(static_cast<uint32_t>(A) * q_sum - 32u * static_cast<uint32_t>(B));
  parts.magnitude += 32 * static_cast<int64_t>(max(abs(B), abs(top)));
  const uint64_t a = static_cast<uint64_t>(static_cast<int64_t>(A)), b = static_cast<uint64_t>(static_cast<int64_t>(B));
  parts.squares += static_cast<int64_t>(a * a * q.squares - 2 * (a * b) * q_sum + 32 * (b * b));
  // v is monotone in q: its extremes are at the smallest and largest quant (|A q| < 2^30: no
  // overflow). A zero extreme takes its sign from the decoder's own float operations.
  const int32_t at_low = A * static_cast<int32_t>(q.low) - B, at_high = A * static_cast<int32_t>(q.high) - B;
  ext.low = min(ext.low, min(at_low, at_high));
  ext.high = max(ext.high, max(at_low, at_high));
  if (at_low == 0 || at_high == 0) {
    const float d1 = __fmul_rn(d, static_cast<float>(sc)), m1 = __fmul_rn(dmin, static_cast<float>(m));
    const float v_low = __fsub_rn(__fmul_rn(d1, static_cast<float>(q.low)), m1);
    const float v_high = __fsub_rn(__fmul_rn(d1, static_cast<float>(q.high)), m1);
    ext.zero_min_key = min(ext.zero_min_key, min(order_key(__float_as_uint(v_low)), order_key(__float_as_uint(v_high))));
    ext.zero_max_key = max(ext.zero_max_key, max(order_key(__float_as_uint(v_low)), order_key(__float_as_uint(v_high))));
  }
  // Zeros: the whole sub-block when A = B = 0; else the quant q0 = B / A when that is a whole
  // number in [low, high], found with an approximate quotient and checked in integers.
  if (A == 0) {
    zeros += B == 0 ? 32u : 0u;
  } else if ((at_low <= 0) != (at_high <= 0) || at_low == 0 || at_high == 0) {
    const int32_t q0 = __float2int_rn(__fdividef(static_cast<float>(B), static_cast<float>(A)));
    if (q0 >= static_cast<int32_t>(q.low) && q0 <= static_cast<int32_t>(q.high) && A * q0 == B) {  // |A·q0| < 2^31
      zeros += count_quant(w, shift, static_cast<uint32_t>(q0));
    }
  }
}

/// Six-bit scale and minimum of sub-block j from the packed bytes 4..15 of a super-block held in
/// three words (k4_scale_min of device_decode.cuh, from registers; j is a constant here).
__device__ __forceinline__ void scale_min_of(uint32_t low, uint32_t mid, uint32_t high, uint32_t j, uint32_t& sc,
                                             uint32_t& m) {
  const uint32_t shift = 8 * (j % 4);
  const uint32_t a = (low >> shift) & 0xffu, b = (mid >> shift) & 0xffu;
  if (j < 4) {
    sc = a & 63u;
    m = b & 63u;
  } else {
    const uint32_t c = (high >> shift) & 0xffu;
    sc = (c & 0xfu) | ((a >> 6) << 4);
    m = (c >> 4) | ((b >> 6) << 4);
  }
}

/// The exact parts of the super-block at `block` (16-byte aligned), its extremes and zeros.
__device__ __forceinline__ BlockParts super_block(const uint8_t* block, int32_t& min_key, int32_t& max_key,
                                                  uint32_t& zeros) {
  Extremes ext;
  BlockParts parts;
  const uint4 header = *reinterpret_cast<const uint4*>(block);
  int64_t d_int, dmin_int;
  int d_exp, dmin_exp;
  const bool finite_d = half_scaled(header.x & 0xffffu, d_int, d_exp);
  const bool finite_dmin = half_scaled(header.x >> 16, dmin_int, dmin_exp);
  parts.c = min(d_exp, dmin_exp);
  // A and B in 32 bits: |d_unit|, |dmin_unit| <= 2^20 (exponents at most 9 apart, far beyond
  // what ggml's quantizer makes) keeps every product below 2^26. Capping the shift at 20 cannot
  // let a larger unit through: a shift above 20 means a normal half (mantissa >= 2^10), so the
  // capped unit is still at least 2^30 and fails the check.
  const int64_t d_unit = d_int * (int64_t{1} << min(d_exp - parts.c, 20));
  const int64_t dmin_unit = dmin_int * (int64_t{1} << min(dmin_exp - parts.c, 20));
  constexpr int64_t kUnitLimit = int64_t{1} << 20;
  parts.exact = finite_d && finite_dmin && d_unit <= kUnitLimit && -d_unit <= kUnitLimit && dmin_unit <= kUnitLimit &&
                -dmin_unit <= kUnitLimit;
  if (!parts.exact) return parts;
  const auto d32 = static_cast<int32_t>(d_unit), dmin32 = static_cast<int32_t>(dmin_unit);
  const float d = half_to_float(header.x & 0xffffu), dmin = half_to_float(header.x >> 16);
#pragma unroll
  for (uint32_t p = 0; p < 4; ++p) {
    uint32_t w[8];
    const uint4 a = *reinterpret_cast<const uint4*>(block + 16 + 32 * p);
    const uint4 b = *reinterpret_cast<const uint4*>(block + 32 + 32 * p);
    w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w, w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
    Quants lo, hi;
    quant_stats(w, lo, hi);
    uint32_t sc, m;
    scale_min_of(header.y, header.z, header.w, 2 * p, sc, m);
    sub_block(sc, m, d32, dmin32, d, dmin, lo, w, 0, parts, ext, zeros);
    scale_min_of(header.y, header.z, header.w, 2 * p + 1, sc, m);
    sub_block(sc, m, d32, dmin32, d, dmin, hi, w, 4, parts, ext, zeros);
  }
  // Non-zero extremes as floats: N·2^c exactly (|N| <= 2^24 when exact; 2^c is a normal float).
  const float unit = __uint_as_float(static_cast<uint32_t>(127 + parts.c) << 23);
  const int32_t low_key = ext.low != 0 ? order_key(__float_as_uint(__fmul_rn(static_cast<float>(ext.low), unit))) : kKeyPosInf;
  const int32_t high_key = ext.high != 0 ? order_key(__float_as_uint(__fmul_rn(static_cast<float>(ext.high), unit))) : kKeyNegInf;
  min_key = min(min_key, min(low_key, ext.zero_min_key));
  max_key = max(max_key, max(high_key, ext.zero_max_key));
  return parts;
}

template <class T>
__device__ __forceinline__ T row_min(T x, uint32_t g) {
  for (uint32_t m = g / 2; m >= 1; m /= 2) x = min(x, shuffle_xor(x, static_cast<int>(m)));
  return x;
}
template <class T>
__device__ __forceinline__ T row_sum(T x, uint32_t g) {
  for (uint32_t m = g / 2; m >= 1; m /= 2) x += shuffle_xor(x, static_cast<int>(m));
  return x;
}

/// Persistent warps over warp units, as tile_rows_fast (tile_stats_kernel.cuh). kG: lanes per row
/// as a constant (the default tile's instance: one super-block per row), or 0 to pass it in `g`.
template <uint32_t kG>
__global__ void __launch_bounds__(kTileBlockThreads, 4) tile_rows_q4_k(TileJob job, uint32_t lanes_per_row, uint32_t units) {
  const uint32_t g = kG != 0 ? kG : lanes_per_row;
  const uint32_t lane = threadIdx.x % kLanes;
  const uint32_t k0 = lane % g, segments = kLanes / g;
  const uint32_t warps = gridDim.x * (blockDim.x / kLanes);
  uint32_t unit = blockIdx.x * (blockDim.x / kLanes) + threadIdx.x / kLanes;
  if (unit >= units) return;  // warp-uniform
  const UnitCursor step = UnitCursor::at(job, warps);
  UnitCursor cursor = UnitCursor::at(job, unit);

  for (; unit < units; unit += warps, cursor.advance(job, step)) {
    const uint64_t row = static_cast<uint64_t>(cursor.tile_row) * job.tile + cursor.k +
                         static_cast<uint64_t>(job.partials_per_tile) * (lane / g);
    const uint64_t first_col = job.col_begin + static_cast<uint64_t>(cursor.tile_col) * job.tile;
    const bool row_ok = row < job.view_rows;
    const bool full = first_col + job.tile <= job.col_end;  // warp-uniform
    const uint8_t* row_ptr = job.data + row * job.row_bytes;
    const uint8_t* block = row_ptr + (first_col / 256 + k0) * 144;

    // The exact attempt: this lane's super-block.
    bool lane_exact = false;
    int c = 0;
    int64_t part_sum = 0, part_magnitude = 0, part_squares = 0;
    int32_t min_key = kKeyPosInf, max_key = kKeyNegInf;
    uint32_t zeros = 0;
    if (row_ok && full) {
      const BlockParts parts = super_block(block, min_key, max_key, zeros);
      lane_exact = parts.exact;
      c = parts.c;
      part_sum = parts.sum;
      part_magnitude = parts.magnitude;
      part_squares = parts.squares;
    }
    // The row's lanes bring their parts to the row's finest unit 2^c_min and add them.
    // (With one super-block per row there is nothing to exchange.)
    const int c_min = kG == 1 ? c : row_min(lane_exact ? c : INT32_MAX, g);
    if (kG != 1 && lane_exact) {
      const int shift = c - c_min;
      part_magnitude = scaled_within(part_magnitude, shift);
      part_squares = scaled_within(part_squares, 2 * shift);
      lane_exact = part_magnitude >= 0 && part_squares >= 0;
      if (lane_exact) part_sum = part_sum * (int64_t{1} << shift);  // |part_sum| <= part_magnitude
    }
    const bool all_exact = row_min(lane_exact ? 1 : 0, g) == 1;
    const int64_t total_magnitude = row_sum(lane_exact ? part_magnitude : 0, g);
    const int64_t total_squares = row_sum(lane_exact ? part_squares : 0, g);
    const int64_t total_sum = row_sum(lane_exact ? part_sum : 0, g);
    const bool row_exact = all_exact && total_magnitude <= kSumLimit && total_squares <= kSumLimit && total_sum != 0 &&
                           total_squares != 0;

    LaneCounts counts = LaneCounts::empty();
    double tree_sum = 0.0, tree_sq = 0.0;
    if (!row_exact && row_ok) {
      strided_tree_sums<DecQ4_K>(row_ptr, first_col, g, job.tile / g, k0, job.col_end, nullptr, counts, tree_sum, tree_sq);
    }
    const bool warp_exact = warp_all(row_exact || !row_ok);
    if (!warp_exact) {
      for (uint32_t m = g / 2; m >= 1; m /= 2) {
        tree_sum = tree_sum + shuffle_xor(tree_sum, static_cast<int>(m));
        tree_sq = tree_sq + shuffle_xor(tree_sq, static_cast<int>(m));
      }
    }
    double sum = row_exact ? static_cast<double>(total_sum) * power_of_two(c_min) : tree_sum;
    double sq = row_exact ? static_cast<double>(total_squares) * power_of_two(2 * c_min) : tree_sq;
    sum_unit_rows(sum, sq, segments, g);
    // Lanes without a row kept zeros = 0 and empty keys.
    if (warp_exact) {
      counts = finite_warp_counts(zeros, min_key, max_key);
    } else {
      if (row_exact) counts = finite_counts(zeros, min_key, max_key);
      counts.merge_warp();
    }
    if (lane == 0) job.partials[unit] = make_partial(sum, sq, counts);
  }
}

}  // namespace

cudaError_t launch_tile_rows_q4_k(const TilePlan& plan, const TileJob& job, uint64_t units, cudaStream_t stream) {
  if (units >> 32) return cudaErrorInvalidValue;
  const uint64_t wanted = (units + kTileBlockThreads / kLanes - 1) / (kTileBlockThreads / kLanes);
  // plan.max_blocks is tile_rows_fast's two blocks per SM; this kernel fits four (64 registers,
  // a few bytes spilled), measured on the H200 at 1727 GB/s against 1513 with three (76
  // registers). (An L2 prefetch of the next unit measured no faster.)
  const uint64_t limit = plan.max_blocks > 0 ? plan.max_blocks * 2 : wanted;
  const unsigned grid = static_cast<unsigned>(wanted < limit ? wanted : limit);
  if (plan.lanes_per_segment == 1) {
    tile_rows_q4_k<1><<<grid, kTileBlockThreads, 0, stream>>>(job, 1, static_cast<uint32_t>(units));
  } else {
    tile_rows_q4_k<0><<<grid, kTileBlockThreads, 0, stream>>>(job, plan.lanes_per_segment, static_cast<uint32_t>(units));
  }
  return cudaGetLastError();
}

}  // namespace tm_gpu
