// tm.radix_histogram@1 on the CPU: chunks decoded to float32 and counted in parallel into
// per-thread counts. Counts are integers, so any merge order gives the reference's answer.
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/cpu_dispatch.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_words.h"
#include "tensormorph/decode.h"

namespace tensormorph::cpu {
namespace {

/// Elements decoded and counted at a time by one thread.
constexpr uint64_t kChunkElems = uint64_t{1} << 16;

/// The histogram rows of the distinct prefixes, found by open addressing: most elements match
/// none, and a lookup costs a multiply and a compare or two.
class PrefixTable {
 public:
  explicit PrefixTable(std::span<const uint64_t> prefixes) {
    slots_.fill({0, kEmpty});
    for (size_t p = 0; p < prefixes.size(); ++p) {
      size_t at = hash(prefixes[p]);
      while (slots_[at].row != kEmpty && slots_[at].prefix != prefixes[p]) at = (at + 1) % kSlots;
      if (slots_[at].row == kEmpty) slots_[at] = {prefixes[p], static_cast<uint32_t>(p)};
    }
  }
  /// The row counting `prefix`, or kEmpty.
  uint32_t row(uint64_t prefix) const {
    for (size_t at = hash(prefix);; at = (at + 1) % kSlots) {
      if (slots_[at].row == kEmpty || slots_[at].prefix == prefix) return slots_[at].row;
    }
  }
  static constexpr uint32_t kEmpty = ~uint32_t{0};

 private:
  static constexpr size_t kSlots = 64;  // four times TM_RADIX_MAX_PREFIXES: probes stay short
  static size_t hash(uint64_t prefix) { return static_cast<size_t>((prefix * 0x9e3779b97f4a7c15ull) >> 58); }
  struct Slot {
    uint64_t prefix;
    uint32_t row;
  };
  std::array<Slot, kSlots> slots_;
};

/// Elements one thread counts into its 32-bit counters before it adds them to its 64-bit totals.
constexpr uint64_t kFlushElems = (uint64_t{1} << 32) - 2 * kChunkElems;

/// Interleaved counter sets without prefixes: consecutive equal digits (weights cluster in a few
/// binades) would otherwise wait on each other's increments. Four while they fit in L2 beside
/// each other, two for 16-bit digits.
size_t unprefixed_sets(uint64_t slots) { return slots <= (uint64_t{1} << 13) ? 4 : 2; }

/// One thread's counts: 32-bit counters (half the cache of 64-bit ones), interleaved sets without
/// prefixes, each with a spare last slot that non-finite elements count into, added into 64-bit
/// totals before any could overflow.
struct ThreadCounts {
  std::vector<float> values;
  std::vector<uint32_t> digits;
  std::vector<uint32_t> counts[4];
  std::vector<uint64_t> totals;
  uint64_t pending = 0;  // elements counted since the last flush
  std::array<uint64_t, ops::kRadixClasses> classes{};
  Status status;

