#include "compute/ops/radix_histogram.h"

#include <algorithm>
#include <string>
#include <vector>

#include "tensormorph/decode.h"

namespace tensormorph::ops {

Status check_radix_params(const RadixParams& params, uint64_t prefixes) {
  const std::string op = TM_OP_RADIX_HISTOGRAM;
  const uint32_t width = radix_key_bits(params.key);
  if (params.bits < 1 || params.bits > TM_RADIX_MAX_BITS) {
    return Status::InvalidArgument(op + ": bits " + std::to_string(params.bits) + " is outside [1, " +
                                   std::to_string(TM_RADIX_MAX_BITS) + "]");
  }
  if (params.shift >= width || params.bits > width - params.shift) {
    return Status::InvalidArgument(op + ": the digit [" + std::to_string(params.shift) + ", " +
                                   std::to_string(params.shift + params.bits) + ") is outside the key's " +
                                   std::to_string(width) + " bits");
  }
  if (prefixes > TM_RADIX_MAX_PREFIXES) {
    return Status::InvalidArgument(op + ": " + std::to_string(prefixes) + " prefixes, at most " +
                                   std::to_string(TM_RADIX_MAX_PREFIXES));
  }
  if (prefixes > 0 && params.shift + params.bits == width) {
    return Status::InvalidArgument(op + ": prefixes need key bits above the digit, and the digit [" +
                                   std::to_string(params.shift) + ", " + std::to_string(width) + ") is the top one");
  }
  if (!std::isfinite(params.center)) return Status::InvalidArgument(op + ": the centre is not finite");
  return Status::Ok();
}

uint64_t radix_count_slots(const RadixParams& params, uint64_t prefixes) {
  return std::max<uint64_t>(prefixes, 1) << params.bits;
}

Status radix_histogram_reference(const TensorView& tensor, const RadixParams& params,
                                 std::span<const uint64_t> prefixes, std::span<uint64_t> counts,
                                 std::span<uint64_t, kRadixClasses> classes) {
  TM_RETURN_IF_ERROR(check_tensor_bytes(TM_OP_RADIX_HISTOGRAM, tensor));
  TM_RETURN_IF_ERROR(check_radix_params(params, prefixes.size()));
  if (counts.size() != radix_count_slots(params, prefixes.size())) {
    return Status::InvalidArgument(std::string(TM_OP_RADIX_HISTOGRAM) + ": the counts need " +
                                   std::to_string(radix_count_slots(params, prefixes.size())) + " slots, got " +
                                   std::to_string(counts.size()));
  }
  if (!dtype_decodable(tensor.dtype)) return Status::Unsupported(std::string(dtype_not_decodable_reason(tensor.dtype)));
  std::fill(counts.begin(), counts.end(), uint64_t{0});
  std::fill(classes.begin(), classes.end(), uint64_t{0});
  const uint64_t digit_mask = (uint64_t{1} << params.bits) - 1;
  const uint32_t prefix_shift = params.shift + params.bits;
  const DTypeInfo& info = dtype_info(tensor.dtype);
  const uint64_t chunk_blocks = std::max<uint64_t>(1, 65536 / info.block_elems);
  const uint64_t blocks = tensor.elems / info.block_elems;
  std::vector<float> values;
  for (uint64_t block = 0; block < blocks; block += chunk_blocks) {
    const uint64_t n = std::min(chunk_blocks, blocks - block);
    values.resize(n * info.block_elems);
    TM_RETURN_IF_ERROR(decode_to_f32(tensor.dtype, tensor.bytes.subspan(block * info.block_bytes, n * info.block_bytes),
                                     values.size(), values.data()));
    for (const float v : values) {
      if (std::isnan(v)) {
        ++classes[1];
        continue;
      }
      if (std::isinf(v)) {
        ++classes[v > 0 ? 2 : 3];
        continue;
      }
      ++classes[0];
      const uint64_t key = radix_key(v, params);
      const uint64_t digit = (key >> params.shift) & digit_mask;
      if (prefixes.empty()) {
        ++counts[digit];
        continue;
      }
      for (size_t p = 0; p < prefixes.size(); ++p) {
        if ((key >> prefix_shift) == prefixes[p]) ++counts[(p << params.bits) + digit];
      }
    }
  }
  return Status::Ok();
}

}  // namespace tensormorph::ops
