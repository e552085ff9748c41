// Device-side decoders shared by every kernel family. Each decoder reproduces the CPU reference
// (src/core/decode) operation for operation: no FMA (the module is built with -fmad=false),
// ggml's order of float multiplies and subtractions, exact half -> float, and the F8 values taken
// from the CPU's own tables (uploaded at backend creation).
//
// A decoder D offers:
//   D::Word                           4 consecutive elements as loaded (fast path)
//   D::load_word<kAligned>(row, col)  the word at columns col..col+3 (col % 4 == 0, inside one block)
//   D::bits(word, e, table)           float bits of element e of a word
//   D::element_bits(row, col, table)  float bits of one element, any alignment (generic path)
//   D::decode4<A>(row, col, a, table, out)  4 decoded floats with arithmetic A (decode kernel)
#pragma once

#include <cstdint>

#include "backends/cuda/gpu_device.cuh"
#include "backends/cuda/kernels.h"

namespace tm_gpu {

/// Plain IEEE single-precision arithmetic (NaN payloads unspecified: statistics only count NaN).
struct PlainArith {
  __device__ __forceinline__ float mul(float a, float b) const { return a * b; }
  __device__ __forceinline__ float sub(float a, float b) const { return a - b; }
};

/// Arithmetic whose NaN results carry the host CPU's bits, so decoded NaNs match bit for bit.
struct HostArith {
  HostNan nan;
  __device__ __forceinline__ float nan_of(float a, float b) const {
    if (nan.propagate) {
      if (a != a) return __uint_as_float(__float_as_uint(a) | 0x00400000u);
      if (b != b) return __uint_as_float(__float_as_uint(b) | 0x00400000u);
    }
    return __uint_as_float(nan.default_nan);
  }
  __device__ __forceinline__ float mul(float a, float b) const {
    const float r = a * b;
    return r == r ? r : nan_of(a, b);
  }
  __device__ __forceinline__ float sub(float a, float b) const {
    const float r = a - b;
    return r == r ? r : nan_of(a, b);
  }
  __device__ __forceinline__ float add(float a, float b) const {
    const float r = a + b;
    return r == r ? r : nan_of(a, b);
  }
};

/// A small integer (|v| < 2^22) as float, exactly, without the int-to-float unit: its bits added
/// to those of 1.5 * 2^23 (where one unit in the last place is 1), then 1.5 * 2^23 subtracted.
__device__ __forceinline__ float small_int_to_float(int v) {
  return __int_as_float(0x4b400000 + v) - 12582912.0f;
}

/// Exact IEEE half -> float bits, the CPU's formula (subnormals via an exact product).
__device__ __forceinline__ uint32_t half_bits_to_float_bits(uint32_t half) {
  const uint32_t sign = (half & 0x8000u) << 16;
  const uint32_t magnitude = half & 0x7fffu;
  if (magnitude < 0x0400u) return sign | __float_as_uint(small_int_to_float(static_cast<int>(magnitude)) * 0x1p-24f);
  if (magnitude >= 0x7c00u) return sign | ((magnitude << 13) + (224u << 23));
  return sign | ((magnitude << 13) + (112u << 23));
}

/// Exact IEEE half -> float.
__device__ __forceinline__ float half_to_float(uint32_t half) { return __uint_as_float(half_bits_to_float_bits(half)); }

/// Byte `k` (0..3) of a little-endian word.
__device__ __forceinline__ uint32_t byte_of(uint32_t word, int k) { return (word >> (8 * k)) & 0xffu; }

/// Four bytes at `p`: one 32-bit load when 4-aligned, two 16-bit loads when 2-aligned, else bytes.
template <int kAlign>
__device__ __forceinline__ uint32_t load4(const uint8_t* p) {
  if constexpr (kAlign >= 4) return *reinterpret_cast<const uint32_t*>(p);
  if constexpr (kAlign == 2) return load_u16(p) | (load_u16(p + 2) << 16);
  return load_u32_any(p);
}

/// A word of 4 decoded floats (F8 and the ggml block types).
struct FloatWord {
  float v[4];
};

// ---- Scalar types ---------------------------------------------------------------------------

/// F32: the bits are the value.
struct DecF32 {
  static constexpr uint32_t kBlockElems = 1, kBlockBytes = 4;
  static constexpr bool kTable = false;
  static constexpr int kMaxWords = 16;  // 256 bytes per lane: fewer units, less epilogue per byte
  using Word = uint4;
  template <bool kAligned>
  __device__ static Word load_word(const uint8_t* row, uint64_t col) {
    const uint8_t* p = row + 4 * col;
    if constexpr (kAligned) return load_streamed(reinterpret_cast<const uint4*>(p));
    return make_uint4(load_u32_any(p), load_u32_any(p + 4), load_u32_any(p + 8), load_u32_any(p + 12));
  }
  __device__ static uint32_t bits(const Word& w, int e, const float*) {
    return e == 0 ? w.x : e == 1 ? w.y : e == 2 ? w.z : w.w;
  }
  __device__ static uint32_t element_bits(const uint8_t* row, uint64_t col, const float*) {
    return load_u32_any(row + 4 * col);
  }
};

/// The 16-bit types share their word layout: four halves in two 32-bit words.
template <bool kBrain>
struct Dec16 {
  static constexpr uint32_t kBlockElems = 1, kBlockBytes = 2;
  static constexpr bool kTable = false;
  static constexpr int kMaxWords = 16;
  using Word = uint2;
  template <bool kAligned>
  __device__ static Word load_word(const uint8_t* row, uint64_t col) {
    const uint8_t* p = row + 2 * col;
    if constexpr (kAligned) return load_streamed(reinterpret_cast<const uint2*>(p));
    return make_uint2(load_u32_any(p), load_u32_any(p + 4));
  }
  __device__ static uint32_t convert(uint32_t h) {
    if constexpr (kBrain) return h << 16;
    return half_bits_to_float_bits(h);
  }
  __device__ static uint32_t bits(const Word& w, int e, const float*) {
    const uint32_t word = e < 2 ? w.x : w.y;
    return convert((e & 1) ? word >> 16 : word & 0xffffu);
  }
  __device__ static uint32_t element_bits(const uint8_t* row, uint64_t col, const float*) {
    return convert(load_u16_any(row + 2 * col));
  }
};
using DecF16 = Dec16<false>;
using DecBF16 = Dec16<true>;

/// The F8 types: one byte each, decoded through the CPU's 256-entry table.
struct DecF8 {
  static constexpr uint32_t kBlockElems = 1, kBlockBytes = 1;
  static constexpr bool kTable = true;
  static constexpr int kMaxWords = 16;
  using Word = uint32_t;
  template <bool kAligned>
  __device__ static Word load_word(const uint8_t* row, uint64_t col) {
    return load4<kAligned ? 4 : 1>(row + col);
  }
  __device__ static uint32_t bits(const Word& w, int e, const float* table) {
    return __float_as_uint(table[byte_of(w, e)]);
  }
  __device__ static uint32_t element_bits(const uint8_t* row, uint64_t col, const float* table) {
    return __float_as_uint(table[row[col]]);
  }
};

// ---- ggml block types ---------------------------------------------------------------------

/// Shared plumbing: words and single elements of block types come from decode4.
template <class Self>
struct DecBlock {
  using Word = FloatWord;
  static constexpr int kMaxWords = 8;  // 4 decoded floats per word
  template <bool kAligned>
  __device__ static Word load_word(const uint8_t* row, uint64_t col) {
    Word w;
    Self::template decode4<kAligned>(row + (col / Self::kBlockElems) * Self::kBlockBytes,
                                     static_cast<uint32_t>(col % Self::kBlockElems), PlainArith{}, w.v);
    return w;
  }
  __device__ static uint32_t bits(const Word& w, int e, const float*) { return __float_as_uint(w.v[e]); }
  __device__ static uint32_t element_bits(const uint8_t* row, uint64_t col, const float*) {
    float v[4];
    const uint32_t j = static_cast<uint32_t>(col % Self::kBlockElems);
    Self::template decode4<false>(row + (col / Self::kBlockElems) * Self::kBlockBytes, j & ~3u, PlainArith{}, v);
    return __float_as_uint(v[j & 3u]);
  }
};

/// Q8_0: fp16 d, 32 int8 quants; value q * d.
struct DecQ8_0 : DecBlock<DecQ8_0> {
  static constexpr uint32_t kBlockElems = 32, kBlockBytes = 34;
  static constexpr bool kTable = false;
  template <bool kAligned, class A>
  __device__ static void decode4(const uint8_t* block, uint32_t j, const A& a, float (&out)[4]) {
    const float d = half_to_float(kAligned ? load_u16(block) : load_u16_any(block));
    const uint32_t q = load4<kAligned ? 2 : 1>(block + 2 + j);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      out[k] = a.mul(small_int_to_float(static_cast<int8_t>(byte_of(q, k))), d);
    }
  }
};

