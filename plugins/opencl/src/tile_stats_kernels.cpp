#include "kernel_sources.h"

namespace tm_opencl {

// Tile statistics, following docs/COMPUTE.md's canonical order bit for bit.
//
// The halving sum of P slots, `while P > 1: P /= 2; a[i] += a[i + P]`, is a balanced binary tree
// whose leaves, read left to right, are the slots in bit-reversed index order (after the step
// that halves to width W, slot i holds the tree over the slots congruent to i mod W). Feeding the
// leaves in that order to a binary counter, which adds two partial sums of equal height as soon
// as both exist, builds exactly that tree in log2(P) + 1 registers. So:
//  - *_seq kernels: one work item sums all T slots of a row (or all T row sums of a tile) that way.
//  - *_group kernels: lane i of L lanes sums the slots i, i + L, i + 2L, ... that way (this is the
//    halving tree down to width L), then the lanes run the last log2(L) halving steps in local
//    memory, exactly as the definition does.
// Elements are classified and widened with integer arithmetic only, and min/max are compared on
// integer order keys, so only the float64 additions and squares touch the FPU.
//
// Partial results (one per row of a tile, then one per tile) are stored as structures of arrays:
// sum[], sum_sq[], and 7 uint words of counts and extremes (see TM_STATS_WORDS).
const char* const kTileStatsKernelSource = R"CLC(
#pragma OPENCL EXTENSION cl_khr_fp64 : enable

#define TM_MAX_LEVELS 13  /* log2(4096) + 1 */
#define TM_STATS_WORDS 7  /* nan, pos_inf, neg_inf, zeros, min key, max key, absmax bits */

#if TM_INPUT_F16
typedef ushort tm_elem;
uint element_bits(__global const tm_elem* row, uint column) { return half_to_float_bits((uint)row[column]); }
#else
typedef uint tm_elem;
uint element_bits(__global const tm_elem* row, uint column) { return row[column]; }
#endif

typedef struct {
  uint nan;
  uint pos_inf;
  uint neg_inf;
  uint zeros;
  int min_key;
  int max_key;
  uint absmax_bits;
} Stats;

void stats_init(Stats* s) {
  s->nan = 0u;
  s->pos_inf = 0u;
  s->neg_inf = 0u;
  s->zeros = 0u;
  s->min_key = float_order_key(0x7f800000u); /* +Inf: the minimum of no finite element */
  s->max_key = float_order_key(0xff800000u); /* -Inf */
  s->absmax_bits = 0u;
}

#define TM_STATS_IO(SPACE, SUFFIX)                                     \
  void stats_store_##SUFFIX(SPACE uint* w, const Stats* s) {           \
    w[0] = s->nan;                                                     \
    w[1] = s->pos_inf;                                                 \
    w[2] = s->neg_inf;                                                 \
    w[3] = s->zeros;                                                   \
    w[4] = (uint)s->min_key;                                           \
    w[5] = (uint)s->max_key;                                           \
    w[6] = s->absmax_bits;                                             \
  }                                                                    \
  void stats_merge_##SUFFIX(Stats* s, SPACE const uint* w) {           \
    s->nan += w[0];                                                    \
    s->pos_inf += w[1];                                                \
    s->neg_inf += w[2];                                                \
    s->zeros += w[3];                                                  \
    s->min_key = min(s->min_key, (int)w[4]);                           \
    s->max_key = max(s->max_key, (int)w[5]);                           \
    s->absmax_bits = max(s->absmax_bits, w[6]);                        \
  }
TM_STATS_IO(__global, global)
TM_STATS_IO(__local, local)

/* Exact float -> double from the bits, without float arithmetic (immune to denormal flushing). */
double float_bits_to_double(uint bits) {
  const ulong sign = (ulong)(bits >> 31) << 63;
  const uint exponent = (bits >> 23) & 0xffu;
  const uint mantissa = bits & 0x7fffffu;
  if (exponent == 0u) return as_double(as_ulong((double)mantissa * 0x1p-149) | sign);
  return as_double(sign | ((ulong)(exponent + 896u) << 52) | ((ulong)mantissa << 29));
}

