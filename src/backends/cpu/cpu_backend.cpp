// The CPU backend bound to the plugin ABI: tier 1, every core operation for every decodable
// dtype, bit-identical to the reference implementations. Nothing here throws across the ABI.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <vector>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/cpu_calibration.h"
#include "backends/cpu/cpu_device.h"
#include "backends/cpu/cpu_kernels.h"
#include "backends/cpu/cpu_render.h"
#include "backends/cpu/tile_stats/tile_stats.h"
#include "core/dtype_abi.h"
#include "compute/ops/op_instance.h"
#include "compute/ops/plugin_error.h"
#include "compute/ops/render_tile.h"
#include "backends/cpu/cpu_spectrum.h"
#include "tensormorph/decode.h"

namespace tensormorph::cpu {
namespace {

constexpr const char* kName = "cpu";
constexpr const char* kVersion = "1.0";
constexpr std::align_val_t kBufferAlignment{64};

/// The backend behind a TM_Backend* (the opaque type is never defined; pointers are cast).
struct CpuBackend {
  std::string device_name;
  uint64_t memory_bytes = 0;
  uint32_t threads = 1;
  double bandwidth_gbps = 0;
  Isa isa = Isa::kBaseline;
  ScratchPool tile_scratch;  ///< tile_stats scratch kept between this instance's calls
};

/// A host-memory buffer behind a TM_Buffer*.
struct CpuBuffer {
  std::byte* data = nullptr;
  uint64_t size = 0;
  ~CpuBuffer() { ::operator delete[](data, kBufferAlignment); }
};

CpuBackend* backend_of(TM_Backend* b) { return reinterpret_cast<CpuBackend*>(b); }
CpuBuffer* buffer_of(TM_Buffer* b) { return reinterpret_cast<CpuBuffer*>(b); }

Status require(bool condition, const char* what) {
  return condition ? Status::Ok() : Status::InvalidArgument(std::string(what) + " is null");
}

/// Applies one "key=value" option.
Status apply_option(CpuBackend& backend, const std::string& key, const std::string& value) {
  if (key == "bandwidth_gbps") {
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (end == value.c_str() || *end != '\0' || !(v > 0) || v > 1e6) {
      return Status::InvalidArgument("cpu option bandwidth_gbps=" + value + " is not a positive number");
    }
    backend.bandwidth_gbps = v;
    return Status::Ok();
  }
  if (key == "isa") {
    auto isa = isa_from_name(value);
    if (!isa) return Status::InvalidArgument("cpu option isa=" + value + " is not baseline, avx2 or avx512");
    if (!isa_supported(*isa)) return Status::Unsupported("cpu option isa=" + value + ": this CPU cannot run it");
    backend.isa = *isa;
    return Status::Ok();
  }
  return Status::InvalidArgument("unknown cpu option '" + key + "' (known: bandwidth_gbps, isa)");
}

Status apply_options(CpuBackend& backend, const char* options) {
  if (options == nullptr) return Status::Ok();
  const std::string text = options;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(';', start);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(start, end - start);
    if (!item.empty()) {
      const size_t eq = item.find('=');
      if (eq == std::string::npos) return Status::InvalidArgument("cpu option '" + item + "' is not key=value");
      TM_RETURN_IF_ERROR(apply_option(backend, item.substr(0, eq), item.substr(eq + 1)));
    }
    start = end + 1;
  }
  return Status::Ok();
}

/// Host memory of an argument: its host pointer or buffer, checked to hold nbytes at byte_offset.
template <typename Pointer>
Result<Pointer> argument_memory(const ops::TensorArgument& t, Pointer host, const char* role) {
  if (t.arg.buffer == nullptr) {
    if (host == nullptr) return Pointer{nullptr};
    return host + t.arg.byte_offset;
  }
  const CpuBuffer* buffer = buffer_of(t.arg.buffer);
  uint64_t end = 0;
  if (__builtin_add_overflow(t.arg.byte_offset, t.arg.nbytes, &end) || end > buffer->size) {
    return Status::InvalidArgument(std::string(role) + ": bytes [" + std::to_string(t.arg.byte_offset) + ", +" +
                                   std::to_string(t.arg.nbytes) + ") exceed the buffer's " +
                                   std::to_string(buffer->size) + " bytes");
  }
  return static_cast<Pointer>(buffer->data + t.arg.byte_offset);
}

Result<std::span<const std::byte>> input_bytes(const ops::TensorArgument& t) {
  TM_ASSIGN_OR_RETURN(const std::byte* p,
                      argument_memory(t, static_cast<const std::byte*>(t.arg.host_data), "input"));
  return std::span<const std::byte>(p, t.arg.nbytes);
}

Result<std::byte*> output_bytes(const ops::TensorArgument& t) {
  return argument_memory(t, static_cast<std::byte*>(t.arg.host_out), "output");
}

/// Runs `compute` on a correctly aligned span of T over `dest` (nbytes), staging through a
/// temporary when the caller's memory is misaligned for T.
template <typename T, typename Compute>
Status with_aligned_output(std::byte* dest, uint64_t count, Compute&& compute) {
  if (reinterpret_cast<uintptr_t>(dest) % alignof(T) == 0) {
    return compute(std::span<T>(reinterpret_cast<T*>(dest), count));
  }
  std::vector<T> staging(count);
  TM_RETURN_IF_ERROR(compute(std::span<T>(staging)));
  if (count != 0) std::memcpy(dest, staging.data(), count * sizeof(T));
  return Status::Ok();
}

Status not_decodable(DType dtype) {
  return Status::Unimplemented(std::string(dtype_name(dtype)) + " is not decodable yet: " +
                               std::string(dtype_not_decodable_reason(dtype)));
}

/// What a parsed instance reads and writes, for estimates and reports.
struct Traffic {
  DType dtype = DType::kF32;
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
  double slowdown = 1.0;  ///< work per byte relative to a plain streaming read
  uint64_t working_bytes = 0;  ///< memory beyond inputs and outputs, on the backend's threads
};

/// Relative cost per stored byte of turning `dtype` into floats.
double decode_factor(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kBF16:
    case DType::kF16: return 1.0;
    case DType::kQ8_0: return 1.4;
    case DType::kQ4_K: return 2.0;
    default: return dtype_info(dtype).is_quantized ? 3.0 : 2.0;
  }
}

