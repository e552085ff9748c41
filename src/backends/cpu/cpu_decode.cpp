// tm.decode@1 on the CPU: the reference decoder over chunks of whole blocks in parallel (each
// element's value does not depend on the chunking, so the result is the reference's).
#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <mutex>

#include "backends/cpu/cpu_kernels.h"
#include "tensormorph/decode.h"

namespace tensormorph::cpu {

Status decode(const ops::TensorView& tensor, std::span<float> out, uint32_t max_threads) {
  TM_RETURN_IF_ERROR(ops::check_decode_args(tensor, out.size()));
  if (!dtype_decodable(tensor.dtype)) return Status::Unsupported(std::string(dtype_not_decodable_reason(tensor.dtype)));
  const DTypeInfo& info = dtype_info(tensor.dtype);
  const uint64_t blocks = tensor.elems / info.block_elems;
  const uint64_t chunk_blocks = std::max<uint64_t>(1, (uint64_t{1} << 16) / info.block_elems);
  const uint64_t chunks = (blocks + chunk_blocks - 1) / chunk_blocks;
  std::mutex failure_mutex;
  Status failure;
  tbb::task_arena arena(max_threads == 0 ? tbb::task_arena::automatic : static_cast<int>(max_threads));
  arena.execute([&] {
    tbb::parallel_for(tbb::blocked_range<uint64_t>(0, chunks), [&](const tbb::blocked_range<uint64_t>& r) {
      for (uint64_t c = r.begin(); c != r.end(); ++c) {
        const uint64_t first = c * chunk_blocks;
        const uint64_t n = std::min(chunk_blocks, blocks - first);
        Status status = decode_to_f32(tensor.dtype, tensor.bytes.subspan(first * info.block_bytes, n * info.block_bytes),
                                      n * info.block_elems, out.data() + first * info.block_elems);
        if (!status.ok()) {
          std::lock_guard lock(failure_mutex);
          if (failure.ok()) failure = std::move(status);
        }
      }
    });
  });
  return failure;
}

}  // namespace tensormorph::cpu
