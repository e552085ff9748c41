#include "backends/cpu/cpu_spectrum.h"

#include <cfloat>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "compute/ops/op_instance.h"
#include "compute/ops/spectrum.h"
#include "core/dtype_abi.h"
#include "tensormorph/decode.h"

namespace tensormorph::cpu {
namespace {

/// Floating-point operations (as spectrum_flops counts them) per nanosecond per core: the SVD's
/// band reduction and the Gram matrix are matrix products with a narrow inner dimension, the range
/// finder's too; the band's plane rotations run on one core.
double flops_per_ns_per_core(ops::SpectrumMethod method) { return method == ops::SpectrumMethod::kSvd ? 20.0 : 6.0; }

TM_Exactness exactness_of(ops::SpectrumMethod method) {
  return method == ops::SpectrumMethod::kRandomized ? TM_EXACT_APPROXIMATE : TM_EXACT_BOUNDED;
}

}  // namespace

void spectrum_support(const TM_OpQuery& query, TM_OpSupport& out) {
  const auto method = ops::spectrum_method_of(query.op);
  const auto dtype = from_abi_dtype(query.input_dtype);
  out.level = TM_SUPPORT_NONE;
  out.exactness = method ? exactness_of(*method) : TM_EXACT_BITWISE;
  // The bound's coefficient: |s_i - sigma_i| <= error_bound * max(rows, cols) * s_1 (tm.spectrum@1).
  out.error_bound = method == ops::SpectrumMethod::kSvd ? ops::kSpectrumSvdConstant * DBL_EPSILON : 0;
  std::string reason;
  if (!dtype) {
    reason = "unknown dtype id " + std::to_string(static_cast<int>(query.input_dtype));
  } else if (!dtype_decodable(*dtype)) {
    reason = std::string(dtype_name(*dtype)) + " is not decodable yet: " + std::string(dtype_not_decodable_reason(*dtype));
  } else if (query.shape_class != TM_SHAPE_MATRIX) {
    reason = std::string(query.op) + " takes a 2-D tensor";
  } else {
    out.level = TM_SUPPORT_FULL;
  }
  std::snprintf(out.reason, sizeof out.reason, "%s", reason.c_str());
}

Result<TM_CostEstimate> spectrum_estimate(const TM_OpInstance& op, uint32_t threads) {
  TM_ASSIGN_OR_RETURN(const ops::SpectrumArgs a, ops::parse_spectrum(op));
  if (!dtype_decodable(a.input.dtype)) return Status::Unimplemented(std::string(dtype_name(a.input.dtype)) + " is not decodable");
  TM_CostEstimate cost{};
  cost.struct_size = sizeof cost;
  cost.bytes_read = a.input.arg.nbytes;
  cost.bytes_written = a.values.arg.nbytes + a.bounds.arg.nbytes;
  cost.working_bytes = ops::spectrum_working_bytes(a.method, a.rows, a.cols, a.count);
  cost.compute_ns = ops::spectrum_flops(a.method, a.rows, a.cols, a.count) /
                    (flops_per_ns_per_core(a.method) * std::max<uint32_t>(threads, 1));
  return cost;
}

Status spectrum_execute(const TM_OpInstance& op, const TM_ExecutionPolicy& policy, TM_ExecutionReport& report) {
  TM_ASSIGN_OR_RETURN(const ops::SpectrumArgs a, ops::parse_spectrum(op));
  if (a.input.arg.host_data == nullptr || a.values.arg.host_out == nullptr || a.bounds.arg.host_out == nullptr) {
    return Status::InvalidArgument(std::string(ops::spectrum_op_id(a.method)) + ": the CPU reads and writes host memory only");
  }
  TM_RETURN_IF_ERROR(ops::check_exactness_floor(exactness_of(a.method), 0, policy));
  const auto start = std::chrono::steady_clock::now();
  std::vector<double> values(a.count), bounds(a.count);
  const ops::MatrixView matrix{a.input.dtype,
                               {static_cast<const std::byte*>(a.input.arg.host_data) + a.input.arg.byte_offset, a.input.arg.nbytes},
                               a.rows, a.cols};
  TM_RETURN_IF_ERROR(ops::compute_spectrum(matrix, a.method, values, bounds, policy.max_threads));
  const double relative = values[0] > 0 ? bounds[0] / values[0] : 0;
  TM_RETURN_IF_ERROR(ops::check_exactness_floor(exactness_of(a.method), relative, policy));
  std::memcpy(static_cast<std::byte*>(a.values.arg.host_out) + a.values.arg.byte_offset, values.data(), a.values.arg.nbytes);
  std::memcpy(static_cast<std::byte*>(a.bounds.arg.host_out) + a.bounds.arg.byte_offset, bounds.data(), a.bounds.arg.nbytes);
  report.exactness = exactness_of(a.method);
  report.error_bound = relative;
  report.device_ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count();
  report.bytes_read = a.input.arg.nbytes;
  report.bytes_written = a.values.arg.nbytes + a.bounds.arg.nbytes;
  report.output_nbytes[0] = a.values.arg.nbytes;
  report.output_nbytes[1] = a.bounds.arg.nbytes;
  return Status::Ok();
}

}  // namespace tensormorph::cpu
