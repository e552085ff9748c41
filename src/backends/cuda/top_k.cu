// tm.top_k@1's device passes (the host side is gpu_top_k.cpp). Radix passes over the magnitude key
// (radix_histogram.cu) find a threshold; this file collects the elements at or above it, and, where
// the threshold key is shared by more elements than are wanted, counts those per aligned segment of
// positions so that the host can take the first ones by index. The host sorts the few candidates in
// the operation's order: the result does not depend on the order the atomics handed out slots.
#include "backends/cuda/device_decode.cuh"

namespace tm_gpu {
namespace {

constexpr unsigned kThreads = 256;
constexpr uint32_t kFiniteLimit = 0x7f800000u;  // magnitude keys of Inf and NaN are at least this

template <class D>
__global__ void __launch_bounds__(kThreads) collect_kernel(TopKJob job) {
  const uint64_t groups = (job.elems + 3) / 4;
  const uint64_t step = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t g = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups; g += step) {
    float v[4];
    int n = 0;
    decode_group4<D>(job.in, job.elems, 4 * g, job.aligned, job.f8_table, v, n);
    for (int e = 0; e < n; ++e) {
      const uint32_t key = __float_as_uint(v[e]) & 0x7fffffffu;
      if (key >= kFiniteLimit) continue;
      const uint64_t index = job.base + 4 * g + static_cast<uint64_t>(e);
      // Almost every element fails the first test: the pass runs at memory speed.
      if (key < job.lo && !(job.tie && key == job.tie_key && index / kTopKSegmentElems <= job.tie_segment)) continue;
      const unsigned long long slot = atomicAdd(job.count, 1ull);
      if (slot < job.capacity) job.out[slot] = TopKCandidate{key, v[e], index};
    }
  }
}

/// CTA x counts the elements of segment base / S + x that lie in this launch.
template <class D>
__global__ void __launch_bounds__(kThreads) segment_count_kernel(TopKJob job) {
  __shared__ unsigned int total;
  if (threadIdx.x == 0) total = 0;
  __syncthreads();
  const uint64_t offset = job.base % kTopKSegmentElems;
  const uint64_t seg_begin = static_cast<uint64_t>(blockIdx.x) * kTopKSegmentElems;
  const uint64_t begin = seg_begin > offset ? seg_begin - offset : 0;
  const uint64_t end_unclipped = seg_begin + kTopKSegmentElems - offset;
  const uint64_t end = end_unclipped < job.elems ? end_unclipped : job.elems;
  // Group starts stay multiples of 4 from `begin`; whole words only when `begin` is one.
  const bool aligned = job.aligned && begin % 4 == 0;
  unsigned int count = 0;
  for (uint64_t i = begin + 4 * threadIdx.x; i < end; i += 4 * kThreads) {
    float v[4];
    int n = 0;
    decode_group4<D>(job.in, end, i, aligned, job.f8_table, v, n);
    for (int e = 0; e < n; ++e) count += (__float_as_uint(v[e]) & 0x7fffffffu) == job.tie_key ? 1u : 0u;
  }
  if (count != 0) atomicAdd(&total, count);
  __syncthreads();
  if (threadIdx.x == 0 && total != 0) {
    atomicAdd(&job.segment_counts[job.base / kTopKSegmentElems + blockIdx.x], static_cast<unsigned long long>(total));
  }
}

}  // namespace

cudaError_t launch_top_k_collect(KernelDType dtype, const TopKJob& job, cudaStream_t stream) {
  if (job.elems == 0) return cudaSuccess;
  const uint64_t groups = (job.elems + 3) / 4;
  const uint64_t wanted = (groups + kThreads - 1) / kThreads;
  const unsigned grid = static_cast<unsigned>(wanted < 2048 ? wanted : 2048);
  with_decoder(dtype, [&]<class D>() { collect_kernel<D><<<grid, kThreads, 0, stream>>>(job); });
  return cudaGetLastError();
}

cudaError_t launch_top_k_segment_counts(KernelDType dtype, const TopKJob& job, cudaStream_t stream) {
  if (job.elems == 0) return cudaSuccess;
  const uint64_t offset = job.base % kTopKSegmentElems;
  const uint64_t grid = (offset + job.elems + kTopKSegmentElems - 1) / kTopKSegmentElems;
  with_decoder(dtype, [&]<class D>() {
    segment_count_kernel<D><<<static_cast<unsigned>(grid), kThreads, 0, stream>>>(job);
  });
  return cudaGetLastError();
}

}  // namespace tm_gpu
