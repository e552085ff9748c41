// The tm.tile_stats@1 kernels of the WebGPU backend (docs/COMPUTE.md, "The tile kernels").
#include <string>
#include <vector>

#include "backends/webgpu/wgsl_kernels.h"
#include "backends/webgpu/wgsl_parts.h"

namespace tensormorph::webgpu {

namespace {

// The low `bits` bits of `value` in reverse order: the leaf a streamed pairwise tree takes n-th is the
// halving tree's leaf bit_reversed(n).
uint32_t bit_reversed(uint32_t value, uint32_t bits) {
  uint32_t r = 0;
  for (uint32_t b = 0; b < bits; ++b) r |= ((value >> b) & 1u) << (bits - 1 - b);
  return r;
}

// What the lanes and words kernels write for the reduce kernel beside wgsl::counters_source(): the
// workgroup's 12-word partial record.
constexpr const char* kPartRecord = R"(
// After the last barrier: the workgroup's record at word o.
fn write_part(o: u32, sum: vec2<u32>, sq: vec2<u32>) {
  parts_out[o] = atomicLoad(&counts[0]);
  parts_out[o + 1u] = atomicLoad(&counts[1]);
  parts_out[o + 2u] = atomicLoad(&counts[2]);
  parts_out[o + 3u] = atomicLoad(&counts[3]);
  parts_out[o + 4u] = atomicLoad(&keys[0]);
  parts_out[o + 5u] = atomicLoad(&keys[1]);
  parts_out[o + 6u] = atomicLoad(&keys[2]);
  parts_out[o + 7u] = 0u;
  parts_out[o + 8u] = sum.x;
  parts_out[o + 9u] = sum.y;
  parts_out[o + 10u] = sq.x;
  parts_out[o + 11u] = sq.y;
}
)";

}  // namespace

std::string tile_rows_kernel(DType dtype) {
  return std::string(wgsl::tile_params_source()) + R"(
@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> rows_out: array<u32>;
@group(0) @binding(2) var<uniform> P: Params;
)" + wgsl::loads_source() + wgsl::float64_source() + wgsl::element_source(dtype) + R"(
var<workgroup> sh_sum: array<vec2<u32>, 256>;
var<workgroup> sh_sq: array<vec2<u32>, 256>;
var<workgroup> counts: array<atomic<u32>, 128>;
var<workgroup> keys: array<atomic<u32>, 96>;

// Workgroup (j, g) covers tile column j of rows g*G .. g*G+G-1 of the band, G = 256 / W rows of
// W = min(T, 256) lanes; lane `slot` holds the row's slots slot + k*W, k < T/W. The halving tree's
// levels above W run in registers (slot i and i + P share a lane), the rest in shared memory.
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
  let T = P.tile;
  let W = min(T, 256u);
  let G = 256u / W;
  let K = T / W;
  let rig = t / W;
  let slot = t % W;
  let j = wg.x;
  let row = wg.y * G + rig;
  if (t < G * 4u) { atomicStore(&counts[t], 0u); }
  if (t < G) {
    atomicStore(&keys[t * 3u], 0xff800000u);
    atomicStore(&keys[t * 3u + 1u], 0x007fffffu);
    atomicStore(&keys[t * 3u + 2u], 0u);
  }
  workgroupBarrier();
  var s: array<vec2<u32>, 16>;
  var q: array<vec2<u32>, 16>;
  var nan = 0u;
  var pinf = 0u;
  var ninf = 0u;
  var zeros = 0u;
  var minkey = 0xff800000u;
  var maxkey = 0x007fffffu;
  var absmax = 0u;
  let row_ok = row < P.band_rows;
  let row_byte = P.base_byte + row * P.row_bytes;
  for (var k = 0u; k < K; k = k + 1u) {
    let col = P.col_begin + j * T + slot + k * W;
    var sv = vec2<u32>(0u, 0u);
    var qv = vec2<u32>(0u, 0u);
    if (row_ok && col < P.col_end) {
      let u = elem(row_byte, col);
      let mag = u & 0x7fffffffu;
      if (mag > 0x7f800000u) {
        nan = nan + 1u;
      } else if (mag == 0x7f800000u) {
        if (u == mag) { pinf = pinf + 1u; } else { ninf = ninf + 1u; }
      } else {
        if (mag == 0u) { zeros = zeros + 1u; }
        let key = order_key(u);
        minkey = min(minkey, key);
        maxkey = max(maxkey, key);
        absmax = max(absmax, mag);
        sv = f64_of(u);
        qv = f64_square_of(u);
      }
    }
    s[k] = sv;
    q[k] = qv;
  }
  for (var p = K / 2u; p >= 1u; p = p / 2u) {
    for (var i = 0u; i < p; i = i + 1u) {
      s[i] = f64_add(s[i], s[i + p]);
      q[i] = f64_add(q[i], q[i + p]);
    }
  }
  sh_sum[t] = s[0];
  sh_sq[t] = q[0];
  if (nan != 0u) { atomicAdd(&counts[rig * 4u], nan); }
  if (pinf != 0u) { atomicAdd(&counts[rig * 4u + 1u], pinf); }
  if (ninf != 0u) { atomicAdd(&counts[rig * 4u + 2u], ninf); }
  if (zeros != 0u) { atomicAdd(&counts[rig * 4u + 3u], zeros); }
  atomicMin(&keys[rig * 3u], minkey);
  atomicMax(&keys[rig * 3u + 1u], maxkey);
  atomicMax(&keys[rig * 3u + 2u], absmax);
  workgroupBarrier();
  for (var p = W / 2u; p >= 1u; p = p / 2u) {
    if (slot < p) {
      sh_sum[t] = f64_add(sh_sum[t], sh_sum[t + p]);
      sh_sq[t] = f64_add(sh_sq[t], sh_sq[t + p]);
    }
    workgroupBarrier();
  }
  // Rows past the band's end still write their (empty) record: the reduce kernel reads T per tile.
  if (slot == 0u && row < ((P.band_rows + T - 1u) / T) * T) {
    let o = (row * P.tiles_x + j) * 12u;
    rows_out[o] = atomicLoad(&counts[rig * 4u]);
    rows_out[o + 1u] = atomicLoad(&counts[rig * 4u + 1u]);
    rows_out[o + 2u] = atomicLoad(&counts[rig * 4u + 2u]);
    rows_out[o + 3u] = atomicLoad(&counts[rig * 4u + 3u]);
    rows_out[o + 4u] = atomicLoad(&keys[rig * 3u]);
    rows_out[o + 5u] = atomicLoad(&keys[rig * 3u + 1u]);
    rows_out[o + 6u] = atomicLoad(&keys[rig * 3u + 2u]);
    rows_out[o + 7u] = 0u;
    rows_out[o + 8u] = sh_sum[t].x;
    rows_out[o + 9u] = sh_sum[t].y;
    rows_out[o + 10u] = sh_sq[t].x;
    rows_out[o + 11u] = sh_sq[t].y;
  }
}
)";
}

