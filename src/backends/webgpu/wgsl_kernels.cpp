#include "backends/webgpu/wgsl_kernels.h"
#include "backends/webgpu/wgsl_parts.h"

#include <algorithm>

#include "tensormorph/c/plugin.h"

namespace tensormorph::webgpu {
namespace {

// 64-bit integers as vec2<u32>(low, high), and the float64 values of the canonical sums in them.
// The inputs of f64_add are finite and never subnormal (the smallest is the square of the smallest
// float32 subnormal, 2^-298), so the addition needs no subnormal or overflow cases. WGSL takes
// shift amounts modulo 32: a shift below whose amount can reach 32 has its result discarded by a
// select. The 64-bit shifts select rather than branch: with branches, the float64 tree the tile
// kernel walks for float32 squares ran 2.5 times slower on an H100 (bench/webgpu_tile_kernel_bench).
constexpr const char* kFloat64 = R"(
fn add64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  let lo = a.x + b.x;
  return vec2<u32>(lo, a.y + b.y + select(0u, 1u, lo < a.x));
}
fn sub64(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  return vec2<u32>(a.x - b.x, a.y - b.y - select(0u, 1u, a.x < b.x));
}
fn shl64(a: vec2<u32>, s: u32) -> vec2<u32> {
  let r = s & 31u;
  let carry = select(0u, a.x >> (32u - r), r != 0u);
  let lo = select(a.x << r, 0u, s >= 32u);
  let hi = select((a.y << r) | carry, a.x << r, s >= 32u);
  return select(vec2<u32>(lo, hi), vec2<u32>(0u, 0u), s >= 64u);
}
fn shr64(a: vec2<u32>, s: u32) -> vec2<u32> {
  let r = s & 31u;
  let carry = select(0u, a.y << (32u - r), r != 0u);
  let lo = select((a.x >> r) | carry, a.y >> r, s >= 32u);
  let hi = select(a.y >> r, 0u, s >= 32u);
  return select(vec2<u32>(lo, hi), vec2<u32>(0u, 0u), s >= 64u);
}
// Shifts right and ORs every bit shifted out into bit 0 (the sticky bit of rounding).
fn shr64_sticky(a: vec2<u32>, s: u32) -> vec2<u32> {
  if (s == 0u) { return a; }
  let r = shr64(a, s);
  let back = shl64(r, s);
  return vec2<u32>(r.x | select(0u, 1u, back.x != a.x || back.y != a.y), r.y);
}
fn clz64(a: vec2<u32>) -> u32 {
  if (a.y != 0u) { return countLeadingZeros(a.y); }
  return 32u + countLeadingZeros(a.x);
}
// IEEE float64 a + b, round to nearest even (finite, normal or zero operands).
fn f64_add(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  let ea = (a.y >> 20u) & 0x7ffu;
  let eb = (b.y >> 20u) & 0x7ffu;
  if (ea == 0u) {
    if (eb == 0u) { return vec2<u32>(0u, a.y & b.y & 0x80000000u); }
    return b;
  }
  if (eb == 0u) { return a; }
  var x = a;
  var y = b;
  let amag = a.y & 0x7fffffffu;
  let bmag = b.y & 0x7fffffffu;
  if (bmag > amag || (bmag == amag && b.x > a.x)) { x = b; y = a; }
  let ex = (x.y >> 20u) & 0x7ffu;
  let ey = (y.y >> 20u) & 0x7ffu;
  // Significands with the implicit bit at 55 and three bits below for rounding.
  let mx = shl64(vec2<u32>(x.x, (x.y & 0xfffffu) | 0x100000u), 3u);
  let my = shr64_sticky(shl64(vec2<u32>(y.x, (y.y & 0xfffffu) | 0x100000u), 3u), ex - ey);
  var e = ex;
  var m: vec2<u32>;
  if (((x.y ^ y.y) & 0x80000000u) == 0u) {
    m = add64(mx, my);
    if ((m.y & 0x1000000u) != 0u) { m = shr64_sticky(m, 1u); e = e + 1u; }
  } else {
    m = sub64(mx, my);
    if (m.x == 0u && m.y == 0u) { return vec2<u32>(0u, 0u); }
    let s = clz64(m) - 8u;
    m = shl64(m, s);
    e = e - s;
  }
  let low = m.x & 7u;
  m = shr64(m, 3u);
  if (low > 4u || (low == 4u && (m.x & 1u) == 1u)) {
    m = add64(m, vec2<u32>(1u, 0u));
    if ((m.y & 0x200000u) != 0u) { m = shr64(m, 1u); e = e + 1u; }
  }
  return vec2<u32>(m.x, (x.y & 0x80000000u) | (e << 20u) | (m.y & 0xfffffu));
}
// f64_add for operands that are +0 or positive and normal (sums of squares): no signs, no
// cancellation. It is the float64 tree's one addition for float32 squares, so its shifts are
// constant where they can be and its sticky bit a mask, not a shift back and a comparison.
fn f64_add_pos(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  let swap = b.y > a.y || (b.y == a.y && b.x > a.x);
  let x = select(a, b, swap);
  let y = select(b, a, swap);
  let ey = y.y >> 20u;
  let ex = x.y >> 20u;
  let d = ex - ey;
  // y is +0 or below half an ulp of x (y < 2^(ey - 1022) <= 2^(ex - 1076)): the sum rounds to x.
  if (ey == 0u || d >= 54u) { return x; }
  let mx = vec2<u32>(x.x << 3u, (((x.y & 0xfffffu) | 0x100000u) << 3u) | (x.x >> 29u));
  let my = vec2<u32>(y.x << 3u, (((y.y & 0xfffffu) | 0x100000u) << 3u) | (y.x >> 29u));
  // my >> d, every bit shifted out ORed into bit 0.
  let r = d & 31u;
  let far = d >= 32u;
  let lo = select((my.x >> r) | ((my.y << 1u) << (31u - r)), my.y >> r, far);
  let hi = select(my.y >> r, 0u, far);
  let out_mask = select(vec2<u32>((1u << r) - 1u, 0u), vec2<u32>(0xffffffffu, (1u << r) - 1u), far);
  let sticky = select(0u, 1u, ((my.x & out_mask.x) | (my.y & out_mask.y)) != 0u);
  var m = add64(mx, vec2<u32>(lo | sticky, hi));
  var e = ex;
  if ((m.y & 0x1000000u) != 0u) {
    m = vec2<u32>((m.x >> 1u) | (m.y << 31u) | (m.x & 1u), m.y >> 1u);
    e = e + 1u;
  }
  let low = m.x & 7u;
  m = vec2<u32>((m.x >> 3u) | (m.y << 29u), m.y >> 3u);
  if (low > 4u || (low == 4u && (m.x & 1u) == 1u)) {
    m = add64(m, vec2<u32>(1u, 0u));
    if ((m.y & 0x200000u) != 0u) { m = vec2<u32>((m.x >> 1u) | (m.y << 31u), m.y >> 1u); e = e + 1u; }
  }
  return vec2<u32>(m.x, (e << 20u) | (m.y & 0xfffffu));
}
// The float64 of a finite float32 (exact).
fn f64_of(u: u32) -> vec2<u32> {
  let sign = u & 0x80000000u;
  let e8 = (u >> 23u) & 0xffu;
  var m = u & 0x7fffffu;
  var e64 = e8 + 896u;
  if (e8 == 0u) {
    if (m == 0u) { return vec2<u32>(0u, sign); }
    let p = 31u - countLeadingZeros(m);
    e64 = p + 874u;
    m = (m << (23u - p)) & 0x7fffffu;
  }
  return vec2<u32>(m << 29u, sign | (e64 << 20u) | (m >> 3u));
}
// The float64 square of a finite float32 (exact: 48 significant bits).
fn f64_square_of(u: u32) -> vec2<u32> {
  let e8 = (u >> 23u) & 0xffu;
  var m = u & 0x7fffffu;
  var e = i32(e8) - 127;
  if (e8 == 0u) {
    if (m == 0u) { return vec2<u32>(0u, 0u); }
    let p = 31u - countLeadingZeros(m);
    m = m << (23u - p);
    e = i32(p) - 149;
  } else {
    m = m | 0x800000u;
  }
  let h = m >> 16u;
  let l = m & 0xffffu;
  let hl2 = 2u * h * l;
  var p = add64(vec2<u32>(l * l, h * h), vec2<u32>(hl2 << 16u, hl2 >> 16u));
  // 47 or 48 significant bits: the implicit bit to bit 52.
  let wide = (p.y >> 15u) & 1u;
  let s = 6u - wide;
  p = vec2<u32>(p.x << s, (p.y << s) | (p.x >> (32u - s)));
  return vec2<u32>(p.x, (u32(2 * e + i32(wide) + 1023) << 20u) | (p.y & 0xfffffu));
}
fn neg64(a: vec2<u32>) -> vec2<u32> { return sub64(vec2<u32>(0u, 0u), a); }
// The float64 of acc * 2^unit, acc a nonzero signed integer below 2^53 in magnitude (exact).
fn f64_of_int(acc: vec2<u32>, unit: i32) -> vec2<u32> {
  let neg = (acc.y & 0x80000000u) != 0u;
  let mag = select(acc, neg64(acc), neg);
  let p = 63u - clz64(mag);
  let m = shl64(mag, 52u - p);
  let e = u32(i32(p) + unit + 1023);
  return vec2<u32>(m.x, select(0u, 0x80000000u, neg) | (e << 20u) | (m.y & 0xfffffu));
}
// The order key of a float32: unsigned order of keys is the order of values, -0 below +0.
fn order_key(u: u32) -> u32 {
  return select(~u, u | 0x80000000u, (u & 0x80000000u) == 0u);
}
fn key_bits(k: u32) -> u32 {
  return select(~k, k ^ 0x80000000u, (k & 0x80000000u) != 0u);
}
)";