  void prepare(uint64_t slots, bool prefixed) {
    if (!totals.empty()) return;
    totals.assign(slots, 0);
    const size_t sets = prefixed ? 1 : unprefixed_sets(slots);
    for (size_t s = 0; s < sets; ++s) counts[s].assign(slots + 1, 0);
  }
  void flush() {
    for (auto& c : counts) {
      for (size_t i = 0; i < totals.size() && i < c.size(); ++i) totals[i] += c[i];
      std::fill(c.begin(), c.end(), 0u);
    }
    pending = 0;
  }
};

/// The 32-bit key K of a float's bits (ops::value_order_key or ops::magnitude_key).
template <ops::RadixKey K>
[[gnu::always_inline]] inline uint32_t key_of_bits(uint32_t bits) {
  const float x = std::bit_cast<float>(bits);
  if constexpr (K == ops::RadixKey::kValue) {
    return ops::value_order_key(x);
  } else {
    return ops::magnitude_key(x);
  }
}

/// Each element's digit under key K, the spare slot for non-finite ones; returns how many were
/// non-finite. Compiled once per instruction set (SSE2 has 4 lanes and no 16-to-32-bit widening).
template <ops::RadixKey K, typename Raw>
[[gnu::always_inline]] inline uint32_t digits_body(const std::byte* __restrict raw, size_t n, uint32_t shift,
                                                   uint32_t mask, uint32_t spare, uint32_t* __restrict digits) {
  uint32_t non_finite = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t bits = float_bits<Raw>(raw, i);
    const uint32_t special = (bits & 0x7f800000u) == 0x7f800000u;
    non_finite += special;
    const uint32_t digit = (key_of_bits<K>(bits) >> shift) & mask;
    digits[i] = special ? spare : digit;
  }
  return non_finite;
}

using DigitsFn = uint32_t (*)(const std::byte*, size_t, uint32_t, uint32_t, uint32_t, uint32_t*);

template <ops::RadixKey K, typename Raw>
uint32_t digits_baseline(const std::byte* raw, size_t n, uint32_t shift, uint32_t mask, uint32_t spare, uint32_t* digits) {
  return digits_body<K, Raw>(raw, n, shift, mask, spare, digits);
}
#if TM_CPU_X86_TARGETS
template <ops::RadixKey K, typename Raw>
TM_TARGET_AVX2 uint32_t digits_avx2(const std::byte* raw, size_t n, uint32_t shift, uint32_t mask, uint32_t spare,
                                    uint32_t* digits) {
  return digits_body<K, Raw>(raw, n, shift, mask, spare, digits);
}
template <ops::RadixKey K, typename Raw>
TM_TARGET_AVX512 uint32_t digits_avx512(const std::byte* raw, size_t n, uint32_t shift, uint32_t mask, uint32_t spare,
                                        uint32_t* digits) {
  return digits_body<K, Raw>(raw, n, shift, mask, spare, digits);
}
#endif

template <ops::RadixKey K, typename Raw>
DigitsFn digits_for(Isa isa) {
#if TM_CPU_X86_TARGETS
  if (isa == Isa::kAvx512) return digits_avx512<K, Raw>;
  if (isa == Isa::kAvx2) return digits_avx2<K, Raw>;
#endif
  (void)isa;
  return digits_baseline<K, Raw>;
}

/// Counts n elements of `raw` (float32 words, or BF16 halves: Raw = uint16_t, read without
/// decoding) without prefixes under a 32-bit key: the digits first (non-finite elements to the
/// spare slot, classified apart only when a chunk has any), then counted round-robin into the
/// interleaved sets.
template <ops::RadixKey K, typename Raw>
void count_unprefixed(const std::byte* raw, size_t n, const ops::RadixParams& params, ThreadCounts& local, Isa isa) {
  const uint32_t digit_mask = static_cast<uint32_t>((uint64_t{1} << params.bits) - 1);
  const uint32_t spare = static_cast<uint32_t>(local.totals.size());
  local.digits.resize(n);
  uint32_t* const digits = local.digits.data();
  const uint32_t non_finite = digits_for<K, Raw>(isa)(raw, n, params.shift, digit_mask, spare, digits);
  if (non_finite > 0) {
    for (size_t i = 0; i < n; ++i) {
      const uint32_t bits = float_bits<Raw>(raw, i);
      if ((bits & 0x7f800000u) != 0x7f800000u) continue;
      ++local.classes[(bits & 0x007fffffu) != 0 ? 1 : (bits >> 31) == 0 ? 2 : 3];
    }
  }
  local.classes[0] += n - non_finite;
  const size_t sets = unprefixed_sets(local.totals.size());
  size_t i = 0;
  if (sets == 4) {
    uint32_t* const c0 = local.counts[0].data();
    uint32_t* const c1 = local.counts[1].data();
    uint32_t* const c2 = local.counts[2].data();
    uint32_t* const c3 = local.counts[3].data();
    for (; i + 4 <= n; i += 4) {
      ++c0[digits[i]];
      ++c1[digits[i + 1]];
      ++c2[digits[i + 2]];
      ++c3[digits[i + 3]];
    }
  } else {
    uint32_t* const c0 = local.counts[0].data();
    uint32_t* const c1 = local.counts[1].data();
    for (; i + 2 <= n; i += 2) {
      ++c0[digits[i]];
      ++c1[digits[i + 1]];
    }
  }
  for (; i < n; ++i) ++local.counts[0][digits[i]];
  local.pending += n;
  if (local.pending >= kFlushElems) local.flush();
}

/// Counts `values` into `local` under key `K` (a RadixKey as a template argument, so the key's
/// branch leaves the inner loop).
template <ops::RadixKey K>
void count_values(std::span<const float> values, const ops::RadixParams& params, const PrefixTable* table,
                  ThreadCounts& local, [[maybe_unused]] Isa isa) {
  const uint64_t digit_mask = (uint64_t{1} << params.bits) - 1;
  const uint32_t prefix_shift = params.shift + params.bits;
  uint64_t finite = 0;
  uint32_t* const sets[2] = {local.counts[0].data(), local.counts[table == nullptr ? 1 : 0].data()};
  if constexpr (K != ops::RadixKey::kDeviation) {
    if (table == nullptr) {
      return count_unprefixed<K, uint32_t>(reinterpret_cast<const std::byte*>(values.data()), values.size(), params,
                                           local, isa);
    }
  }
  for (size_t i = 0; i < values.size(); ++i) {
    const float v = values[i];
    if (!std::isfinite(v)) {
      ++local.classes[std::isnan(v) ? 1 : v > 0 ? 2 : 3];
      continue;
    }
    ++finite;
    uint64_t key;
    if constexpr (K == ops::RadixKey::kValue) {
      key = ops::value_order_key(v);
    } else if constexpr (K == ops::RadixKey::kMagnitude) {
      key = ops::magnitude_key(v);
    } else {
      key = ops::deviation_key(v, params.center);
    }
    const uint64_t digit = (key >> params.shift) & digit_mask;
    if (table == nullptr) {
      ++sets[i & 1][digit];
    } else if (const uint32_t row = table->row(key >> prefix_shift); row != PrefixTable::kEmpty) {
      ++sets[0][(uint64_t{row} << params.bits) + digit];
    }
  }
  local.classes[0] += finite;
  local.pending += values.size();
  if (local.pending >= kFlushElems) local.flush();
}

}  // namespace