Result<Traffic> traffic_of(const TM_OpInstance& op, ops::CoreOp kind, uint32_t threads) {
  Traffic t;
  switch (kind) {
    case ops::CoreOp::kDecode: {
      TM_ASSIGN_OR_RETURN(auto args, ops::parse_decode(op));
      t = {args.input.dtype, args.input.arg.nbytes, args.output.arg.nbytes, decode_factor(args.input.dtype)};
      break;
    }
    case ops::CoreOp::kTileStats: {
      TM_ASSIGN_OR_RETURN(auto args, ops::parse_tile_stats(op));
      const DTypeInfo& info = dtype_info(args.input.dtype);
      const uint64_t first_block = args.range.col_begin / info.block_elems;
      const uint64_t end_block = (args.range.col_end + info.block_elems - 1) / info.block_elems;
      t.dtype = args.input.dtype;
      t.bytes_read = (args.range.row_end - args.range.row_begin) * (end_block - first_block) * info.block_bytes;
      t.bytes_written = args.output.arg.nbytes;
      t.slowdown = decode_factor(args.input.dtype);
      break;
    }
    case ops::CoreOp::kHistogram: {
      TM_ASSIGN_OR_RETURN(auto args, ops::parse_histogram(op));
      // Binning is scalar, about four times the cost of streaming the decoded float32 values.
      const DTypeInfo& info = dtype_info(args.input.dtype);
      const double float_bytes_per_byte = 4.0 * info.block_elems / info.block_bytes;
      t = {args.input.dtype, args.input.arg.nbytes, args.output.arg.nbytes,
           4.0 * float_bytes_per_byte * decode_factor(args.input.dtype), histogram_working_bytes(args.bins, threads)};
      break;
    }
    case ops::CoreOp::kExactSummary: {
      TM_ASSIGN_OR_RETURN(auto args, ops::parse_exact_summary(op));
      // One sequential scalar pass (three for F64: extremes, scaled sum, scaled squares).
      const double passes = args.input.dtype == DType::kF64 ? 3.0 : 1.0;
      t = {args.input.dtype, args.input.arg.nbytes, args.output.arg.nbytes, 4.0 * passes};
      break;
    }
    case ops::CoreOp::kRadixHistogram: {
      TM_ASSIGN_OR_RETURN(auto args, ops::parse_radix_histogram(op));
      // Decoding, then one scattered increment per element, like tm.histogram@1.
      const DTypeInfo& info = dtype_info(args.input.dtype);
      const double float_bytes_per_byte = 4.0 * info.block_elems / info.block_bytes;
      t = {args.input.dtype, args.input.arg.nbytes + args.prefixes.arg.nbytes,
           args.counts.arg.nbytes + args.classes.arg.nbytes, 4.0 * float_bytes_per_byte * decode_factor(args.input.dtype),
           radix_histogram_working_bytes(args.counts.arg.nbytes / sizeof(uint64_t), args.prefixes.elems > 0, threads)};
      break;
    }
    case ops::CoreOp::kChannelStats: {
      TM_ASSIGN_OR_RETURN(auto args, ops::parse_channel_stats(op));
      // Decoding, then two scalar passes of extremes (row and column) per element.
      const DTypeInfo& info = dtype_info(args.input.dtype);
      const double float_bytes_per_byte = 4.0 * info.block_elems / info.block_bytes;
      t = {args.input.dtype, args.input.arg.nbytes, args.rows_out.arg.nbytes + args.cols_out.arg.nbytes,
           6.0 * float_bytes_per_byte * decode_factor(args.input.dtype),
           channel_stats_working_bytes(args.rows, args.cols, threads)};
      break;
    }
    case ops::CoreOp::kTopK: {
      TM_ASSIGN_OR_RETURN(auto args, ops::parse_top_k(op));
      // Decoding, then a compare per element with the heap's worst entry.
      const DTypeInfo& info = dtype_info(args.input.dtype);
      const double float_bytes_per_byte = 4.0 * info.block_elems / info.block_bytes;
      t = {args.input.dtype, args.input.arg.nbytes, args.indices.arg.nbytes + args.values.arg.nbytes,
           float_bytes_per_byte * decode_factor(args.input.dtype), top_k_working_bytes(args.k, threads)};
      break;
    }
    case ops::CoreOp::kDiffStats:
    case ops::CoreOp::kSubtract: {
      TM_ASSIGN_OR_RETURN(auto args, kind == ops::CoreOp::kDiffStats ? ops::parse_diff_stats(op) : ops::parse_subtract(op));
      // Both inputs streamed once, decoded as needed, then one vectorized pass over the pairs
      // (float64 sums for diff_stats); modelled per stored byte like a decode of the costlier side.
      const double a_factor = decode_factor(args.a.dtype), b_factor = decode_factor(args.b.dtype);
      const uint64_t read = args.a.arg.nbytes + args.b.arg.nbytes;
      const double weighted = static_cast<double>(args.a.arg.nbytes) * a_factor + static_cast<double>(args.b.arg.nbytes) * b_factor;
      const double pass = kind == ops::CoreOp::kDiffStats ? 1.5 : 1.0;
      // The dtype checked for decodability: the side that is not decodable, if any.
      t = {dtype_decodable(args.a.dtype) ? args.b.dtype : args.a.dtype, read, args.output.arg.nbytes,
           read == 0 ? 1.0 : pass * weighted / static_cast<double>(read), diff_working_bytes(threads)};
      break;
    }
  }
  return t;
}