/// Q4_0: fp16 d, 16 bytes; element j < 16 in the low nibble of byte j, j + 16 in its high nibble;
/// value (q - 8) * d.
struct DecQ4_0 : DecBlock<DecQ4_0> {
  static constexpr uint32_t kBlockElems = 32, kBlockBytes = 18;
  static constexpr bool kTable = false;
  template <bool kAligned, class A>
  __device__ static void decode4(const uint8_t* block, uint32_t j, const A& a, float (&out)[4]) {
    const float d = half_to_float(kAligned ? load_u16(block) : load_u16_any(block));
    const uint32_t q = load4<kAligned ? 2 : 1>(block + 2 + (j & 15u));
    const int shift = j < 16 ? 0 : 4;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int v = static_cast<int>((byte_of(q, k) >> shift) & 0xfu) - 8;
      out[k] = a.mul(small_int_to_float(v), d);
    }
  }
};

/// Scale and min of sub-block j of the 12-byte Q4_K packing (see decode_ggml_kquants.cpp).
__device__ __forceinline__ void k4_scale_min(const uint8_t* packed, uint32_t j, uint32_t& scale, uint32_t& min) {
  if (j < 4) {
    scale = packed[j] & 63u;
    min = packed[j + 4] & 63u;
  } else {
    scale = (packed[j + 4] & 0xfu) | ((packed[j - 4] >> 6) << 4);
    min = (packed[j + 4] >> 4) | ((packed[j] >> 6) << 4);
  }
}

