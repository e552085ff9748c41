// tm.top_k@1 on the device: radix selection of the threshold over the magnitude key, then one pass
// collecting the elements at or above it; the host sorts those few candidates in the operation's
// order (magnitude descending, index ascending), so the list is the CPU's whatever order the device
// found them in.
//
// 1. A histogram of key bits 30..20 (2048 counters, radix_histogram.cu) with the finite count. When
//    at most k elements are finite, every finite element is a candidate.
// 2. Otherwise the bucket holding the k-th largest key is found from the top. When the elements in
//    and above it are at most k + kSlack, they are the candidates; else the next digit (bits 19..9,
//    then 8..0) is counted under that bucket's prefix and the bucket narrowed again.
// 3. After the last digit the bucket is one key T: the elements above T number fewer than k, and
//    more than k + kSlack share T. Ties go by position, so the elements equal to T are counted per
//    aligned segment of 2^16 positions, and only those of the segments up to the one where the
//    count reaches what is still needed are collected (at most kSlack too many).
// Each pass streams the input again when it is in host memory (chunks, like histogram).
#include <algorithm>
#include <bit>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cuda/gpu_exec.h"
#include "backends/cuda/gpu_stream.h"
#include "compute/ops/radix_histogram.h"
#include "compute/ops/top_k.h"