/* Counts one element into s; returns its sum slot and stores its square slot (0 unless finite). */
double take_element(uint bits, Stats* s, double* square) {
  const uint magnitude = bits & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) {
    if (magnitude > 0x7f800000u) s->nan += 1u;
    else if ((bits >> 31) != 0u) s->neg_inf += 1u;
    else s->pos_inf += 1u;
    *square = 0.0;
    return 0.0;
  }
  if (magnitude == 0u) s->zeros += 1u;
  const int key = float_order_key(bits);
  s->min_key = min(s->min_key, key);
  s->max_key = max(s->max_key, key);
  s->absmax_bits = max(s->absmax_bits, magnitude);
  const double value = float_bits_to_double(bits);
  *square = value * value; /* exact: at most 24 significant bits squared */
  return value;
}

/* The next value of a counter that counts in bit-reversed order over log2(leaves) bits. */
uint bit_reversed_next(uint slot, uint leaves) {
  uint bit = leaves >> 1;
  while (bit != 0u && (slot & bit) != 0u) {
    slot ^= bit;
    bit >>= 1;
  }
  return slot | bit;
}

/* Halving sum over the row slots first, first + stride, ... (leaves of them); slots at or past
   `valid` are +0.0. Also counts the valid elements into s. */
void row_partial(__global const tm_elem* row, uint valid, uint first, uint stride, uint leaves,
                 Stats* s, double* sum, double* sum_sq) {
  double sums[TM_MAX_LEVELS];
  double squares[TM_MAX_LEVELS];
  uint slot = 0u;
  for (uint n = 0u; n < leaves; ++n) {
    const uint column = first + slot * stride;
    double value = 0.0;
    double square = 0.0;
    if (column < valid) value = take_element(element_bits(row, column), s, &square);
    uint level = 0u;
    for (uint carry = n; (carry & 1u) != 0u; carry >>= 1) {
      value = sums[level] + value;
      square = squares[level] + square;
      ++level;
    }
    sums[level] = value;
    squares[level] = square;
    slot = bit_reversed_next(slot, leaves);
  }
  const uint top = 31u - clz(leaves);
  *sum = sums[top];
  *sum_sq = squares[top];
}

/* The same over a tile's row sums (rows at or past `valid` are +0.0); merges the rows' stats. */
void tile_partial(__global const double* row_sum, __global const double* row_sq,
                  __global const uint* row_stats, uint valid, uint first, uint stride, uint leaves,
                  Stats* s, double* sum, double* sum_sq) {
  double sums[TM_MAX_LEVELS];
  double squares[TM_MAX_LEVELS];
  uint slot = 0u;
  for (uint n = 0u; n < leaves; ++n) {
    const uint row = first + slot * stride;
    double value = 0.0;
    double square = 0.0;
    if (row < valid) {
      value = row_sum[row];
      square = row_sq[row];
      stats_merge_global(s, row_stats + (ulong)row * TM_STATS_WORDS);
    }
    uint level = 0u;
    for (uint carry = n; (carry & 1u) != 0u; carry >>= 1) {
      value = sums[level] + value;
      square = squares[level] + square;
      ++level;
    }
    sums[level] = value;
    squares[level] = square;
    slot = bit_reversed_next(slot, leaves);
  }
  const uint top = 31u - clz(leaves);
  *sum = sums[top];
  *sum_sq = squares[top];
}

/* The last log2(lanes) halving steps across the work-group; lane 0 ends with the totals. */
void group_halving(__local double* sums, __local double* squares, __local uint* stats, Stats* s,
                   double* sum, double* sum_sq) {
  const uint lanes = (uint)get_local_size(0);
  const uint lane = (uint)get_local_id(0);
  sums[lane] = *sum;
  squares[lane] = *sum_sq;
  stats_store_local(stats + lane * TM_STATS_WORDS, s);
  for (uint width = lanes >> 1; width != 0u; width >>= 1) { /* ("half" is a type in OpenCL C) */
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lane < width) {
      sums[lane] = sums[lane] + sums[lane + width];
      squares[lane] = squares[lane] + squares[lane + width];
      stats_merge_local(s, stats + (lane + width) * TM_STATS_WORDS);
      stats_store_local(stats + lane * TM_STATS_WORDS, s);
    }
  }
  if (lane == 0u) { /* lane 0 wrote the last step itself: no barrier needed */
    *sum = sums[0];
    *sum_sq = squares[0];
  }
}