// Element loads from `src` (array<u32>) at byte addresses, and float32 arithmetic on bits with
// the host CPU's NaN results (P.default_nan, P.propagate_nan), so decoded NaNs match bit for bit.
constexpr const char* kLoads = R"(
fn word_at(byte: u32) -> u32 {
  let w = byte >> 2u;
  let s = (byte & 3u) * 8u;
  if (s == 0u) { return src[w]; }
  return (src[w] >> s) | (src[w + 1u] << (32u - s));
}
fn half_at(byte: u32) -> u32 { return (src[byte >> 2u] >> ((byte & 2u) * 8u)) & 0xffffu; }
fn byte_at(byte: u32) -> u32 { return (src[byte >> 2u] >> ((byte & 3u) * 8u)) & 0xffu; }
fn half_bits(h: u32) -> u32 {
  let sign = (h & 0x8000u) << 16u;
  let mag = h & 0x7fffu;
  if (mag < 0x400u) {
    if (mag == 0u) { return sign; }
    let p = 31u - countLeadingZeros(mag);
    return sign | ((p + 103u) << 23u) | ((mag << (23u - p)) & 0x7fffffu);
  }
  if (mag >= 0x7c00u) { return sign | ((mag << 13u) + (224u << 23u)); }
  return sign | ((mag << 13u) + (112u << 23u));
}
fn is_nan(u: u32) -> bool { return (u & 0x7fffffffu) > 0x7f800000u; }
fn is_inf(u: u32) -> bool { return (u & 0x7fffffffu) == 0x7f800000u; }
fn is_zero(u: u32) -> bool { return (u & 0x7fffffffu) == 0u; }
fn nan_of(a: u32, b: u32) -> u32 {
  if (P.propagate_nan != 0u) {
    if (is_nan(a)) { return a | 0x400000u; }
    if (is_nan(b)) { return b | 0x400000u; }
  }
  return P.default_nan;
}
fn fmul(a: u32, b: u32) -> u32 {
  if (is_nan(a) || is_nan(b) || (is_inf(a) && is_zero(b)) || (is_zero(a) && is_inf(b))) { return nan_of(a, b); }
  if (is_inf(a) || is_inf(b)) { return ((a ^ b) & 0x80000000u) | 0x7f800000u; }
  return bitcast<u32>(bitcast<f32>(a) * bitcast<f32>(b));
}
fn fsub(a: u32, b: u32) -> u32 {
  if (is_nan(a) || is_nan(b) || (is_inf(a) && is_inf(b) && ((a ^ b) & 0x80000000u) == 0u)) { return nan_of(a, b); }
  if (is_inf(a)) { return a; }
  if (is_inf(b)) { return b ^ 0x80000000u; }
  return bitcast<u32>(bitcast<f32>(a) - bitcast<f32>(b));
}
fn small_int_bits(v: u32) -> u32 { return bitcast<u32>(f32(v)); }
)";

