// tm.top_k@1 on the CPU: each thread keeps the best k of the chunks it reads in a heap whose top is
// its worst entry; groups of elements none of which reaches that entry's magnitude (almost all, once
// the heap is full) are passed over by one vectorized test. The heaps are merged in the operation's
// order. The order is total (magnitude, then index), so any split gives one answer.
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "backends/cpu/cpu_dispatch.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_words.h"
#include "tensormorph/decode.h"

namespace tensormorph::cpu {
namespace {

constexpr uint64_t kChunkElems = uint64_t{1} << 16;
/// Elements screened at once against the heap's worst entry before any is looked at one by one.
constexpr uint64_t kGroupElems = 64;
constexpr uint32_t kInfBits = 0x7f800000u;  // magnitudes at or above it are not finite

struct ThreadBest {
  std::vector<float> values;
  std::vector<ops::TopKEntry> heap;  // at most k, the worst on top
  Status status;
};

/// Whether any of n elements is finite with a magnitude key of at least `lo` (one unsigned range
/// test per element, no branch: the loop vectorizes).
template <typename Raw>
[[gnu::always_inline]] inline bool any_candidate_body(const std::byte* __restrict words, uint64_t n, uint32_t lo) {
  uint32_t any = 0;
  for (uint64_t i = 0; i < n; ++i) any |= (float_bits<Raw>(words, i) & 0x7fffffffu) - lo < kInfBits - lo;
  return any != 0;
}

using AnyCandidateFn = bool (*)(const std::byte*, uint64_t, uint32_t);

template <typename Raw>
bool any_candidate_baseline(const std::byte* words, uint64_t n, uint32_t lo) {
  return any_candidate_body<Raw>(words, n, lo);
}
#if TM_CPU_X86_TARGETS
template <typename Raw>
TM_TARGET_AVX2 bool any_candidate_avx2(const std::byte* words, uint64_t n, uint32_t lo) {
  return any_candidate_body<Raw>(words, n, lo);
}
template <typename Raw>
TM_TARGET_AVX512 bool any_candidate_avx512(const std::byte* words, uint64_t n, uint32_t lo) {
  return any_candidate_body<Raw>(words, n, lo);
}
#endif

template <typename Raw>
AnyCandidateFn any_candidate_for(Isa isa) {
#if TM_CPU_X86_TARGETS
  if (isa == Isa::kAvx512) return any_candidate_avx512<Raw>;
  if (isa == Isa::kAvx2) return any_candidate_avx2<Raw>;
#endif
  (void)isa;
  return any_candidate_baseline<Raw>;
}

/// Offers n elements (float32 words, or BF16 when `bf16`) at positions first_index... to the
/// heap. Groups in which nothing reaches the heap's worst magnitude are skipped whole; the rest
/// are compared one by one in the operation's order.
void keep_best(const std::byte* words, uint64_t n, bool bf16, AnyCandidateFn any_candidate, uint64_t first_index,
               uint64_t k, ThreadBest& local) {
  auto& heap = local.heap;
  for (uint64_t g = 0; g < n; g += kGroupElems) {
    const uint64_t m = std::min(kGroupElems, n - g);
    const std::byte* group = words + g * (bf16 ? 2 : 4);
    const uint32_t lo = heap.size() < k ? 0 : heap.front().key;
    if (!any_candidate(group, m, lo)) continue;
    for (uint64_t i = 0; i < m; ++i) {
      const uint32_t bits = bf16 ? float_bits<uint16_t>(group, i) : float_bits<uint32_t>(group, i);
      if ((bits & 0x7fffffffu) >= kInfBits) continue;
      const float v = std::bit_cast<float>(bits);
      const ops::TopKEntry entry{ops::magnitude_key(v), first_index + g + i, v};
      if (heap.size() < k) {
        heap.push_back(entry);
        std::push_heap(heap.begin(), heap.end(), ops::top_k_before);
      } else if (ops::top_k_before(entry, heap.front())) {
        std::pop_heap(heap.begin(), heap.end(), ops::top_k_before);
        heap.back() = entry;
        std::push_heap(heap.begin(), heap.end(), ops::top_k_before);
      }
    }
  }
}

}  // namespace

uint64_t top_k_working_bytes(uint64_t k, uint32_t threads) {
  return (kChunkElems * sizeof(float) + k * sizeof(ops::TopKEntry)) * threads + k * threads * sizeof(ops::TopKEntry);
}

Status top_k(const ops::TensorView& tensor, std::span<uint64_t> indices, std::span<float> values, uint64_t* written,
             uint32_t max_threads) {
  TM_RETURN_IF_ERROR(ops::check_tensor_bytes(TM_OP_TOP_K, tensor));
  const uint64_t k = indices.size();
  if (k != values.size() || k == 0 || k > TM_TOP_K_MAX) {
    return Status::InvalidArgument(std::string(TM_OP_TOP_K) + ": k must be in [1, " + std::to_string(TM_TOP_K_MAX) + "]");
  }
  if (!dtype_decodable(tensor.dtype)) return Status::Unsupported(std::string(dtype_not_decodable_reason(tensor.dtype)));
  const DTypeInfo& info = dtype_info(tensor.dtype);
  // F32 and BF16 are read where they lie; every other dtype is decoded to float32 words first.
  const bool in_place = tensor.dtype == DType::kF32 || tensor.dtype == DType::kBF16;
  const bool bf16 = tensor.dtype == DType::kBF16;
  const AnyCandidateFn any_candidate = bf16 ? any_candidate_for<uint16_t>(best_isa()) : any_candidate_for<uint32_t>(best_isa());
  const uint64_t blocks = tensor.elems / info.block_elems;
  const uint64_t chunk_blocks = std::max<uint64_t>(1, kChunkElems / info.block_elems);
  const uint64_t chunks = (blocks + chunk_blocks - 1) / chunk_blocks;
  tbb::enumerable_thread_specific<ThreadBest> locals;
  tbb::task_arena arena(max_threads == 0 ? tbb::task_arena::automatic : static_cast<int>(max_threads));
  arena.execute([&] {
    tbb::parallel_for(tbb::blocked_range<uint64_t>(0, chunks), [&](const tbb::blocked_range<uint64_t>& r) {
      ThreadBest& local = locals.local();
      for (uint64_t c = r.begin(); c != r.end(); ++c) {
        const uint64_t first = c * chunk_blocks;
        const uint64_t n = std::min(chunk_blocks, blocks - first);
        const std::byte* words = tensor.bytes.data() + first * info.block_bytes;
        if (!in_place) {
          local.values.resize(n * info.block_elems);
          Status status = decode_to_f32(tensor.dtype, tensor.bytes.subspan(first * info.block_bytes, n * info.block_bytes),
                                        local.values.size(), local.values.data());
          if (!status.ok()) {
            if (local.status.ok()) local.status = std::move(status);
            continue;
          }
          words = reinterpret_cast<const std::byte*>(local.values.data());
        }
        keep_best(words, n * info.block_elems, bf16, any_candidate, first * info.block_elems, k, local);
      }
    });
  });
  std::vector<ops::TopKEntry> all;
  for (const ThreadBest& local : locals) {
    if (!local.status.ok()) return local.status;
    all.insert(all.end(), local.heap.begin(), local.heap.end());
  }
  const size_t n = std::min<size_t>(k, all.size());
  std::partial_sort(all.begin(), all.begin() + static_cast<std::ptrdiff_t>(n), all.end(), ops::top_k_before);
  for (size_t i = 0; i < k; ++i) {
    indices[i] = i < n ? all[i].index : ~uint64_t{0};
    values[i] = i < n ? all[i].value : std::bit_cast<float>(ops::kTopKPaddingBits);
  }
  *written = n;
  return Status::Ok();
}

}  // namespace tensormorph::cpu
