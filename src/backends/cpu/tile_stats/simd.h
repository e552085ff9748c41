// Portable SIMD vocabulary for the tile-statistics kernels: GCC/Clang vector extensions, compiled
// once per instruction set through target attributes (see cpu_dispatch.h), so one binary runs
// anywhere. Everything here is always_inline so that it takes on the instruction set of its caller.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "backends/cpu/cpu_dispatch.h"

#if TM_CPU_X86_TARGETS
#include <immintrin.h>  // declares the __builtin_ia32_* used by the x86 conversions below
#endif

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
typedef int16_t i16x8 __attribute__((vector_size(16)));
typedef int8_t i8x8 __attribute__((vector_size(8)));
typedef uint8_t u8x8 __attribute__((vector_size(8)));
typedef int8_t i8x16 __attribute__((vector_size(16)));
typedef char char16 __attribute__((vector_size(16)));
typedef char char32 __attribute__((vector_size(32)));
typedef int8_t i8x32 __attribute__((vector_size(32)));
typedef uint8_t u8x16 __attribute__((vector_size(16)));
typedef int16_t i16x16 __attribute__((vector_size(32)));
typedef uint8_t u8x32 __attribute__((vector_size(32)));
typedef uint16_t u16x16 __attribute__((vector_size(32)));
typedef uint64_t u64x4 __attribute__((vector_size(32)));
typedef int64_t i64x4 __attribute__((vector_size(32)));
typedef int64_t i64x8 __attribute__((vector_size(64)));
typedef int16_t i16x32 __attribute__((vector_size(64)));
typedef int32_t i32x4 __attribute__((vector_size(16)));
typedef int32_t i32x16 __attribute__((vector_size(64)));
typedef double f64x8 __attribute__((vector_size(64)));
typedef double f64x4 __attribute__((vector_size(32)));
typedef double f64x2 __attribute__((vector_size(16)));

/// Elements per vector in every kernel.
inline constexpr uint32_t kLanes = 8;

/// The float whose order key (order_key below) is `key`: the key formula is its own inverse.
inline float float_from_key(int32_t key) {
  const int32_t b = key ^ ((key >> 31) & 0x7fffffff);
  return std::bit_cast<float>(b);
}

/// The key of +Inf; larger keys are +NaN.
inline constexpr int32_t kKeyPosInf = 0x7f800000;
/// The key of -Inf; smaller keys are -NaN.
inline constexpr int32_t kKeyNegInf = static_cast<int32_t>(0xff800000u ^ 0x7fffffffu);

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
  return v + static_cast<std::remove_cvref_t<decltype(v[0])>>(x);
}

/// 16 small integers (bytes widened to 16 bits) as two float vectors, elements 0-7 and 8-15; exact.
/// (GCC lowers 8-byte vectors through general registers, so bytes travel as 16-byte vectors.)
TM_CPU_INLINE void widen16(const i16x16& w, f32x8& lo, f32x8& hi) {
  lo = __builtin_convertvector(__builtin_convertvector(__builtin_shufflevector(w, w, 0, 1, 2, 3, 4, 5, 6, 7), i32x8),
                               f32x8);
  hi = __builtin_convertvector(
      __builtin_convertvector(__builtin_shufflevector(w, w, 8, 9, 10, 11, 12, 13, 14, 15), i32x8), f32x8);
}

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
TM_CPU_INLINE uint16_t reduce_min(const u16x8& v) {
  uint16_t m = v[0];
  for (int i = 1; i < 8; ++i) m = v[i] < m ? v[i] : m;
  return m;
}
TM_CPU_INLINE uint16_t reduce_or(const u16x8& v) {
  const uint64_t lo = std::bit_cast<uint64_t>(__builtin_shufflevector(v, v, 0, 1, 2, 3));
  const uint64_t hi = std::bit_cast<uint64_t>(__builtin_shufflevector(v, v, 4, 5, 6, 7));
  return static_cast<uint16_t>((lo | hi) | ((lo | hi) >> 16) | ((lo | hi) >> 32) | ((lo | hi) >> 48));
}
TM_CPU_INLINE uint64_t reduce_add(const u32x8& v) {
  uint64_t s = 0;
  for (int i = 0; i < 8; ++i) s += v[i];
  return s;
}
TM_CPU_INLINE int64_t reduce_add(const i64x8& v) {
  const i64x4 a = __builtin_shufflevector(v, v, 0, 1, 2, 3) + __builtin_shufflevector(v, v, 4, 5, 6, 7);
  return (a[0] + a[2]) + (a[1] + a[3]);
}