// elem(row_byte, col): the float32 bits of element `col` of the row starting at `row_byte`.
std::string element_loader(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "fn elem(row_byte: u32, col: u32) -> u32 { return word_at(row_byte + 4u * col); }\n";
    case DType::kF16:
      return "fn elem(row_byte: u32, col: u32) -> u32 { return half_bits(half_at(row_byte + 2u * col)); }\n";
    case DType::kBF16:
      return "fn elem(row_byte: u32, col: u32) -> u32 { return half_at(row_byte + 2u * col) << 16u; }\n";
    case DType::kQ8_0:
      // ggml: y = d * q, with d the block's half scale.
      return R"(
fn elem(row_byte: u32, col: u32) -> u32 {
  let block = row_byte + (col / 32u) * 34u;
  let d = half_bits(half_at(block));
  let q = i32(byte_at(block + 2u + col % 32u) << 24u) >> 24u;
  return fmul(d, bitcast<u32>(f32(q)));
}
)";
    case DType::kQ4_K:
      // ggml's dequantize_row_q4_K: y = (d * sc) * q - (dmin * m), scales unpacked by get_scale_min_k4.
      return R"(
fn elem(row_byte: u32, col: u32) -> u32 {
  let block = row_byte + (col / 256u) * 144u;
  let e = col % 256u;
  let j = e / 64u;
  let upper = (e % 64u) >= 32u;
  let is = 2u * j + select(0u, 1u, upper);
  let scales = block + 4u;
  var sc: u32;
  var m: u32;
  if (is < 4u) {
    sc = byte_at(scales + is) & 63u;
    m = byte_at(scales + is + 4u) & 63u;
  } else {
    sc = (byte_at(scales + is + 4u) & 0xfu) | ((byte_at(scales + is - 4u) >> 6u) << 4u);
    m = (byte_at(scales + is + 4u) >> 4u) | ((byte_at(scales + is) >> 6u) << 4u);
  }
  let qbyte = byte_at(block + 16u + 32u * j + e % 32u);
  let q = select(qbyte & 0xfu, qbyte >> 4u, upper);
  let d = half_bits(half_at(block));
  let dmin = half_bits(half_at(block + 2u));
  let d1 = fmul(d, small_int_bits(sc));
  let m1 = fmul(dmin, small_int_bits(m));
  return fsub(fmul(d1, small_int_bits(q)), m1);
}
)";
    default:
      return {};
  }
}

constexpr const char* kElementParams = R"(
struct Params {
  base_byte: u32,
  count: u32,
  default_nan: u32,
  propagate_nan: u32,
  bins: u32,
  below_key: u32,
  above_key: u32,
  edges: u32,
}
)";

constexpr const char* kTileParams = R"(
struct Params {
  base_byte: u32,
  row_bytes: u32,
  band_rows: u32,
  col_begin: u32,
  col_end: u32,
  tile: u32,
  tiles_x: u32,
  out_tile_row: u32,
  default_nan: u32,
  propagate_nan: u32,
  parts: u32,
}
)";

