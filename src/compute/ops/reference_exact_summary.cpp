// The reference tm.exact_summary@1: statistics of F64 and 32/64-bit integer tensors in their own
// domain. Float32, which every other statistic goes through, cannot hold 2^24 + 1, 2^31 - 1 or
// 1e300; here integers stay integers (exact extremes, exact sums, an exact variance numerator) and
// F64 stays float64 (scaled by a power of two so that no sum or square overflows).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "compute/ops/reference.h"

namespace tensormorph::ops {
namespace {

// GCC and Clang's 128-bit integers (__extension__: not ISO C++, and -Wpedantic says so).
__extension__ typedef unsigned __int128 u128;
__extension__ typedef __int128 i128;

/// An unsigned 256-bit integer, four little-endian 64-bit limbs.
struct U256 {
  uint64_t limb[4] = {0, 0, 0, 0};
};

/// a * b in full (both below 2^128, so the product fits).
U256 multiply(u128 a, u128 b) {
  const uint64_t x[2] = {static_cast<uint64_t>(a), static_cast<uint64_t>(a >> 64)};
  const uint64_t y[2] = {static_cast<uint64_t>(b), static_cast<uint64_t>(b >> 64)};
  U256 r;
  for (int i = 0; i < 2; ++i) {
    u128 carry = 0;
    for (int j = 0; j < 2; ++j) {
      const u128 t = static_cast<u128>(x[i]) * y[j] + r.limb[i + j] + carry;
      r.limb[i + j] = static_cast<uint64_t>(t);
      carry = t >> 64;
    }
    r.limb[i + 2] = static_cast<uint64_t>(carry);
  }
  return r;
}

/// a * m modulo 2^256 (callers keep the product below 2^256).
U256 multiply(const U256& a, uint64_t m) {
  U256 r;
  u128 carry = 0;
  for (int i = 0; i < 4; ++i) {
    const u128 t = static_cast<u128>(a.limb[i]) * m + carry;
    r.limb[i] = static_cast<uint64_t>(t);
    carry = t >> 64;
  }
  return r;
}

/// a - b for a >= b.
U256 subtract(const U256& a, const U256& b) {
  U256 r;
  uint64_t borrow = 0;
  for (int i = 0; i < 4; ++i) {
    const uint64_t d = a.limb[i] - b.limb[i];
    const uint64_t next_borrow = (a.limb[i] < b.limb[i]) || (d < borrow) ? 1 : 0;
    r.limb[i] = d - borrow;
    borrow = next_borrow;
  }
  return r;
}

/// The nearest double (ties to even): the top 128 bits with a sticky bit for what lies below
/// round exactly as the whole number would, since they hold far more than 53 significant bits.
double to_double(const U256& a) {
  int high = 3;
  while (high > 0 && a.limb[high] == 0) --high;
  if (high <= 1) return static_cast<double>((static_cast<u128>(a.limb[1]) << 64) | a.limb[0]);
  u128 top = (static_cast<u128>(a.limb[high]) << 64) | a.limb[high - 1];
  bool sticky = false;
  for (int i = 0; i < high - 1; ++i) sticky = sticky || a.limb[i] != 0;
  if (sticky) top |= 1;
  return std::ldexp(static_cast<double>(top), 64 * (high - 1));
}

/// Neumaier's compensated sum: the running sum and the rounding errors it dropped.
struct CompensatedSum {
  double sum = 0, compensation = 0;
  void add(double v) {
    const double t = sum + v;
    compensation += std::fabs(sum) >= std::fabs(v) ? (sum - t) + v : (v - t) + sum;
    sum = t;
  }
  double value() const { return sum + compensation; }
};

template <typename T>
T load(const std::byte* p, uint64_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}

/// |v| as unsigned, without the overflow of -INT64_MIN.
template <typename Int>
uint64_t magnitude_of(Int v) {
  if constexpr (std::numeric_limits<Int>::is_signed) {
    return v < 0 ? uint64_t{0} - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  } else {
    return static_cast<uint64_t>(v);
  }
}

TM_ExactSummary empty_summary(uint64_t count) {
  TM_ExactSummary s{};
  s.count = count;
  s.min = std::numeric_limits<double>::infinity();
  s.max = -std::numeric_limits<double>::infinity();
  return s;
}

template <typename Int>
void summarize_integers(const std::byte* p, uint64_t n, TM_ExactSummary& s) {
  if (n == 0) return;
  constexpr bool kSigned = std::numeric_limits<Int>::is_signed;
  Int lo = load<Int>(p, 0), hi = lo;
  i128 sum = 0;
  // The sum of squares, sum_squares_high * 2^128 + sum_squares_low: each square is below 2^128.
  u128 sum_squares_low = 0;
  uint64_t sum_squares_high = 0;
  uint64_t zeros = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const Int v = load<Int>(p, i);
    lo = v < lo ? v : lo;
    hi = v > hi ? v : hi;
    zeros += v == 0;
    sum += v;
    const uint64_t magnitude = magnitude_of(v);
    const u128 square = static_cast<u128>(magnitude) * magnitude;
    sum_squares_low += square;
    sum_squares_high += sum_squares_low < square;
  }
  s.zeros = zeros;
  if constexpr (kSigned) {
    s.min_int = lo;
    s.max_int = hi;
    s.absmax_uint = std::max(magnitude_of(lo), magnitude_of(hi));
  } else {
    s.min_uint = lo;
    s.max_uint = hi;
    s.absmax_uint = hi;
  }
  s.min = static_cast<double>(lo);
  s.max = static_cast<double>(hi);
  s.absmax = static_cast<double>(s.absmax_uint);
  s.sum_low = static_cast<uint64_t>(static_cast<u128>(sum));
  s.sum_high = static_cast<int64_t>(sum >> 64);
  s.mean = static_cast<double>(sum) / static_cast<double>(n);
  // n * sum(x^2) - sum(x)^2 >= 0, exactly: n < 2^64, sum(x^2) < 2^192, |sum(x)| < 2^128.
  U256 squares;
  squares.limb[0] = static_cast<uint64_t>(sum_squares_low);
  squares.limb[1] = static_cast<uint64_t>(sum_squares_low >> 64);
  squares.limb[2] = sum_squares_high;
  const u128 abs_sum = sum < 0 ? u128{0} - static_cast<u128>(sum) : static_cast<u128>(sum);
  const U256 numerator = subtract(multiply(squares, n), multiply(abs_sum, abs_sum));
  s.std = std::sqrt(to_double(numerator)) / static_cast<double>(n);
}

void summarize_f64(const std::byte* p, uint64_t n, TM_ExactSummary& s) {
  // Pass 1: counts and extremes; -0.0 orders below +0.0 as in tm.tile_stats@1.
  uint64_t finite = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const double v = load<double>(p, i);
    if (std::isnan(v)) {
      ++s.nan;
    } else if (std::isinf(v)) {
      ++(v > 0 ? s.pos_inf : s.neg_inf);
    } else {
      ++finite;
      s.zeros += v == 0;
      if (v < s.min || (v == s.min && std::signbit(v))) s.min = v;
      if (v > s.max || (v == s.max && !std::signbit(v))) s.max = v;
      s.absmax = std::fmax(s.absmax, std::fabs(v));
    }
  }
  if (finite == 0 || s.absmax == 0) return;
  // Passes 2 and 3 work on v * 2^-e, |v * 2^-e| < 2: no sum of squares can overflow.
  const int e = std::ilogb(s.absmax);
  CompensatedSum sum;
  for (uint64_t i = 0; i < n; ++i) {
    const double v = load<double>(p, i);
    if (std::isfinite(v)) sum.add(std::ldexp(v, -e));
  }
  const double mean_scaled = sum.value() / static_cast<double>(finite);
  CompensatedSum squares;
  for (uint64_t i = 0; i < n; ++i) {
    const double v = load<double>(p, i);
    if (!std::isfinite(v)) continue;
    const double d = std::ldexp(v, -e) - mean_scaled;
    squares.add(d * d);
  }
  s.mean = std::ldexp(mean_scaled, e);
  s.std = std::ldexp(std::sqrt(squares.value() / static_cast<double>(finite)), e);
}

}  // namespace

