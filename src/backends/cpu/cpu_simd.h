// Portable SIMD vocabulary for the CPU kernels: GCC/Clang vector extensions, compiled once per
// instruction set through target attributes (see cpu_dispatch.h), so one binary runs anywhere.
// Everything here is always_inline so that it takes on the instruction set of its caller.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

#include "backends/cpu/cpu_order_key.h"

#define TM_CPU_INLINE [[gnu::always_inline]] inline

// Vectors are only passed between always_inline functions, so the calling convention GCC warns
// about (passing wide vectors without AVX) never applies.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpsabi"

namespace tensormorph::cpu::simd {

typedef float f32x8 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));
typedef uint32_t u32x8 __attribute__((vector_size(32)));
typedef uint16_t u16x8 __attribute__((vector_size(16)));
typedef int8_t i8x8 __attribute__((vector_size(8)));
typedef uint8_t u8x8 __attribute__((vector_size(8)));
typedef double f64x8 __attribute__((vector_size(64)));
typedef double f64x4 __attribute__((vector_size(32)));
typedef double f64x2 __attribute__((vector_size(16)));

/// Elements per vector in every kernel.
inline constexpr uint32_t kLanes = 8;

/// Unaligned load of a vector from `p`.
template <typename V>
TM_CPU_INLINE V load(const void* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

/// Unaligned store of `v` to `p`.
template <typename V>
TM_CPU_INLINE void store(void* p, const V& v) {
  std::memcpy(p, &v, sizeof v);
}

/// Reinterprets the bits of a vector as another vector type of the same size.
template <typename To, typename From>
TM_CPU_INLINE To bits(const From& v) {
  static_assert(sizeof(To) == sizeof(From));
  To out;
  std::memcpy(&out, &v, sizeof out);
  return out;
}

/// A vector with every lane `x`.
template <typename V, typename S>
TM_CPU_INLINE V splat(S x) {
  V v = {};
  return v + static_cast<decltype(v[0] + 0)>(x);
}

/// float -> double, exact.
TM_CPU_INLINE f64x8 widen(const f32x8& v) { return __builtin_convertvector(v, f64x8); }

/// A monotone integer key of a float's bits: signed comparison of keys orders all floats, with
/// -0.0 just below +0.0, -NaN below -Inf and +NaN above +Inf.
TM_CPU_INLINE i32x8 order_key(const f32x8& v) {
  const i32x8 b = bits<i32x8>(v);
  return b ^ ((b >> 31) & 0x7fffffff);
}

/// Lane-wise minimum / maximum of signed keys.
TM_CPU_INLINE i32x8 min(const i32x8& a, const i32x8& b) { return a < b ? a : b; }
TM_CPU_INLINE i32x8 max(const i32x8& a, const i32x8& b) { return a > b ? a : b; }

/// Canonical halving reduction of the 8 lanes: lanes i + i+4, then i + i+2, then 0 + 1.
TM_CPU_INLINE double halving_lanes(const f64x8& v) {
  const f64x4 a = __builtin_shufflevector(v, v, 0, 1, 2, 3) + __builtin_shufflevector(v, v, 4, 5, 6, 7);
  const f64x2 b = __builtin_shufflevector(a, a, 0, 1) + __builtin_shufflevector(a, a, 2, 3);
  return b[0] + b[1];
}

/// Horizontal sums of integer lanes (order does not matter for integers).
TM_CPU_INLINE int32_t reduce_min(const i32x8& v) {
  int32_t m = v[0];
  for (int i = 1; i < 8; ++i) m = v[i] < m ? v[i] : m;
  return m;
}
TM_CPU_INLINE int32_t reduce_max(const i32x8& v) {
  int32_t m = v[0];
  for (int i = 1; i < 8; ++i) m = v[i] > m ? v[i] : m;
  return m;
}
TM_CPU_INLINE uint64_t reduce_add(const u32x8& v) {
  uint64_t s = 0;
  for (int i = 0; i < 8; ++i) s += v[i];
  return s;
}

// ---- Element loaders: 8 stored elements -> 8 floats, bit-identical to decode_to_f32 ---------

/// IEEE float32 storage.
struct F32Source {
  using Element = float;
  TM_CPU_INLINE static f32x8 load8(const Element* p) { return load<f32x8>(p); }
};

/// bfloat16 storage: the top half of a float32.
struct BF16Source {
  using Element = uint16_t;
  TM_CPU_INLINE static f32x8 load8(const Element* p) {
    const u32x8 wide = __builtin_convertvector(load<u16x8>(p), u32x8);
    return bits<f32x8>(wide << 16);
  }
};

/// IEEE half storage, with the branch-free exact conversion of decode_internal::half_bits_to_float
/// (NaN payloads kept, subnormals exact).
struct F16Source {
  using Element = uint16_t;
  TM_CPU_INLINE static f32x8 load8(const Element* p) {
    const u32x8 h = __builtin_convertvector(load<u16x8>(p), u32x8);
    const u32x8 sign = (h & 0x8000u) << 16;
    const u32x8 magnitude = h & 0x7fffu;
    u32x8 normal = (magnitude << 13) + (112u << 23);
    normal += bits<u32x8>(magnitude >= 0x7c00u) & (112u << 23);
    const f32x8 subnormal = __builtin_convertvector(bits<i32x8>(magnitude), f32x8) * 0x1p-24f;
    const u32x8 result = magnitude < 0x0400u ? bits<u32x8>(subnormal) : normal;
    return bits<f32x8>(sign | result);
  }
};

}  // namespace tensormorph::cpu::simd

#pragma GCC diagnostic pop