/// 2^e as a double (e in the normal range), for the exact-sum shortcuts' bounds and units.
TM_CPU_INLINE double power_of_two(int e) { return std::bit_cast<double>(static_cast<uint64_t>(1023 + e) << 52); }

/// Halves the width of 8 entities three times over (entity k starts in e[k], 32 bytes of V's
/// elements) with the associative `op`: pairs of 128-bit halves, then of 64-bit and 32-bit
/// pieces of two entities at a time, ending with entity kOrder[i] in 32-bit lane i. Each step
/// is one or two shuffles (vperm2i128, vpunpck*qdq, vshufps) and one `op`.
inline constexpr uint32_t kFoldOrder[8] = {0, 2, 4, 6, 1, 3, 5, 7};
/// The inverse: entity k ends in lane kFoldLane[k].
inline constexpr uint32_t kFoldLane[8] = {0, 4, 1, 5, 2, 6, 3, 7};
template <typename V, typename Op>
TM_CPU_INLINE u32x8 fold8(const V (&e)[8], const Op& op) {
  V halves[4];
  for (int p = 0; p < 4; ++p) {
    const u64x4 a = bits<u64x4>(e[2 * p]), b = bits<u64x4>(e[2 * p + 1]);
    halves[p] = op(bits<V>(__builtin_shufflevector(a, b, 0, 1, 4, 5)), bits<V>(__builtin_shufflevector(a, b, 2, 3, 6, 7)));
  }
  V quarters[2];
  for (int p = 0; p < 2; ++p) {
    const u64x4 a = bits<u64x4>(halves[2 * p]), b = bits<u64x4>(halves[2 * p + 1]);
    quarters[p] = op(bits<V>(__builtin_shufflevector(a, b, 0, 4, 2, 6)), bits<V>(__builtin_shufflevector(a, b, 1, 5, 3, 7)));
  }
  const u32x8 a = bits<u32x8>(quarters[0]), b = bits<u32x8>(quarters[1]);
  return bits<u32x8>(op(bits<V>(__builtin_shufflevector(a, b, 0, 2, 8, 10, 4, 6, 12, 14)),
                        bits<V>(__builtin_shufflevector(a, b, 1, 3, 9, 11, 5, 7, 13, 15))));
}

/// Lane-wise operations to fold with, for any vector type.
inline constexpr auto lane_add = [](const auto& a, const auto& b) __attribute__((always_inline)) { return a + b; };
inline constexpr auto lane_min = [](const auto& a, const auto& b) __attribute__((always_inline)) { return a < b ? a : b; };
inline constexpr auto lane_max = [](const auto& a, const auto& b) __attribute__((always_inline)) { return a > b ? a : b; };

/// Folds the 4 bytes of every 32-bit lane into its byte 0 with `op` (the last two halvings of
/// byte entities after fold8); the other bytes are left meaningless.
template <typename V, typename Op>
TM_CPU_INLINE V fold_lane_bytes(V v, const Op& op) {
  v = op(v, bits<V>(bits<u32x8>(v) >> 8));
  return op(v, bits<V>(bits<u32x8>(v) >> 16));
}

// ---- Conversions, per instruction set ---------------------------------------------------------