bool exact_summary_supported(DType dtype) {
  switch (dtype) {
    case DType::kF64:
    case DType::kI32:
    case DType::kU32:
    case DType::kI64:
    case DType::kU64: return true;
    default: return false;
  }
}

Status exact_summary_reference(const TensorView& tensor, TM_ExactSummary* out) {
  if (!exact_summary_supported(tensor.dtype)) {
    return Status::InvalidArgument("exact_summary: " + std::string(dtype_name(tensor.dtype)) +
                                   " is not F64, I32, U32, I64 or U64");
  }
  uint64_t expected = 0;
  if (__builtin_mul_overflow(tensor.elems, dtype_info(tensor.dtype).block_bytes, &expected) ||
      expected != tensor.bytes.size()) {
    return Status::InvalidArgument("exact_summary: " + std::to_string(tensor.elems) + " " +
                                   std::string(dtype_name(tensor.dtype)) + " elements do not take the " +
                                   std::to_string(tensor.bytes.size()) + " bytes given");
  }
  TM_ExactSummary s = empty_summary(tensor.elems);
  const std::byte* p = tensor.bytes.data();
  switch (tensor.dtype) {
    case DType::kI32: summarize_integers<int32_t>(p, tensor.elems, s); break;
    case DType::kU32: summarize_integers<uint32_t>(p, tensor.elems, s); break;
    case DType::kI64: summarize_integers<int64_t>(p, tensor.elems, s); break;
    case DType::kU64: summarize_integers<uint64_t>(p, tensor.elems, s); break;
    default: summarize_f64(p, tensor.elems, s); break;
  }
  *out = s;
  return Status::Ok();
}

}  // namespace tensormorph::ops