// The counts and extremes of the values an invocation has seen, and its workgroup's (in atomics).
constexpr const char* kCounters = R"(
var<workgroup> counts: array<atomic<u32>, 4>;
var<workgroup> keys: array<atomic<u32>, 3>;
var<private> c_nan: u32;
var<private> c_pinf: u32;
var<private> c_ninf: u32;
var<private> c_zeros: u32;
var<private> k_min: u32 = 0xff800000u;
var<private> k_max: u32 = 0x007fffffu;
var<private> k_abs: u32;

// Before the first barrier.
fn start_counts(t: u32) {
  if (t < 4u) { atomicStore(&counts[t], 0u); }
  if (t == 0u) {
    atomicStore(&keys[0], 0xff800000u);
    atomicStore(&keys[1], 0x007fffffu);
    atomicStore(&keys[2], 0u);
  }
}
// The invocation's counts and extremes into the workgroup's.
fn flush_counts() {
  if (c_nan != 0u) { atomicAdd(&counts[0], c_nan); }
  if (c_pinf != 0u) { atomicAdd(&counts[1], c_pinf); }
  if (c_ninf != 0u) { atomicAdd(&counts[2], c_ninf); }
  if (c_zeros != 0u) { atomicAdd(&counts[3], c_zeros); }
  if (k_min != 0xff800000u) { atomicMin(&keys[0], k_min); }
  if (k_max != 0x007fffffu) { atomicMax(&keys[1], k_max); }
  if (k_abs != 0u) { atomicMax(&keys[2], k_abs); }
}
)";

// One invocation per element of a 2-D grid of workgroups of 256.
constexpr const char* kFlatIndex = R"(
fn flat_index(wg: vec3<u32>, groups: vec3<u32>, t: u32) -> u32 { return (wg.y * groups.x + wg.x) * 256u + t; }
)";

}  // namespace

namespace wgsl {
const char* float64_source() { return kFloat64; }
const char* loads_source() { return kLoads; }
const char* tile_params_source() { return kTileParams; }
const char* counters_source() { return kCounters; }
std::string element_source(DType dtype) { return element_loader(dtype); }
}  // namespace wgsl

bool kernel_dtype_supported(DType dtype) { return !element_loader(dtype).empty(); }

std::string decode_kernel(DType dtype) {
  return std::string(kElementParams) + R"(
@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@group(0) @binding(2) var<uniform> P: Params;
)" + kLoads + element_loader(dtype) + kFlatIndex + R"(
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
  let i = flat_index(wg, groups, t);
  if (i < P.count) { dst[i] = elem(P.base_byte, i); }
}
)";
}

std::string histogram_kernel(DType dtype) {
  return std::string(kElementParams) + R"(
@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read> edges: array<u32>;
@group(0) @binding(2) var<storage, read_write> counts: array<atomic<u32>>;
@group(0) @binding(3) var<uniform> P: Params;
)" + kLoads + element_loader(dtype) + kFlatIndex + R"(
fn order_key(u: u32) -> u32 { return select(~u, u | 0x80000000u, (u & 0x80000000u) == 0u); }
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
  let i = flat_index(wg, groups, t);
  if (i >= P.count) { return; }
  let u = elem(P.base_byte, i);
  var slot: u32;
  if (is_nan(u)) {
    slot = P.bins + 2u;
  } else {
    let key = order_key(u);
    if (key < P.below_key) {
      slot = P.bins;
    } else if (key >= P.above_key) {
      slot = P.bins + 1u;
    } else {
      // The bin is the number of edges at or below the key (edges ascend).
      var lo = 0u;
      var hi = P.edges;
      while (lo < hi) {
        let mid = (lo + hi) / 2u;
        if (edges[mid] <= key) { lo = mid + 1u; } else { hi = mid; }
      }
      slot = lo;
    }
  }
  atomicAdd(&counts[slot], 1u);
}
)";
}

