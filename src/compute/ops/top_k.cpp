#include "compute/ops/top_k.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <string>
#include <vector>

#include "tensormorph/decode.h"

namespace tensormorph::ops {

Status top_k_reference(const TensorView& tensor, std::span<uint64_t> indices, std::span<float> values,
                       uint64_t* written) {
  TM_RETURN_IF_ERROR(check_tensor_bytes(TM_OP_TOP_K, tensor));
  if (indices.size() != values.size() || indices.empty() || indices.size() > TM_TOP_K_MAX) {
    return Status::InvalidArgument(std::string(TM_OP_TOP_K) + ": k must be in [1, " + std::to_string(TM_TOP_K_MAX) +
                                   "] with as many indices as values");
  }
  if (!dtype_decodable(tensor.dtype)) return Status::Unsupported(std::string(dtype_not_decodable_reason(tensor.dtype)));
  std::vector<float> decoded(tensor.elems);
  TM_RETURN_IF_ERROR(decode_to_f32(tensor.dtype, tensor.bytes, tensor.elems, decoded.data()));
  std::vector<TopKEntry> finite;
  for (uint64_t i = 0; i < decoded.size(); ++i) {
    if (std::isfinite(decoded[i])) finite.push_back({magnitude_key(decoded[i]), i, decoded[i]});
  }
  const size_t n = std::min<size_t>(indices.size(), finite.size());
  std::partial_sort(finite.begin(), finite.begin() + static_cast<std::ptrdiff_t>(n), finite.end(), top_k_before);
  for (size_t i = 0; i < n; ++i) {
    indices[i] = finite[i].index;
    values[i] = finite[i].value;
  }
  std::fill(indices.begin() + static_cast<std::ptrdiff_t>(n), indices.end(), ~uint64_t{0});
  std::fill(values.begin() + static_cast<std::ptrdiff_t>(n), values.end(), std::bit_cast<float>(kTopKPaddingBits));
  *written = n;
  return Status::Ok();
}

}  // namespace tensormorph::ops