Result<ops::CoreOp> core_op_of(const TM_OpInstance& op) {
  const TM_OpInstance instance = ops::read_abi_struct(&op);
  if (instance.op == nullptr) return Status::InvalidArgument("operation instance names no operation");
  auto kind = ops::core_op_from_id(instance.op);
  if (!kind) return Status::Unimplemented(std::string("cpu does not implement ") + instance.op);
  return *kind;
}

Status run_decode(const TM_OpInstance& op, uint32_t threads) {
  TM_ASSIGN_OR_RETURN(auto args, ops::parse_decode(op));
  if (!dtype_decodable(args.input.dtype)) return not_decodable(args.input.dtype);
  TM_ASSIGN_OR_RETURN(auto in, input_bytes(args.input));
  TM_ASSIGN_OR_RETURN(std::byte * out, output_bytes(args.output));
  const ops::TensorView tensor{args.input.dtype, in, args.input.elems};
  return with_aligned_output<float>(out, args.output.elems,
                                    [&](std::span<float> values) { return decode(tensor, values, threads); });
}

Status run_tile_stats(const TM_OpInstance& op, uint32_t threads, Isa isa, ScratchPool& scratch) {
  TM_ASSIGN_OR_RETURN(auto args, ops::parse_tile_stats(op));
  if (!dtype_decodable(args.input.dtype)) return not_decodable(args.input.dtype);
  TM_ASSIGN_OR_RETURN(auto in, input_bytes(args.input));
  TM_ASSIGN_OR_RETURN(std::byte * out, output_bytes(args.output));
  const ops::MatrixView matrix{args.input.dtype, in, args.rows, args.cols};
  return with_aligned_output<TM_TileStats>(out, args.grid.count(), [&](std::span<TM_TileStats> stats) {
    return tile_stats(scratch, matrix, args.range, args.tile, stats, threads, isa);
  });
}