std::string radix_histogram_kernel(DType dtype) {
  return R"(
struct Params {
  base_byte: u32,
  count: u32,
  default_nan: u32,
  propagate_nan: u32,
  key: u32,
  shift: u32,
  bits: u32,
  prefix_count: u32,
  center_lo: u32,
  center_hi: u32,
  counters: u32,
  pad: u32,
  prefixes: array<vec4<u32>, 8>,
}
@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> counts: array<atomic<u32>>;
@group(0) @binding(2) var<uniform> P: Params;
)" + std::string(kLoads) + kFloat64 + element_loader(dtype) + kFlatIndex + R"(
var<workgroup> classes: array<atomic<u32>, 4>;

fn prefix_of(r: u32) -> vec2<u32> {
  let pair = P.prefixes[r / 2u];
  return select(pair.zw, pair.xy, r % 2u == 0u);
}

// One element: its class, and for a finite one its key's digit in every prefix row it matches.
// The keys are the CPU's: the deviation key is the float64 |x - center| in one IEEE addition
// (f64_add reads a subnormal centre as zero, which rounds the same: x is 0, and then the result
// is -center itself, or at least 2^-149, whose half ulp is far above any subnormal).
fn count_element(u: u32) {
  let mag = u & 0x7fffffffu;
  if (mag > 0x7f800000u) { atomicAdd(&classes[1], 1u); return; }
  if (mag == 0x7f800000u) { atomicAdd(&classes[select(3u, 2u, u == mag)], 1u); return; }
  atomicAdd(&classes[0], 1u);
  var key = vec2<u32>(mag, 0u);
  if (P.key == )" + std::to_string(TM_RADIX_KEY_VALUE) + R"(u) {
    key = vec2<u32>(order_key(u), 0u);
  } else if (P.key == )" + std::to_string(TM_RADIX_KEY_DEVIATION) + R"(u) {
    let d = f64_add(f64_of(u), vec2<u32>(P.center_lo, P.center_hi ^ 0x80000000u));
    key = vec2<u32>(d.x, d.y & 0x7fffffffu);
  }
  let digit = shr64(key, P.shift).x & ((1u << P.bits) - 1u);
  let high = shr64(key, P.shift + P.bits);
  if (P.prefix_count == 0u) {
    atomicAdd(&counts[digit], 1u);
    return;
  }
  for (var r = 0u; r < P.prefix_count; r = r + 1u) {
    if (all(high == prefix_of(r))) { atomicAdd(&counts[(r << P.bits) + digit], 1u); }
  }
}

// counts[0, counters) are the digit counters (row-major by prefix), counts[counters + c] the
// classes (finite, NaN, +Inf, -Inf), gathered per workgroup first.
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
  if (t < 4u) { atomicStore(&classes[t], 0u); }
  workgroupBarrier();
  let i = flat_index(wg, groups, t);
  if (i < P.count) { count_element(elem(P.base_byte, i)); }
  workgroupBarrier();
  if (t < 4u) {
    let c = atomicLoad(&classes[t]);
    if (c != 0u) { atomicAdd(&counts[P.counters + t], c); }
  }
}
)";
}

namespace {

// The two sides of tm.diff_stats@1 / tm.subtract@1, both staged in `src`: value_a(i) and
// value_b(i) decode element i of each (each side its own dtype) and apply its offset as the host's
// float32 v + offset (in float64, then rounded once to float32: a float64 sum of two float32
// rounds to the same float32 as a float32 sum, since 53 >= 2 * 24 + 2).
std::string diff_prelude(DType a, DType b) {
  auto renamed = [](std::string loader, const char* name) {
    const std::string from = "fn elem(";
    loader.replace(loader.find(from), from.size(), std::string("fn ") + name + "(");
    return loader;
  };
  return R"(
struct Params {
  base_a: u32,
  base_b: u32,
  count: u32,
  default_nan: u32,
  propagate_nan: u32,
  a_offset: u32,
  b_offset: u32,
  offsets: u32,
}
@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
@group(0) @binding(2) var<uniform> P: Params;
)" + std::string(kLoads) + kFloat64 + renamed(element_loader(a), "elem_a") + renamed(element_loader(b), "elem_b") + R"(
// The 64-bit product of two u32.
fn mul_wide(a: u32, b: u32) -> vec2<u32> {
  let al = a & 0xffffu;
  let ah = a >> 16u;
  let bl = b & 0xffffu;
  let bh = b >> 16u;
  let ll = al * bl;
  let hl = ah * bl;
  let mid = al * bh + (ll >> 16u) + (hl & 0xffffu);
  return vec2<u32>((mid << 16u) | (ll & 0xffffu), ah * bh + (mid >> 16u) + (hl >> 16u));
}
fn gt64(a: vec2<u32>, b: vec2<u32>) -> bool { return a.y > b.y || (a.y == b.y && a.x > b.x); }
// IEEE float64 a * b, round to nearest even, for normal or zero operands whose product is normal
// (every product here: squares of differences of float32 and products of two float32). A zero
// product is +0 (a sum that starts at +0 never tells the signs of zero apart).
fn f64_mul(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
  let ea = (a.y >> 20u) & 0x7ffu;
  let eb = (b.y >> 20u) & 0x7ffu;
  if (ea == 0u || eb == 0u) { return vec2<u32>(0u, 0u); }
  let ah = (a.y & 0xfffffu) | 0x100000u;
  let bh = (b.y & 0xfffffu) | 0x100000u;
  // The 106-bit product of the significands as (high, low) 64-bit halves.
  let x = mul_wide(a.x, b.x);
  let y = add64(mul_wide(ah, b.x), mul_wide(a.x, bh));
  let z = mul_wide(ah, bh);
  let low = add64(x, vec2<u32>(0u, y.x));
  let carry = select(0u, 1u, gt64(x, low));
  let high = add64(add64(z, vec2<u32>(y.y, 0u)), vec2<u32>(carry, 0u));
  let shift = select(52u, 53u, (high.y & 0x200u) != 0u);
  var m = shl64(high, 64u - shift);
  m = vec2<u32>(m.x | shr64(low, shift).x, m.y | shr64(low, shift).y);
  let rem = sub64(low, shl64(shr64(low, shift), shift));
  let half = shl64(vec2<u32>(1u, 0u), shift - 1u);
  var e = shift + ea + eb - 1075u;
  if (gt64(rem, half) || (rem.x == half.x && rem.y == half.y && (m.x & 1u) == 1u)) {
    m = add64(m, vec2<u32>(1u, 0u));
    if ((m.y & 0x200000u) != 0u) { m = shr64(m, 1u); e = e + 1u; }
  }
  return vec2<u32>(m.x, ((a.y ^ b.y) & 0x80000000u) | (e << 20u) | (m.y & 0xfffffu));
}
// The float32 nearest a float64 (normal or zero), ties to even, subnormal and infinite results included.
fn f32_of_f64(d: vec2<u32>) -> u32 {
  let sign = d.y & 0x80000000u;
  let e = (d.y >> 20u) & 0x7ffu;
  if (e == 0u) { return sign; }
  if (e >= 1151u) { return sign | 0x7f800000u; }
  let m = vec2<u32>(d.x, (d.y & 0xfffffu) | 0x100000u);
  let shift = select(29u, 926u - e, e <= 896u);
  if (shift >= 64u) { return sign; }
  let kept = shr64(m, shift);
  let rem = sub64(m, shl64(kept, shift));
  let half = shl64(vec2<u32>(1u, 0u), shift - 1u);
  var r = kept.x;
  if (gt64(rem, half) || (rem.x == half.x && rem.y == half.y && (r & 1u) == 1u)) { r = r + 1u; }
  if (e <= 896u) { return sign | r; }
  return sign | (((e - 896u) << 23u) + r - 0x800000u);
}
fn offset_by(v: u32, offset: u32) -> u32 {
  if (is_nan(v)) { return nan_of(v, offset); }
  if (is_inf(v)) { return v; }
  return f32_of_f64(f64_add(f64_of(v), f64_of(offset)));
}
fn value_a(i: u32) -> u32 {
  let v = elem_a(P.base_a, i);
  if ((P.offsets & 1u) != 0u) { return offset_by(v, P.a_offset); }
  return v;
}
fn value_b(i: u32) -> u32 {
  let v = elem_b(P.base_b, i);
  if ((P.offsets & 2u) != 0u) { return offset_by(v, P.b_offset); }
  return v;
}
fn negated(d: vec2<u32>) -> vec2<u32> { return vec2<u32>(d.x, d.y ^ 0x80000000u); }
)";
}

}  // namespace