std::string tile_reduce_kernel() {
  return std::string(wgsl::tile_params_source()) + R"(
@group(0) @binding(0) var<storage, read> parts_in: array<u32>;
@group(0) @binding(1) var<storage, read_write> tiles_out: array<u32>;
@group(0) @binding(2) var<uniform> P: Params;
)" + wgsl::float64_source() + R"(
var<workgroup> sh_sum: array<vec2<u32>, 256>;
var<workgroup> sh_sq: array<vec2<u32>, 256>;
var<workgroup> counts: array<atomic<u32>, 4>;
var<workgroup> keys: array<atomic<u32>, 3>;

// Workgroup (j, i) finishes tile (i, j) of the band: the halving tree's last levels over its
// S = P.parts partial records (the row slots' residues mod S), record k at ((i*S + k) * tiles_x + j).
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
  let S = P.parts;
  let j = wg.x;
  let i = wg.y;
  if (t < 4u) { atomicStore(&counts[t], 0u); }
  if (t == 0u) {
    atomicStore(&keys[0], 0xff800000u);
    atomicStore(&keys[1], 0x007fffffu);
    atomicStore(&keys[2], 0u);
  }
  workgroupBarrier();
  var sv = vec2<u32>(0u, 0u);
  var qv = vec2<u32>(0u, 0u);
  if (t < S) {
    let o = ((i * S + t) * P.tiles_x + j) * 12u;
    if (parts_in[o] != 0u) { atomicAdd(&counts[0], parts_in[o]); }
    if (parts_in[o + 1u] != 0u) { atomicAdd(&counts[1], parts_in[o + 1u]); }
    if (parts_in[o + 2u] != 0u) { atomicAdd(&counts[2], parts_in[o + 2u]); }
    if (parts_in[o + 3u] != 0u) { atomicAdd(&counts[3], parts_in[o + 3u]); }
    atomicMin(&keys[0], parts_in[o + 4u]);
    atomicMax(&keys[1], parts_in[o + 5u]);
    atomicMax(&keys[2], parts_in[o + 6u]);
    sv = vec2<u32>(parts_in[o + 8u], parts_in[o + 9u]);
    qv = vec2<u32>(parts_in[o + 10u], parts_in[o + 11u]);
  }
  sh_sum[t] = sv;
  sh_sq[t] = qv;
  workgroupBarrier();
  for (var p = S / 2u; p >= 1u; p = p / 2u) {
    if (t < p) {
      sh_sum[t] = f64_add(sh_sum[t], sh_sum[t + p]);
      sh_sq[t] = f64_add(sh_sq[t], sh_sq[t + p]);
    }
    workgroupBarrier();
  }
  if (t == 0u) {
    let T = P.tile;
    let rows = min(T, P.band_rows - i * T);
    let cols = min(T, P.col_end - (P.col_begin + j * T));
    let o = ((P.out_tile_row + i) * P.tiles_x + j) * 18u;
    tiles_out[o] = rows * cols;
    tiles_out[o + 1u] = 0u;
    tiles_out[o + 2u] = atomicLoad(&counts[0]);
    tiles_out[o + 3u] = 0u;
    tiles_out[o + 4u] = atomicLoad(&counts[1]);
    tiles_out[o + 5u] = 0u;
    tiles_out[o + 6u] = atomicLoad(&counts[2]);
    tiles_out[o + 7u] = 0u;
    tiles_out[o + 8u] = atomicLoad(&counts[3]);
    tiles_out[o + 9u] = 0u;
    tiles_out[o + 10u] = sh_sum[0].x;
    tiles_out[o + 11u] = sh_sum[0].y;
    tiles_out[o + 12u] = sh_sq[0].x;
    tiles_out[o + 13u] = sh_sq[0].y;
    tiles_out[o + 14u] = key_bits(atomicLoad(&keys[0]));
    tiles_out[o + 15u] = key_bits(atomicLoad(&keys[1]));
    tiles_out[o + 16u] = atomicLoad(&keys[2]);
    tiles_out[o + 17u] = 0u;
  }
}
)";
}