Status run_histogram(const TM_OpInstance& op, uint32_t threads) {
  TM_ASSIGN_OR_RETURN(auto args, ops::parse_histogram(op));
  if (!dtype_decodable(args.input.dtype)) return not_decodable(args.input.dtype);
  TM_ASSIGN_OR_RETURN(auto in, input_bytes(args.input));
  TM_ASSIGN_OR_RETURN(std::byte * out, output_bytes(args.output));
  const ops::TensorView tensor{args.input.dtype, in, args.input.elems};
  return with_aligned_output<uint64_t>(out, args.output.elems, [&](std::span<uint64_t> counts) {
    return histogram(tensor, args.lo, args.hi, args.bins, counts, threads);
  });
}

Status run_radix_histogram(const TM_OpInstance& op, uint32_t threads) {
  TM_ASSIGN_OR_RETURN(auto args, ops::parse_radix_histogram(op));
  if (!dtype_decodable(args.input.dtype)) return not_decodable(args.input.dtype);
  TM_ASSIGN_OR_RETURN(auto in, input_bytes(args.input));
  TM_ASSIGN_OR_RETURN(auto prefix_bytes, input_bytes(args.prefixes));
  TM_ASSIGN_OR_RETURN(std::byte * counts_out, output_bytes(args.counts));
  TM_ASSIGN_OR_RETURN(std::byte * classes_out, output_bytes(args.classes));
  std::vector<uint64_t> prefixes(args.prefixes.elems);
  if (!prefixes.empty()) std::memcpy(prefixes.data(), prefix_bytes.data(), prefix_bytes.size());
  std::array<uint64_t, ops::kRadixClasses> classes{};
  const ops::TensorView tensor{args.input.dtype, in, args.input.elems};
  TM_RETURN_IF_ERROR(with_aligned_output<uint64_t>(counts_out, args.counts.elems, [&](std::span<uint64_t> counts) {
    return radix_histogram(tensor, args.params, prefixes, counts, classes, threads);
  }));
  std::memcpy(classes_out, classes.data(), sizeof classes);
  return Status::Ok();
}

Status run_channel_stats(const TM_OpInstance& op, uint32_t threads) {
  TM_ASSIGN_OR_RETURN(auto args, ops::parse_channel_stats(op));
  if (!dtype_decodable(args.input.dtype)) return not_decodable(args.input.dtype);
  TM_ASSIGN_OR_RETURN(auto in, input_bytes(args.input));
  TM_ASSIGN_OR_RETURN(std::byte * rows_out, output_bytes(args.rows_out));
  TM_ASSIGN_OR_RETURN(std::byte * cols_out, output_bytes(args.cols_out));
  std::vector<TM_TileStats> rows(args.rows), cols(args.cols);
  TM_RETURN_IF_ERROR(channel_stats({args.input.dtype, in, args.rows, args.cols}, rows, cols, threads));
  if (!rows.empty()) std::memcpy(rows_out, rows.data(), rows.size() * sizeof(TM_TileStats));
  if (!cols.empty()) std::memcpy(cols_out, cols.data(), cols.size() * sizeof(TM_TileStats));
  return Status::Ok();
}

Result<uint64_t> run_top_k(const TM_OpInstance& op, uint32_t threads) {
  TM_ASSIGN_OR_RETURN(auto args, ops::parse_top_k(op));
  if (!dtype_decodable(args.input.dtype)) return not_decodable(args.input.dtype);
  TM_ASSIGN_OR_RETURN(auto in, input_bytes(args.input));
  TM_ASSIGN_OR_RETURN(std::byte * indices_out, output_bytes(args.indices));
  TM_ASSIGN_OR_RETURN(std::byte * values_out, output_bytes(args.values));
  std::vector<uint64_t> indices(args.k);
  std::vector<float> values(args.k);
  uint64_t written = 0;
  TM_RETURN_IF_ERROR(top_k({args.input.dtype, in, args.input.elems}, indices, values, &written, threads));
  std::memcpy(indices_out, indices.data(), indices.size() * sizeof(uint64_t));
  std::memcpy(values_out, values.data(), values.size() * sizeof(float));
  return written;
}