/// Q4_K: 256-element super-blocks: d, dmin, 12 packed 6-bit scale/min pairs, 128 nibble bytes.
/// Element 64p + l (l < 32) is the low nibble of qs[32p + l] with sub-block 2p; element
/// 64p + 32 + l its high nibble with sub-block 2p + 1. Value (d * sc) * q - (dmin * m).
struct DecQ4_K : DecBlock<DecQ4_K> {
  static constexpr uint32_t kBlockElems = 256, kBlockBytes = 144;
  static constexpr bool kTable = false;
  template <bool kAligned, class A>
  __device__ static void decode4(const uint8_t* block, uint32_t j, const A& a, float (&out)[4]) {
    const float d = half_to_float(kAligned ? load_u16(block) : load_u16_any(block));
    const float dmin = half_to_float(kAligned ? load_u16(block + 2) : load_u16_any(block + 2));
    const uint32_t p = j / 64, high = (j / 32) & 1u, l = j & 31u;
    uint32_t sc = 0, m = 0;
    k4_scale_min(block + 4, 2 * p + high, sc, m);
    const float dl = a.mul(d, small_int_to_float(static_cast<int>(sc)));
    const float ml = a.mul(dmin, small_int_to_float(static_cast<int>(m)));
    const uint32_t q = load4<kAligned ? 4 : 1>(block + 16 + 32 * p + l);
    const int shift = high ? 4 : 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      out[k] = a.sub(a.mul(dl, small_int_to_float(static_cast<int>((byte_of(q, k) >> shift) & 0xfu))), ml);
    }
  }
};

