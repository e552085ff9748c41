// tm.histogram@1 on the CPU: chunks decoded to float32 and binned in parallel. Counts are
// integers, so any merge order gives the reference's answer.
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/enumerable_thread_specific.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include "backends/cpu/cpu_kernels.h"
#include "tensormorph/decode.h"

namespace tensormorph::cpu {
namespace {

/// Up to this many bins each thread counts privately; beyond, threads add atomically into `out`.
constexpr uint64_t kPrivateBinsMax = uint64_t{1} << 16;

struct ThreadCounts {
  std::vector<float> values;
  std::vector<uint64_t> counts;
  Status status;
};

}  // namespace

uint64_t histogram_working_bytes(uint64_t bins, uint32_t threads) {
  const uint64_t per_thread = (uint64_t{1} << 16) * sizeof(float) + (bins + 3 <= kPrivateBinsMax + 3 ? (bins + 3) * sizeof(uint64_t) : 0);
  return per_thread * threads;
}

Status histogram(const ops::TensorView& tensor, double lo, double hi, uint64_t bins, std::span<uint64_t> out,
                 uint32_t max_threads) {
  TM_RETURN_IF_ERROR(ops::check_histogram_args(tensor, lo, hi, bins, out.size()));
  if (!dtype_decodable(tensor.dtype)) return Status::Unsupported(std::string(dtype_not_decodable_reason(tensor.dtype)));
  const double scale = static_cast<double>(bins) / (hi - lo);
  const DTypeInfo& info = dtype_info(tensor.dtype);
  const uint64_t blocks = tensor.elems / info.block_elems;
  const uint64_t chunk_blocks = std::max<uint64_t>(1, (uint64_t{1} << 16) / info.block_elems);
  const uint64_t chunks = (blocks + chunk_blocks - 1) / chunk_blocks;
  const bool private_counts = out.size() <= kPrivateBinsMax + 3;
  std::fill(out.begin(), out.end(), uint64_t{0});
  tbb::enumerable_thread_specific<ThreadCounts> locals;
  tbb::task_arena arena(max_threads == 0 ? tbb::task_arena::automatic : static_cast<int>(max_threads));
  arena.execute([&] {
    tbb::parallel_for(tbb::blocked_range<uint64_t>(0, chunks), [&](const tbb::blocked_range<uint64_t>& r) {
      ThreadCounts& local = locals.local();
      if (private_counts && local.counts.empty()) local.counts.assign(out.size(), 0);
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
        if (private_counts) {
          for (float v : local.values) ++local.counts[ops::histogram_slot(v, lo, hi, scale, bins)];
        } else {
          for (float v : local.values) {
            std::atomic_ref<uint64_t>(out[ops::histogram_slot(v, lo, hi, scale, bins)])
                .fetch_add(1, std::memory_order_relaxed);
          }
        }
      }
    });
  });
  for (const ThreadCounts& local : locals) {
    if (!local.status.ok()) return local.status;
    for (size_t i = 0; i < local.counts.size(); ++i) out[i] += local.counts[i];
  }
  return Status::Ok();
}

}  // namespace tensormorph::cpu