std::string tile_lanes_kernel(DType dtype, uint32_t tile) {
  // T = 32 gives each lane 4 values: one block of 4. Larger T: blocks of 8 values, as many as T
  // asks (T and S come from the parameters), so one kernel serves every T >= 64.
  const bool single_block = tile < 2 * kLanesTileMin;
  const uint32_t block_levels = single_block ? 2 : 3;
  // The square of an odd significand: at most 11 bits for the 16-bit floats, 24 otherwise.
  const bool narrow = dtype == DType::kF16 || dtype == DType::kBF16;
  std::string code = std::string(wgsl::tile_params_source()) + R"(
@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> parts_out: array<u32>;
@group(0) @binding(2) var<uniform> P: Params;
)" + wgsl::loads_source() + wgsl::float64_source() + wgsl::element_source(dtype) + R"(
var<workgroup> sh_sum: array<vec2<u32>, 256>;
var<workgroup> sh_sq: array<vec2<u32>, 256>;
)" + wgsl::counters_source() + kPartRecord + R"(
var<private> vx: vec2<u32>;
var<private> vy: vec2<u32>;
// The lane's exact sums: signed 64-bit integers in units of 2^low_bit (squares: 2^(2 low_bit)),
// low_bit the lowest set bit of any value so far (4096: no nonzero value yet), top_bit a bound
// on every magnitude's exponent (|v| < 2^top_bit).
var<private> acc_s: vec2<u32>;
var<private> acc_q: vec2<u32>;
var<private> low_bit: i32 = 4096;
var<private> top_bit: i32 = -4096;
var<private> all_minus_zero: bool = true;
// log2 of the values per lane, and whether the squares' bound still holds (it only tightens).
var<private> lane_levels: i32;
var<private> squares_exact: bool = true;

)" + (narrow ? R"(
fn square_wide(m: u32) -> vec2<u32> { return vec2<u32>(m * m, 0u); }
)"
             : R"(