/// Q6_K: 256-element super-blocks: ql[128], qh[64], int8 scales[16], fp16 d. Element
/// 128h + 32k + l takes nibble (k < 2 ? low : high) of ql[64h + 32(k & 1) + l] and bits 2k..2k+1
/// of qh[32h + l], minus 32, times (d * scales[8h + 2k + l / 16]).
struct DecQ6_K : DecBlock<DecQ6_K> {
  static constexpr uint32_t kBlockElems = 256, kBlockBytes = 210;
  static constexpr bool kTable = false;
  template <bool kAligned, class A>
  __device__ static void decode4(const uint8_t* block, uint32_t j, const A& a, float (&out)[4]) {
    const uint32_t h = j / 128, k = (j / 32) & 3u, l = j & 31u;
    const uint32_t low = load4<kAligned ? 2 : 1>(block + 64 * h + 32 * (k & 1u) + l);
    const uint32_t high = load4<kAligned ? 2 : 1>(block + 128 + 32 * h + l);
    const int scale = static_cast<int8_t>(block[192 + 8 * h + 2 * k + l / 16]);
    const float d = half_to_float(kAligned ? load_u16(block + 208) : load_u16_any(block + 208));
    const float ds = a.mul(d, small_int_to_float(scale));
    const int nibble_shift = k < 2 ? 0 : 4;
#pragma unroll
    for (int t = 0; t < 4; ++t) {
      const int q = static_cast<int>(((byte_of(low, t) >> nibble_shift) & 0xfu) |
                                     (((byte_of(high, t) >> (2 * k)) & 3u) << 4)) - 32;
      out[t] = a.mul(ds, small_int_to_float(q));
    }
  }
};

/// The up to 4 decoded values of elements [i, i + 4) of a run of `elems` elements at `in` (whole
/// blocks, a multiple of 4 in a block type), plain arithmetic; `n` says how many there are.
template <class D>
__device__ __forceinline__ void decode_group4(const uint8_t* in, uint64_t elems, uint64_t i, bool aligned,
                                              const float* f8_table, float (&v)[4], int& n) {
  n = elems - i < 4 ? static_cast<int>(elems - i) : 4;
  if constexpr (D::kBlockElems == 1) {
    if (n == 4 && aligned) {
      const typename D::Word w = D::template load_word<true>(in, i);
#pragma unroll
      for (int e = 0; e < 4; ++e) v[e] = __uint_as_float(D::bits(w, e, f8_table));
    } else {
      for (int e = 0; e < n; ++e) v[e] = __uint_as_float(D::element_bits(in, i + e, f8_table));
    }
  } else {
    const uint8_t* block = in + (i / D::kBlockElems) * D::kBlockBytes;
    const uint32_t j = static_cast<uint32_t>(i % D::kBlockElems);
    if (aligned) {
      D::template decode4<true>(block, j, PlainArith{}, v);
    } else {
      D::template decode4<false>(block, j, PlainArith{}, v);
    }
  }
}

/// Calls `body.template operator()<D>()` with the decoder of `dtype`.
template <class Body>
inline auto with_decoder(KernelDType dtype, Body&& body) {
  switch (dtype) {
    case KernelDType::kF32: return body.template operator()<DecF32>();
    case KernelDType::kF16: return body.template operator()<DecF16>();
    case KernelDType::kBF16: return body.template operator()<DecBF16>();
    case KernelDType::kF8E4M3:
    case KernelDType::kF8E5M2: return body.template operator()<DecF8>();
    case KernelDType::kQ8_0: return body.template operator()<DecQ8_0>();
    case KernelDType::kQ4_0: return body.template operator()<DecQ4_0>();
    case KernelDType::kQ4_K: return body.template operator()<DecQ4_K>();
    case KernelDType::kQ6_K: return body.template operator()<DecQ6_K>();
  }
  return body.template operator()<DecF32>();
}

}  // namespace tm_gpu
