// The reference tm.histogram@1 and tm.decode@1 (tile statistics live in reference_tile_stats.cpp).
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "compute/ops/reference.h"
#include "tensormorph/decode.h"

namespace tensormorph::ops {

Status check_tensor_bytes(const char* op, const TensorView& tensor) {
  if (static_cast<size_t>(tensor.dtype) >= static_cast<size_t>(DType::kCount)) {
    return Status::InvalidArgument(std::string(op) + ": unknown dtype value " +
                                   std::to_string(static_cast<int>(tensor.dtype)));
  }
  auto expected = dtype_storage_bytes(tensor.dtype, tensor.elems);
  if (!expected.ok()) return Status::InvalidArgument(std::string(op) + ": " + expected.status().message());
  if (tensor.bytes.size() != *expected) {
    return Status::InvalidArgument(std::string(op) + ": " + std::to_string(tensor.elems) + " " +
                                   std::string(dtype_name(tensor.dtype)) + " elements take " +
                                   std::to_string(*expected) + " bytes, but " + std::to_string(tensor.bytes.size()) +
                                   " were given");
  }
  return Status::Ok();
}

Status check_histogram_params(double lo, double hi, uint64_t bins, uint64_t out_counts) {
  if (!std::isfinite(lo) || !std::isfinite(hi) || !(lo < hi)) {
    return Status::InvalidArgument("histogram: the range [" + std::to_string(lo) + ", " + std::to_string(hi) +
                                   "] needs finite lo < hi");
  }
  if (bins < 1 || bins > kMaxHistogramBins) {
    return Status::InvalidArgument("histogram: bins " + std::to_string(bins) + " is outside [1, " +
                                   std::to_string(kMaxHistogramBins) + "]");
  }
  if (!std::isfinite(static_cast<double>(bins) / (hi - lo))) {
    return Status::InvalidArgument("histogram: bins / (hi - lo) overflows for the range [" + std::to_string(lo) +
                                   ", " + std::to_string(hi) + "]");
  }
  if (out_counts != bins + 3) {
    return Status::InvalidArgument("histogram: " + std::to_string(bins) + " bins need an output of " +
                                   std::to_string(bins + 3) + " counts, but it holds " + std::to_string(out_counts));
  }
  return Status::Ok();
}

Status check_histogram_args(const TensorView& tensor, double lo, double hi, uint64_t bins,
                            uint64_t out_counts) {
  TM_RETURN_IF_ERROR(check_tensor_bytes("histogram", tensor));
  return check_histogram_params(lo, hi, bins, out_counts);
}

Status histogram_reference(const TensorView& tensor, double lo, double hi, uint64_t bins,
                           std::span<uint64_t> out) {
  TM_RETURN_IF_ERROR(check_histogram_args(tensor, lo, hi, bins, out.size()));
  const double scale = static_cast<double>(bins) / (hi - lo);
  std::fill(out.begin(), out.end(), uint64_t{0});
  const DTypeInfo& info = dtype_info(tensor.dtype);
  const uint64_t chunk_blocks = std::max<uint64_t>(1, 65536 / info.block_elems);
  const uint64_t blocks = tensor.elems / info.block_elems;
  std::vector<float> values;
  for (uint64_t block = 0; block < blocks; block += chunk_blocks) {
    const uint64_t n = std::min(chunk_blocks, blocks - block);
    values.resize(n * info.block_elems);
    TM_RETURN_IF_ERROR(decode_to_f32(tensor.dtype, tensor.bytes.subspan(block * info.block_bytes, n * info.block_bytes),
                                     values.size(), values.data()));
    for (float v : values) ++out[histogram_slot(v, lo, hi, scale, bins)];
  }
  return Status::Ok();
}

Status check_decode_args(const TensorView& tensor, uint64_t out_elems) {
  TM_RETURN_IF_ERROR(check_tensor_bytes("decode", tensor));
  if (out_elems != tensor.elems) {
    return Status::InvalidArgument("decode: " + std::to_string(tensor.elems) + " elements need an output of as many " +
                                   "floats, but it holds " + std::to_string(out_elems));
  }
  return Status::Ok();
}

Status decode_reference(const TensorView& tensor, std::span<float> out) {
  TM_RETURN_IF_ERROR(check_decode_args(tensor, out.size()));
  return decode_to_f32(tensor.dtype, tensor.bytes, tensor.elems, out.data());
}

}  // namespace tensormorph::ops
