#include "kernel_sources.h"

namespace tm_opencl {

// Q8_0 blocks: an fp16 scale d, then 32 int8 quants; value j = (float)q[j] * d, as ggml computes
// it. The product is one correctly rounded float multiply of two normal-or-zero floats (a half
// scale is never a float subnormal and |q| >= 1 keeps |q * d| >= 2^-24), so no denormal can arise.
// IEEE leaves NaN bit patterns to the hardware, so the two NaN cases reproduce the host CPU's
// choice, measured at backend creation: `default_nan` for 0 * Inf, and for a NaN scale either the
// scale quieted (`propagate_nan`, x86 and Arm) or `default_nan`. Results go out as bits so that no
// float move can rewrite a NaN.
const char* const kDecodeKernelSource = R"CLC(
#define TM_Q8_0_BLOCK_BYTES 34u

__kernel void decode_q8_0(__global const uchar* src, ulong src_byte, ulong elements, __global uint* dst,
                          uint default_nan, uint propagate_nan) {
  const ulong i = get_global_id(0);
  if (i >= elements) return;
  __global const uchar* block = src + src_byte + (i >> 5) * TM_Q8_0_BLOCK_BYTES;
  const uint scale_bits = half_to_float_bits((uint)block[0] | ((uint)block[1] << 8));
  const int q = (int)as_char(block[2 + (i & 31u)]);
  const uint magnitude = scale_bits & 0x7fffffffu;
  uint out;
  if (magnitude > 0x7f800000u) out = propagate_nan != 0u ? (scale_bits | 0x00400000u) : default_nan;
  else if (magnitude == 0x7f800000u && q == 0) out = default_nan;
  else out = as_uint((float)q * as_float(scale_bits));
  dst[i] = out;
}
)CLC";

}  // namespace tm_opencl
