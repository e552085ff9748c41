// The spectra's kernels: decoded float32 values widened to the float64 the solvers take, with the
// first non-finite value found (a spectrum is defined for finite matrices only); R taken from a
// QR factorization.
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

__global__ void __launch_bounds__(kThreads) upper_triangle_kernel(const double* in, uint64_t ld, double* out, uint64_t n) {
  const uint64_t step = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t k = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < n * n; k += step) {
    const uint64_t row = k % n, column = k / n;
    out[k] = row <= column ? in[column * ld + row] : 0.0;
  }
}

unsigned grid_for(uint64_t n) {
  const uint64_t blocks = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < (1u << 20) ? blocks : (1u << 20));
}

}  // namespace

cudaError_t launch_upper_triangle(const double* in, uint64_t ld, double* out, uint64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  upper_triangle_kernel<<<grid_for(n * n), kThreads, 0, stream>>>(in, ld, out, n);
  return cudaGetLastError();
}

cudaError_t launch_widen_checked(const float* in, double* out, uint64_t n, unsigned long long* first_bad, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  widen_kernel<<<grid_for(n), kThreads, 0, stream>>>(in, out, n, first_bad);
  return cudaGetLastError();
}

}  // namespace tm_gpu