std::string subtract_kernel(DType a, DType b) {
  return diff_prelude(a, b) + kFlatIndex + R"(
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
  let i = flat_index(wg, groups, t);
  if (i >= P.count) { return; }
  let x = value_a(i);
  let y = value_b(i);
  var r: u32;
  if (is_nan(x) || is_nan(y) || (is_inf(x) && is_inf(y) && ((x ^ y) & 0x80000000u) == 0u)) {
    r = 0x7fc00000u;
  } else if (is_inf(x)) {
    r = x;
  } else if (is_inf(y)) {
    r = y ^ 0x80000000u;
  } else {
    r = f32_of_f64(f64_add(f64_of(x), negated(f64_of(y))));
  }
  out[i] = r;
}
)";
}

std::string diff_stats_kernel(DType a, DType b) {
  return diff_prelude(a, b) + R"(
var<workgroup> sh: array<vec2<u32>, 256>;
var<workgroup> sh_max: array<vec2<u32>, 256>;
var<workgroup> sh_pair: array<vec2<u32>, 256>;
var<workgroup> sh_index: array<u32, 256>;
var<workgroup> tallies: array<atomic<u32>, 8>;

fn class_of(u: u32) -> u32 {
  let mag = u & 0x7fffffffu;
  if (mag > 0x7f800000u) { return 1u; }
  if (mag == 0x7f800000u) { return select(3u, 2u, u == mag); }
  return 0u;
}

var<private> t: array<u32, 8>;  // finite, differing, bits differing, class mismatch, NaN a, NaN b, Inf a, Inf b
var<private> sums: array<vec2<u32>, 5>;
var<private> best: vec2<u32>;
var<private> best_index: u32;
var<private> best_pair: vec2<u32>;

// Pair i of the chunk starting at `first`, into the lane's counts, sums and maximum.
fn take_pair(first: u32, i: u32) {
  let x = value_a(first + i);
  let y = value_b(first + i);
  let cx = class_of(x);
  let cy = class_of(y);
  if (x != y) { t[2] = t[2] + 1u; }
  if (cx != cy) { t[3] = t[3] + 1u; }
  if (cx == 1u) { t[4] = t[4] + 1u; }
  if (cy == 1u) { t[5] = t[5] + 1u; }
  if (cx >= 2u) { t[6] = t[6] + 1u; }
  if (cy >= 2u) { t[7] = t[7] + 1u; }
  if (cx != 0u || cy != 0u) {
    if (cx != cy) { t[1] = t[1] + 1u; }
    return;
  }
  t[0] = t[0] + 1u;
  if (x != y && !(is_zero(x) && is_zero(y))) { t[1] = t[1] + 1u; }
  let da = f64_of(x);
  let db = f64_of(y);
  let d = f64_add(da, negated(db));
  sums[0] = f64_add(sums[0], d);
  sums[1] = f64_add(sums[1], f64_mul(d, d));
  sums[2] = f64_add(sums[2], f64_square_of(x));
  sums[3] = f64_add(sums[3], f64_square_of(y));
  sums[4] = f64_add(sums[4], f64_mul(da, db));
  let ad = vec2<u32>(d.x, d.y & 0x7fffffffu);
  if (best_index == 0xffffffffu || gt64(ad, best)) {
    best = ad;
    best_index = i;
    best_pair = vec2<u32>(x, y);
  }
}

// Workgroup c is chunk c (65,536 pairs): lane l adds the pairs 256 s + l, s ascending, from +0.0,
// as the CPU reference does; then the halving tree over the lanes. The maximum |a - b| keeps the
// lowest index on ties (a total order, so any reduction order gives the same pair).
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) l: u32) {
  let first = wg.x * 65536u;
  let m = min(65536u, P.count - first);
  if (l < 8u) { atomicStore(&tallies[l], 0u); }
  best_index = 0xffffffffu;
  workgroupBarrier();
  for (var k = 0u; k < 256u; k = k + 1u) {
    if (k * 256u + l < m) { take_pair(first, k * 256u + l); }
  }
  for (var j = 0u; j < 8u; j = j + 1u) {
    if (t[j] != 0u) { atomicAdd(&tallies[j], t[j]); }
  }
  let o = wg.x * 24u;
  for (var j = 0u; j < 5u; j = j + 1u) {
    sh[l] = sums[j];
    workgroupBarrier();
    for (var p = 128u; p >= 1u; p = p / 2u) {
      if (l < p) { sh[l] = f64_add(sh[l], sh[l + p]); }
      workgroupBarrier();
    }
    if (l == 0u) {
      out[o + 14u + 2u * j] = sh[0].x;
      out[o + 15u + 2u * j] = sh[0].y;
    }
    workgroupBarrier();
  }
  sh_max[l] = best;
  sh_index[l] = best_index;
  sh_pair[l] = best_pair;
  workgroupBarrier();
  for (var p = 128u; p >= 1u; p = p / 2u) {
    if (l < p) {
      let oi = sh_index[l + p];
      let si = sh_index[l];
      if (oi != 0xffffffffu && (si == 0xffffffffu || gt64(sh_max[l + p], sh_max[l]) ||
                                (all(sh_max[l + p] == sh_max[l]) && oi < si))) {
        sh_max[l] = sh_max[l + p];
        sh_index[l] = oi;
        sh_pair[l] = sh_pair[l + p];
      }
    }
    workgroupBarrier();
  }
  if (l < 8u) { out[o + l] = atomicLoad(&tallies[l]); }
  if (l == 0u) {
    out[o + 8u] = sh_index[0];
    out[o + 9u] = sh_pair[0].x;
    out[o + 10u] = sh_pair[0].y;
    out[o + 11u] = 0u;
    out[o + 12u] = sh_max[0].x;
    out[o + 13u] = sh_max[0].y;
  }
}
)";
}