fn square_wide(m: u32) -> vec2<u32> {
  let l = m & 0xffffu;
  let h = m >> 16u;
  let hl2 = 2u * h * l;
  return add64(vec2<u32>(l * l, h * h), vec2<u32>(hl2 << 16u, hl2 >> 16u));
}
)") + R"(

// One slot of a row: counted, observed, and added to the lane's exact sums (+0 when absent or not
// finite). The shifts saturate at 64 bits; a sum they spoil fails the bound and takes the tree.
fn take(present: bool, u: u32) {
  if (!present || u != 0x80000000u) { all_minus_zero = false; }
  if (!present) { return; }
  let mag = u & 0x7fffffffu;
  if (mag > 0x7f800000u) { c_nan = c_nan + 1u; return; }
  if (mag == 0x7f800000u) {
    if (u == mag) { c_pinf = c_pinf + 1u; } else { c_ninf = c_ninf + 1u; }
    return;
  }
  let key = order_key(u);
  k_min = min(k_min, key);
  k_max = max(k_max, key);
  k_abs = max(k_abs, mag);
  if (mag == 0u) { c_zeros = c_zeros + 1u; return; }
  let e8 = mag >> 23u;
  let m = select((mag & 0x7fffffu) | 0x800000u, mag, e8 == 0u);
  let unit = i32(max(e8, 1u)) - 150;
  let tz = countTrailingZeros(m);
  let odd = m >> tz;
  let lb = unit + i32(tz);
  top_bit = max(top_bit, unit + 24);
  if (lb < low_bit) {
    let up = u32(min(low_bit - lb, 64));
    acc_s = shl64(acc_s, up);
    acc_q = shl64(acc_q, min(2u * up, 64u));
    low_bit = lb;
  }
  let d = u32(min(lb - low_bit, 64));
  let v = shl64(vec2<u32>(odd, 0u), d);
  acc_s = add64(acc_s, select(v, neg64(v), u != mag));
  // float32 squares have up to 48 bits and mostly fail: stop paying for them once they do.
  squares_exact = squares_exact && 2 * top_bit + lane_levels - 2 * low_bit <= 53;
  if (squares_exact) { acc_q = add64(acc_q, shl64(square_wide(odd), min(2u * d, 64u))); }
}

// One slot as float64 and its square in vx, vy, for the tree: +0 when absent or not finite.
fn leaf(present: bool, u: u32) {
  vx = vec2<u32>(0u, 0u);
  vy = vec2<u32>(0u, 0u);
  if (present && (u & 0x7fffffffu) < 0x7f800000u) {
    vx = f64_of(u);
    vy = f64_square_of(u);
  }
}

// Workgroup (j, y) covers tile column j of tile row i = y / S and the tile's rows g, g + S, ...
// (g = y % S, S = T / 32), one row per 8 lanes. The canonical halving tree of a row pairs slots
// of one residue mod 8 first: lane l's slots l + 8m, m < T / 8, form one subtree, the halving
// tree over m. When no addition of that subtree can round, its value is the exact sum of its
// leaves (docs/COMPUTE.md): every value is a multiple of 2^low_bit and n of them add up to less
// than n * 2^top_bit <= 2^(53 + low_bit). Then the lane's integer sums are its result; otherwise
// the lane walks the subtree in float64 (the pairwise tree over m in bit-reversed order, streamed
// with one partial sum per level). Then the last three levels over the 8 lanes, the tile's row
// tree over the workgroup's 32 rows (same residue mod S), and the reduce kernel's levels over
// the S residues.
@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
  let S = P.parts;
  let T = P.tile;
  // Blocks per lane, as a power of two: T / 8 values in blocks of )" + std::to_string(1u << block_levels) + R"(.
  let outer = countTrailingZeros(T) - )" + std::to_string(3 + block_levels) + R"(u;
  let lane = t % 8u;
  let rs = t / 8u;
  let i = wg.y / S;
  let g = wg.y % S;
  let j = wg.x;
  let row = i * T + g + S * rs;
  let row_ok = row < P.band_rows;
  let row_byte = P.base_byte + row * P.row_bytes;
  let col0 = P.col_begin + j * T + lane;
  start_counts(t);
  lane_levels = i32(countTrailingZeros(T)) - 3;
  workgroupBarrier();
  var x: vec2<u32>;
  var y: vec2<u32>;
)";
  // A block is the first values of a lane's bit-reversed order (one pairwise subtree), its loads
  // first so they are in flight together; longer rows repeat it for each block b (their columns
  // differ by 8 * bitrev(b)). Small blocks keep the kernel small: software devices compile it
  // with LLVM.
  const uint32_t block_values = 1u << block_levels;
  for (uint32_t level = 0; level <= block_levels; ++level) {
    code += "  var s" + std::to_string(level) + ": vec2<u32>;\n  var q" + std::to_string(level) + ": vec2<u32>;\n";
  }
  auto column = [&](uint32_t q) {
    return "base + " + std::to_string(8 * bit_reversed(q, block_levels)) + "u * (1u << outer)";
  };
  std::string loads;
  for (uint32_t q = 0; q < block_values; ++q) {
    loads += "    let u" + std::to_string(q) + " = elem(row_byte, " + column(q) + ");\n";
  }
  std::string counted = loads;
  std::string tree = loads;
  for (uint32_t q = 0; q < block_values; ++q) {
    const std::string present = "row_ok && " + column(q) + " < P.col_end";
    counted += "    take(" + present + ", u" + std::to_string(q) + ");\n";
    tree += "    leaf(" + present + ", u" + std::to_string(q) + ");\n    x = vx;\n    y = vy;\n";
    uint32_t level = 0;
    while (((q >> level) & 1u) != 0) {
      tree += "    if (tree_s) { x = f64_add(s" + std::to_string(level) + ", x); }\n    if (tree_q) { y = f64_add_pos(q" +
              std::to_string(level) + ", y); }\n";
      ++level;
    }
    tree += "    s" + std::to_string(level) + " = x;\n    q" + std::to_string(level) + " = y;\n";
  }
  const std::string top = std::to_string(block_levels);
  if (single_block) {
    code += "  {\n    let base = col0;\n" + counted + "  }\n";
  } else {
    code += "  for (var b = 0u; b < (1u << outer); b = b + 1u) {\n";
    code += "    let base = col0 + 8u * (reverseBits(b) >> (32u - outer));\n" + counted + "  }\n";
  }
  code += R"(
  let no_value = low_bit == 4096;
  let tree_s = !no_value && top_bit + lane_levels - low_bit > 53;
  let tree_q = !no_value && !squares_exact;
  var lane_s = vec2<u32>(0u, select(0u, 0x80000000u, all_minus_zero));
  var lane_q = vec2<u32>(0u, 0u);
  if (acc_s.x != 0u || acc_s.y != 0u) { lane_s = f64_of_int(acc_s, low_bit); }
  if (acc_q.x != 0u || acc_q.y != 0u) { lane_q = f64_of_int(acc_q, 2 * low_bit); }
  if (tree_s || tree_q) {
)";
  if (single_block) {
    code += "  {\n    let base = col0;\n" + tree + "  }\n";
    code += "    if (tree_s) { lane_s = s" + top + "; }\n    if (tree_q) { lane_q = q" + top + "; }\n";
  } else {
    // Up to 2^6 blocks (T = 4096); b's bit-reversal over `outer` bits (a shift by 32 is by 0 in
    // WGSL's runtime semantics, and then b is 0).
    code += "  var bs: array<vec2<u32>, 8>;\n  var bq: array<vec2<u32>, 8>;\n";
    code += "  for (var b = 0u; b < (1u << outer); b = b + 1u) {\n";
    code += "    let base = col0 + 8u * (reverseBits(b) >> (32u - outer));\n" + tree;
    code += "    x = s" + top + ";\n    y = q" + top + ";\n";
    code += "    var level = 0u;\n    while (((b >> level) & 1u) != 0u) {\n";
    code += "      if (tree_s) { x = f64_add(bs[level], x); }\n      if (tree_q) { y = f64_add_pos(bq[level], y); }\n"
            "      level = level + 1u;\n    }\n";
    code += "    bs[level] = x;\n    bq[level] = y;\n  }\n";
    code += "    if (tree_s) { lane_s = bs[outer]; }\n    if (tree_q) { lane_q = bq[outer]; }\n";
  }
  code += R"(  }
  sh_sum[t] = lane_s;
  sh_sq[t] = lane_q;
  flush_counts();
  workgroupBarrier();
  for (var p = 4u; p >= 1u; p = p / 2u) {
    if (lane < p) {
      sh_sum[t] = f64_add(sh_sum[t], sh_sum[t + p]);
      sh_sq[t] = f64_add_pos(sh_sq[t], sh_sq[t + p]);
    }
    workgroupBarrier();
  }
  for (var p = 16u; p >= 1u; p = p / 2u) {
    if (lane == 0u && rs < p) {
      sh_sum[t] = f64_add(sh_sum[t], sh_sum[t + 8u * p]);
      sh_sq[t] = f64_add_pos(sh_sq[t], sh_sq[t + 8u * p]);
    }
    workgroupBarrier();
  }
  if (t == 0u) { write_part(((i * S + g) * P.tiles_x + j) * 12u, sh_sum[0], sh_sq[0]); }
}
)";
  return code;
}