ops::DiffSide side_of(const ops::TensorArgument& t, std::span<const std::byte> bytes, const ops::DiffOffset& offset) {
  return {{t.dtype, bytes, t.elems}, offset};
}

Status run_diff_stats(const TM_OpInstance& op, uint32_t threads) {
  TM_ASSIGN_OR_RETURN(auto args, ops::parse_diff_stats(op));
  for (DType d : {args.a.dtype, args.b.dtype}) {
    if (!dtype_decodable(d)) return not_decodable(d);
  }
  TM_ASSIGN_OR_RETURN(auto a, input_bytes(args.a));
  TM_ASSIGN_OR_RETURN(auto b, input_bytes(args.b));
  TM_ASSIGN_OR_RETURN(std::byte * out, output_bytes(args.output));
  return with_aligned_output<TM_DiffStats>(out, args.chunks, [&](std::span<TM_DiffStats> records) {
    return diff_stats(side_of(args.a, a, args.a_offset), side_of(args.b, b, args.b_offset), args.element_offset, records,
                      threads);
  });
}

Status run_subtract(const TM_OpInstance& op, uint32_t threads) {
  TM_ASSIGN_OR_RETURN(auto args, ops::parse_subtract(op));
  for (DType d : {args.a.dtype, args.b.dtype}) {
    if (!dtype_decodable(d)) return not_decodable(d);
  }
  TM_ASSIGN_OR_RETURN(auto a, input_bytes(args.a));
  TM_ASSIGN_OR_RETURN(auto b, input_bytes(args.b));
  TM_ASSIGN_OR_RETURN(std::byte * out, output_bytes(args.output));
  return with_aligned_output<float>(out, args.elems, [&](std::span<float> values) {
    return subtract(side_of(args.a, a, args.a_offset), side_of(args.b, b, args.b_offset), values, threads);
  });
}

Status run_exact_summary(const TM_OpInstance& op) {
  TM_ASSIGN_OR_RETURN(auto args, ops::parse_exact_summary(op));
  TM_ASSIGN_OR_RETURN(auto in, input_bytes(args.input));
  TM_ASSIGN_OR_RETURN(std::byte * out, output_bytes(args.output));
  TM_ExactSummary summary{};
  TM_RETURN_IF_ERROR(ops::exact_summary_reference({args.input.dtype, in, args.input.elems}, &summary));
  std::memcpy(out, &summary, sizeof summary);
  return Status::Ok();
}

// ---- The ABI entry points --------------------------------------------------------------------

TM_StatusCode error_code(const TM_Error* error) { return ops::plugin_error_code(error); }
const char* error_message(const TM_Error* error) { return ops::plugin_error_message(error); }
void error_destroy(TM_Error* error) { ops::plugin_error_destroy(error); }

TM_Error* device_count(uint32_t* count, char* why_none, size_t why_len) {
  return ops::guard_plugin_call("device_count", [&] {
    TM_RETURN_IF_ERROR(require(count != nullptr, "count"));
    *count = 1;
    if (why_none != nullptr && why_len > 0) why_none[0] = '\0';
    return Status::Ok();
  });
}

TM_Error* backend_create(const TM_BackendCreateArgs* args, TM_Backend** out) {
  return ops::guard_plugin_call("backend_create", [&] {
    TM_RETURN_IF_ERROR(require(out != nullptr, "out"));
    *out = nullptr;
    TM_BackendCreateArgs create{};
    if (args != nullptr) create = ops::read_abi_struct(args);
    if (create.device_index != 0) {
      return Status::NotFound("cpu has one device; device " + std::to_string(create.device_index) + " does not exist");
    }
    auto backend = std::make_unique<CpuBackend>();
    backend->device_name = cpu_model_name();
    backend->memory_bytes = physical_memory_bytes();
    backend->threads = hardware_threads();
    backend->isa = best_isa();
    TM_RETURN_IF_ERROR(apply_options(*backend, create.options));
    if (backend->bandwidth_gbps <= 0) {
      backend->bandwidth_gbps =
          calibrated_read_bandwidth_gbps({backend->device_name, backend->threads, backend->memory_bytes});
    }
    *out = reinterpret_cast<TM_Backend*>(backend.release());
    return Status::Ok();
  });
}