namespace {

// What the channel kernels share: the parameters (after the kernel's storage bindings), one
// element's counts and extremes, the streamed pairwise tree, and the 18-word TM_TileStats record.
std::string channel_prelude(DType dtype, int uniform_binding) {
  return R"(
struct Params {
  base_byte: u32,
  row_bytes: u32,
  rows: u32,
  cols: u32,
  levels: u32,
  slots: u32,
  default_nan: u32,
  propagate_nan: u32,
  row0: u32,
  band_rows: u32,
  last_band: u32,
  pad: u32,
}
@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> out: array<u32>;
@group(0) @binding()" + std::to_string(uniform_binding) + R"() var<uniform> P: Params;
)" + std::string(kLoads) + kFloat64 + element_loader(dtype) + kCounters + R"(
var<private> vx: vec2<u32>;
var<private> vy: vec2<u32>;
var<private> stack_x: array<vec2<u32>, 33>;
var<private> stack_y: array<vec2<u32>, 33>;

// One element: counted, and as float64 (and its square) in vx, vy; +0 when not finite.
fn take(u: u32) {
  vx = vec2<u32>(0u, 0u);
  vy = vec2<u32>(0u, 0u);
  let mag = u & 0x7fffffffu;
  if (mag > 0x7f800000u) { c_nan = c_nan + 1u; return; }
  if (mag == 0x7f800000u) {
    if (u == mag) { c_pinf = c_pinf + 1u; } else { c_ninf = c_ninf + 1u; }
    return;
  }
  if (mag == 0u) { c_zeros = c_zeros + 1u; }
  let key = order_key(u);
  k_min = min(k_min, key);
  k_max = max(k_max, key);
  k_abs = max(k_abs, mag);
  vx = f64_of(u);
  vy = f64_square_of(u);
}

// Slot k of a contiguous pairwise tree, streamed: merges every finished subtree (the set low bits
// of k) before it.
fn push(k: u32, x0: vec2<u32>, y0: vec2<u32>) {
  var x = x0;
  var y = y0;
  var level = 0u;
  while (((k >> level) & 1u) != 0u) {
    x = f64_add(stack_x[level], x);
    y = f64_add(stack_y[level], y);
    level = level + 1u;
  }
  stack_x[level] = x;
  stack_y[level] = y;
}

fn write_record(o: u32, count: u32, nan: u32, pinf: u32, ninf: u32, zeros: u32, sum: vec2<u32>, sq: vec2<u32>,
                kmin: u32, kmax: u32, kabs: u32) {
  out[o] = count;
  out[o + 1u] = 0u;
  out[o + 2u] = nan;
  out[o + 3u] = 0u;
  out[o + 4u] = pinf;
  out[o + 5u] = 0u;
  out[o + 6u] = ninf;
  out[o + 7u] = 0u;
  out[o + 8u] = zeros;
  out[o + 9u] = 0u;
  out[o + 10u] = sum.x;
  out[o + 11u] = sum.y;
  out[o + 12u] = sq.x;
  out[o + 13u] = sq.y;
  out[o + 14u] = key_bits(kmin);
  out[o + 15u] = key_bits(kmax);
  out[o + 16u] = kabs;
  out[o + 17u] = 0u;
}
)";
}

}  // namespace

