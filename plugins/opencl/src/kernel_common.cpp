#include "kernel_sources.h"

namespace tm_opencl {

// Everything here is integer arithmetic, so it is exact on any device, including ones that flush
// float denormals.
const char* const kCommonKernelSource = R"CLC(
#pragma OPENCL FP_CONTRACT OFF

/* IEEE half bits -> IEEE float bits, exactly (NaN payloads kept, subnormal halves normalised). */
uint half_to_float_bits(uint half_bits) {
  const uint sign = (half_bits & 0x8000u) << 16;
  const uint exponent = (half_bits >> 10) & 0x1fu;
  uint mantissa = half_bits & 0x3ffu;
  if (exponent == 0x1fu) return sign | 0x7f800000u | (mantissa << 13);
  if (exponent != 0u) return sign | ((exponent + 112u) << 23) | (mantissa << 13);
  if (mantissa == 0u) return sign;
  /* m * 2^-24 with the leading one of m at bit p: shift it to bit 10, exponent p - 24. */
  const uint shift = clz(mantissa) - 21u;
  mantissa <<= shift;
  return sign | ((113u - shift) << 23) | ((mantissa & 0x3ffu) << 13);
}

/* A signed integer that orders finite floats like their values, with -0 just below +0. */
int float_order_key(uint bits) {
  return (bits & 0x80000000u) != 0u ? (int)(bits ^ 0x7fffffffu) : (int)bits;
}

/* Inverse of float_order_key. */
uint float_bits_from_order_key(int key) {
  return key < 0 ? ((uint)key ^ 0x7fffffffu) : (uint)key;
}
)CLC";

}  // namespace tm_opencl