void backend_destroy(TM_Backend* backend) { delete backend_of(backend); }

TM_Error* device_traits(TM_Backend* backend, TM_DeviceTraits* out) {
  return ops::guard_plugin_call("device_traits", [&] {
    TM_RETURN_IF_ERROR(require(backend != nullptr && out != nullptr, "backend or out"));
    const CpuBackend& b = *backend_of(backend);
    TM_DeviceTraits traits{};
    traits.struct_size = sizeof traits;
    std::snprintf(traits.device_name, sizeof traits.device_name, "%s", b.device_name.c_str());
    traits.memory_bytes = b.memory_bytes;
    traits.memory_space_count = 0;
    traits.host_memory_visible = 1;
    traits.compute_units = b.threads;
    traits.runs_on_host_cores = 1;
    ops::write_abi_struct(traits, out);
    return Status::Ok();
  });
}

TM_Error* query(TM_Backend* backend, const TM_OpQuery* query_in, TM_OpSupport* out) {
  return ops::guard_plugin_call("query", [&] {
    TM_RETURN_IF_ERROR(require(backend != nullptr && query_in != nullptr && out != nullptr, "backend, query or out"));
    const TM_OpQuery q = ops::read_abi_struct(query_in);
    TM_OpSupport support{};
    support.struct_size = sizeof support;
    support.level = TM_SUPPORT_NONE;
    support.exactness = TM_EXACT_BITWISE;
    std::string reason;
    if (q.op != nullptr && ops::is_render_op(q.op)) {
      render_support(q, support);
      ops::write_abi_struct(support, out);
      return Status::Ok();
    }
    if (q.op != nullptr && ops::spectrum_method_of(q.op)) {
      spectrum_support(q, support);
      ops::write_abi_struct(support, out);
      return Status::Ok();
    }
    const auto kind = q.op ? ops::core_op_from_id(q.op) : std::nullopt;
    const auto dtype = from_abi_dtype(q.input_dtype);
    if (!kind) {
      reason = std::string("cpu does not implement ") + (q.op ? q.op : "(null)");
    } else if (!dtype) {
      reason = "unknown dtype id " + std::to_string(static_cast<int>(q.input_dtype));
    } else if (*kind == ops::CoreOp::kExactSummary && !ops::exact_summary_supported(*dtype)) {
      reason = std::string(TM_OP_EXACT_SUMMARY) + " takes F64, I32, U32, I64 or U64, not " +
               std::string(dtype_name(*dtype));
    } else if (!dtype_decodable(*dtype)) {
      reason = std::string(dtype_name(*dtype)) + " is not decodable yet: " + std::string(dtype_not_decodable_reason(*dtype));
    } else if ((*kind == ops::CoreOp::kDiffStats || *kind == ops::CoreOp::kSubtract) && q.input_count >= 2 &&
               (!from_abi_dtype(q.input_dtypes[1]) || !dtype_decodable(*from_abi_dtype(q.input_dtypes[1])))) {
      reason = std::string(q.op) + ": in[1] has dtype id " + std::to_string(static_cast<int>(q.input_dtypes[1])) +
               ", which is not decodable";
    } else if ((*kind == ops::CoreOp::kTileStats || *kind == ops::CoreOp::kChannelStats) &&
               q.shape_class != TM_SHAPE_MATRIX) {
      reason = std::string(q.op) + " takes a 2-D tensor (view a vector as [1, n])";
    } else {
      support.level = TM_SUPPORT_FULL;
    }
    std::snprintf(support.reason, sizeof support.reason, "%s", reason.c_str());
    ops::write_abi_struct(support, out);
    return Status::Ok();
  });
}

