#include "compute/ops/diff_stats.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "compute/ops/channel_stats.h"
#include "tensormorph/decode.h"

namespace tensormorph::ops {
namespace {

Status check_sides(const char* op, const DiffSide& a, const DiffSide& b) {
  TM_RETURN_IF_ERROR(check_tensor_bytes(op, a.tensor));
  TM_RETURN_IF_ERROR(check_tensor_bytes(op, b.tensor));
  if (a.tensor.elems != b.tensor.elems) {
    return Status::InvalidArgument(std::string(op) + ": in[0] (A) holds " + std::to_string(a.tensor.elems) +
                                   " elements but in[1] (B) holds " + std::to_string(b.tensor.elems) +
                                   ": both inputs need the same element count");
  }
  for (const DiffSide* s : {&a, &b}) {
    if (!dtype_decodable(s->tensor.dtype)) {
      return Status::Unsupported(std::string(op) + ": " + std::string(dtype_not_decodable_reason(s->tensor.dtype)));
    }
  }
  return Status::Ok();
}

/// Elements [first, first + n) of a side, decoded, offsets applied.
Status decode_side(const DiffSide& side, uint64_t first, uint64_t n, std::vector<float>& out) {
  const DTypeInfo& info = dtype_info(side.tensor.dtype);
  out.resize(n);
  if (n == 0) return Status::Ok();
  const auto bytes = side.tensor.bytes.subspan(first / info.block_elems * info.block_bytes, n / info.block_elems * info.block_bytes);
  TM_RETURN_IF_ERROR(decode_to_f32(side.tensor.dtype, bytes, n, out.data()));
  if (side.offset.active) {
    for (float& v : out) v = v + side.offset.value;
  }
  return Status::Ok();
}

}  // namespace

TM_DiffStats empty_diff_stats() {
  TM_DiffStats s{};
  s.max_abs_index = ~uint64_t{0};
  return s;
}

Status diff_stats_reference(const DiffSide& a, const DiffSide& b, uint64_t element_offset, std::span<TM_DiffStats> out) {
  TM_RETURN_IF_ERROR(check_sides(TM_OP_DIFF_STATS, a, b));
  const uint64_t n = a.tensor.elems;
  const uint64_t chunks = (n + kDiffChunk - 1) / kDiffChunk;
  if (out.size() != chunks) {
    return Status::InvalidArgument(std::string(TM_OP_DIFF_STATS) + ": " + std::to_string(n) + " elements make " +
                                   std::to_string(chunks) + " chunk records, the output holds " + std::to_string(out.size()));
  }
  std::vector<float> va, vb;
  for (uint64_t c = 0; c < chunks; ++c) {
    const uint64_t first = c * kDiffChunk;
    const uint64_t m = std::min(kDiffChunk, n - first);
    TM_RETURN_IF_ERROR(decode_side(a, first, m, va));
    TM_RETURN_IF_ERROR(decode_side(b, first, m, vb));
    TM_DiffStats s = empty_diff_stats();
    s.pairs = m;
    // Lane l takes elements 256 s + l of the chunk, s ascending, from +0.0.
    std::array<std::array<double, kDiffLanes>, 5> lanes{};
    for (uint64_t i = 0; i < m; ++i) {
      const float x = va[i], y = vb[i];
      const uint32_t xb = std::bit_cast<uint32_t>(x), yb = std::bit_cast<uint32_t>(y);
      const uint32_t cx = diff_class(xb), cy = diff_class(yb);
      if (xb != yb) ++s.bits_differing;
      if (cx != cy) ++s.class_mismatch;
      if (cx == 1) ++s.nan_a;
      if (cx >= 2) ++s.inf_a;
      if (cy == 1) ++s.nan_b;
      if (cy >= 2) ++s.inf_b;
      if (cx != 0 || cy != 0) {
        if (cx != cy) ++s.differing;
        continue;
      }
      ++s.finite_pairs;
      if (x != y) ++s.differing;
      const double da = x, db = y;
      const double d = da - db;
      const uint64_t l = i % kDiffLanes;
      lanes[0][l] = lanes[0][l] + d;
      lanes[1][l] = lanes[1][l] + d * d;
      lanes[2][l] = lanes[2][l] + da * da;
      lanes[3][l] = lanes[3][l] + db * db;
      lanes[4][l] = lanes[4][l] + da * db;
      const double ad = std::fabs(d);
      if (s.max_abs_index == ~uint64_t{0} || ad > s.max_abs_diff) {
        s.max_abs_diff = ad;
        s.max_abs_index = element_offset + first + i;
        s.a_at_max = x;
        s.b_at_max = y;
      }
    }
    s.sum_diff = halving_sum(lanes[0]);
    s.sum_sq_diff = halving_sum(lanes[1]);
    s.sum_sq_a = halving_sum(lanes[2]);
    s.sum_sq_b = halving_sum(lanes[3]);
    s.sum_ab = halving_sum(lanes[4]);
    out[c] = s;
  }
  return Status::Ok();
}

Status subtract_reference(const DiffSide& a, const DiffSide& b, std::span<float> out) {
  TM_RETURN_IF_ERROR(check_sides(TM_OP_SUBTRACT, a, b));
  const uint64_t n = a.tensor.elems;
  if (out.size() != n) {
    return Status::InvalidArgument(std::string(TM_OP_SUBTRACT) + ": " + std::to_string(n) +
                                   " elements need an output of as many floats, it holds " + std::to_string(out.size()));
  }
  std::vector<float> va, vb;
  for (uint64_t first = 0; first < n; first += kDiffChunk) {
    const uint64_t m = std::min(kDiffChunk, n - first);
    TM_RETURN_IF_ERROR(decode_side(a, first, m, va));
    TM_RETURN_IF_ERROR(decode_side(b, first, m, vb));
    for (uint64_t i = 0; i < m; ++i) {
      const float d = va[i] - vb[i];
      out[first + i] = std::isnan(d) ? std::bit_cast<float>(kSubtractNanBits) : d;
    }
  }
  return Status::Ok();
}

TM_DiffStats merge_diff_stats(std::span<const TM_DiffStats> chunks) {
  TM_DiffStats s = empty_diff_stats();
  if (chunks.empty()) return s;
  const size_t slots = std::bit_ceil(chunks.size());
  std::array<std::vector<double>, 5> sums;
  for (auto& v : sums) v.assign(slots, 0.0);
  for (size_t i = 0; i < chunks.size(); ++i) {
    const TM_DiffStats& c = chunks[i];
    s.pairs += c.pairs;
    s.finite_pairs += c.finite_pairs;
    s.differing += c.differing;
    s.bits_differing += c.bits_differing;
    s.class_mismatch += c.class_mismatch;
    s.nan_a += c.nan_a;
    s.nan_b += c.nan_b;
    s.inf_a += c.inf_a;
    s.inf_b += c.inf_b;
    sums[0][i] = c.sum_diff;
    sums[1][i] = c.sum_sq_diff;
    sums[2][i] = c.sum_sq_a;
    sums[3][i] = c.sum_sq_b;
    sums[4][i] = c.sum_ab;
    if (c.max_abs_index == ~uint64_t{0}) continue;
    if (s.max_abs_index == ~uint64_t{0} || c.max_abs_diff > s.max_abs_diff ||
        (c.max_abs_diff == s.max_abs_diff && c.max_abs_index < s.max_abs_index)) {
      s.max_abs_diff = c.max_abs_diff;
      s.max_abs_index = c.max_abs_index;
      s.a_at_max = c.a_at_max;
      s.b_at_max = c.b_at_max;
    }
  }
  s.sum_diff = pairwise_sum(sums[0]);
  s.sum_sq_diff = pairwise_sum(sums[1]);
  s.sum_sq_a = pairwise_sum(sums[2]);
  s.sum_sq_b = pairwise_sum(sums[3]);
  s.sum_ab = pairwise_sum(sums[4]);
  return s;
}

DiffMetrics diff_metrics(const TM_DiffStats& s) {
  DiffMetrics m;
  m.pairs = s.pairs;
  m.finite_pairs = s.finite_pairs;
  m.differing = s.differing;
  m.bits_differing = s.bits_differing;
  m.class_mismatch = s.class_mismatch;
  m.max_abs_diff = s.max_abs_diff;
  m.max_abs_index = s.max_abs_index;
  m.a_at_max = s.a_at_max;
  m.b_at_max = s.b_at_max;
  const double n = static_cast<double>(s.finite_pairs);
  // IEEE division throughout: 0 / 0 is NaN (nothing to measure), x / 0 is +Inf.
  m.mean_diff = s.sum_diff / n;
  m.rmse = std::sqrt(s.sum_sq_diff / n);
  m.nmse = s.sum_sq_diff / s.sum_sq_a;
  m.rel_frobenius = std::sqrt(m.nmse);
  m.cosine = s.sum_ab / std::sqrt(s.sum_sq_a * s.sum_sq_b);
  m.snr_db = s.sum_sq_diff == 0 ? std::numeric_limits<double>::infinity() : 10.0 * std::log10(s.sum_sq_a / s.sum_sq_diff);
  m.identical = s.bits_differing == 0;
  return m;
}

}  // namespace tensormorph::ops
