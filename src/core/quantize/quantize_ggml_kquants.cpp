// ggml's reference encoders for the k-quants (256-element super-blocks), byte for byte. The
// layouts are those of decode_ggml_kquants.cpp. Each type works in two stages: a per-sub-block
// search picks a float scale (and min), the super-block's fp16 scale(s) quantize those to small
// integers, and the values are then re-quantized against the scales the decoder will really see.
// Sub-blocks whose effective scale is zero keep the codes of the first stage, as in ggml.
//
// Bit equality with ggml depends on evaluating every expression in its order (e.g. w*l*l is
// (w*l)*l), in float, without FMA (the project builds with -ffp-contract=off).
#include "core/quantize/quantize_internal.h"

namespace tensormorph::quantize_internal {
namespace {

constexpr int kSuper = 256;

/// ggml's make_qx_quants for the NULL-weight case with rmse_type 1 (weights x^2): a symmetric
/// scale from the signed absmax, refined over 18 nearby trial scales. Codes go to L as l + nmax.
float make_qx_quants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0.0f, amax = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0.0f, suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
    L[i] = static_cast<int8_t>(l + nmax);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  float scale = suml2 != 0.0f ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(static_cast<float>(nmax) + 0.1f * static_cast<float>(is)) / max;
    sumlx = suml2 = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
      const float w = x[i] * x[i];
      sumlx += w * x[i] * static_cast<float>(l);
      suml2 += w * static_cast<float>(l) * static_cast<float>(l);
    }
    if (suml2 > 0.0f && sumlx * sumlx > best * suml2) {
      for (int i = 0; i < n; ++i) {
        L[i] = static_cast<int8_t>(nmax + imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i]))));
      }
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

/// ggml's make_q3_quants with do_rmse: symmetric start, then up to 5 passes of moving single
/// codes while that improves the x^2-weighted fit. Codes go to L as l + nmax.
float make_q3_quants(int n, int nmax, const float* x, int8_t* L) {
  float max = 0.0f, amax = 0.0f;
  for (int i = 0; i < n; ++i) {
    const float ax = std::fabs(x[i]);
    if (ax > amax) {
      amax = ax;
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    return 0.0f;
  }
  const float iscale = static_cast<float>(-nmax) / max;
  float sumlx = 0.0f, suml2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    const int l = imax(-nmax, imin(nmax - 1, nearest_int(iscale * x[i])));
    L[i] = static_cast<int8_t>(l);
    const float w = x[i] * x[i];
    sumlx += w * x[i] * static_cast<float>(l);
    suml2 += w * static_cast<float>(l) * static_cast<float>(l);
  }
  for (int itry = 0; itry < 5; ++itry) {
    int n_changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = x[i] * x[i];
      const float li = static_cast<float>(L[i]);
      float slx = sumlx - w * x[i] * li;
      if (slx > 0.0f) {
        float sl2 = suml2 - w * li * li;
        const int new_l = imax(-nmax, imin(nmax - 1, nearest_int(x[i] * sl2 / slx)));
        if (new_l != L[i]) {
          slx += w * x[i] * static_cast<float>(new_l);
          sl2 += w * static_cast<float>(new_l) * static_cast<float>(new_l);
          if (sl2 > 0.0f && slx * slx * suml2 > sumlx * sumlx * sl2) {
            L[i] = static_cast<int8_t>(new_l);
            sumlx = slx;
            suml2 = sl2;
            ++n_changed;
          }
        }
      }
    }
    if (n_changed == 0) break;
  }
  for (int i = 0; i < n; ++i) L[i] = static_cast<int8_t>(L[i] + nmax);
  return sumlx / suml2;
}