namespace tensormorph::gpu {
namespace {

/// Candidates beyond k a collection may take (a bucket's surplus, a tie segment).
constexpr uint64_t kSlack = tm_gpu::kTopKSegmentElems;

struct Digit {
  uint32_t shift, bits;
};
constexpr Digit kDigits[] = {{20, 11}, {9, 11}, {0, 9}};
constexpr uint64_t kMaxCounters = uint64_t{1} << 11;

uint64_t chunk_blocks_of(const GpuBackend& b, const ops::TopKArgs& args, uint64_t memory_budget) {
  const tm_gpu::KernelBlock block = tm_gpu::kernel_block(*kernel_dtype(args.input.dtype));
  const uint64_t total_blocks = args.input.elems / block.elems;
  return std::min(total_blocks, std::max<uint64_t>(1, chunk_limit(b, memory_budget) / block.bytes));
}

}  // namespace

uint64_t top_k_working_bytes(const GpuBackend& b, const ops::TopKArgs& args, uint64_t memory_budget) {
  const tm_gpu::KernelBlock block = tm_gpu::kernel_block(*kernel_dtype(args.input.dtype));
  const uint64_t segments = args.input.elems / tm_gpu::kTopKSegmentElems + 1;
  const uint64_t chunks = args.input.arg.buffer ? 0 : 2 * chunk_blocks_of(b, args, memory_budget) * block.bytes;
  return kMaxCounters * 8 + 4 * 8 + 8 + segments * 8 + (args.k + kSlack) * sizeof(tm_gpu::TopKCandidate) + chunks;
}

Result<RunReport> run_top_k(GpuBackend& b, const ops::TopKArgs& args, uint64_t memory_budget, uint64_t* written) {
  const auto kdt = kernel_dtype(args.input.dtype);
  if (!kdt) return Status::Unimplemented(std::string(TM_GPU_VENDOR ": top_k does not implement ") +
                                         std::string(dtype_name(args.input.dtype)));
  RunReport report;
  report.bytes_written = args.indices.arg.nbytes + args.values.arg.nbytes;
  TM_ASSIGN_OR_RETURN(const InputRef in, input_of(b, args.input));
  TM_ASSIGN_OR_RETURN(const OutputRef indices_out, output_of(b, args.indices));
  TM_ASSIGN_OR_RETURN(const OutputRef values_out, output_of(b, args.values));
  TM_RETURN_IF_ERROR(over_budget(top_k_working_bytes(b, args, memory_budget), memory_budget, "top_k"));
  const tm_gpu::KernelBlock block = tm_gpu::kernel_block(*kdt);
  const uint64_t total_blocks = args.input.elems / block.elems;
  const uint64_t chunk_blocks = chunk_blocks_of(b, args, memory_budget);
  const uint64_t k = args.k;
  TM_RETURN_IF_ERROR(b.activate());
  cudaStream_t stream = b.compute_stream();
  const float* f8_table = b.f8_table(*kdt);

  // One timed pass over the input: `launch(data, elems, base)` per chunk.
  auto pass = [&](auto&& launch) -> Status {
    TM_RETURN_IF_ERROR(b.check(cudaEventRecord(b.event(0), stream), "recording the start event"));
    uint64_t base = 0;
    TM_RETURN_IF_ERROR(over_input_chunks(b, in, block, total_blocks, chunk_blocks, [&](const uint8_t* data, uint64_t elems) {
      const Status s = launch(data, elems, base);
      base += elems;
      return s;
    }));
    TM_RETURN_IF_ERROR(b.check(cudaEventRecord(b.event(1), stream), "recording the stop event"));
    TM_ASSIGN_OR_RETURN(const double ns, elapsed_ns(b, b.event(0), b.event(1)));
    report.device_ns += ns;
    report.bytes_read += args.input.arg.nbytes;
    return Status::Ok();
  };

  // A digit's counts (and the classes) of the finite keys under `prefix` (none for the top digit).
  TM_ASSIGN_OR_RETURN(uint8_t* counts_dev, b.scratch(0, kMaxCounters * 8));
  TM_ASSIGN_OR_RETURN(uint8_t* classes_dev, b.scratch(1, ops::kRadixClasses * 8));
  std::vector<uint64_t> counts(kMaxCounters);
  uint64_t classes[ops::kRadixClasses] = {};
  auto count_digit = [&](const Digit& d, bool has_prefix, uint64_t prefix) -> Status {
    tm_gpu::RadixJob job;
    job.key = TM_RADIX_KEY_MAGNITUDE;
    job.shift = d.shift;
    job.bits = d.bits;
    job.prefix_count = has_prefix ? 1 : 0;
    job.prefixes[0] = prefix;
    job.counts = reinterpret_cast<unsigned long long*>(counts_dev);
    job.classes = reinterpret_cast<unsigned long long*>(classes_dev);
    job.f8_table = f8_table;
    const uint64_t n = uint64_t{1} << d.bits;
    TM_RETURN_IF_ERROR(b.check(cudaMemsetAsync(counts_dev, 0, n * 8, stream), "clearing the counts"));
    TM_RETURN_IF_ERROR(b.check(cudaMemsetAsync(classes_dev, 0, sizeof classes, stream), "clearing the classes"));
    TM_RETURN_IF_ERROR(pass([&](const uint8_t* data, uint64_t elems, uint64_t) {
      job.in = data;
      job.elems = elems;
      job.aligned = reinterpret_cast<uintptr_t>(data) % 16 == 0;
      return b.check(tm_gpu::launch_radix_histogram(*kdt, job, stream), "launching top_k's radix histogram");
    }));
    TM_RETURN_IF_ERROR(b.copy_to_host(counts.data(), counts_dev, n * 8));
    if (!has_prefix) TM_RETURN_IF_ERROR(b.copy_to_host(classes, classes_dev, sizeof classes));
    return Status::Ok();
  };

  tm_gpu::TopKJob job;
  job.f8_table = f8_table;
  uint64_t expected = 0;  // candidates the collection will find
  TM_RETURN_IF_ERROR(count_digit(kDigits[0], false, 0));
  const uint64_t finite = classes[0];
  if (finite <= k) {
    job.lo = 0;  // every finite element
    expected = finite;
  } else {
    uint64_t above = 0;  // elements whose key is above the current bucket's range
    uint64_t prefix = 0;
    for (size_t level = 0;; ++level) {
      const Digit& d = kDigits[level];
      uint64_t bucket = (uint64_t{1} << d.bits) - 1;
      while (above + counts[bucket] < k) above += counts[bucket--];  // the k-th largest lies in a bucket
      prefix = (prefix << d.bits) | bucket;
      const uint64_t at = counts[bucket];
      if (above + at <= k + kSlack) {
        job.lo = static_cast<uint32_t>(prefix << d.shift);
        expected = above + at;
        break;
      }
      if (level + 1 < std::size(kDigits)) {
        TM_RETURN_IF_ERROR(count_digit(kDigits[level + 1], true, prefix));
        continue;
      }
      // The bucket is one key shared by too many elements: take them by position.
      const uint64_t need = k - above;
      const uint64_t segments = (args.input.elems + tm_gpu::kTopKSegmentElems - 1) / tm_gpu::kTopKSegmentElems;
      TM_ASSIGN_OR_RETURN(uint8_t* segments_dev, b.scratch(5, segments * 8));
      TM_RETURN_IF_ERROR(b.check(cudaMemsetAsync(segments_dev, 0, segments * 8, stream), "clearing the segment counts"));
      job.tie_key = static_cast<uint32_t>(prefix);
      job.segment_counts = reinterpret_cast<unsigned long long*>(segments_dev);
      TM_RETURN_IF_ERROR(pass([&](const uint8_t* data, uint64_t elems, uint64_t base) {
        job.in = data;
        job.elems = elems;
        job.base = base;
        job.aligned = reinterpret_cast<uintptr_t>(data) % 16 == 0;
        return b.check(tm_gpu::launch_top_k_segment_counts(*kdt, job, stream), "launching top_k's tie counts");
      }));
      std::vector<uint64_t> per_segment(segments);
      TM_RETURN_IF_ERROR(b.copy_to_host(per_segment.data(), segments_dev, segments * 8));
      uint64_t taken = 0, s = 0;
      while (taken + per_segment[s] < need) taken += per_segment[s++];
      job.lo = job.tie_key + 1;
      job.tie = true;
      job.tie_segment = s;
      expected = above + taken + per_segment[s];
      break;
    }
  }

  // The collection, then the order on the host.
  std::vector<tm_gpu::TopKCandidate> found(expected);
  if (expected > 0) {
    TM_ASSIGN_OR_RETURN(uint8_t* candidates_dev, b.scratch(4, expected * sizeof(tm_gpu::TopKCandidate)));
    TM_ASSIGN_OR_RETURN(uint8_t* count_dev, b.scratch(1, ops::kRadixClasses * 8));
    TM_RETURN_IF_ERROR(b.check(cudaMemsetAsync(count_dev, 0, 8, stream), "clearing the candidate count"));
    job.out = reinterpret_cast<tm_gpu::TopKCandidate*>(candidates_dev);
    job.count = reinterpret_cast<unsigned long long*>(count_dev);
    job.capacity = expected;
    TM_RETURN_IF_ERROR(pass([&](const uint8_t* data, uint64_t elems, uint64_t base) {
      job.in = data;
      job.elems = elems;
      job.base = base;
      job.aligned = reinterpret_cast<uintptr_t>(data) % 16 == 0;
      return b.check(tm_gpu::launch_top_k_collect(*kdt, job, stream), "launching top_k's collection");
    }));
    uint64_t collected = 0;
    TM_RETURN_IF_ERROR(b.copy_to_host(&collected, count_dev, 8));
    if (collected != expected) {
      return Status::Internal(std::string(TM_GPU_VENDOR ": top_k collected ") + std::to_string(collected) +
                              " candidates where the counts said " + std::to_string(expected));
    }
    TM_RETURN_IF_ERROR(b.copy_to_host(found.data(), candidates_dev, expected * sizeof(tm_gpu::TopKCandidate)));
  }
  std::vector<ops::TopKEntry> entries(found.size());
  for (size_t i = 0; i < found.size(); ++i) entries[i] = {found[i].key, found[i].index, found[i].value};
  const size_t n = std::min<size_t>(k, entries.size());
  std::partial_sort(entries.begin(), entries.begin() + static_cast<std::ptrdiff_t>(n), entries.end(), ops::top_k_before);
  std::vector<uint64_t> indices(k, ~uint64_t{0});
  std::vector<float> values(k, std::bit_cast<float>(ops::kTopKPaddingBits));
  for (size_t i = 0; i < n; ++i) {
    indices[i] = entries[i].index;
    values[i] = entries[i].value;
  }
  if (indices_out.host) {
    std::memcpy(indices_out.host, indices.data(), k * sizeof(uint64_t));
  } else {
    TM_RETURN_IF_ERROR(b.copy_to_device(indices_out.device, indices.data(), k * sizeof(uint64_t)));
  }
  if (values_out.host) {
    std::memcpy(values_out.host, values.data(), k * sizeof(float));
  } else {
    TM_RETURN_IF_ERROR(b.copy_to_device(values_out.device, values.data(), k * sizeof(float)));
  }
  *written = n;
  return report;
}

}  // namespace tensormorph::gpu