/* One work item per (tile column, region row); entry = across * region_rows + row. */
__kernel void row_stats_seq(__global const tm_elem* src, ulong src_base, ulong row_pitch,
                            uint region_rows, uint region_cols, uint tile, uint tiles_across,
                            __global double* row_sum, __global double* row_sq, __global uint* row_stats) {
  const ulong entry = get_global_id(0);
  if (entry >= (ulong)region_rows * tiles_across) return;
  const uint across = (uint)(entry / region_rows);
  const uint row = (uint)(entry % region_rows);
  const uint col0 = across * tile;
  Stats s;
  stats_init(&s);
  double sum;
  double sum_sq;
  row_partial(src + src_base + (ulong)row * row_pitch + col0, min(tile, region_cols - col0), 0u, 1u, tile,
              &s, &sum, &sum_sq);
  row_sum[entry] = sum;
  row_sq[entry] = sum_sq;
  stats_store_global(row_stats + entry * TM_STATS_WORDS, &s);
}

/* One work-group per (tile column, region row). */
__kernel void row_stats_group(__global const tm_elem* src, ulong src_base, ulong row_pitch,
                              uint region_rows, uint region_cols, uint tile, uint tiles_across,
                              __global double* row_sum, __global double* row_sq, __global uint* row_stats,
                              __local double* local_sums, __local double* local_squares,
                              __local uint* local_stats) {
  const ulong entry = get_group_id(0);
  const uint lanes = (uint)get_local_size(0);
  const uint across = (uint)(entry / region_rows);
  const uint row = (uint)(entry % region_rows);
  const uint col0 = across * tile;
  Stats s;
  stats_init(&s);
  double sum;
  double sum_sq;
  row_partial(src + src_base + (ulong)row * row_pitch + col0, min(tile, region_cols - col0),
              (uint)get_local_id(0), lanes, tile / lanes, &s, &sum, &sum_sq);
  group_halving(local_sums, local_squares, local_stats, &s, &sum, &sum_sq);
  if (get_local_id(0) == 0) {
    row_sum[entry] = sum;
    row_sq[entry] = sum_sq;
    stats_store_global(row_stats + entry * TM_STATS_WORDS, &s);
  }
}

/* One work item per tile of the region; tile index = down * tiles_across + across. */
__kernel void tile_stats_seq(__global const double* row_sum, __global const double* row_sq,
                             __global const uint* row_stats, uint region_rows, uint tile, uint tiles_down,
                             uint tiles_across, __global double* tile_sum, __global double* tile_sq,
                             __global uint* tile_stats) {
  const ulong index = get_global_id(0);
  if (index >= (ulong)tiles_down * tiles_across) return;
  const uint down = (uint)(index / tiles_across);
  const uint across = (uint)(index % tiles_across);
  const uint row0 = down * tile;
  const ulong first_entry = (ulong)across * region_rows + row0;
  Stats s;
  stats_init(&s);
  double sum;
  double sum_sq;
  tile_partial(row_sum + first_entry, row_sq + first_entry, row_stats + first_entry * TM_STATS_WORDS,
               min(tile, region_rows - row0), 0u, 1u, tile, &s, &sum, &sum_sq);
  tile_sum[index] = sum;
  tile_sq[index] = sum_sq;
  stats_store_global(tile_stats + index * TM_STATS_WORDS, &s);
}

/* One work-group per tile of the region. */
__kernel void tile_stats_group(__global const double* row_sum, __global const double* row_sq,
                               __global const uint* row_stats, uint region_rows, uint tile, uint tiles_down,
                               uint tiles_across, __global double* tile_sum, __global double* tile_sq,
                               __global uint* tile_stats, __local double* local_sums,
                               __local double* local_squares, __local uint* local_stats) {
  const ulong index = get_group_id(0);
  const uint lanes = (uint)get_local_size(0);
  const uint down = (uint)(index / tiles_across);
  const uint across = (uint)(index % tiles_across);
  const uint row0 = down * tile;
  const ulong first_entry = (ulong)across * region_rows + row0;
  Stats s;
  stats_init(&s);
  double sum;
  double sum_sq;
  tile_partial(row_sum + first_entry, row_sq + first_entry, row_stats + first_entry * TM_STATS_WORDS,
               min(tile, region_rows - row0), (uint)get_local_id(0), lanes, tile / lanes, &s, &sum, &sum_sq);
  group_halving(local_sums, local_squares, local_stats, &s, &sum, &sum_sq);
  if (get_local_id(0) == 0) {
    tile_sum[index] = sum;
    tile_sq[index] = sum_sq;
    stats_store_global(tile_stats + index * TM_STATS_WORDS, &s);
  }
}
)CLC";

}  // namespace tm_opencl
