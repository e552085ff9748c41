// tm.top_k@1 on the CPU: each thread keeps the best k of the chunks it decodes in a heap whose top
// is its worst entry (most elements fail one comparison with it); the heaps are merged in the
// operation's order. The order is total (magnitude, then index), so any split gives one answer.
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "tensormorph/decode.h"

namespace tensormorph::cpu {
namespace {

constexpr uint64_t kChunkElems = uint64_t{1} << 16;

struct ThreadBest {
  std::vector<float> values;
  std::vector<ops::TopKEntry> heap;  // at most k, the worst on top
  Status status;
};

void keep_best(std::span<const float> values, uint64_t first_index, uint64_t k, ThreadBest& local) {
  auto& heap = local.heap;
  for (size_t i = 0; i < values.size(); ++i) {
    const float v = values[i];
    if (!std::isfinite(v)) continue;
    const ops::TopKEntry entry{ops::magnitude_key(v), first_index + i, v};
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
        local.values.resize(n * info.block_elems);
        Status status = decode_to_f32(tensor.dtype, tensor.bytes.subspan(first * info.block_bytes, n * info.block_bytes),
                                      local.values.size(), local.values.data());
        if (!status.ok()) {
          if (local.status.ok()) local.status = std::move(status);
          continue;
        }
        keep_best(local.values, first * info.block_elems, k, local);
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
