// Scalar reference implementations the plugin is compared against, written straight from
// docs/COMPUTE.md (tile statistics, canonical order), ggml's Q8_0 definition and tm.render_tile@1's
// definition, deliberately in the plainest form: explicit slot arrays, the literal halving loop,
// one block per pixel. Render colours are the kit's tm_kit_pixel_colour, the CPU reference's own.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "plugin_host.h"
#include "tensormorph/c/plugin.h"
#include "tensormorph/c/plugin_kit.h"

namespace tm_opencl_test {

/// IEEE half -> float by arithmetic on the fields (NaN payloads kept bit for bit).
inline float f16_to_f32(uint16_t half) {
  const bool negative = (half & 0x8000u) != 0;
  const int exponent = (half >> 10) & 0x1f;
  const int mantissa = half & 0x3ff;
  if (exponent == 0x1f) {
    const uint32_t bits = (negative ? 0x80000000u : 0u) | 0x7f800000u | (static_cast<uint32_t>(mantissa) << 13);
    return std::bit_cast<float>(bits);
  }
  const float magnitude = exponent == 0 ? std::ldexp(static_cast<float>(mantissa), -24)
                                        : std::ldexp(static_cast<float>(1024 + mantissa), exponent - 25);
  return negative ? -magnitude : magnitude;
}

/// Every half of `halves` as a float.
inline std::vector<float> widen_f16(const std::vector<uint16_t>& halves) {
  std::vector<float> values;
  values.reserve(halves.size());
  for (uint16_t half : halves) values.push_back(f16_to_f32(half));
  return values;
}

/// docs/COMPUTE.md's halving_sum, literally.
inline double halving_sum(std::vector<double> a) {
  size_t p = a.size();
  while (p > 1) {
    p /= 2;
    for (size_t i = 0; i < p; ++i) a[i] = a[i] + a[i + p];
  }
  return a[0];
}

/// The order min/max use between equal values: -0 counts as below +0 (so min prefers -0, max +0).
inline bool ordered_below(float a, float b) { return a < b || (a == b && std::signbit(a) && !std::signbit(b)); }

/// Tile statistics of the view [r0, r1) x [c0, c1) of a rows x cols row-major matrix of decoded
/// float32 values, per docs/COMPUTE.md.
inline std::vector<TM_TileStats> reference_tile_stats(const std::vector<float>& values, uint64_t cols, uint64_t r0,
                                                      uint64_t r1, uint64_t c0, uint64_t c1, uint64_t tile) {
  const uint64_t tiles_down = (r1 - r0 + tile - 1) / tile;
  const uint64_t tiles_across = (c1 - c0 + tile - 1) / tile;
  std::vector<TM_TileStats> result;
  for (uint64_t ti = 0; ti < tiles_down; ++ti) {
    for (uint64_t tj = 0; tj < tiles_across; ++tj) {
      TM_TileStats s{};
      s.min = std::numeric_limits<float>::infinity();
      s.max = -std::numeric_limits<float>::infinity();
      s.absmax = 0.0f;
      std::vector<double> row_sums(tile, 0.0);
      std::vector<double> row_squares(tile, 0.0);
      for (uint64_t k = 0; k < tile; ++k) {
        const uint64_t r = r0 + ti * tile + k;
        if (r >= r1) continue;  // row outside the tile: its slot stays +0.0
        std::vector<double> slots(tile, 0.0);
        std::vector<double> squares(tile, 0.0);
        for (uint64_t m = 0; m < tile; ++m) {
          const uint64_t c = c0 + tj * tile + m;
          if (c >= c1) continue;
          const float v = values[r * cols + c];
          ++s.count;
          if (std::isnan(v)) {
            ++s.nan;
          } else if (std::isinf(v)) {
            ++(v > 0 ? s.pos_inf : s.neg_inf);
          } else {
            if (v == 0.0f) ++s.zeros;
            slots[m] = static_cast<double>(v);
            squares[m] = static_cast<double>(v) * static_cast<double>(v);
            if (ordered_below(v, s.min)) s.min = v;
            if (ordered_below(s.max, v)) s.max = v;
            if (std::fabs(v) > s.absmax) s.absmax = std::fabs(v);
          }
        }
        row_sums[k] = halving_sum(slots);
        row_squares[k] = halving_sum(squares);
      }
      s.sum = halving_sum(row_sums);
      s.sum_sq = halving_sum(row_squares);
      result.push_back(s);
    }
  }
  return result;
}

/// ggml's Q8_0 to_float: y[j] = qs[j] * d with d the block's fp16 scale.
inline std::vector<float> reference_decode_q8_0(const std::vector<uint8_t>& blocks) {
  std::vector<float> out;
  for (size_t b = 0; b + 34 <= blocks.size(); b += 34) {
    uint16_t scale_bits = 0;
    std::memcpy(&scale_bits, &blocks[b], 2);
    const float d = f16_to_f32(scale_bits);
    for (size_t j = 0; j < 32; ++j) out.push_back(static_cast<float>(static_cast<int8_t>(blocks[b + 2 + j])) * d);
  }
  return out;
}

/// Bytes of a 256 x 256 RGBA tile.
constexpr size_t kRenderTileBytes = size_t{TM_RENDER_TILE_PIXELS} * TM_RENDER_TILE_PIXELS * 4;

/// tm.render_tile@1 from the decoded values of a rows x cols matrix with magnify 1: pixel (y, x)
/// shows the statistics, as tm.tile_stats@1 with T = cell, of the block of rows
/// [row_begin + y * cell, +cell) and columns [col_begin + x * cell, +cell) clipped to the matrix;
/// a block with no element is transparent.
inline std::vector<uint8_t> reference_render_values(const std::vector<float>& values, uint64_t rows, uint64_t cols,
                                                    const RenderParams& p) {
  std::vector<uint8_t> rgba(kRenderTileBytes, 0);
  for (uint64_t y = 0; y < TM_RENDER_TILE_PIXELS; ++y) {
    const uint64_t r0 = p.row_begin + y * p.cell;
    if (r0 >= rows) continue;
    for (uint64_t x = 0; x < TM_RENDER_TILE_PIXELS; ++x) {
      const uint64_t c0 = p.col_begin + x * p.cell;
      if (c0 >= cols) continue;
      const TM_TileStats block =
          reference_tile_stats(values, cols, r0, std::min(rows, r0 + p.cell), c0, std::min(cols, c0 + p.cell), p.cell)[0];
      tm_kit_pixel_colour(&block, p.stat, p.colormap, p.lo, p.hi, &rgba[(y * TM_RENDER_TILE_PIXELS + x) * 4]);
    }
  }
  return rgba;
}

/// tm.render_tile@1 from a row-major rows x cols grid of statistics: pixel (y, x) shows cell
/// (row_begin + y / magnify, col_begin + x / magnify); pixels outside the grid are transparent.
inline std::vector<uint8_t> reference_render_stats(const std::vector<TM_TileStats>& grid, uint64_t rows, uint64_t cols,
                                                   const RenderParams& p) {
  std::vector<uint8_t> rgba(kRenderTileBytes, 0);
  for (uint64_t y = 0; y < TM_RENDER_TILE_PIXELS; ++y) {
    const uint64_t gy = p.row_begin + y / p.magnify;
    for (uint64_t x = 0; x < TM_RENDER_TILE_PIXELS; ++x) {
      const uint64_t gx = p.col_begin + x / p.magnify;
      if (gy >= rows || gx >= cols) continue;
      tm_kit_pixel_colour(&grid[gy * cols + gx], p.stat, p.colormap, p.lo, p.hi,
                          &rgba[(y * TM_RENDER_TILE_PIXELS + x) * 4]);
    }
  }
  return rgba;
}

}  // namespace tm_opencl_test