TM_Error* estimate(TM_Backend* backend, const TM_OpInstance* op, TM_CostEstimate* out) {
  return ops::guard_plugin_call("estimate", [&] {
    TM_RETURN_IF_ERROR(require(backend != nullptr && op != nullptr && out != nullptr, "backend, op or out"));
    if (const char* id = ops::read_abi_struct(op).op; id != nullptr && ops::is_render_op(id)) {
      TM_ASSIGN_OR_RETURN(const TM_CostEstimate cost, render_estimate(*op, backend_of(backend)->bandwidth_gbps));
      ops::write_abi_struct(cost, out);
      return Status::Ok();
    }
    if (const char* id = ops::read_abi_struct(op).op; id != nullptr && ops::spectrum_method_of(id)) {
      TM_ASSIGN_OR_RETURN(const TM_CostEstimate cost, spectrum_estimate(*op, backend_of(backend)->threads));
      ops::write_abi_struct(cost, out);
      return Status::Ok();
    }
    TM_ASSIGN_OR_RETURN(const ops::CoreOp kind, core_op_of(*op));
    TM_ASSIGN_OR_RETURN(const Traffic traffic, traffic_of(*op, kind, backend_of(backend)->threads));
    if (!dtype_decodable(traffic.dtype)) return not_decodable(traffic.dtype);
    TM_CostEstimate cost{};
    cost.struct_size = sizeof cost;
    cost.bytes_read = traffic.bytes_read;
    cost.bytes_written = traffic.bytes_written;
    cost.working_bytes = traffic.working_bytes;
    // GB/s is bytes per nanosecond.
    cost.compute_ns = static_cast<double>(traffic.bytes_read) * traffic.slowdown / backend_of(backend)->bandwidth_gbps +
                      static_cast<double>(traffic.bytes_written) / backend_of(backend)->bandwidth_gbps;
    ops::write_abi_struct(cost, out);
    return Status::Ok();
  });
}

TM_Error* buffer_alloc(TM_Backend* backend, uint32_t memory_space, uint64_t bytes, TM_Buffer** out) {
  return ops::guard_plugin_call("buffer_alloc", [&] {
    TM_RETURN_IF_ERROR(require(backend != nullptr && out != nullptr, "backend or out"));
    *out = nullptr;
    if (memory_space != TM_MEMORY_SPACE_HOST) {
      return Status::InvalidArgument("cpu has no memory space " + std::to_string(memory_space) + " (only host, 0)");
    }
    auto buffer = std::make_unique<CpuBuffer>();
    buffer->data = static_cast<std::byte*>(::operator new[](std::max<uint64_t>(bytes, 1), kBufferAlignment));
    buffer->size = bytes;
    *out = reinterpret_cast<TM_Buffer*>(buffer.release());
    return Status::Ok();
  });
}

void buffer_free(TM_Backend* /*backend*/, TM_Buffer* buffer) { delete buffer_of(buffer); }

Status check_buffer_range(TM_Buffer* buffer, uint64_t offset, uint64_t bytes, const void* memory) {
  TM_RETURN_IF_ERROR(require(buffer != nullptr, "buffer"));
  TM_RETURN_IF_ERROR(require(memory != nullptr || bytes == 0, "host memory"));
  uint64_t end = 0;
  if (__builtin_add_overflow(offset, bytes, &end) || end > buffer_of(buffer)->size) {
    return Status::InvalidArgument("bytes [" + std::to_string(offset) + ", +" + std::to_string(bytes) +
                                   ") exceed the buffer's " + std::to_string(buffer_of(buffer)->size));
  }
  return Status::Ok();
}

TM_Error* buffer_write(TM_Backend* /*backend*/, TM_Buffer* buffer, uint64_t offset, const void* src, uint64_t bytes) {
  return ops::guard_plugin_call("buffer_write", [&] {
    TM_RETURN_IF_ERROR(check_buffer_range(buffer, offset, bytes, src));
    if (bytes != 0) std::memcpy(buffer_of(buffer)->data + offset, src, bytes);
    return Status::Ok();
  });
}

TM_Error* buffer_read(TM_Backend* /*backend*/, TM_Buffer* buffer, uint64_t offset, void* dst, uint64_t bytes) {
  return ops::guard_plugin_call("buffer_read", [&] {
    TM_RETURN_IF_ERROR(check_buffer_range(buffer, offset, bytes, dst));
    if (bytes != 0) std::memcpy(dst, buffer_of(buffer)->data + offset, bytes);
    return Status::Ok();
  });
}

