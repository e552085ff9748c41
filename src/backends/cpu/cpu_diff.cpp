// tm.diff_stats@1 and tm.subtract@1 on the CPU. Threads take whole chunks of 65536 pairs; F32 and
// BF16 are read where they lie (without an offset), every other side is decoded into a per-thread
// buffer first (and offset there). A chunk is walked in rows of 256 pairs: pair l of a row goes to
// lane l, which is the operation's canonical order, so the loop over a row updates 256-wide lane
// arrays element by element and vectorizes; pairs that are not both finite add +0.0 through a bit
// mask (a lane sum starts at +0.0 and is never -0.0, so adding +0.0 is the same as skipping).
// Counts are plain integer reductions. The lanes then combine by the halving tree.
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/cpu_dispatch.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_words.h"
#include "tensormorph/decode.h"

namespace tensormorph::cpu {
namespace {

constexpr uint64_t kLanes = ops::kDiffLanes;
constexpr uint64_t kChunk = ops::kDiffChunk;
constexpr uint64_t kMinusOneBits = 0xbff0000000000000ull;  // -1.0: below every |d|

/// One chunk's lane sums and per-lane maxima (row index s of the lane's largest |d|).
struct alignas(64) Lanes {
  double sum_diff[kLanes], sum_sq_diff[kLanes], sum_sq_a[kLanes], sum_sq_b[kLanes], sum_ab[kLanes];
  double max[kLanes];
  uint64_t max_row[kLanes];
};

struct Counts {
  uint64_t finite = 0, differing = 0, bits = 0, classes = 0, nan_a = 0, nan_b = 0, inf_a = 0, inf_b = 0;
};

inline double masked(double v, uint64_t mask) { return std::bit_cast<double>(std::bit_cast<uint64_t>(v) & mask); }

/// Row `s` of a chunk: `w` pairs (256 but in the last row) into lanes 0..w-1.
template <typename RawA, typename RawB>
[[gnu::always_inline]] inline void row_body(const std::byte* __restrict pa, const std::byte* __restrict pb, uint64_t w,
                                            uint64_t s, Lanes& __restrict lanes, Counts& counts) {
  uint64_t finite = 0, differing = 0, bits = 0, classes = 0, nan_a = 0, nan_b = 0, inf_a = 0, inf_b = 0;
  for (uint64_t l = 0; l < w; ++l) {
    const uint32_t xb = float_bits<RawA>(pa, l), yb = float_bits<RawB>(pb, l);
    const float x = std::bit_cast<float>(xb), y = std::bit_cast<float>(yb);
    const uint32_t mx = xb & 0x7fffffffu, my = yb & 0x7fffffffu;
    const uint32_t fx = mx < 0x7f800000u, fy = my < 0x7f800000u;
    const uint32_t nx = mx > 0x7f800000u, ny = my > 0x7f800000u;
    const uint32_t ix = mx == 0x7f800000u, iy = my == 0x7f800000u;
    const uint32_t cx = nx | (ix << 1) | (ix & (xb >> 31)), cy = ny | (iy << 1) | (iy & (yb >> 31));
    const uint32_t both = fx & fy;
    const uint32_t class_differs = cx != cy;
    finite += both;
    differing += (both & static_cast<uint32_t>(x != y)) | class_differs;
    bits += xb != yb;
    classes += class_differs;
    nan_a += nx;
    nan_b += ny;
    inf_a += ix;
    inf_b += iy;
    const uint64_t mask = uint64_t{0} - both;
    const double da = x, db = y;
    const double d = da - db;
    lanes.sum_diff[l] = lanes.sum_diff[l] + masked(d, mask);
    lanes.sum_sq_diff[l] = lanes.sum_sq_diff[l] + masked(d * d, mask);
    lanes.sum_sq_a[l] = lanes.sum_sq_a[l] + masked(da * da, mask);
    lanes.sum_sq_b[l] = lanes.sum_sq_b[l] + masked(db * db, mask);
    lanes.sum_ab[l] = lanes.sum_ab[l] + masked(da * db, mask);
    // |d| of a finite pair, -1.0 for the others; a lane keeps its first strictly larger one.
    const double ad = std::bit_cast<double>((std::bit_cast<uint64_t>(std::fabs(d)) & mask) | (kMinusOneBits & ~mask));
    const uint64_t greater = uint64_t{0} - static_cast<uint64_t>(ad > lanes.max[l]);
    lanes.max[l] = std::bit_cast<double>((std::bit_cast<uint64_t>(ad) & greater) |
                                         (std::bit_cast<uint64_t>(lanes.max[l]) & ~greater));
    lanes.max_row[l] = (s & greater) | (lanes.max_row[l] & ~greater);
  }
  counts.finite += finite;
  counts.differing += differing;
  counts.bits += bits;
  counts.classes += classes;
  counts.nan_a += nan_a;
  counts.nan_b += nan_b;
  counts.inf_a += inf_a;
  counts.inf_b += inf_b;
}

template <typename RawA, typename RawB>
[[gnu::always_inline]] inline void chunk_body(const std::byte* pa, const std::byte* pb, uint64_t m, Lanes& lanes,
                                              Counts& counts) {
  for (uint64_t s = 0; s * kLanes < m; ++s) {
    row_body<RawA, RawB>(pa + s * kLanes * sizeof(RawA), pb + s * kLanes * sizeof(RawB),
                         std::min(kLanes, m - s * kLanes), s, lanes, counts);
  }
}

/// a - b of n pairs into `out`, NaN canonical.
template <typename RawA, typename RawB>
[[gnu::always_inline]] inline void subtract_body(const std::byte* __restrict pa, const std::byte* __restrict pb, uint64_t n,
                                                 float* __restrict out) {
  for (uint64_t i = 0; i < n; ++i) {
    const float r = value_at<RawA>(pa, i) - value_at<RawB>(pb, i);
    const uint32_t rb = std::bit_cast<uint32_t>(r);
    const uint32_t nan = uint32_t{0} - static_cast<uint32_t>((rb & 0x7fffffffu) > 0x7f800000u);
    out[i] = std::bit_cast<float>((ops::kSubtractNanBits & nan) | (rb & ~nan));
  }
}

using ChunkFn = void (*)(const std::byte*, const std::byte*, uint64_t, Lanes&, Counts&);
using SubtractFn = void (*)(const std::byte*, const std::byte*, uint64_t, float*);

template <typename RawA, typename RawB>
void chunk_baseline(const std::byte* pa, const std::byte* pb, uint64_t m, Lanes& lanes, Counts& counts) {
  chunk_body<RawA, RawB>(pa, pb, m, lanes, counts);
}
template <typename RawA, typename RawB>
void subtract_baseline(const std::byte* pa, const std::byte* pb, uint64_t n, float* out) {
  subtract_body<RawA, RawB>(pa, pb, n, out);
}
#if TM_CPU_X86_TARGETS
template <typename RawA, typename RawB>
TM_TARGET_AVX2 void chunk_avx2(const std::byte* pa, const std::byte* pb, uint64_t m, Lanes& lanes, Counts& counts) {
  chunk_body<RawA, RawB>(pa, pb, m, lanes, counts);
}
template <typename RawA, typename RawB>
TM_TARGET_AVX512 void chunk_avx512(const std::byte* pa, const std::byte* pb, uint64_t m, Lanes& lanes, Counts& counts) {
  chunk_body<RawA, RawB>(pa, pb, m, lanes, counts);
}
template <typename RawA, typename RawB>
TM_TARGET_AVX2 void subtract_avx2(const std::byte* pa, const std::byte* pb, uint64_t n, float* out) {
  subtract_body<RawA, RawB>(pa, pb, n, out);
}
template <typename RawA, typename RawB>
TM_TARGET_AVX512 void subtract_avx512(const std::byte* pa, const std::byte* pb, uint64_t n, float* out) {
  subtract_body<RawA, RawB>(pa, pb, n, out);
}
#endif

template <typename RawA, typename RawB>
ChunkFn chunk_for(Isa isa) {
#if TM_CPU_X86_TARGETS
  if (isa == Isa::kAvx512) return chunk_avx512<RawA, RawB>;
  if (isa == Isa::kAvx2) return chunk_avx2<RawA, RawB>;
#endif
  (void)isa;
  return chunk_baseline<RawA, RawB>;
}

template <typename RawA, typename RawB>
SubtractFn subtract_for(Isa isa) {
#if TM_CPU_X86_TARGETS
  if (isa == Isa::kAvx512) return subtract_avx512<RawA, RawB>;
  if (isa == Isa::kAvx2) return subtract_avx2<RawA, RawB>;
#endif
  (void)isa;
  return subtract_baseline<RawA, RawB>;
}

/// The kernel for words of each side: BF16 words (true) or float32 words.
template <typename Fn, Fn (*For16_16)(Isa), Fn (*For16_32)(Isa), Fn (*For32_16)(Isa), Fn (*For32_32)(Isa)>
Fn pick(bool a16, bool b16, Isa isa) {
  return a16 ? (b16 ? For16_16(isa) : For16_32(isa)) : (b16 ? For32_16(isa) : For32_32(isa));
}

/// Whether a side is read in place, and then whether as BF16.
bool in_place(const ops::DiffSide& side) {
  return !side.offset.active && (side.tensor.dtype == DType::kF32 || side.tensor.dtype == DType::kBF16);
}

/// Elements [first, first + m) of `side` as words: in place, or decoded (and offset) into `buffer`.
Result<const std::byte*> side_words(const ops::DiffSide& side, uint64_t first, uint64_t m, std::vector<float>& buffer) {
  const DTypeInfo& info = dtype_info(side.tensor.dtype);
  const uint64_t offset = first / info.block_elems * info.block_bytes;
  if (in_place(side)) return side.tensor.bytes.data() + offset;
  buffer.resize(m);
  TM_RETURN_IF_ERROR(decode_to_f32(side.tensor.dtype, side.tensor.bytes.subspan(offset, m / info.block_elems * info.block_bytes),
                                   m, buffer.data()));
  if (side.offset.active) {
    const float o = side.offset.value;
    float* __restrict v = buffer.data();
    for (uint64_t i = 0; i < m; ++i) v[i] = v[i] + o;
  }
  return reinterpret_cast<const std::byte*>(buffer.data());
}

struct ThreadState {
  std::vector<float> a, b;
  Status status;
};

Status check(const char* op, const ops::DiffSide& a, const ops::DiffSide& b) {
  TM_RETURN_IF_ERROR(ops::check_tensor_bytes(op, a.tensor));
  TM_RETURN_IF_ERROR(ops::check_tensor_bytes(op, b.tensor));
  if (a.tensor.elems != b.tensor.elems) {
    return Status::InvalidArgument(std::string(op) + ": in[0] (A) holds " + std::to_string(a.tensor.elems) +
                                   " elements but in[1] (B) holds " + std::to_string(b.tensor.elems));
  }
  for (const ops::DiffSide* s : {&a, &b}) {
    if (!dtype_decodable(s->tensor.dtype)) return Status::Unsupported(std::string(dtype_not_decodable_reason(s->tensor.dtype)));
  }
  return Status::Ok();
}

/// Runs body(chunk, state) over the chunks of n elements on at most max_threads threads.
template <typename Body>
Status over_chunks(uint64_t n, uint32_t max_threads, Body&& body) {
  const uint64_t chunks = (n + kChunk - 1) / kChunk;
  tbb::enumerable_thread_specific<ThreadState> locals;
  tbb::task_arena arena(max_threads == 0 ? tbb::task_arena::automatic : static_cast<int>(max_threads));
  arena.execute([&] {
    tbb::parallel_for(tbb::blocked_range<uint64_t>(0, chunks, 1), [&](const tbb::blocked_range<uint64_t>& r) {
      ThreadState& local = locals.local();
      for (uint64_t c = r.begin(); c != r.end(); ++c) {
        Status status = body(c, local);
        if (!status.ok() && local.status.ok()) local.status = std::move(status);
      }
    });
  });
  for (const ThreadState& local : locals) {
    if (!local.status.ok()) return local.status;
  }
  return Status::Ok();
}

}  // namespace

uint64_t diff_working_bytes(uint32_t threads) {
  return static_cast<uint64_t>(threads) * (2 * kChunk * sizeof(float) + sizeof(Lanes));
}

Status diff_stats(const ops::DiffSide& a, const ops::DiffSide& b, uint64_t element_offset, std::span<TM_DiffStats> out,
                  uint32_t max_threads) {
  TM_RETURN_IF_ERROR(check(TM_OP_DIFF_STATS, a, b));
  const uint64_t n = a.tensor.elems;
  if (out.size() != (n + kChunk - 1) / kChunk) {
    return Status::InvalidArgument(std::string(TM_OP_DIFF_STATS) + ": the output does not hold one record per chunk");
  }
  const bool a16 = in_place(a) && a.tensor.dtype == DType::kBF16, b16 = in_place(b) && b.tensor.dtype == DType::kBF16;
  const ChunkFn kernel = pick<ChunkFn, chunk_for<uint16_t, uint16_t>, chunk_for<uint16_t, uint32_t>,
                              chunk_for<uint32_t, uint16_t>, chunk_for<uint32_t, uint32_t>>(a16, b16, best_isa());
  return over_chunks(n, max_threads, [&](uint64_t c, ThreadState& local) -> Status {
    const uint64_t first = c * kChunk;
    const uint64_t m = std::min(kChunk, n - first);
    TM_ASSIGN_OR_RETURN(const std::byte* pa, side_words(a, first, m, local.a));
    TM_ASSIGN_OR_RETURN(const std::byte* pb, side_words(b, first, m, local.b));
    Lanes lanes;
    for (uint64_t l = 0; l < kLanes; ++l) {
      lanes.sum_diff[l] = lanes.sum_sq_diff[l] = lanes.sum_sq_a[l] = lanes.sum_sq_b[l] = lanes.sum_ab[l] = 0.0;
      lanes.max[l] = std::bit_cast<double>(kMinusOneBits);
      lanes.max_row[l] = 0;
    }
    Counts counts;
    kernel(pa, pb, m, lanes, counts);
    TM_DiffStats s = ops::empty_diff_stats();
    s.pairs = m;
    s.finite_pairs = counts.finite;
    s.differing = counts.differing;
    s.bits_differing = counts.bits;
    s.class_mismatch = counts.classes;
    s.nan_a = counts.nan_a;
    s.nan_b = counts.nan_b;
    s.inf_a = counts.inf_a;
    s.inf_b = counts.inf_b;
    s.sum_diff = ops::halving_sum(lanes.sum_diff);
    s.sum_sq_diff = ops::halving_sum(lanes.sum_sq_diff);
    s.sum_sq_a = ops::halving_sum(lanes.sum_sq_a);
    s.sum_sq_b = ops::halving_sum(lanes.sum_sq_b);
    s.sum_ab = ops::halving_sum(lanes.sum_ab);
    // The largest lane maximum, the lowest index among equal ones.
    double best = -1.0;
    uint64_t best_index = 0;
    for (uint64_t l = 0; l < kLanes; ++l) {
      const uint64_t index = lanes.max_row[l] * kLanes + l;
      if (lanes.max[l] > best || (lanes.max[l] == best && index < best_index)) {
        best = lanes.max[l];
        best_index = index;
      }
    }
    if (best >= 0) {
      s.max_abs_diff = best;
      s.max_abs_index = element_offset + first + best_index;
      s.a_at_max = a16 ? value_at<uint16_t>(pa, best_index) : value_at<uint32_t>(pa, best_index);
      s.b_at_max = b16 ? value_at<uint16_t>(pb, best_index) : value_at<uint32_t>(pb, best_index);
    }
    out[c] = s;
    return Status::Ok();
  });
}

Status subtract(const ops::DiffSide& a, const ops::DiffSide& b, std::span<float> out, uint32_t max_threads) {
  TM_RETURN_IF_ERROR(check(TM_OP_SUBTRACT, a, b));
  const uint64_t n = a.tensor.elems;
  if (out.size() != n) return Status::InvalidArgument(std::string(TM_OP_SUBTRACT) + ": the output does not hold n floats");
  const bool a16 = in_place(a) && a.tensor.dtype == DType::kBF16, b16 = in_place(b) && b.tensor.dtype == DType::kBF16;
  const SubtractFn kernel = pick<SubtractFn, subtract_for<uint16_t, uint16_t>, subtract_for<uint16_t, uint32_t>,
                                 subtract_for<uint32_t, uint16_t>, subtract_for<uint32_t, uint32_t>>(a16, b16, best_isa());
  return over_chunks(n, max_threads, [&](uint64_t c, ThreadState& local) -> Status {
    const uint64_t first = c * kChunk;
    const uint64_t m = std::min(kChunk, n - first);
    TM_ASSIGN_OR_RETURN(const std::byte* pa, side_words(a, first, m, local.a));
    TM_ASSIGN_OR_RETURN(const std::byte* pb, side_words(b, first, m, local.b));
    kernel(pa, pb, m, out.data() + first);
    return Status::Ok();
  });
}

}  // namespace tensormorph::cpu
