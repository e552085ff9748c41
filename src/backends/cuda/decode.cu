// tm.decode@1: every element of a tensor to float32, bit for bit the CPU reference (NaN results of
// the block types' arithmetic carry the host CPU's NaN bits, see HostArith).
#include "backends/cuda/device_decode.cuh"

namespace tm_gpu {
namespace {

constexpr unsigned kThreads = 256;

template <class D>
__global__ void __launch_bounds__(kThreads) decode_kernel(DecodeJob job) {
  const uint64_t groups = (job.elems + 3) / 4;
  const uint64_t step = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  const HostArith arith{job.nan};
  for (uint64_t g = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups; g += step) {
    const uint64_t i = 4 * g;
    const bool whole = i + 4 <= job.elems;
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if constexpr (D::kBlockElems == 1) {
      if (whole && job.aligned) {
        const typename D::Word w = D::template load_word<true>(job.in, i);
#pragma unroll
        for (int e = 0; e < 4; ++e) v[e] = __uint_as_float(D::bits(w, e, job.f8_table));
      } else {
        for (int e = 0; e < 4 && i + e < job.elems; ++e) v[e] = __uint_as_float(D::element_bits(job.in, i + e, job.f8_table));
      }
    } else {
      // Block types hold a multiple of 4 elements per block, so a group never straddles blocks.
      const uint8_t* block = job.in + (i / D::kBlockElems) * D::kBlockBytes;
      const uint32_t j = static_cast<uint32_t>(i % D::kBlockElems);
      if (job.aligned) {
        D::template decode4<true>(block, j, arith, v);
      } else {
        D::template decode4<false>(block, j, arith, v);
      }
    }
    if (whole && job.aligned) {
      *reinterpret_cast<float4*>(job.out + i) = make_float4(v[0], v[1], v[2], v[3]);
    } else {
      for (int e = 0; e < 4 && i + e < job.elems; ++e) job.out[i + e] = v[e];
    }
  }
}

unsigned grid_for(uint64_t groups) {
  const uint64_t blocks = (groups + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < (1u << 20) ? (blocks == 0 ? 1 : blocks) : (1u << 20));
}

}  // namespace

cudaError_t launch_decode(KernelDType dtype, const DecodeJob& job, cudaStream_t stream) {
  if (job.elems == 0) return cudaSuccess;
  const unsigned grid = grid_for((job.elems + 3) / 4);
  with_decoder(dtype, [&]<class D>() { decode_kernel<D><<<grid, kThreads, 0, stream>>>(job); });
  return cudaGetLastError();
}

}  // namespace tm_gpu