TM_Error* execute(TM_Backend* backend, const TM_OpInstance* op, const TM_ExecutionPolicy* policy_in,
                  TM_ExecutionReport* report) {
  return ops::guard_plugin_call("execute", [&] {
    TM_RETURN_IF_ERROR(require(backend != nullptr && op != nullptr, "backend or op"));
    CpuBackend& b = *backend_of(backend);
    TM_ExecutionPolicy policy{};
    policy.struct_size = sizeof policy;
    if (policy_in != nullptr) policy = ops::read_abi_struct(policy_in);
    if (const char* id = ops::read_abi_struct(op).op; id != nullptr && ops::is_render_op(id)) {
      const bool sampled = std::string_view(id) == ops::kOpRenderTileSampled;
      TM_RETURN_IF_ERROR(ops::check_exactness_floor(sampled ? TM_EXACT_APPROXIMATE : TM_EXACT_BITWISE, 0.0, policy));
      TM_ExecutionReport r{};
      r.struct_size = sizeof r;
      TM_RETURN_IF_ERROR(render_execute(*op, policy.max_threads, b.isa, b.tile_scratch, r));
      if (report != nullptr) ops::write_abi_struct(r, report);
      return Status::Ok();
    }
    if (const char* id = ops::read_abi_struct(op).op; id != nullptr && ops::spectrum_method_of(id)) {
      TM_ExecutionReport r{};
      r.struct_size = sizeof r;
      TM_RETURN_IF_ERROR(spectrum_execute(*op, policy, r));
      if (report != nullptr) ops::write_abi_struct(r, report);
      return Status::Ok();
    }
    TM_ASSIGN_OR_RETURN(const ops::CoreOp kind, core_op_of(*op));
    // Every result of this backend is bitwise: only an unknown floor can be refused here.
    TM_RETURN_IF_ERROR(ops::check_exactness_floor(TM_EXACT_BITWISE, 0.0, policy));
    TM_ASSIGN_OR_RETURN(const Traffic traffic, traffic_of(*op, kind, policy.max_threads == 0 ? b.threads : policy.max_threads));
    const auto start = std::chrono::steady_clock::now();
    std::optional<uint64_t> found;  // entries of a data-dependent output
    switch (kind) {
      case ops::CoreOp::kDecode: TM_RETURN_IF_ERROR(run_decode(*op, policy.max_threads)); break;
      case ops::CoreOp::kTileStats:
        TM_RETURN_IF_ERROR(run_tile_stats(*op, policy.max_threads, b.isa, b.tile_scratch));
        break;
      case ops::CoreOp::kHistogram: TM_RETURN_IF_ERROR(run_histogram(*op, policy.max_threads)); break;
      case ops::CoreOp::kExactSummary: TM_RETURN_IF_ERROR(run_exact_summary(*op)); break;
      case ops::CoreOp::kRadixHistogram: TM_RETURN_IF_ERROR(run_radix_histogram(*op, policy.max_threads)); break;
      case ops::CoreOp::kChannelStats: TM_RETURN_IF_ERROR(run_channel_stats(*op, policy.max_threads)); break;
      case ops::CoreOp::kDiffStats: TM_RETURN_IF_ERROR(run_diff_stats(*op, policy.max_threads)); break;
      case ops::CoreOp::kSubtract: TM_RETURN_IF_ERROR(run_subtract(*op, policy.max_threads)); break;
      case ops::CoreOp::kTopK: {
        TM_ASSIGN_OR_RETURN(const uint64_t written, run_top_k(*op, policy.max_threads));
        found = written;
        break;
      }
    }
    ops::write_execution_report(report, TM_EXACT_BITWISE,
                                std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - start).count(),
                                traffic.bytes_read, traffic.bytes_written);
    if (found && report != nullptr) {
      // tm.top_k@1's outputs are data-dependent: say how much of each holds entries.
      TM_ExecutionReport r = ops::read_abi_struct(report);
      r.output_nbytes[0] = *found * sizeof(uint64_t);
      r.output_nbytes[1] = *found * sizeof(float);
      ops::write_abi_struct(r, report);
    }
    return Status::Ok();
  });
}

const TM_PluginApi kApi = {
    sizeof(TM_PluginApi), TM_PLUGIN_ABI_MAJOR, TM_PLUGIN_ABI_MINOR, kName, kVersion,
    &error_code, &error_message, &error_destroy,
    &device_count, &backend_create, &backend_destroy, &device_traits,
    &query, &estimate,
    &buffer_alloc, &buffer_free, &buffer_write, &buffer_read,
    &execute,
};

}  // namespace
}  // namespace tensormorph::cpu

extern "C" const TM_PluginApi* tm_cpu_backend_get_api(uint32_t host_major, uint32_t /*host_minor*/) {
  return host_major == TM_PLUGIN_ABI_MAJOR ? &tensormorph::cpu::kApi : nullptr;
}
