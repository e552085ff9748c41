// tm.radix_histogram@1: each finite element's order key (the CPU's keys; the deviation key in the
// same float64 subtraction), its digit and the rows of the prefixes it matches, counted with
// atomics: in shared memory when the rows fit there; else, for a top digit (65536 counters, a few
// of them hot), in kRadixCopies private copies in global memory added together at the end; else
// (under prefixes, where most elements match none) straight into the counts.
#include "backends/cuda/device_decode.cuh"

namespace tm_gpu {
namespace {

constexpr unsigned kThreads = 256;
enum class Counting { kShared, kPrivate, kGlobal };

__device__ __forceinline__ uint64_t key_of(float x, const RadixJob& job) {
  const uint32_t u = __float_as_uint(x);
  if (job.key == TM_RADIX_KEY_VALUE) return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  if (job.key == TM_RADIX_KEY_MAGNITUDE) return u & 0x7fffffffu;
  return static_cast<uint64_t>(__double_as_longlong(fabs(static_cast<double>(x) - job.center)));
}

template <class D, Counting kMode>
__global__ void __launch_bounds__(kThreads) radix_kernel(RadixJob job) {
  extern __shared__ unsigned int local[];
  __shared__ unsigned int classes[4];
  const uint64_t rows = job.prefix_count == 0 ? 1 : job.prefix_count;
  const uint64_t counters = rows << job.bits;
  if (threadIdx.x < 4) classes[threadIdx.x] = 0;
  if constexpr (kMode == Counting::kShared) {
    for (uint64_t c = threadIdx.x; c < counters; c += blockDim.x) local[c] = 0;
  }
  unsigned int* copy = kMode == Counting::kPrivate ? job.private_counts + (blockIdx.x % kRadixCopies) * counters : nullptr;
  __syncthreads();
  const uint64_t digit_mask = (uint64_t{1} << job.bits) - 1;
  const uint32_t prefix_shift = job.shift + job.bits;
  const uint64_t groups = (job.elems + 3) / 4;
  const uint64_t step = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  unsigned int finite = 0;
  for (uint64_t g = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups; g += step) {
    float v[4];
    int n = 0;
    decode_group4<D>(job.in, job.elems, 4 * g, job.aligned, job.f8_table, v, n);
    for (int e = 0; e < n; ++e) {
      const float x = v[e];
      if (x != x) {
        atomicAdd(&classes[1], 1u);
        continue;
      }
      if (x == __int_as_float(0x7f800000)) {
        atomicAdd(&classes[2], 1u);
        continue;
      }
      if (x == __int_as_float(static_cast<int>(0xff800000u))) {
        atomicAdd(&classes[3], 1u);
        continue;
      }
      ++finite;
      const uint64_t key = key_of(x, job);
      const uint64_t digit = (key >> job.shift) & digit_mask;
      for (uint64_t row = 0; row < rows; ++row) {
        if (job.prefix_count != 0 && (key >> prefix_shift) != job.prefixes[row]) continue;
        const uint64_t c = (row << job.bits) + digit;
        if constexpr (kMode == Counting::kShared) {
          atomicAdd(&local[c], 1u);
        } else if constexpr (kMode == Counting::kPrivate) {
          atomicAdd(&copy[c], 1u);
        } else {
          atomicAdd(&job.counts[c], 1ull);
        }
      }
    }
  }
  atomicAdd(&classes[0], finite);
  __syncthreads();
  if constexpr (kMode == Counting::kShared) {
    for (uint64_t c = threadIdx.x; c < counters; c += blockDim.x) {
      if (local[c] != 0) atomicAdd(&job.counts[c], static_cast<unsigned long long>(local[c]));
    }
  }
  if (threadIdx.x < 4 && classes[threadIdx.x] != 0) {
    atomicAdd(&job.classes[threadIdx.x], static_cast<unsigned long long>(classes[threadIdx.x]));
  }
}

/// counts[c] += the sum of the private copies' counter c.
__global__ void __launch_bounds__(kThreads) add_copies(const unsigned int* copies, uint64_t counters,
                                                       unsigned long long* counts) {
  for (uint64_t c = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < counters;
       c += static_cast<uint64_t>(gridDim.x) * blockDim.x) {
    unsigned long long sum = 0;
    for (uint32_t k = 0; k < kRadixCopies; ++k) sum += copies[k * counters + c];
    counts[c] += sum;
  }
}

}  // namespace

cudaError_t launch_radix_histogram(KernelDType dtype, const RadixJob& job, cudaStream_t stream) {
  if (job.elems == 0) return cudaSuccess;
  const uint64_t groups = (job.elems + 3) / 4;
  const uint64_t wanted = (groups + kThreads - 1) / kThreads;
  const unsigned grid = static_cast<unsigned>(wanted < 2048 ? wanted : 2048);
  const uint64_t counters = (job.prefix_count == 0 ? uint64_t{1} : job.prefix_count) << job.bits;
  with_decoder(dtype, [&]<class D>() {
    if (counters <= kRadixSharedCounters) {
      radix_kernel<D, Counting::kShared><<<grid, kThreads, counters * sizeof(unsigned int), stream>>>(job);
    } else if (job.private_counts != nullptr) {
      radix_kernel<D, Counting::kPrivate><<<grid, kThreads, 0, stream>>>(job);
    } else {
      radix_kernel<D, Counting::kGlobal><<<grid, kThreads, 0, stream>>>(job);
    }
  });
  return cudaGetLastError();
}

cudaError_t launch_radix_merge_copies(const RadixJob& job, cudaStream_t stream) {
  const uint64_t counters = (job.prefix_count == 0 ? uint64_t{1} : job.prefix_count) << job.bits;
  if (job.private_counts == nullptr || counters <= kRadixSharedCounters) return cudaSuccess;
  const uint64_t blocks = (counters + kThreads - 1) / kThreads;
  add_copies<<<static_cast<unsigned>(blocks < 1024 ? blocks : 1024), kThreads, 0, stream>>>(job.private_counts, counters,
                                                                                              job.counts);
  return cudaGetLastError();
}

}  // namespace tm_gpu
