// tm.channel_stats@1's kernels (the host side, bands and chunks, is gpu_channel_stats.cpp).
//
// Rows: the halving tree over P = bit_ceil(cols) slots. A row goes to G = min(256, P) lanes; lane k
// takes slots k + G m, m < P / G. Halving consumes the top slot bits first, so each lane first
// reduces its own slots by halving over m, which is the contiguous pairwise tree over its slots in
// bit-reversed order of m: the lane visits m = rev(i) for i = 0, 1, ... and adds them up with a
// binary counter (one partial per tree level, in registers). The lanes then combine by halving over
// k: through shared memory while k spans warps, then by shuffles (xor 16 ... 1).
//
// Columns: the contiguous pairwise tree over bit_ceil(rows) row slots. Its subtrees are aligned
// blocks of rows, so a thread takes one column of one aligned block of `block_rows` rows and sums
// it going down the rows with a binary counter; the merge kernel builds the tree above the
// blocks' partials the same way (blocks past the matrix are +0.0 slots, as in the definition).
// Counts and extremes are exact and order-free: per thread, then atomics per column.
//
// Every addition is one of the definition's, on the same operands; -fmad=false keeps v * v and the
// additions separate, as on the CPU.
#include "backends/cuda/device_decode.cuh"

namespace tm_gpu {
namespace {

constexpr unsigned kThreads = 256;
constexpr int kColumnDepth = 10;  // log2(kChannelMaxBlockRows)
static_assert((1u << kColumnDepth) == kChannelMaxBlockRows);

/// Float bits of element `col` of a row. Aligned: the row start suits the dtype's natural loads.
template <class D, bool kAligned>
__device__ __forceinline__ uint32_t element_at(const uint8_t* row, uint64_t col, const float* table) {
  if constexpr (D::kBlockElems == 1) {
    if constexpr (kAligned && D::kBlockBytes == 4) {
      return *reinterpret_cast<const uint32_t*>(row + 4 * col);
    } else if constexpr (kAligned && D::kBlockBytes == 2) {
      return D::convert(load_u16(row + 2 * col));
    } else {
      return D::element_bits(row, col, table);
    }
  } else {
    float v[4];
    const uint32_t j = static_cast<uint32_t>(col % D::kBlockElems);
    D::template decode4<kAligned>(row + (col / D::kBlockElems) * D::kBlockBytes, j & ~3u, PlainArith{}, v);
    return __float_as_uint(v[j & 3u]);
  }
}

/// Counts and extremes of the finite values seen (the CPU's add_to_extremes, as order keys).
struct Extremes {
  uint32_t nan = 0, pos_inf = 0, neg_inf = 0, zeros = 0;
  int32_t min_key = kKeyPosInf, max_key = kKeyNegInf;
  uint32_t absmax = 0;  // bits of |x|: their unsigned order is the order of magnitudes

  /// Adds one element; returns its value as the slot of the sums (+0.0 when not finite).
  __device__ __forceinline__ double add(uint32_t bits) {
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
};

/// A contiguous pairwise tree built leaf by leaf: level l holds the sum of the last 2^l leaves not
/// yet merged. Unrolled with constant indices, so the levels stay in registers; the branches depend
/// on the leaf number only, which is the same across a warp.
template <int kDepth>
struct PairCounter {
  double sum[kDepth + 1];
  double sq[kDepth + 1];