/// Conversions written as plain vector code (any instruction set).
struct PortableConvert {
  /// The widest vector of 16-bit lanes the instruction set holds in one register (128 bits for
  /// the baseline: SSE2, NEON), and its bytes as 32-bit lanes; see StoredStats for why.
  using Words = i16x8;
  using WordPairs = i32x4;
  /// The low 8 of 16 signed bytes -> 8 floats, exact.
  TM_CPU_INLINE static f32x8 bytes8(const i8x16& v) {
    return __builtin_convertvector(
        __builtin_convertvector(__builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7), i32x8), f32x8);
  }
  /// 8 x u16 -> 8 x u32 (zero extension).
  TM_CPU_INLINE static u32x8 widen_u16(const u16x8& v) { return __builtin_convertvector(v, u32x8); }
  /// The low 8 of 16 bytes -> 8 x u32 (zero extension).
  TM_CPU_INLINE static u32x8 widen_u8(const u8x16& v) {
    return __builtin_convertvector(__builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7), u32x8);
  }
  /// True when some bit of the 32 bytes is set.
  TM_CPU_INLINE static bool any_bit(const u64x4& v) { return ((v[0] | v[1]) | (v[2] | v[3])) != 0; }
  /// float -> double, exact.
  TM_CPU_INLINE static f64x8 widen(const f32x8& v) { return __builtin_convertvector(v, f64x8); }
  /// int32 -> double, exact.
  TM_CPU_INLINE static f64x8 widen(const i32x8& v) { return __builtin_convertvector(v, f64x8); }
  /// int32 -> int64 (sign extension).
  TM_CPU_INLINE static i64x8 widen_i64(const i32x8& v) { return __builtin_convertvector(v, i64x8); }
  /// x·x + y with x·x exact (x widened from at most 26 significant bits), so a fused
  /// multiply-add gives the same bits.
  TM_CPU_INLINE static f64x8 square_add(const f64x8& x, const f64x8& y) { return x * x + y; }
  /// Sums of adjacent pairs of signed bytes: lane i holds q[2i] + q[2i + 1].
  TM_CPU_INLINE static i16x16 pair_sums(const i8x32& q) {
    return __builtin_convertvector(__builtin_shufflevector(q, q, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30),
                                   i16x16) +
           __builtin_convertvector(__builtin_shufflevector(q, q, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31),
                                   i16x16);
  }
  /// Sums of 4 adjacent signed bytes: lane i holds q[4i] + ... + q[4i + 3].
  TM_CPU_INLINE static i32x8 quad_sums(const i8x32& q) {
    const i16x16 pairs = pair_sums(q);
    return __builtin_convertvector(__builtin_shufflevector(pairs, pairs, 0, 2, 4, 6, 8, 10, 12, 14), i32x8) +
           __builtin_convertvector(__builtin_shufflevector(pairs, pairs, 1, 3, 5, 7, 9, 11, 13, 15), i32x8);
  }
  /// Sums of the squares of adjacent pairs of bytes, each at most 127: lane i holds
  /// q[2i]² + q[2i + 1]².
  TM_CPU_INLINE static u16x16 pair_squares(const u8x32& q) {
    const u16x16 w = bits<u16x16>(q);
    const u16x16 even = w & 0xff, odd = w >> 8;
    return even * even + odd * odd;
  }
  /// Sums of the squares of 4 adjacent signed bytes, none of them -128: lane i holds
  /// q[4i]² + ... + q[4i + 3]².
  TM_CPU_INLINE static i32x8 quad_squares(const i8x32& q) {
    const i16x16 even = __builtin_convertvector(
        __builtin_shufflevector(q, q, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30), i16x16);
    const i16x16 odd = __builtin_convertvector(
        __builtin_shufflevector(q, q, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31), i16x16);
    // Each square fits 16 signed bits; their sum (up to 2 * 128^2, for the -128 that callers
    // refuse afterwards) fits 16 unsigned bits.
    const u16x16 pairs = bits<u16x16>(even * even) + bits<u16x16>(odd * odd);
    return bits<i32x8>(__builtin_convertvector(__builtin_shufflevector(pairs, pairs, 0, 2, 4, 6, 8, 10, 12, 14), u32x8) +
                       __builtin_convertvector(__builtin_shufflevector(pairs, pairs, 1, 3, 5, 7, 9, 11, 13, 15), u32x8));
  }
  /// IEEE half bits -> float, the branch-free exact conversion of decode_internal::half_bits_to_float
  /// (NaN payloads kept, subnormals exact).
  TM_CPU_INLINE static f32x8 half8(const u16x8& bits16) {
    const u32x8 h = __builtin_convertvector(bits16, u32x8);
    const u32x8 sign = (h & 0x8000u) << 16;
    const u32x8 magnitude = h & 0x7fffu;
    u32x8 normal = (magnitude << 13) + (112u << 23);
    normal += bits<u32x8>(magnitude >= 0x7c00u) & (112u << 23);
    const f32x8 subnormal = __builtin_convertvector(bits<i32x8>(magnitude), f32x8) * 0x1p-24f;
    const u32x8 result = magnitude < 0x0400u ? bits<u32x8>(subnormal) : normal;
    return bits<f32x8>(sign | result);
  }
};