bool words_kernel_takes(DType dtype, uint64_t tile) {
  // The kernel also serves F16 and BF16 (bench/webgpu_tile_kernel_bench measures it), but on an H100
  // the lanes kernel ran BF16 faster (5.75 against 6.57 ms per GiB), so only F32 takes it.
  return dtype == DType::kF32 && tile >= kWordsTileMin && tile <= kWordsTileMax;
}

// Each invocation holds V = `values` values of one row (`aligned`: every row's words start at a
// multiple of 4 bytes, so each is one load with no branch): its words k + W r (r < NW) of the row's
// T slots, W = T / V invocations per row, so a workgroup's loads are contiguous. A slot is
// s = e + PW (k + W r), e the value within a word: the halving tree over s adds r's bits first
// (within the invocation), then k's (across the row's invocations), then e's. The values stay in
// registers and are read three times: counted, added exactly in integers, and for F32 squared into
// the float64 tree.
//
// Sums: an invocation adds its values as integers in units of its smallest nonzero value's binade,
// the row's invocations merge theirs (shifting to the smaller unit), and the row's sum is that exact
// integer whenever no addition of the row's tree can round: every value is a multiple of the row's
// unit and the T of them are below 2^(53 - log2 T) units each (docs/COMPUTE.md). Squares likewise for
// the 16-bit floats; F32 squares (48 bits each) always take the float64 tree, as does any row whose
// bound fails: the invocation's halving tree over r, then the levels across the row's invocations in
// workgroup memory, then (16-bit) over e. Then the tile's row tree over the workgroup's rows.
std::string tile_words_kernel(DType dtype, bool aligned, uint32_t values) {
  const bool f32 = dtype == DType::kF32;
  const uint32_t per_word = f32 ? 1 : 2;
  const uint32_t words = values / per_word;
  uint32_t word_levels = 0;
  while ((1u << word_levels) < words) ++word_levels;
  const uint32_t value_levels = word_levels + (per_word == 2 ? 1 : 0);
  const uint32_t sig_bits = f32 ? 24 : dtype == DType::kBF16 ? 8 : 11;
  const auto n = [](uint32_t v) { return std::to_string(v) + "u"; };
  std::string code = std::string(wgsl::tile_params_source()) + R"(
@group(0) @binding(0) var<storage, read> src: array<u32>;
@group(0) @binding(1) var<storage, read_write> parts_out: array<u32>;
@group(0) @binding(2) var<uniform> P: Params;
)" + wgsl::loads_source() + wgsl::float64_source() + wgsl::element_source(dtype) + R"(
// Significant bits of a value, and how far below a float32 significand they end.
const SB: u32 = )" + n(sig_bits) + R"(;
const DROP: u32 = )" + n(24 - sig_bits) + R"(;
const PW: u32 = )" + n(per_word) + R"(;
const NW: u32 = )" + n(words) + R"(;
const LOG_NW: u32 = )" + n(word_levels) + R"(;
// log2 of the values an invocation holds.
const LOG_V: u32 = )" + n(value_levels) + R"(;
var<workgroup> sh_x: array<vec2<u32>, )" + n(256 * per_word) + R"(>;
var<workgroup> sh_y: array<vec2<u32>, )" + n(256 * per_word) + R"(>;
var<workgroup> sh_int: array<vec4<u32>, 256>;
var<workgroup> sh_meta: array<u32, 256>;
var<workgroup> sh_rows: array<vec4<u32>, 64>;
var<workgroup> sh_flags: array<u32, 64>;
var<workgroup> tree_bits: atomic<u32>;
var<workgroup> tree_plain: u32;
)" + wgsl::counters_source() + kPartRecord + R"(
// The smallest nonzero finite magnitude less one (0xffffffff: none).
var<private> min_nonzero: u32 = 0xffffffffu;
// The invocation's exact sums, in units of 2^(unit_of(E0)) and its square.
var<private> E0: u32;
var<private> acc32: u32;
var<private> acc_s: vec2<u32>;
var<private> acc_q: vec2<u32>;

// One slot: counted and observed when present.
fn observe(present: bool, u: u32) {
  if (!present) { return; }
  let mag = u & 0x7fffffffu;
  if (mag >= 0x7f800000u) {
    if (mag > 0x7f800000u) { c_nan = c_nan + 1u; } else if (u == mag) { c_pinf = c_pinf + 1u; } else { c_ninf = c_ninf + 1u; }
    return;
  }
  c_zeros = c_zeros + select(0u, 1u, mag == 0u);
  let key = order_key(u);
  k_min = min(k_min, key);
  k_max = max(k_max, key);
  k_abs = max(k_abs, mag);
  min_nonzero = min(min_nonzero, mag - 1u);
}
// A finite value is m * 2^(max(e, 1) - 150 + DROP), e its float32 exponent field: m, or 0 when
// absent or not finite; and its shift above the invocation's unit.
fn significand(present: bool, u: u32) -> u32 {
  let mag = u & 0x7fffffffu;
  let m = ((mag & 0x7fffffu) | select(0u, 0x800000u, mag >= 0x800000u)) >> DROP;
  return select(0u, m, present && mag < 0x7f800000u);
}
fn shift_of(u: u32) -> u32 { return max((u >> 23u) & 0xffu, 1u) - E0; }
fn unit_of(e: u32) -> i32 { return i32(e) - 150 + i32(DROP); }
// m * 2^s as a 64-bit integer (m < 2^32; 0 for s >= 64).
fn widen(m: u32, s: u32) -> vec2<u32> {
  let r = s & 31u;
  let lo = m << r;
  let carry = (m >> 1u) >> (31u - r);
  return select(select(vec2<u32>(lo, carry), vec2<u32>(0u, lo), s >= 32u), vec2<u32>(0u, 0u), s >= 64u);
}
fn sum32(present: bool, u: u32) {
  let v = significand(present, u) << shift_of(u);
  acc32 = acc32 + select(v, 0u - v, (u & 0x80000000u) != 0u);
}
fn sum64(present: bool, u: u32) {
  let v = widen(significand(present, u), shift_of(u));
  acc_s = add64(acc_s, select(v, neg64(v), (u & 0x80000000u) != 0u));
}
fn square64(present: bool, u: u32) {
  let m = significand(present, u);
  acc_q = add64(acc_q, widen(m * m, 2u * shift_of(u)));
}
// A slot as float64 and its square for the tree: +0 when absent or not finite.
fn leaf_sum(present: bool, u: u32) -> vec2<u32> {
  return select(vec2<u32>(0u, 0u), f64_of(u), present && (u & 0x7fffffffu) < 0x7f800000u);
}
fn leaf_square(present: bool, u: u32) -> vec2<u32> {
  return select(vec2<u32>(0u, 0u), f64_square_of(u), present && (u & 0x7fffffffu) < 0x7f800000u);
}

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
  let T = P.tile;
  let log_t = countTrailingZeros(T);
  let lw = log_t - LOG_V;
  let W = 1u << lw;
  let k = t & (W - 1u);
  let u = t >> lw;
  let R = 256u >> lw;
  let S = P.parts;
  let i = wg.y / S;
  let g = wg.y % S;
  let j = wg.x;
  let row = i * T + g + S * u;
  let row_byte = P.base_byte + row * P.row_bytes;
  let col0 = P.col_begin + j * T + PW * k;
  let stride = PW * W;
  // Slots s of this invocation are present when stride * r + e < room.
  let room = select(0u, P.col_end - col0, row < P.band_rows && col0 < P.col_end);
  start_counts(t);
  if (t == 0u) { atomicStore(&tree_bits, 0u); }
  workgroupBarrier();
)";
  // The invocation's values u<r>_<e>, loaded together (aligned: whole words, no branch between
  // the loads), and whether each is present.
  const std::string scale = f32 ? "4u" : "2u";
  if (aligned) code += "  let first_word = (row_byte + " + scale + " * col0) >> 2u;\n";
  std::vector<std::string> value, present;
  for (uint32_t r = 0; r < words; ++r) {
    const std::string w = "w" + std::to_string(r);
    code += aligned ? "  let " + w + " = src[first_word + W * " + n(r) + "];\n"
                    : "  let " + w + " = word_at(row_byte + " + scale + " * (col0 + stride * " + n(r) + "));\n";
    for (uint32_t e = 0; e < per_word; ++e) {
      const std::string name = "u" + std::to_string(r) + "_" + std::to_string(e);
      const std::string bits = f32 ? w : dtype == DType::kBF16 ? (e == 0 ? w + " << 16u" : w + " & 0xffff0000u")
                                                                : (e == 0 ? "half_bits(" + w + " & 0xffffu)" : "half_bits(" + w + " >> 16u)");
      code += "  let " + name + " = " + bits + ";\n";
      code += "  let p" + std::to_string(r) + "_" + std::to_string(e) + " = stride * " + n(r) + " + " + n(e) + " < room;\n";
      value.push_back(name);
      present.push_back("p" + std::to_string(r) + "_" + std::to_string(e));
    }
  }
  auto each = [&](const std::string& fn) {
    std::string out;
    for (size_t v = 0; v < value.size(); ++v) out += "    " + fn + "(" + present[v] + ", " + value[v] + ");\n";
    return out;
  };
  code += "  {\n" + each("observe") + "  }\n";
  code += R"(
  let none = min_nonzero == 0xffffffffu;
  E0 = select(max((min_nonzero + 1u) >> 23u, 1u), 255u, none);
  // Every slot present and -0 (so none is +0: its key is above -0's).
  let all_minus_zero = c_zeros == (1u << LOG_V) && k_max == 0x7fffffffu;
  let top = max(k_abs >> 23u, 1u);
  let spread = select(top - E0, 0u, none);
)";
  if (f32) {
    code += "  {\n" + each("sum64") + "  }\n";
  } else {
    code += "  if (SB + spread + LOG_V <= 31u) {\n" + each("sum32") +
            "    acc_s = vec2<u32>(acc32, select(0u, 0xffffffffu, i32(acc32) < 0));\n  } else {\n" + each("sum64") + "  }\n";
    code += "  {\n" + each("square64") + "  }\n";
  }
  if (f32) {
    // The squares' halving tree over r, streamed in bit-reversed order (the pairwise tree over n,
    // r = reverse(n)), one partial sum per level.
    code += "  {\n";
    for (uint32_t level = 0; level <= word_levels; ++level) code += "    var q" + std::to_string(level) + ": vec2<u32>;\n";
    code += "    var y: vec2<u32>;\n";
    for (uint32_t i = 0; i < words; ++i) {
      const uint32_t r = bit_reversed(i, word_levels);
      code += "    y = leaf_square(" + present[r] + ", " + value[r] + ");\n";
      uint32_t level = 0;
      while (((i >> level) & 1u) != 0) {
        code += "    y = f64_add_pos(q" + std::to_string(level) + ", y);\n";
        ++level;
      }
      code += "    q" + std::to_string(level) + " = y;\n";
    }
    code += "    sh_y[t] = q" + std::to_string(word_levels) + ";\n  }\n";
  }
  code += R"(
  flush_counts();
  // The row's exact integers: merged across its invocations, in the smaller unit.
  sh_int[t] = vec4<u32>(acc_s, acc_q);
  sh_meta[t] = E0 | (top << 8u) | select(0u, 0x10000u, all_minus_zero);
  workgroupBarrier();
  for (var p = W / 2u; p >= 1u; p = p / 2u) {
    if (k < p) {
      let a = sh_meta[t];
      let b = sh_meta[t + p];
      let ea = a & 0xffu;
      let eb = b & 0xffu;
      let e = min(ea, eb);
      let x = sh_int[t];
      let y = sh_int[t + p];
      sh_int[t] = vec4<u32>(add64(shl64(x.xy, ea - e), shl64(y.xy, eb - e)),
                            add64(shl64(x.zw, 2u * (ea - e)), shl64(y.zw, 2u * (eb - e))));
      sh_meta[t] = e | max(a & 0xff00u, b & 0xff00u) | (a & b & 0x10000u);
    }
    workgroupBarrier();
  }
  // The row's bounds: flags 1 (sum) and 2 (squares) mark a row whose tree may round.
  if (k == 0u) {
    let m = sh_meta[t];
    let x = sh_int[t];
    let e = m & 0xffu;
    let sp = select(((m >> 8u) & 0xffu) - e, 0u, e == 255u);
    var rs = vec2<u32>(0u, select(0u, 0x80000000u, (m & 0x10000u) != 0u));
    var rq = vec2<u32>(0u, 0u);
    var flags = 0u;
    if (SB + sp + log_t <= 53u) {
      if (x.x != 0u || x.y != 0u) { rs = f64_of_int(x.xy, unit_of(e)); }
    } else {
      flags = 1u;
    }
)";
  if (f32) {
    code += "    flags = flags | 2u;\n";
  } else {
    code += R"(    if (2u * (SB + sp) + log_t <= 53u) {
      if (x.z != 0u || x.w != 0u) { rq = f64_of_int(x.zw, 2 * unit_of(e)); }
    } else {
      flags = flags | 2u;
    }
)";
  }
  code += R"(    sh_rows[u] = vec4<u32>(rs, rq);
    sh_flags[u] = flags;
    if (flags != 0u) { atomicOr(&tree_bits, flags); }
  }
  workgroupBarrier();
  if (t == 0u) { tree_plain = atomicLoad(&tree_bits); }
  if (workgroupUniformLoad(&tree_plain) != 0u) {
    let mine = sh_flags[u];
    // The rows whose bound failed: the invocation's halving trees over r (values read again),
    // streamed as in the squares' tree above, one per value of a word.
    let need_sum = (mine & 1u) != 0u;
    let need_sq = )" + std::string(f32 ? "false" : "(mine & 2u) != 0u") + R"(;
    if (need_sum || need_sq) {
      for (var e = 0u; e < PW; e = e + 1u) {
        var stack_x: array<vec2<u32>, 6>;
        var stack_y: array<vec2<u32>, 6>;
        for (var n = 0u; n < NW; n = n + 1u) {
          let r = reverseBits(n) >> (32u - LOG_NW);
          let present = stride * r + e < room;
          var v = 0u;
          if (present) { v = elem(row_byte, col0 + stride * r + e); }
          var x = leaf_sum(present, v);
          var y = leaf_square(present, v);
          var level = 0u;
          while (((n >> level) & 1u) != 0u) {
            if (need_sum) { x = f64_add(stack_x[level], x); }
            if (need_sq) { y = f64_add_pos(stack_y[level], y); }
            level = level + 1u;
          }
          stack_x[level] = x;
          stack_y[level] = y;
        }
        if (need_sum) { sh_x[e * 256u + t] = stack_x[LOG_NW]; }
        if (need_sq) { sh_y[e * 256u + t] = stack_y[LOG_NW]; }
      }
    }
    // The levels across the row's invocations.
    for (var p = W / 2u; p >= 1u; p = p / 2u) {
      workgroupBarrier();
      if (k < p) {
        for (var e = 0u; e < PW; e = e + 1u) {
          let a = e * 256u + t;
          if ((mine & 1u) != 0u) { sh_x[a] = f64_add(sh_x[a], sh_x[a + p]); }
          if ((mine & 2u) != 0u) { sh_y[a] = f64_add_pos(sh_y[a], sh_y[a + p]); }
        }
      }
    }
    workgroupBarrier();
    if (k == 0u && mine != 0u) {
      var r = sh_rows[u];
)";
  if (f32) {
    code += R"(      if ((mine & 1u) != 0u) { r = vec4<u32>(sh_x[t], r.zw); }
      r = vec4<u32>(r.xy, sh_y[t]);
)";
  } else {
    code += R"(      if ((mine & 1u) != 0u) { r = vec4<u32>(f64_add(sh_x[t], sh_x[256u + t]), r.zw); }
      if ((mine & 2u) != 0u) { r = vec4<u32>(r.xy, f64_add_pos(sh_y[t], sh_y[256u + t])); }
)";
  }
  code += R"(      sh_rows[u] = r;
    }
  }
  workgroupBarrier();
  // The tile's row tree over the workgroup's R rows (one residue g of the rows mod S).
  for (var p = R / 2u; p >= 1u; p = p / 2u) {
    if (t < p) {
      let a = sh_rows[t];
      let b = sh_rows[t + p];
      sh_rows[t] = vec4<u32>(f64_add(a.xy, b.xy), f64_add_pos(a.zw, b.zw));
    }
    workgroupBarrier();
  }
  if (t == 0u) { write_part(((i * S + g) * P.tiles_x + j) * 12u, sh_rows[0].xy, sh_rows[0].zw); }
}
)";
  return code;
}

}  // namespace tensormorph::webgpu
