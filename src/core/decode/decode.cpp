// Dispatch from a dtype to its family's block decoder, with the size checks every caller needs.
#include <algorithm>
#include <string>
#include <vector>

#include "core/decode/decode_internal.h"
#include "tensormorph/decode.h"

namespace tensormorph {
namespace {

using decode_internal::BlockDecoder;

std::optional<BlockDecoder> find_decoder(DType dtype) {
  if (static_cast<size_t>(dtype) >= static_cast<size_t>(DType::kCount)) return std::nullopt;
  for (auto find : {&decode_internal::find_scalar_decoder, &decode_internal::find_ggml_legacy_decoder,
                    &decode_internal::find_ggml_kquant_decoder, &decode_internal::find_ggml_iq_decoder,
                    &decode_internal::find_ggml_ternary_decoder, &decode_internal::find_mxfp4_decoder}) {
    if (auto decoder = find(dtype)) return decoder;
  }
  return std::nullopt;
}

std::string name_of(DType dtype) { return std::string(dtype_name(dtype)); }

/// Checks everything decode_to_f32/f64 promise about their arguments; on success `blocks` is the
/// number of whole blocks to decode.
template <typename Out>
Status check_request(DType dtype, std::span<const std::byte> src, uint64_t elems, const Out* out,
                     const std::optional<BlockDecoder>& decoder, uint64_t& blocks) {
  if (static_cast<size_t>(dtype) >= static_cast<size_t>(DType::kCount)) {
    return Status::InvalidArgument("cannot decode dtype value " + std::to_string(static_cast<int>(dtype)) +
                                   ": not a known dtype");
  }
  if (!decoder) return Status::Unsupported(std::string(dtype_not_decodable_reason(dtype)));
  const DTypeInfo& info = dtype_info(dtype);
  if (info.block_elems != decoder->block_elems || info.block_bytes != decoder->block_bytes) {
    return Status::Internal(name_of(dtype) + ": the dtype table says " + std::to_string(info.block_elems) +
                            " elements in " + std::to_string(info.block_bytes) +
                            " bytes per block, but the decoder expects " + std::to_string(decoder->block_elems) +
                            " in " + std::to_string(decoder->block_bytes));
  }
  if (elems % decoder->block_elems != 0) {
    return Status::InvalidArgument(name_of(dtype) + ": " + std::to_string(elems) +
                                   " elements is not a whole number of " +
                                   std::to_string(decoder->block_elems) + "-element blocks");
  }
  blocks = elems / decoder->block_elems;
  uint64_t expected_bytes = 0;
  if (__builtin_mul_overflow(blocks, uint64_t{decoder->block_bytes}, &expected_bytes)) {
    return Status::InvalidArgument(name_of(dtype) + ": the byte size of " + std::to_string(elems) +
                                   " elements overflows 64 bits");
  }
  if (src.size() != expected_bytes) {
    return Status::InvalidArgument(name_of(dtype) + ": " + std::to_string(elems) + " elements take " +
                                   std::to_string(expected_bytes) + " bytes, but the source span holds " +
                                   std::to_string(src.size()));
  }
  if (elems != 0 && out == nullptr) {
    return Status::InvalidArgument(name_of(dtype) + ": null output buffer for " + std::to_string(elems) +
                                   " elements");
  }
  return Status::Ok();
}

}  // namespace

bool dtype_decodable(DType dtype) { return find_decoder(dtype).has_value(); }

std::string_view dtype_not_decodable_reason(DType dtype) {
  if (static_cast<size_t>(dtype) >= static_cast<size_t>(DType::kCount)) return "not a known dtype";
  if (dtype_decodable(dtype)) return {};
  switch (dtype) {
    case DType::kC64: return "C64 is complex-valued and has no real float decoding";
    default: return "decoding this dtype is not implemented";
  }
}

Status decode_to_f32(DType dtype, std::span<const std::byte> src, uint64_t elems, float* out) {
  const std::optional<BlockDecoder> decoder = find_decoder(dtype);
  uint64_t blocks = 0;
  TM_RETURN_IF_ERROR(check_request(dtype, src, elems, out, decoder, blocks));
  if (blocks != 0) decoder->to_f32(src.data(), blocks, out);
  return Status::Ok();
}

Status decode_to_f64(DType dtype, std::span<const std::byte> src, uint64_t elems, double* out) {
  const std::optional<BlockDecoder> decoder = find_decoder(dtype);
  uint64_t blocks = 0;
  TM_RETURN_IF_ERROR(check_request(dtype, src, elems, out, decoder, blocks));
  if (blocks == 0) return Status::Ok();
  if (decoder->to_f64 != nullptr) {
    decoder->to_f64(src.data(), blocks, out);
    return Status::Ok();
  }
  // Quantized types are defined by ggml's float32 arithmetic: decode a chunk to float32, widen.
  const uint64_t chunk_blocks = std::max<uint64_t>(1, 16384 / decoder->block_elems);
  std::vector<float> chunk(chunk_blocks * decoder->block_elems);
  const std::byte* in = src.data();
  for (uint64_t done = 0; done < blocks;) {
    const uint64_t n = std::min(chunk_blocks, blocks - done);
    decoder->to_f32(in, n, chunk.data());
    const uint64_t values = n * decoder->block_elems;
    std::copy_n(chunk.data(), values, out);  // float -> double is exact
    in += n * decoder->block_bytes;
    out += values;
    done += n;
  }
  return Status::Ok();
}

}  // namespace tensormorph