uint64_t radix_histogram_working_bytes(uint64_t slots, bool with_prefixes, uint32_t threads) {
  const uint64_t per_thread = kChunkElems * (sizeof(float) + sizeof(uint32_t)) + slots * sizeof(uint64_t) +
                              (with_prefixes ? 1 : unprefixed_sets(slots)) * (slots + 1) * sizeof(uint32_t);
  return per_thread * threads;
}

Status radix_histogram(const ops::TensorView& tensor, const ops::RadixParams& params, std::span<const uint64_t> prefixes,
                       std::span<uint64_t> counts, std::span<uint64_t, ops::kRadixClasses> classes,
                       uint32_t max_threads) {
  TM_RETURN_IF_ERROR(ops::check_tensor_bytes(TM_OP_RADIX_HISTOGRAM, tensor));
  TM_RETURN_IF_ERROR(ops::check_radix_params(params, prefixes.size()));
  if (counts.size() != ops::radix_count_slots(params, prefixes.size())) {
    return Status::InvalidArgument(std::string(TM_OP_RADIX_HISTOGRAM) + ": the counts need " +
                                   std::to_string(ops::radix_count_slots(params, prefixes.size())) + " slots");
  }
  if (!dtype_decodable(tensor.dtype)) return Status::Unsupported(std::string(dtype_not_decodable_reason(tensor.dtype)));
  const PrefixTable table(prefixes);
  const PrefixTable* lookup = prefixes.empty() ? nullptr : &table;
  const DTypeInfo& info = dtype_info(tensor.dtype);
  const uint64_t blocks = tensor.elems / info.block_elems;
  const uint64_t chunk_blocks = std::max<uint64_t>(1, kChunkElems / info.block_elems);
  const uint64_t chunks = (blocks + chunk_blocks - 1) / chunk_blocks;
  tbb::enumerable_thread_specific<ThreadCounts> locals;
  const Isa isa = best_isa();
  tbb::task_arena arena(max_threads == 0 ? tbb::task_arena::automatic : static_cast<int>(max_threads));
  arena.execute([&] {
    tbb::parallel_for(tbb::blocked_range<uint64_t>(0, chunks), [&](const tbb::blocked_range<uint64_t>& r) {
      ThreadCounts& local = locals.local();
      local.prepare(counts.size(), lookup != nullptr);
      for (uint64_t c = r.begin(); c != r.end(); ++c) {
        const uint64_t first = c * chunk_blocks;
        const uint64_t n = std::min(chunk_blocks, blocks - first);
        // F32 and BF16 hold their float32 bits (BF16 the top half): counted without decoding.
        if (lookup == nullptr && params.key != ops::RadixKey::kDeviation &&
            (tensor.dtype == DType::kF32 || tensor.dtype == DType::kBF16)) {
          const std::byte* raw = tensor.bytes.data() + first * info.block_bytes;
          const size_t elems = n * info.block_elems;
          const bool bf16 = tensor.dtype == DType::kBF16;
          if (params.key == ops::RadixKey::kValue) {
            bf16 ? count_unprefixed<ops::RadixKey::kValue, uint16_t>(raw, elems, params, local, isa)
                 : count_unprefixed<ops::RadixKey::kValue, uint32_t>(raw, elems, params, local, isa);
          } else {
            bf16 ? count_unprefixed<ops::RadixKey::kMagnitude, uint16_t>(raw, elems, params, local, isa)
                 : count_unprefixed<ops::RadixKey::kMagnitude, uint32_t>(raw, elems, params, local, isa);
          }
          continue;
        }
        local.values.resize(n * info.block_elems);
        Status status = decode_to_f32(tensor.dtype, tensor.bytes.subspan(first * info.block_bytes, n * info.block_bytes),
                                      local.values.size(), local.values.data());
        if (!status.ok()) {
          if (local.status.ok()) local.status = std::move(status);
          continue;
        }
        switch (params.key) {
          case ops::RadixKey::kValue: count_values<ops::RadixKey::kValue>(local.values, params, lookup, local, isa); break;
          case ops::RadixKey::kMagnitude:
            count_values<ops::RadixKey::kMagnitude>(local.values, params, lookup, local, isa);
            break;
          case ops::RadixKey::kDeviation:
            count_values<ops::RadixKey::kDeviation>(local.values, params, lookup, local, isa);
            break;
        }
      }
    });
  });
  std::fill(counts.begin(), counts.end(), uint64_t{0});
  std::fill(classes.begin(), classes.end(), uint64_t{0});
  for (ThreadCounts& local : locals) {
    if (!local.status.ok()) return local.status;
    local.flush();
    for (size_t i = 0; i < local.totals.size(); ++i) counts[i] += local.totals[i];
    for (size_t i = 0; i < ops::kRadixClasses; ++i) classes[i] += local.classes[i];
  }
  // A repeated prefix counted into its first row only: its own rows get the same counts.
  const uint64_t row_slots = uint64_t{1} << params.bits;
  for (size_t p = 0; p < prefixes.size(); ++p) {
    const uint32_t first = table.row(prefixes[p]);
    if (first != p) {
      std::copy_n(counts.begin() + first * row_slots, row_slots, counts.begin() + p * row_slots);
    }
  }
  return Status::Ok();
}

}  // namespace tensormorph::cpu
