// tm.diff_stats@1 and tm.subtract@1 on the device (the host side is gpu_diff.cpp). One 256-thread
// block per chunk of 65536 pairs: it decodes both sides tile by tile (1024 pairs, each thread four
// consecutive ones, into shared memory), then thread l takes the tile's pairs 256 k + l, k
// ascending, which is the chunk's lane order (docs/COMPUTE.md): lane l's terms are added in the
// order of their elements, and the 256 lane sums combine by the halving tree. Decoding reproduces
// the CPU bit for bit: the block types and the offsets use the host's NaN bits (HostArith), since
// bits_differing sees NaN payloads. Every float64 operation is one of the definition's, rounded
// on its own (no FMA: the module is built with -fmad=false, and the products are explicit).
#include "backends/cuda/device_decode.cuh"

namespace tm_gpu {
namespace {

constexpr unsigned kThreads = 256;
constexpr uint32_t kTile = 4 * kThreads;  // pairs decoded at once
constexpr uint64_t kChunk = TM_DIFF_CHUNK;

__device__ __forceinline__ double dmul(double a, double b) {
#if defined(__HIP_PLATFORM_AMD__)
  return a * b;  // hipcc runs with -ffp-contract=off
#else
  return __dmul_rn(a, b);
#endif
}
__device__ __forceinline__ double dadd(double a, double b) {
#if defined(__HIP_PLATFORM_AMD__)
  return a + b;
#else
  return __dadd_rn(a, b);
#endif
}
__device__ __forceinline__ double dsub(double a, double b) {
#if defined(__HIP_PLATFORM_AMD__)
  return a - b;
#else
  return __dsub_rn(a, b);
#endif
}

/// The decoded values of elements [i, i + 4) of a side (n of them below `elems`), offset applied.
template <class D>
__device__ __forceinline__ void decode_side4(const DiffSideJob& s, uint64_t elems, uint64_t i, const HostArith& arith,
                                             float (&v)[4], int& n) {
  n = elems - i < 4 ? static_cast<int>(elems - i) : 4;
  if constexpr (D::kBlockElems == 1) {
    if (n == 4 && s.aligned) {
      const typename D::Word w = D::template load_word<true>(s.data, i);
#pragma unroll
      for (int e = 0; e < 4; ++e) v[e] = __uint_as_float(D::bits(w, e, s.f8_table));
    } else {
      for (int e = 0; e < n; ++e) v[e] = __uint_as_float(D::element_bits(s.data, i + e, s.f8_table));
    }
  } else {
    // Block types hold a multiple of 4 elements per block: a group never straddles blocks.
    const uint8_t* block = s.data + (i / D::kBlockElems) * D::kBlockBytes;
    const uint32_t j = static_cast<uint32_t>(i % D::kBlockElems);
    if (s.aligned) {
      D::template decode4<true>(block, j, arith, v);
    } else {
      D::template decode4<false>(block, j, arith, v);
    }
  }
  if (s.offset) {
    for (int e = 0; e < n; ++e) v[e] = arith.add(v[e], s.offset_value);
  }
}

/// decode_side4 with the side's decoder (the dtype is the same for every thread of a launch).
__device__ __forceinline__ void decode_any4(const DiffSideJob& s, uint64_t elems, uint64_t i, const HostArith& arith,
                                            float (&v)[4], int& n) {
  switch (s.dtype) {
    case KernelDType::kF32: decode_side4<DecF32>(s, elems, i, arith, v, n); return;
    case KernelDType::kF16: decode_side4<DecF16>(s, elems, i, arith, v, n); return;
    case KernelDType::kBF16: decode_side4<DecBF16>(s, elems, i, arith, v, n); return;
    case KernelDType::kF8E4M3:
    case KernelDType::kF8E5M2: decode_side4<DecF8>(s, elems, i, arith, v, n); return;
    case KernelDType::kQ8_0: decode_side4<DecQ8_0>(s, elems, i, arith, v, n); return;
    case KernelDType::kQ4_0: decode_side4<DecQ4_0>(s, elems, i, arith, v, n); return;
    case KernelDType::kQ4_K: decode_side4<DecQ4_K>(s, elems, i, arith, v, n); return;
    case KernelDType::kQ6_K: decode_side4<DecQ6_K>(s, elems, i, arith, v, n); return;
  }
  n = 0;
}

/// 0 finite, 1 NaN, 2 +Inf, 3 -Inf.
__device__ __forceinline__ uint32_t class_of(uint32_t bits) {
  const uint32_t magnitude = bits & 0x7fffffffu;
  const uint32_t nan = magnitude > 0x7f800000u ? 1u : 0u;
  const uint32_t inf = magnitude == 0x7f800000u ? 1u : 0u;
  return nan | (inf << 1) | (inf & (bits >> 31));
}

/// The halving tree over the block's 256 values in `slots` (slot l = thread l's); every thread
/// gets the result. Destroys `slots`.
__device__ double halving_tree(double* slots, double mine) {
  slots[threadIdx.x] = mine;
  __syncthreads();
  for (unsigned h = kThreads / 2; h >= 1; h /= 2) {
    if (threadIdx.x < h) slots[threadIdx.x] = dadd(slots[threadIdx.x], slots[threadIdx.x + h]);
    __syncthreads();
  }
  const double r = slots[0];
  __syncthreads();
  return r;
}

__global__ void __launch_bounds__(kThreads) diff_stats_kernel(DiffJob job) {
  __shared__ float tile_a[kTile], tile_b[kTile];
  __shared__ double slots[kThreads];
  __shared__ unsigned int counts[8];
  __shared__ double best_diff[kThreads];
  __shared__ unsigned long long best_index[kThreads];
  __shared__ float best_a[kThreads], best_b[kThreads];
  const HostArith arith{job.nan};
  const unsigned l = threadIdx.x;
  const uint64_t first = static_cast<uint64_t>(blockIdx.x) * kChunk;
  const uint64_t m = job.elems - first < kChunk ? job.elems - first : kChunk;
  if (l < 8) counts[l] = 0;
  double sum_diff = 0.0, sum_sq_diff = 0.0, sum_sq_a = 0.0, sum_sq_b = 0.0, sum_ab = 0.0;
  double max_diff = -1.0;
  uint64_t max_index = 0;  // within the chunk
  float max_a = 0.0f, max_b = 0.0f;
  uint32_t finite = 0, differing = 0, bits_differing = 0, classes = 0, nan_a = 0, nan_b = 0, inf_a = 0, inf_b = 0;
  for (uint64_t t = 0; t < m; t += kTile) {
    {
      const uint64_t i = first + t + 4 * l;
      if (i < first + m) {
        float va[4], vb[4];
        int na = 0, nb = 0;
        decode_any4(job.a, first + m, i, arith, va, na);
        decode_any4(job.b, first + m, i, arith, vb, nb);
        for (int e = 0; e < na; ++e) tile_a[4 * l + e] = va[e];
        for (int e = 0; e < nb; ++e) tile_b[4 * l + e] = vb[e];
      }
    }
    __syncthreads();
#pragma unroll
    for (uint32_t k = 0; k < 4; ++k) {
      const uint64_t c = t + k * kThreads + l;  // index in the chunk: row (t / 256 + k), lane l
      if (c >= m) break;
      const float x = tile_a[k * kThreads + l], y = tile_b[k * kThreads + l];
      const uint32_t xb = __float_as_uint(x), yb = __float_as_uint(y);
      const uint32_t cx = class_of(xb), cy = class_of(yb);
      bits_differing += xb != yb ? 1u : 0u;
      classes += cx != cy ? 1u : 0u;
      nan_a += cx == 1 ? 1u : 0u;
      nan_b += cy == 1 ? 1u : 0u;
      inf_a += cx >= 2 ? 1u : 0u;
      inf_b += cy >= 2 ? 1u : 0u;
      if (cx != 0 || cy != 0) {
        differing += cx != cy ? 1u : 0u;
        continue;
      }
      ++finite;
      differing += x != y ? 1u : 0u;
      const double da = x, db = y;
      const double d = dsub(da, db);
      sum_diff = dadd(sum_diff, d);
      sum_sq_diff = dadd(sum_sq_diff, dmul(d, d));
      sum_sq_a = dadd(sum_sq_a, dmul(da, da));
      sum_sq_b = dadd(sum_sq_b, dmul(db, db));
      sum_ab = dadd(sum_ab, dmul(da, db));
      const double ad = fabs(d);
      if (ad > max_diff) {  // a lane's elements come in index order: the first of equal ones stays
        max_diff = ad;
        max_index = c;
        max_a = x;
        max_b = y;
      }
    }
    __syncthreads();
  }
  // Counts: warp sums, then one shared atomic per warp and counter.
  const uint32_t mine[8] = {finite, differing, bits_differing, classes, nan_a, nan_b, inf_a, inf_b};
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const uint32_t w = warp_sum(mine[k]);
    if ((l & (kLanes - 1)) == 0 && w != 0) atomicAdd(&counts[k], w);
  }
  // The largest |d|, the lowest index among equal ones: a tree over the threads.
  best_diff[l] = max_diff;
  best_index[l] = max_index;
  best_a[l] = max_a;
  best_b[l] = max_b;
  __syncthreads();
  for (unsigned h = kThreads / 2; h >= 1; h /= 2) {
    if (l < h) {
      const double o = best_diff[l + h];
      const unsigned long long oi = best_index[l + h];
      if (o > best_diff[l] || (o == best_diff[l] && oi < best_index[l])) {
        best_diff[l] = o;
        best_index[l] = oi;
        best_a[l] = best_a[l + h];
        best_b[l] = best_b[l + h];
      }
    }
    __syncthreads();
  }
  const double s0 = halving_tree(slots, sum_diff);
  const double s1 = halving_tree(slots, sum_sq_diff);
  const double s2 = halving_tree(slots, sum_sq_a);
  const double s3 = halving_tree(slots, sum_sq_b);
  const double s4 = halving_tree(slots, sum_ab);
  if (l == 0) {
    TM_DiffStats r;
    r.pairs = m;
    r.finite_pairs = counts[0];
    r.differing = counts[1];
    r.bits_differing = counts[2];
    r.class_mismatch = counts[3];
    r.nan_a = counts[4];
    r.nan_b = counts[5];
    r.inf_a = counts[6];
    r.inf_b = counts[7];
    const bool found = best_diff[0] >= 0.0;
    r.max_abs_index = found ? job.first_index + first + best_index[0] : ~0ull;
    r.max_abs_diff = found ? best_diff[0] : 0.0;
    r.sum_diff = s0;
    r.sum_sq_diff = s1;
    r.sum_sq_a = s2;
    r.sum_sq_b = s3;
    r.sum_ab = s4;
    r.a_at_max = found ? best_a[0] : 0.0f;
    r.b_at_max = found ? best_b[0] : 0.0f;
    job.stats[blockIdx.x] = r;
  }
}

__global__ void __launch_bounds__(kThreads) subtract_kernel(DiffJob job) {
  const uint64_t groups = (job.elems + 3) / 4;
  const uint64_t step = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  const HostArith arith{job.nan};
  for (uint64_t g = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups; g += step) {
    const uint64_t i = 4 * g;
    float va[4] = {0.0f, 0.0f, 0.0f, 0.0f}, vb[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    int na = 0, nb = 0;
    decode_any4(job.a, job.elems, i, arith, va, na);
    decode_any4(job.b, job.elems, i, arith, vb, nb);
    (void)nb;  // the same as na: both sides have job.elems elements
    float r[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float d = va[e] - vb[e];
      r[e] = d == d ? d : __uint_as_float(0x7fc00000u);
    }
    if (na == 4 && job.difference_aligned) {
      *reinterpret_cast<float4*>(job.difference + i) = make_float4(r[0], r[1], r[2], r[3]);
    } else {
      for (int e = 0; e < na; ++e) job.difference[i + e] = r[e];
    }
  }
}

}  // namespace

cudaError_t launch_diff_stats(const DiffJob& job, cudaStream_t stream) {
  if (job.elems == 0) return cudaSuccess;
  const uint64_t chunks = (job.elems + kChunk - 1) / kChunk;
  diff_stats_kernel<<<static_cast<unsigned>(chunks), kThreads, 0, stream>>>(job);
  return cudaGetLastError();
}

cudaError_t launch_subtract(const DiffJob& job, cudaStream_t stream) {
  if (job.elems == 0) return cudaSuccess;
  const uint64_t blocks = ((job.elems + 3) / 4 + kThreads - 1) / kThreads;
  const unsigned grid = static_cast<unsigned>(blocks < (1u << 20) ? blocks : (1u << 20));
  subtract_kernel<<<grid, kThreads, 0, stream>>>(job);
  return cudaGetLastError();
}

}  // namespace tm_gpu