  /// Adds leaf number n (0, 1, ...): its value and square.
  __device__ __forceinline__ void push(double v, double w, uint64_t n) {
#pragma unroll
    for (int l = 0; l < kDepth; ++l) {
      if (((n >> l) & 1u) == 0) {
        sum[l] = v;
        sq[l] = w;
        return;
      }
      v = sum[l] + v;
      w = sq[l] + w;
    }
    sum[kDepth] = v;
    sq[kDepth] = w;
  }
  /// The root once 2^levels leaves were pushed.
  __device__ __forceinline__ void root(int levels, double& s, double& q) const {
    s = 0.0;
    q = 0.0;
#pragma unroll
    for (int l = 0; l <= kDepth; ++l) {
      if (l == levels) {
        s = sum[l];
        q = sq[l];
      }
    }
  }
};

__device__ __forceinline__ int log2_of(uint64_t power_of_two) { return 63 - __clzll(static_cast<long long>(power_of_two)); }

template <class D, bool kAligned, int kDepth>
__global__ void __launch_bounds__(kThreads) row_kernel(ChannelJob job) {
  __shared__ double s_sum[kThreads], s_sq[kThreads];
  __shared__ uint32_t s_count[4][kThreads];
  __shared__ int32_t s_min[kThreads], s_max[kThreads];
  __shared__ uint32_t s_abs[kThreads];
  const uint32_t group = job.row_slots < kThreads ? static_cast<uint32_t>(job.row_slots) : kThreads;  // G
  const uint32_t lane = threadIdx.x % group;
  const uint64_t row = static_cast<uint64_t>(blockIdx.x) * (kThreads / group) + threadIdx.x / group;
  const uint64_t per_lane = job.row_slots / group;  // M
  const int levels = log2_of(per_lane);
  Extremes x;
  double sum = 0.0, sq = 0.0;
  if (row < job.rows) {
    const uint8_t* data = job.data + row * job.row_bytes;
    PairCounter<kDepth> counter;
    for (uint64_t i = 0; i < per_lane; ++i) {
      const uint64_t m = levels == 0 ? 0 : __brevll(static_cast<long long>(i)) >> (64 - levels);
      const uint64_t col = lane + group * m;
      double v = 0.0;
      if (col < job.cols) v = x.add(element_at<D, kAligned>(data, col, job.f8_table));
      counter.push(v, v * v, i);
    }
    counter.root(levels, sum, sq);
  }
  // Halving over the lanes: across warps through shared memory (lane k += lane k + h) ...
  if (group > 32) {
    const unsigned t = threadIdx.x;
    s_sum[t] = sum;
    s_sq[t] = sq;
    s_count[0][t] = x.nan;
    s_count[1][t] = x.pos_inf;
    s_count[2][t] = x.neg_inf;
    s_count[3][t] = x.zeros;
    s_min[t] = x.min_key;
    s_max[t] = x.max_key;
    s_abs[t] = x.absmax;
    __syncthreads();
    for (uint32_t h = group / 2; h >= 32; h /= 2) {
      if (lane < h) {
        s_sum[t] = s_sum[t] + s_sum[t + h];
        s_sq[t] = s_sq[t] + s_sq[t + h];
        for (int c = 0; c < 4; ++c) s_count[c][t] += s_count[c][t + h];
        s_min[t] = min(s_min[t], s_min[t + h]);
        s_max[t] = max(s_max[t], s_max[t + h]);
        s_abs[t] = max(s_abs[t], s_abs[t + h]);
      }
      __syncthreads();
    }
    sum = s_sum[t];
    sq = s_sq[t];
    x.nan = s_count[0][t];
    x.pos_inf = s_count[1][t];
    x.neg_inf = s_count[2][t];
    x.zeros = s_count[3][t];
    x.min_key = s_min[t];
    x.max_key = s_max[t];
    x.absmax = s_abs[t];
  }
  // ... then within the warp by shuffles (a group narrower than a warp stays inside its lanes).
  for (uint32_t h = (group < 32 ? group : 32) / 2; h >= 1; h /= 2) {
    sum = sum + shuffle_xor(sum, static_cast<int>(h));
    sq = sq + shuffle_xor(sq, static_cast<int>(h));
    x.nan += shuffle_xor(x.nan, static_cast<int>(h));
    x.pos_inf += shuffle_xor(x.pos_inf, static_cast<int>(h));
    x.neg_inf += shuffle_xor(x.neg_inf, static_cast<int>(h));
    x.zeros += shuffle_xor(x.zeros, static_cast<int>(h));
    x.min_key = min(x.min_key, shuffle_xor(x.min_key, static_cast<int>(h)));
    x.max_key = max(x.max_key, shuffle_xor(x.max_key, static_cast<int>(h)));
    x.absmax = max(x.absmax, shuffle_xor(x.absmax, static_cast<int>(h)));
  }
  if (lane == 0 && row < job.rows) {
    TM_TileStats s;
    s.count = job.cols;
    s.nan = x.nan;
    s.pos_inf = x.pos_inf;
    s.neg_inf = x.neg_inf;
    s.zeros = x.zeros;
    s.sum = sum;
    s.sum_sq = sq;
    s.min = __uint_as_float(bits_from_key(x.min_key));
    s.max = __uint_as_float(bits_from_key(x.max_key));
    s.absmax = __uint_as_float(x.absmax);
    s.reserved = 0;
    job.row_stats[row] = s;
  }
}

/// One thread per (column, aligned block of rows); 32 neighbouring columns per warp share each row's bytes.
template <class D, bool kAligned>
__global__ void __launch_bounds__(kThreads) column_kernel(ChannelJob job, uint64_t column_ctas) {
  const uint64_t col = (blockIdx.x % column_ctas) * kThreads + threadIdx.x;
  const uint64_t block = blockIdx.x / column_ctas;  // in the band
  if (col >= job.cols) return;
  const uint64_t first = block * job.block_rows;
  const uint8_t* data = job.data + first * job.row_bytes;
  Extremes x;
  PairCounter<kColumnDepth> counter;
  constexpr uint32_t kBatch = 8;  // loads in flight per thread
  for (uint32_t r0 = 0; r0 < job.block_rows; r0 += kBatch) {
    uint32_t bits[kBatch];
    bool valid[kBatch];
#pragma unroll
    for (uint32_t j = 0; j < kBatch; ++j) {
      valid[j] = r0 + j < job.block_rows && first + r0 + j < job.rows;
      bits[j] = valid[j] ? element_at<D, kAligned>(data + (r0 + j) * job.row_bytes, col, job.f8_table) : 0u;
    }
#pragma unroll
    for (uint32_t j = 0; j < kBatch; ++j) {
      if (r0 + j >= job.block_rows) break;
      const double v = valid[j] ? x.add(bits[j]) : 0.0;  // rows past the matrix are +0.0 slots
      counter.push(v, v * v, r0 + j);
    }
  }
  double sum, sq;
  counter.root(log2_of(job.block_rows), sum, sq);
  const uint64_t slot = (job.first_row / job.block_rows + block) * job.cols + col;
  job.partial_sum[slot] = sum;
  job.partial_sq[slot] = sq;
  ColumnCounts& c = job.counts[col];
  if (x.nan) atomicAdd(&c.nan, static_cast<unsigned long long>(x.nan));
  if (x.pos_inf) atomicAdd(&c.pos_inf, static_cast<unsigned long long>(x.pos_inf));
  if (x.neg_inf) atomicAdd(&c.neg_inf, static_cast<unsigned long long>(x.neg_inf));
  if (x.zeros) atomicAdd(&c.zeros, static_cast<unsigned long long>(x.zeros));
  if (x.min_key != kKeyPosInf) atomicMin(&c.min_key, x.min_key);
  if (x.max_key != kKeyNegInf) atomicMax(&c.max_key, x.max_key);
  if (x.absmax) atomicMax(&c.absmax_bits, x.absmax);
}

__global__ void __launch_bounds__(kThreads) init_kernel(ColumnCounts* counts, uint64_t cols) {
  const uint64_t c = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c < cols) counts[c] = ColumnCounts{0, 0, 0, 0, kKeyPosInf, kKeyNegInf, 0, 0};
}

/// One thread per column: the pairwise tree over `slots` block partials (those from `blocks` on are
/// +0.0). Few leaves per column, so the counter's levels may live in local memory.
__global__ void __launch_bounds__(kThreads) merge_kernel(ChannelJob job, uint64_t rows, uint64_t blocks, uint64_t slots,
                                                         TM_TileStats* out) {
  const uint64_t col = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (col >= job.cols) return;
  double sum[64], sq[64];
  for (uint64_t n = 0; n < slots; ++n) {
    double v = n < blocks ? job.partial_sum[n * job.cols + col] : 0.0;
    double w = n < blocks ? job.partial_sq[n * job.cols + col] : 0.0;
    int l = 0;
    for (uint64_t m = n; m & 1u; m >>= 1, ++l) {
      v = sum[l] + v;
      w = sq[l] + w;
    }
    sum[l] = v;
    sq[l] = w;
  }
  const int top = log2_of(slots);
  const ColumnCounts c = job.counts[col];
  TM_TileStats s;
  s.count = rows;
  s.nan = c.nan;
  s.pos_inf = c.pos_inf;
  s.neg_inf = c.neg_inf;
  s.zeros = c.zeros;
  s.sum = sum[top];
  s.sum_sq = sq[top];
  s.min = __uint_as_float(bits_from_key(c.min_key));
  s.max = __uint_as_float(bits_from_key(c.max_key));
  s.absmax = __uint_as_float(c.absmax_bits);
  s.reserved = 0;
  out[col] = s;
}

unsigned ctas_for(uint64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

}  // namespace

cudaError_t launch_channel_init(ColumnCounts* counts, uint64_t cols, cudaStream_t stream) {
  if (cols == 0) return cudaSuccess;
  init_kernel<<<ctas_for(cols), kThreads, 0, stream>>>(counts, cols);
  return cudaGetLastError();
}

cudaError_t launch_channel_rows(KernelDType dtype, const ChannelJob& job, cudaStream_t stream) {
  if (job.rows == 0 || job.cols == 0) return cudaSuccess;
  const uint64_t group = job.row_slots < kThreads ? job.row_slots : kThreads;
  const uint64_t ctas = (job.rows + kThreads / group - 1) / (kThreads / group);
  const uint64_t per_lane = job.row_slots / group;
  with_decoder(dtype, [&]<class D>() {
    // Rows up to 2^20 columns keep 12 levels; wider ones (rare) take a deeper counter.
    if (per_lane > (uint64_t{1} << 12)) {
      row_kernel<D, false, 40><<<static_cast<unsigned>(ctas), kThreads, 0, stream>>>(job);
    } else if (job.aligned) {
      row_kernel<D, true, 12><<<static_cast<unsigned>(ctas), kThreads, 0, stream>>>(job);
    } else {
      row_kernel<D, false, 12><<<static_cast<unsigned>(ctas), kThreads, 0, stream>>>(job);
    }
  });
  return cudaGetLastError();
}

cudaError_t launch_channel_columns(KernelDType dtype, const ChannelJob& job, cudaStream_t stream) {
  if (job.rows == 0 || job.cols == 0) return cudaSuccess;
  const uint64_t column_ctas = ctas_for(job.cols);
  const uint64_t blocks = (job.rows + job.block_rows - 1) / job.block_rows;
  const unsigned grid = static_cast<unsigned>(column_ctas * blocks);
  with_decoder(dtype, [&]<class D>() {
    if (job.aligned) {
      column_kernel<D, true><<<grid, kThreads, 0, stream>>>(job, column_ctas);
    } else {
      column_kernel<D, false><<<grid, kThreads, 0, stream>>>(job, column_ctas);
    }
  });
  return cudaGetLastError();
}

cudaError_t launch_channel_merge(const ChannelJob& job, uint64_t rows, uint64_t blocks, TM_TileStats* out,
                                 cudaStream_t stream) {
  if (job.cols == 0) return cudaSuccess;
  uint64_t row_slots = 1;
  while (row_slots < rows) row_slots *= 2;
  merge_kernel<<<ctas_for(job.cols), kThreads, 0, stream>>>(job, rows, blocks, row_slots / job.block_rows, out);
  return cudaGetLastError();
}

}  // namespace tm_gpu
