// tm.histogram@1: bins over [lo, hi] computed in float64 exactly as the CPU reference does, counted
// in shared memory when the bins fit there, else straight into global memory.
#include "backends/cuda/device_decode.cuh"

namespace tm_gpu {
namespace {

constexpr unsigned kThreads = 256;
/// Counters a block keeps in shared memory (48 KiB of 32-bit counters).
constexpr uint64_t kSharedCounters = 12288;

/// The CPU reference's bin rule (ops::histogram_slot), in the same float64 operations.
__device__ __forceinline__ uint64_t bin_of(float value, const HistogramJob& job) {
  if (value != value) return job.bins + 2;
  const double v = value;
  if (v < job.lo) return job.bins;
  if (v > job.hi) return job.bins + 1;
  const double b = floor((v - job.lo) * job.scale);
  return b >= static_cast<double>(job.bins) ? job.bins - 1 : static_cast<uint64_t>(b);
}

template <class D, bool kShared>
__global__ void __launch_bounds__(kThreads) histogram_kernel(HistogramJob job) {
  extern __shared__ unsigned int local[];
  const uint64_t counters = job.bins + 3;
  if constexpr (kShared) {
    for (uint64_t c = threadIdx.x; c < counters; c += blockDim.x) local[c] = 0;
    __syncthreads();
  }
  const uint64_t groups = (job.elems + 3) / 4;
  const uint64_t step = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t g = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups; g += step) {
    float v[4];
    int n = 0;
    decode_group4<D>(job.in, job.elems, 4 * g, job.aligned, job.f8_table, v, n);
    for (int e = 0; e < n; ++e) {
      const uint64_t bin = bin_of(v[e], job);
      if constexpr (kShared) {
        atomicAdd(&local[bin], 1u);
      } else {
        atomicAdd(&job.counts[bin], 1ull);
      }
    }
  }
  if constexpr (kShared) {
    __syncthreads();
    for (uint64_t c = threadIdx.x; c < counters; c += blockDim.x) {
      if (local[c] != 0) atomicAdd(&job.counts[c], static_cast<unsigned long long>(local[c]));
    }
  }
}

}  // namespace

cudaError_t launch_histogram(KernelDType dtype, const HistogramJob& job, cudaStream_t stream) {
  if (job.elems == 0) return cudaSuccess;
  const uint64_t groups = (job.elems + 3) / 4;
  const uint64_t wanted = (groups + kThreads - 1) / kThreads;
  // Enough blocks to fill the device; each flushes its shared counters once.
  const unsigned grid = static_cast<unsigned>(wanted < 2048 ? wanted : 2048);
  const bool shared = job.bins + 3 <= kSharedCounters;
  with_decoder(dtype, [&]<class D>() {
    if (shared) {
      histogram_kernel<D, true><<<grid, kThreads, (job.bins + 3) * sizeof(unsigned int), stream>>>(job);
    } else {
      histogram_kernel<D, false><<<grid, kThreads, 0, stream>>>(job);
    }
  });
  return cudaGetLastError();
}

}  // namespace tm_gpu