std::string channel_rows_kernel(DType dtype) {
  return channel_prelude(dtype, 2) + R"(
var<workgroup> sh_sum: array<vec2<u32>, 256>;
var<workgroup> sh_sq: array<vec2<u32>, 256>;

// Workgroup r is row r. Its halving tree over P.slots = bit_ceil(cols) slots (+0 past the end):
// with more than 256 slots, lane l first sums slots l + 256 m as the halving tree over m, which
// is the pairwise tree over m in bit-reversed order (2^P.levels values), streamed; then the
// halving levels over the lanes (or over the P.slots lanes when there are fewer).
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
  let r = wg.y * groups.x + wg.x;
  let live = r < P.rows;
  start_counts(t);
  workgroupBarrier();
  let row_byte = P.base_byte + r * P.row_bytes;
  let values = 1u << P.levels;
  for (var k = 0u; k < values; k = k + 1u) {
    var m = 0u;
    if (P.levels > 0u) { m = reverseBits(k) >> (32u - P.levels); }
    let c = t + 256u * m;
    vx = vec2<u32>(0u, 0u);
    vy = vec2<u32>(0u, 0u);
    if (live && c < P.cols) { take(elem(row_byte, c)); }
    push(k, vx, vy);
  }
  flush_counts();
  sh_sum[t] = stack_x[P.levels];
  sh_sq[t] = stack_y[P.levels];
  workgroupBarrier();
  for (var p = min(P.slots, 256u) / 2u; p >= 1u; p = p / 2u) {
    if (t < p) {
      sh_sum[t] = f64_add(sh_sum[t], sh_sum[t + p]);
      sh_sq[t] = f64_add(sh_sq[t], sh_sq[t + p]);
    }
    workgroupBarrier();
  }
  if (t == 0u && live) {
    write_record(r * 18u, P.cols, atomicLoad(&counts[0]), atomicLoad(&counts[1]), atomicLoad(&counts[2]),
                 atomicLoad(&counts[3]), sh_sum[0], sh_sq[0], atomicLoad(&keys[0]), atomicLoad(&keys[1]),
                 atomicLoad(&keys[2]));
  }
}
)";
}

std::string channel_cols_kernel(DType dtype) {
  return channel_prelude(dtype, 3) + kFlatIndex + R"(
@group(0) @binding(2) var<storage, read_write> state: array<u32>;

// Invocation c is column c: its contiguous pairwise tree over 2^P.levels = bit_ceil(rows) row
// slots (+0 past the last row), streamed down the rows of one band (rows row0 .. row0 +
// band_rows) per dispatch. Between bands a column's counts, extremes and partial sums wait in
// `state`; the last band adds the padding slots and writes the record.
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>,
        @builtin(local_invocation_index) t: u32) {
  let c = flat_index(wg, groups, t);
  if (c >= P.cols) { return; }
  let o = c * (8u + 4u * (P.levels + 1u));
  if (P.row0 > 0u) {
    c_nan = state[o];
    c_pinf = state[o + 1u];
    c_ninf = state[o + 2u];
    c_zeros = state[o + 3u];
    k_min = state[o + 4u];
    k_max = state[o + 5u];
    k_abs = state[o + 6u];
    for (var l = 0u; l <= P.levels; l = l + 1u) {
      stack_x[l] = vec2<u32>(state[o + 8u + 4u * l], state[o + 9u + 4u * l]);
      stack_y[l] = vec2<u32>(state[o + 10u + 4u * l], state[o + 11u + 4u * l]);
    }
  }
  for (var k = 0u; k < P.band_rows; k = k + 1u) {
    take(elem(P.base_byte + k * P.row_bytes, c));
    push(P.row0 + k, vx, vy);
  }
  if (P.last_band == 0u) {
    state[o] = c_nan;
    state[o + 1u] = c_pinf;
    state[o + 2u] = c_ninf;
    state[o + 3u] = c_zeros;
    state[o + 4u] = k_min;
    state[o + 5u] = k_max;
    state[o + 6u] = k_abs;
    for (var l = 0u; l <= P.levels; l = l + 1u) {
      state[o + 8u + 4u * l] = stack_x[l].x;
      state[o + 9u + 4u * l] = stack_x[l].y;
      state[o + 10u + 4u * l] = stack_y[l].x;
      state[o + 11u + 4u * l] = stack_y[l].y;
    }
    return;
  }
  for (var k = P.rows; k < P.slots; k = k + 1u) { push(k, vec2<u32>(0u, 0u), vec2<u32>(0u, 0u)); }
  write_record(c * 18u, P.rows, c_nan, c_pinf, c_ninf, c_zeros, stack_x[P.levels], stack_y[P.levels], k_min, k_max,
               k_abs);
}
)";
}

}  // namespace tensormorph::webgpu
