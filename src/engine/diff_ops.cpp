#include "engine/diff_ops.h"

#include <algorithm>
#include <string>

#include "core/dtype_abi.h"
#include "tensormorph/decode.h"

namespace tensormorph::engine {
namespace {

/// Elements `bytes` holds of `dtype` (whole blocks), for messages.
std::string held(const DiffOperand& o) {
  const DTypeInfo& info = dtype_info(o.dtype);
  if (info.block_bytes == 0 || o.bytes.size() % info.block_bytes != 0) {
    return std::to_string(o.bytes.size()) + " bytes, not whole " + std::string(dtype_name(o.dtype)) + " blocks";
  }
  return std::to_string(o.bytes.size() / info.block_bytes * info.block_elems) + " " + std::string(dtype_name(o.dtype)) +
         " elements (" + std::to_string(o.bytes.size()) + " bytes)";
}

Status check_operands(const char* op, const DiffOperand& a, const DiffOperand& b, uint64_t elements) {
  for (const DiffOperand* o : {&a, &b}) {
    if (static_cast<size_t>(o->dtype) >= static_cast<size_t>(DType::kCount)) {
      return Status::InvalidArgument(std::string(op) + ": unknown dtype value " + std::to_string(static_cast<int>(o->dtype)));
    }
  }
  auto need_a = dtype_storage_bytes(a.dtype, elements);
  auto need_b = dtype_storage_bytes(b.dtype, elements);
  if (!need_a.ok() || !need_b.ok() || *need_a != a.bytes.size() || *need_b != b.bytes.size()) {
    return Status::InvalidArgument(std::string(op) + ": comparing " + std::to_string(elements) + " elements, but A holds " +
                                   held(a) + " and B holds " + held(b));
  }
  for (const DiffOperand* o : {&a, &b}) {
    if (!dtype_decodable(o->dtype)) {
      return Status::Unsupported(std::string(op) + ": " + std::string(dtype_not_decodable_reason(o->dtype)));
    }
  }
  return Status::Ok();
}

uint64_t band_key(uint64_t key, uint64_t band) {
  if (key == 0) return 0;
  uint64_t h = key ^ ((band + 0x9e3779b97f4a7c15ull) + (key << 6) + (key >> 2));
  return h == 0 ? 1 : h;
}

/// The request over pairs [first, first + n) of a and b.
compute::OpRequest band_request(const char* op, const DiffOperand& a, const DiffOperand& b, uint64_t first, uint64_t n,
                                uint64_t band, uint32_t max_threads) {
  compute::OpRequest req;
  req.op = op;
  req.subject = pair_subject(a.name, b.name);
  for (const DiffOperand* o : {&a, &b}) {
    const DTypeInfo& info = dtype_info(o->dtype);
    const auto bytes = o->bytes.subspan(first / info.block_elems * info.block_bytes, n / info.block_elems * info.block_bytes);
    req.inputs.push_back({to_abi_dtype(o->dtype), {n}, bytes, band_key(o->residency_key, band)});
  }
  if (a.offset != 0) req.attributes.push_back({TM_ATTR_A_OFFSET, 0, a.offset});
  if (b.offset != 0) req.attributes.push_back({TM_ATTR_B_OFFSET, 0, b.offset});
  req.max_threads = max_threads;
  return req;
}

}  // namespace

std::string pair_subject(std::string_view a, std::string_view b) {
  if (a == b || b.empty()) return std::string(a);
  if (a.empty()) return std::string(b);
  return std::string(a) + " vs " + std::string(b);
}

Result<std::vector<TM_DiffStats>> run_diff_stats(compute::Scheduler& scheduler, const DiffOperand& a,
                                                 const DiffOperand& b, uint64_t elements, uint64_t element_offset,
                                                 Records* records, uint32_t max_threads) {
  TM_RETURN_IF_ERROR(check_operands(TM_OP_DIFF_STATS, a, b, elements));
  std::vector<TM_DiffStats> out((elements + TM_DIFF_CHUNK - 1) / TM_DIFF_CHUNK);
  for (uint64_t first = 0, band = 0; first < elements; first += kDiffBandElems, ++band) {
    const uint64_t n = std::min(kDiffBandElems, elements - first);
    compute::OpRequest req = band_request(TM_OP_DIFF_STATS, a, b, first, n, band, max_threads);
    if (element_offset + first != 0) {
      req.attributes.push_back({TM_ATTR_ELEMENT_OFFSET, static_cast<int64_t>(element_offset + first), 0});
    }
    // Bands start at multiples of the chunk, so their records are a run of the whole's.
    const auto records_out = std::span(out).subspan(first / TM_DIFF_CHUNK, (n + TM_DIFF_CHUNK - 1) / TM_DIFF_CHUNK);
    req.outputs.push_back({TM_DTYPE_U8, {records_out.size() * sizeof(TM_DiffStats)}, std::as_writable_bytes(records_out)});
    TM_RETURN_IF_ERROR(run_exact(scheduler, req, records));
  }
  return out;
}

Result<TM_DiffStats> diff_stats_total(compute::Scheduler& scheduler, const DiffOperand& a, const DiffOperand& b,
                                      uint64_t elements, uint64_t element_offset, Records* records, uint32_t max_threads) {
  TM_ASSIGN_OR_RETURN(const auto chunks, run_diff_stats(scheduler, a, b, elements, element_offset, records, max_threads));
  return ops::merge_diff_stats(chunks);
}

Result<std::vector<float>> run_subtract(compute::Scheduler& scheduler, const DiffOperand& a, const DiffOperand& b,
                                        uint64_t elements, Records* records, uint32_t max_threads) {
  TM_RETURN_IF_ERROR(check_operands(TM_OP_SUBTRACT, a, b, elements));
  std::vector<float> out(elements);
  for (uint64_t first = 0, band = 0; first < elements; first += kDiffBandElems, ++band) {
    const uint64_t n = std::min(kDiffBandElems, elements - first);
    compute::OpRequest req = band_request(TM_OP_SUBTRACT, a, b, first, n, band, max_threads);
    req.outputs.push_back({TM_DTYPE_F32, {n}, std::as_writable_bytes(std::span(out).subspan(first, n))});
    TM_RETURN_IF_ERROR(run_exact(scheduler, req, records));
  }
  return out;
}

}  // namespace tensormorph::engine