#if TM_CPU_X86_TARGETS
/// AVX2 + F16C: one vcvtph2ps per 8 halves. Exact for every finite half and infinity; a signalling
/// NaN comes out quiet, which changes nothing here: any NaN sends its tile to the reference code.
/// Only inlined into functions compiled with TM_TARGET_AVX2 or TM_TARGET_AVX512.
struct Avx2Convert : PortableConvert {
  using Words = i16x16;
  using WordPairs = i32x8;
  /// One vpmovzxwd (GCC 12 lowers the generic conversion to four instructions).
  TM_CPU_INLINE static u32x8 widen_u16(const u16x8& v) { return bits<u32x8>(__builtin_ia32_pmovzxwd256(bits<i16x8>(v))); }
  /// One vpmovzxbd.
  TM_CPU_INLINE static u32x8 widen_u8(const u8x16& v) { return bits<u32x8>(__builtin_ia32_pmovzxbd256(bits<char16>(v))); }
  /// One vptest.
  TM_CPU_INLINE static bool any_bit(const u64x4& v) {
    return !__builtin_ia32_ptestz256(bits<long long __attribute__((vector_size(32)))>(v), bits<long long __attribute__((vector_size(32)))>(v));
  }
  TM_CPU_INLINE static f32x8 half8(const u16x8& bits16) { return __builtin_ia32_vcvtph2ps256(bits<i16x8>(bits16)); }
  /// One vpmovsxbd and one vcvtdq2ps.
  TM_CPU_INLINE static f32x8 bytes8(const i8x16& v) {
    return __builtin_convertvector(bits<i32x8>(__builtin_ia32_pmovsxbd256(bits<char16>(v))), f32x8);
  }
  /// One vfmadd231pd per 4 lanes.
  TM_CPU_INLINE static f64x8 square_add(const f64x8& x, const f64x8& y) {
    const f64x4 x0 = __builtin_shufflevector(x, x, 0, 1, 2, 3), x1 = __builtin_shufflevector(x, x, 4, 5, 6, 7);
    const f64x4 y0 = __builtin_shufflevector(y, y, 0, 1, 2, 3), y1 = __builtin_shufflevector(y, y, 4, 5, 6, 7);
    const f64x4 r0 = __builtin_ia32_vfmaddpd256(x0, x0, y0), r1 = __builtin_ia32_vfmaddpd256(x1, x1, y1);
    return __builtin_shufflevector(r0, r1, 0, 1, 2, 3, 4, 5, 6, 7);
  }
  /// One vpmaddubsw against ones.
  TM_CPU_INLINE static i16x16 pair_sums(const i8x32& q) {
    return __builtin_ia32_pmaddubsw256(bits<char32>(splat<u8x32>(1)), bits<char32>(q));
  }
  /// pair_sums, then one vpmaddwd against ones.
  TM_CPU_INLINE static i32x8 quad_sums(const i8x32& q) { return __builtin_ia32_pmaddwd256(pair_sums(q), splat<i16x16>(1)); }
  /// One vpmaddubsw of q with itself (exact: no pair passes 2 * 127^2).
  TM_CPU_INLINE static u16x16 pair_squares(const u8x32& q) {
    return bits<u16x16>(__builtin_ia32_pmaddubsw256(bits<char32>(q), bits<char32>(q)));
  }
  /// vpabsb, pair_squares, vpmaddwd against ones.
  TM_CPU_INLINE static i32x8 quad_squares(const i8x32& q) {
    const u16x16 pairs = pair_squares(bits<u8x32>(__builtin_ia32_pabsb256(bits<char32>(q))));
    return __builtin_ia32_pmaddwd256(bits<i16x16>(pairs), splat<i16x16>(1));
  }
};