/// ggml's make_qkx2_quants: an affine fit (scale, min <= 0) of n values to codes 0..nmax,
/// trying nstep + 1 scales around nmax / range and keeping the best weighted error (absolute
/// if use_mad, squared otherwise). Returns the scale; *the_min receives -min.
float make_qkx2_quants(int n, int nmax, const float* x, const float* weights, uint8_t* L, float* the_min,
                       uint8_t* Laux, float rmin, float rdelta, int nstep, bool use_mad) {
  float min = x[0], max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    const float w = weights[i];
    sum_w += w;
    sum_x += w * x[i];
  }
  if (min > 0.0f) min = 0.0f;
  if (max == min) {
    for (int i = 0; i < n; ++i) L[i] = 0;
    *the_min = -min;
    return 0.0f;
  }
  const float fnmax = static_cast<float>(nmax);
  float iscale = fnmax / (max - min);
  float scale = 1.0f / iscale;
  float best_mad = 0.0f;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(imax(0, imin(nmax, nearest_int(iscale * (x[i] - min)))));
    float diff = scale * static_cast<float>(L[i]) + min - x[i];
    diff = use_mad ? std::fabs(diff) : diff * diff;
    best_mad += weights[i] * diff;
  }
  if (nstep < 1) {
    *the_min = -min;
    return scale;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * static_cast<float>(is) + fnmax) / (max - min);
    float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = imax(0, imin(nmax, nearest_int(iscale * (x[i] - min))));
      Laux[i] = static_cast<uint8_t>(l);
      const float w = weights[i];
      const float fl = static_cast<float>(l);
      sum_l += w * fl;
      sum_l2 += w * fl * fl;
      sum_xl += w * fl * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0.0f) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0.0f) {
        this_min = 0.0f;
        this_scale = sum_xl / sum_l2;
      }
      float mad = 0.0f;
      for (int i = 0; i < n; ++i) {
        float diff = this_scale * static_cast<float>(Laux[i]) + this_min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        mad += weights[i] * diff;
      }
      if (mad < best_mad) {
        for (int i = 0; i < n; ++i) L[i] = Laux[i];
        best_mad = mad;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *the_min = -min;
  return scale;
}

/// Unpacks the j-th 6-bit scale and min of a Q4_K/Q5_K scales[12] array.
void get_scale_min_k4(int j, const uint8_t* q, uint8_t& d, uint8_t& m) {
  if (j < 4) {
    d = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    d = static_cast<uint8_t>((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
    m = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4));
  }
}

