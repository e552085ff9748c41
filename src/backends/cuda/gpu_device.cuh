// Device-side vendor names and the small helpers every kernel family shares: warp exchanges, the
// float order keys of the CPU reference, and byte-wise loads. CUDA names are used as they are;
// under hipcc (__HIP_PLATFORM_AMD__) the few that differ are mapped here.
#pragma once

#include <cstdint>

#if defined(__HIP_PLATFORM_AMD__)
#include <hip/hip_runtime.h>
#else
#include <cuda_runtime.h>
#endif

#include "backends/cuda/gpu_runtime.h"

namespace tm_gpu {

/// Lanes that cooperate through shuffles. AMD wave64 hardware runs two such groups per wave; no
/// kernel shuffles across 32 lanes, so both widths behave the same.
constexpr int kLanes = 32;

/// x from the lane whose index differs from this one's in `mask` (mask < kLanes).
template <typename T>
__device__ __forceinline__ T shuffle_xor(T x, int mask) {
#if defined(__HIP_PLATFORM_AMD__)
  return __shfl_xor(x, mask, kLanes);
#else
  return __shfl_xor_sync(0xffffffffu, x, mask);
#endif
}

/// True when `p` holds on every lane of the warp. (On AMD wave64 hardware it asks both 32-lane
/// groups of the wave; callers only use it to choose between two paths that agree bit for bit.)
__device__ __forceinline__ bool warp_all(bool p) {
#if defined(__HIP_PLATFORM_AMD__)
  return __all(p);
#else
  return __all_sync(0xffffffffu, p);
#endif
}

/// Sum over the 32 lanes (every lane gets it); one instruction on sm_80 and later.
__device__ __forceinline__ uint32_t warp_sum(uint32_t x) {
#if defined(__HIP_PLATFORM_AMD__)
  for (int m = kLanes / 2; m >= 1; m /= 2) x += shuffle_xor(x, m);
  return x;
#else
  return __reduce_add_sync(0xffffffffu, x);
#endif
}

/// Minimum over the 32 lanes (every lane gets it).
__device__ __forceinline__ int32_t warp_min(int32_t x) {
#if defined(__HIP_PLATFORM_AMD__)
  for (int m = kLanes / 2; m >= 1; m /= 2) x = min(x, shuffle_xor(x, m));
  return x;
#else
  return __reduce_min_sync(0xffffffffu, x);
#endif
}

/// Maximum over the 32 lanes (every lane gets it).
__device__ __forceinline__ int32_t warp_max(int32_t x) {
#if defined(__HIP_PLATFORM_AMD__)
  for (int m = kLanes / 2; m >= 1; m /= 2) x = max(x, shuffle_xor(x, m));
  return x;
#else
  return __reduce_max_sync(0xffffffffu, x);
#endif
}

/// Asks for the 128-byte line at `p` to be brought into L2 (a hint; nothing on AMD GPUs).
__device__ __forceinline__ void prefetch_l2(const void* p) {
#if !defined(__HIP_PLATFORM_AMD__)
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
#else
  (void)p;
#endif
}

/// A load of data read once (`ld.global.cs`, evict first: the streamed words do not push
/// the prefetched lines of later units out of L2; F32 84% -> 87% of read bandwidth on the H200).
template <class T>
__device__ __forceinline__ T load_streamed(const T* p) {
#if !defined(__HIP_PLATFORM_AMD__)
  return __ldcs(p);
#else
  return *p;
#endif
}

/// The CPU reference's monotone key of float bits: -0 orders below +0, NaN beyond +-Inf.
__device__ __forceinline__ int32_t order_key(uint32_t bits) {
  return static_cast<int32_t>(bits ^ (static_cast<uint32_t>(static_cast<int32_t>(bits) >> 31) >> 1));
}

/// The float bits whose key is `key` (the key map is its own inverse).
__device__ __forceinline__ uint32_t bits_from_key(int32_t key) {
  return static_cast<uint32_t>(key) ^ (static_cast<uint32_t>(key >> 31) >> 1);
}

/// Key of +Inf (the minimum of an empty set) and of -Inf (its maximum).
constexpr int32_t kKeyPosInf = 0x7f800000;
constexpr int32_t kKeyNegInf = static_cast<int32_t>(0xff800000u ^ 0x7fffffffu);

/// Unaligned little-endian loads, byte by byte (any address).
__device__ __forceinline__ uint32_t load_u8(const uint8_t* p) { return p[0]; }
__device__ __forceinline__ uint32_t load_u16_any(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8);
}
__device__ __forceinline__ uint32_t load_u32_any(const uint8_t* p) {
  return load_u16_any(p) | (load_u16_any(p + 2) << 16);
}

/// An aligned 16-bit load (the address must be even).
__device__ __forceinline__ uint32_t load_u16(const uint8_t* p) {
  return *reinterpret_cast<const uint16_t*>(p);
}

}  // namespace tm_gpu