/// AVX-512: one vcvtps2pd zmm per 8 floats (GCC 12 lowers the generic conversion to four
/// instructions). Only inlined into functions compiled with TM_TARGET_AVX512.
struct Avx512Convert : Avx2Convert {
  using Words = i16x32;
  using WordPairs = i32x16;
  TM_CPU_INLINE static f64x8 widen(const f32x8& v) { return __builtin_ia32_cvtps2pd512_mask(v, f64x8{}, static_cast<char>(-1), 4); }
  /// One vcvtdq2pd zmm.
  TM_CPU_INLINE static f64x8 widen(const i32x8& v) { return __builtin_ia32_cvtdq2pd512_mask(v, f64x8{}, static_cast<char>(-1)); }
  /// One vpmovsxdq zmm.
  TM_CPU_INLINE static i64x8 widen_i64(const i32x8& v) {
    typedef long long i64x8_ll __attribute__((vector_size(64)));  // the builtin's own lane type
    return bits<i64x8>(__builtin_ia32_pmovsxdq512_mask(v, i64x8_ll{}, static_cast<char>(-1)));
  }
  /// One vfmadd231pd zmm.
  TM_CPU_INLINE static f64x8 square_add(const f64x8& x, const f64x8& y) {
    return __builtin_ia32_vfmaddpd512_mask(x, x, y, static_cast<char>(-1), 4);
  }
};
#endif

// ---- Element loaders: 8 stored elements -> 8 floats, bit-identical to decode_to_f32 ---------

/// IEEE float32 storage.
template <typename Convert>
struct F32Source {
  using Element = float;
  using Elements8 = f32x8;  ///< 8 stored elements in one vector
  using Cvt = Convert;
  TM_CPU_INLINE static f32x8 convert8(const Elements8& e) { return e; }
  TM_CPU_INLINE static f32x8 load8(const Element* p) { return convert8(load<Elements8>(p)); }
};

/// bfloat16 storage: the top half of a float32.
template <typename Convert>
struct BF16Source {
  using Element = uint16_t;
  using Elements8 = u16x8;
  using Cvt = Convert;
  TM_CPU_INLINE static f32x8 convert8(const Elements8& e) { return bits<f32x8>(Convert::widen_u16(e) << 16); }
  TM_CPU_INLINE static f32x8 load8(const Element* p) { return convert8(load<Elements8>(p)); }
};

/// IEEE half storage.
template <typename Convert>
struct F16Source {
  using Element = uint16_t;
  using Elements8 = u16x8;
  using Cvt = Convert;
  TM_CPU_INLINE static f32x8 convert8(const Elements8& e) { return Convert::half8(e); }
  TM_CPU_INLINE static f32x8 load8(const Element* p) { return convert8(load<Elements8>(p)); }
};

}  // namespace tensormorph::cpu::simd

#pragma GCC diagnostic pop