/// Packs 256 two-bit codes the way Q2_K and Q3_K store them: byte 32h + l holds elements
/// 128h + l, +32, +64, +96 in bits 0-1, 2-3, 4-5, 6-7.
void pack_2bit(const uint8_t* L, std::byte* qs) {
  for (int j = 0; j < kSuper; j += 128) {
    for (int l = 0; l < 32; ++l) {
      store_u8(qs + j / 4 + l, L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
    }
  }
}

void encode_q2_k(const float* __restrict x, uint64_t blocks, std::byte* __restrict out) {
  uint8_t L[kSuper], Laux[16];
  float weights[16], mins[kSuper / 16], scales[kSuper / 16];
  uint8_t sc[kSuper / 16];
  constexpr float q4scale = 15.0f;
  for (uint64_t b = 0; b < blocks; ++b, x += kSuper, out += 84) {
    float max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < kSuper / 16; ++j) {
      for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
      scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    uint16_t d_half = 0, dmin_half = 0;
    if (max_scale > 0.0f) {
      const float iscale = q4scale / max_scale;
      for (int j = 0; j < kSuper / 16; ++j) sc[j] = static_cast<uint8_t>(nearest_int(iscale * scales[j]));
      d_half = to_half(max_scale / q4scale);
    } else {
      for (int j = 0; j < kSuper / 16; ++j) sc[j] = 0;
      d_half = to_half(0.0f);
    }
    if (max_min > 0.0f) {
      const float iscale = q4scale / max_min;
      for (int j = 0; j < kSuper / 16; ++j) sc[j] = static_cast<uint8_t>(sc[j] | (nearest_int(iscale * mins[j]) << 4));
      dmin_half = to_half(max_min / q4scale);
    } else {
      dmin_half = to_half(0.0f);
    }
    const float dd = from_half(d_half), dmin = from_half(dmin_half);
    for (int j = 0; j < kSuper / 16; ++j) {
      const float d = dd * static_cast<float>(sc[j] & 0xF);
      if (d == 0.0f) continue;
      const float dm = dmin * static_cast<float>(sc[j] >> 4);
      for (int ii = 0; ii < 16; ++ii) {
        L[16 * j + ii] = static_cast<uint8_t>(imax(0, imin(3, nearest_int((x[16 * j + ii] + dm) / d))));
      }
    }
    for (int j = 0; j < kSuper / 16; ++j) store_u8(out + j, sc[j]);
    pack_2bit(L, out + 16);
    store_u16(out + 80, d_half);
    store_u16(out + 82, dmin_half);
  }
}

void encode_q3_k(const float* __restrict x, uint64_t blocks, std::byte* __restrict out) {
  int8_t L[kSuper];
  float scales[kSuper / 16];
  uint8_t packed[12];
  uint8_t codes[kSuper];
  for (uint64_t b = 0; b < blocks; ++b, x += kSuper, out += 110) {
    float max_scale = 0.0f, amax = 0.0f;
    for (int j = 0; j < kSuper / 16; ++j) {
      scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j);
      const float scale = std::fabs(scales[j]);
      if (scale > amax) {
        amax = scale;
        max_scale = scales[j];
      }
    }
    std::memset(packed, 0, sizeof packed);
    uint16_t d_half;
    if (max_scale != 0.0f) {
      const float iscale = -32.0f / max_scale;
      for (int j = 0; j < kSuper / 16; ++j) {
        // ggml stores nearest_int into an int8_t first: the wrap is part of the result.
        int8_t l = static_cast<int8_t>(nearest_int(iscale * scales[j]));
        l = static_cast<int8_t>(imax(-32, imin(31, l)) + 32);
        if (j < 8) {
          packed[j] = l & 0xF;
        } else {
          packed[j - 8] = static_cast<uint8_t>(packed[j - 8] | ((l & 0xF) << 4));
        }
        l = static_cast<int8_t>(l >> 4);
        packed[j % 4 + 8] = static_cast<uint8_t>(packed[j % 4 + 8] | (l << (2 * (j / 4))));
      }
      d_half = to_half(1.0f / iscale);
    } else {
      d_half = to_half(0.0f);
    }
    const float d_all = from_half(d_half);
    for (int j = 0; j < kSuper / 16; ++j) {
      int8_t sc = static_cast<int8_t>(j < 8 ? packed[j] & 0xF : packed[j - 8] >> 4);
      sc = static_cast<int8_t>((sc | (((packed[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32);
      const float d = d_all * static_cast<float>(sc);
      if (d == 0.0f) continue;
      for (int ii = 0; ii < 16; ++ii) {
        L[16 * j + ii] = static_cast<int8_t>(imax(-4, imin(3, nearest_int(x[16 * j + ii] / d))) + 4);
      }
    }
    // High bit of element j goes to bit j / 32 of hmask[j % 32].
    std::byte* hmask = out;
    std::memset(hmask, 0, 32);
    for (int j = 0; j < kSuper; ++j) {
      uint8_t l = static_cast<uint8_t>(L[j]);
      if (l > 3) {
        hmask[j % 32] |= static_cast<std::byte>(1u << (j / 32));
        l = static_cast<uint8_t>(l - 4);
      }
      codes[j] = l;
    }
    pack_2bit(codes, out + 32);
    std::memcpy(out + 96, packed, 12);
    store_u16(out + 108, d_half);
  }
}

/// The shared first stage of Q4_K and Q5_K: eight 32-element affine fits, their scales and mins
/// quantized to 6 bits against the largest of each, then the values re-quantized to 0..nmax.
/// Writes d, dmin and scales[12] at `out` and the codes to L.
void kquant_affine_stage(const float* x, int nmax, float rmin, float rdelta, int nstep, uint8_t* L, std::byte* out) {
  uint8_t Laux[32];
  float weights[32], mins[kSuper / 32], scales[kSuper / 32];
  uint8_t packed[12] = {};
  float max_scale = 0.0f, max_min = 0.0f;
  for (int j = 0; j < kSuper / 32; ++j) {
    float sum_x2 = 0.0f;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32.0f);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] = make_qkx2_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, rmin, rdelta, nstep, false);
    if (scales[j] > max_scale) max_scale = scales[j];
    if (mins[j] > max_min) max_min = mins[j];
  }
  const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
  for (int j = 0; j < kSuper / 32; ++j) {
    uint8_t ls = static_cast<uint8_t>(nearest_int(inv_scale * scales[j]));
    uint8_t lm = static_cast<uint8_t>(nearest_int(inv_min * mins[j]));
    ls = static_cast<uint8_t>(imin(63, ls));
    lm = static_cast<uint8_t>(imin(63, lm));
    if (j < 4) {
      packed[j] = ls;
      packed[j + 4] = lm;
    } else {
      packed[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      packed[j - 4] = static_cast<uint8_t>(packed[j - 4] | ((ls >> 4) << 6));
      packed[j - 0] = static_cast<uint8_t>(packed[j - 0] | ((lm >> 4) << 6));
    }
  }
  const uint16_t d_half = to_half(max_scale / 63.0f);
  const uint16_t dmin_half = to_half(max_min / 63.0f);
  const float dd = from_half(d_half), dmin = from_half(dmin_half);
  for (int j = 0; j < kSuper / 32; ++j) {
    uint8_t sc, m;
    get_scale_min_k4(j, packed, sc, m);
    const float d = dd * static_cast<float>(sc);
    if (d == 0.0f) continue;
    const float dm = dmin * static_cast<float>(m);
    for (int ii = 0; ii < 32; ++ii) {
      L[32 * j + ii] = static_cast<uint8_t>(imax(0, imin(nmax, nearest_int((x[32 * j + ii] + dm) / d))));
    }
  }
  store_u16(out, d_half);
  store_u16(out + 2, dmin_half);
  std::memcpy(out + 4, packed, 12);
}

void encode_q4_k(const float* __restrict x, uint64_t blocks, std::byte* __restrict out) {
  uint8_t L[kSuper];
  for (uint64_t b = 0; b < blocks; ++b, x += kSuper, out += 144) {
    kquant_affine_stage(x, 15, -1.0f, 0.1f, 20, L, out);
    std::byte* q = out + 16;
    for (int j = 0; j < kSuper; j += 64, q += 32) {
      for (int l = 0; l < 32; ++l) store_u8(q + l, L[j + l] | (L[j + l + 32] << 4));
    }
  }
}

void encode_q5_k(const float* __restrict x, uint64_t blocks, std::byte* __restrict out) {
  uint8_t L[kSuper];
  for (uint64_t b = 0; b < blocks; ++b, x += kSuper, out += 176) {
    kquant_affine_stage(x, 31, -0.5f, 0.1f, 15, L, out);
    uint8_t qh[32] = {};
    std::byte* ql = out + 48;
    uint8_t m1 = 1, m2 = 2;
    for (int n = 0; n < kSuper; n += 64, ql += 32) {
      for (int j = 0; j < 32; ++j) {
        int l1 = L[n + j];
        if (l1 > 15) {
          l1 -= 16;
          qh[j] |= m1;
        }
        int l2 = L[n + j + 32];
        if (l2 > 15) {
          l2 -= 16;
          qh[j] |= m2;
        }
        store_u8(ql + j, static_cast<uint32_t>(l1 | (l2 << 4)));
      }
      m1 = static_cast<uint8_t>(m1 << 2);
      m2 = static_cast<uint8_t>(m2 << 2);
    }
    std::memcpy(out + 16, qh, 32);
  }
}

void encode_q6_k(const float* __restrict x, uint64_t blocks, std::byte* __restrict out) {
  int8_t L[kSuper];
  float scales[kSuper / 16];
  int8_t sc[kSuper / 16];
  for (uint64_t b = 0; b < blocks; ++b, x += kSuper, out += 210) {
    float max_scale = 0.0f, max_abs_scale = 0.0f;
    for (int ib = 0; ib < kSuper / 16; ++ib) {
      const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib);
      scales[ib] = scale;
      const float abs_scale = std::fabs(scale);
      if (abs_scale > max_abs_scale) {
        max_abs_scale = abs_scale;
        max_scale = scale;
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(out, 0, 210);
      continue;
    }
    const float iscale = -128.0f / max_scale;
    const uint16_t d_half = to_half(1.0f / iscale);
    for (int ib = 0; ib < kSuper / 16; ++ib) sc[ib] = static_cast<int8_t>(imin(127, nearest_int(iscale * scales[ib])));
    const float dd = from_half(d_half);
    for (int j = 0; j < kSuper / 16; ++j) {
      const float d = dd * static_cast<float>(sc[j]);
      if (d == 0.0f) continue;
      for (int ii = 0; ii < 16; ++ii) {
        L[16 * j + ii] = static_cast<int8_t>(imax(-32, imin(31, nearest_int(x[16 * j + ii] / d))) + 32);
      }
    }
    std::byte* ql = out;
    std::byte* qh = out + 128;
    for (int j = 0; j < kSuper; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t q1 = L[j + l + 0] & 0xF;
        const uint8_t q2 = L[j + l + 32] & 0xF;
        const uint8_t q3 = L[j + l + 64] & 0xF;
        const uint8_t q4 = L[j + l + 96] & 0xF;
        store_u8(ql + l, q1 | (q3 << 4));
        store_u8(ql + l + 32, q2 | (q4 << 4));
        store_u8(qh + l, (L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                             ((L[j + l + 96] >> 4) << 6));
      }
    }
    std::memcpy(out + 192, sc, 16);
    store_u16(out + 208, d_half);
  }
}

}  // namespace

std::optional<BlockEncoder> find_ggml_kquant_encoder(DType dtype) {
  switch (dtype) {
    case DType::kQ2_K: return BlockEncoder{256, 84, encode_q2_k};
    case DType::kQ3_K: return BlockEncoder{256, 110, encode_q3_k};
    case DType::kQ4_K: return BlockEncoder{256, 144, encode_q4_k};
    case DType::kQ5_K: return BlockEncoder{256, 176, encode_q5_k};
    case DType::kQ6_K: return BlockEncoder{256, 210, encode_q6_k};
    default: return std::nullopt;
  }
}

}  // namespace tensormorph::quantize_internal
