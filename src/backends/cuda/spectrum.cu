// The spectra's one kernel: decoded float32 values widened to the float64 the solvers take, with
// the first non-finite value found (a spectrum is defined for finite matrices only).
#include "backends/cuda/gpu_device.cuh"
#include "backends/cuda/kernels.h"

namespace tm_gpu {
namespace {

constexpr unsigned kThreads = 256;

__global__ void __launch_bounds__(kThreads) widen_kernel(const float* in, double* out, uint64_t n, unsigned long long* first_bad) {
  const uint64_t step = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const float v = in[i];
    if (!isfinite(v)) atomicMin(first_bad, static_cast<unsigned long long>(i));
    out[i] = static_cast<double>(v);
  }
}

}  // namespace

cudaError_t launch_widen_checked(const float* in, double* out, uint64_t n, unsigned long long* first_bad, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const uint64_t blocks = (n + kThreads - 1) / kThreads;
  const unsigned grid = static_cast<unsigned>(blocks < (1u << 20) ? blocks : (1u << 20));
  widen_kernel<<<grid, kThreads, 0, stream>>>(in, out, n, first_bad);
  return cudaGetLastError();
}

}  // namespace tm_gpu
