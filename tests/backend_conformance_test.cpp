// Backend conformance, driven by the operation definitions (src/compute/ops/definitions.cpp): for
// every operation of the registry, every conformance case of its definition, every dtype its input
// accepts and every loaded backend that declares the case BITWISE, the backend's output equals the
// definition's CPU reference bit for bit, from host memory and from a resident buffer. Backends come
// from a real ComputeSession: the built-in ones, the modules built into this build's plugins/
// directory (CUDA, HIP) and the OpenCL plugin (plugins/opencl/build, on PoCL). A backend without a
// device is reported with its own reason; with TM_REQUIRE_OPENCL set the OpenCL plugin must take part,
// with TM_REQUIRE_WEBGPU the WebGPU backend (CI runs it on lavapipe, a software Vulkan device).
#include <dlfcn.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/dtype_abi.h"
#include "core/quantize/quantize.h"
#include "engine/compute_session.h"
#include "compute/ops/reference.h"
#include "compute/ops/render_tile.h"
#include "tensormorph/decode.h"

namespace tensormorph {
namespace {

namespace fs = std::filesystem;

const fs::path kPluginDir = TM_PLUGIN_BUILD_DIR;
const fs::path kOpenClPluginDir = TM_OPENCL_PLUGIN_DIR;
constexpr bool kCudaModuleBuilt = TM_CUDA_MODULE_BUILT;
constexpr bool kHipModuleBuilt = TM_HIP_MODULE_BUILT;

std::unique_ptr<engine::ComputeSession> open_session(const std::string& constraints = "") {
  engine::SessionOptions options;
  options.extra_plugin_dirs = {kPluginDir.string(), kOpenClPluginDir.string()};
  if (!constraints.empty()) options.override_constraints = *compute::parse_constraints(constraints);
  auto session = engine::ComputeSession::open(options);
  EXPECT_TRUE(session.ok()) << session.status().to_string();
  return session.ok() ? std::move(session).value() : nullptr;
}

// ---- Test data ---------------------------------------------------------------------------------

enum class Data { kWeights, kRandomBits, kSignedZeros, kSpread };

const char* data_name(Data d) {
  switch (d) {
    case Data::kWeights: return "weights";
    case Data::kRandomBits: return "random bits";
    case Data::kSignedZeros: return "signed zeros";
    case Data::kSpread: return "spread binades";
  }
  return "?";
}

/// Byte offsets of the fp16 scale fields of a block type (overwritten with plausible scales).
std::vector<uint32_t> scale_offsets(DType dtype) {
  switch (dtype) {
    case DType::kQ4_0: case DType::kQ4_1: case DType::kQ5_0: case DType::kQ5_1:
    case DType::kQ8_0: case DType::kQ8_1: return {0};
    case DType::kQ4_K: case DType::kQ5_K: return {0, 2};
    case DType::kQ2_K: return {80, 82};
    case DType::kQ3_K: return {108};
    case DType::kQ6_K: return {208};
    default: return {};
  }
}

/// `elems` elements of `dtype`: realistic weights (with a few NaN, Inf and signed zeros where the
/// dtype has them), raw random bits (every NaN payload, subnormals, random block scales), or only
/// zeros of both signs and one-signed values (the min/max zero-sign rule).
std::vector<std::byte> make_data(DType dtype, uint64_t elems, Data kind, uint32_t seed) {
  std::mt19937_64 rng(seed);
  const DTypeInfo& info = dtype_info(dtype);
  const uint64_t bytes = elems / info.block_elems * info.block_bytes;
  std::vector<std::byte> out(bytes);
  for (auto& b : out) b = static_cast<std::byte>(rng());
  if (kind == Data::kRandomBits) return out;
  const bool scalar_float = dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
  if (kind == Data::kSpread && scalar_float) {
    // Runs of 256 values over 1 to 48 binades, some runs cancelling in pairs 8 apart: both sides
    // of the exact-sum bounds (a sum that cannot round is the exact sum) and exact zero sums.
    std::vector<float> v(elems);
    for (uint64_t i = 0; i < elems; ++i) {
      const uint64_t run = i / 256;
      const int binades = 1 + static_cast<int>((run * 7) % 48);
      const float mantissa = 1.0f + static_cast<float>(rng() % (1u << 23)) / static_cast<float>(1u << 23);
      v[i] = ((rng() & 1) ? -1.0f : 1.0f) * std::ldexp(mantissa, -static_cast<int>(rng() % static_cast<uint64_t>(binades)));
      if (run % 3 == 1 && i % 16 >= 8) v[i] = -v[i - 8];
      // Rows 64..127 of the tile cases' 512 columns: whole tiles of -0.0 (a sum of -0.0 only then).
      if (i >= 32768 && i < 65536) v[i] = -0.0f;
    }
    return *encode_from_f32(dtype, v);
  }
  if (kind == Data::kSignedZeros) {
    if (scalar_float) {
      std::vector<float> v(elems);
      const float sign = (seed & 1) ? -1.0f : 1.0f;
      for (auto& x : v) {
        const uint64_t r = rng() % 3;
        x = r == 0 ? 0.0f : r == 1 ? -0.0f : sign * 0.001f * static_cast<float>(1 + rng() % 7);
      }
      return *encode_from_f32(dtype, v);
    }
    if (info.block_elems == 1 && info.block_bytes == 1) {
      for (auto& b : out) b = static_cast<std::byte>(rng() % 3 == 0 ? 0x00 : rng() % 2 ? 0x80 : ((seed & 1) ? 0x80 : 0) | 0x21);
      return out;
    }
    return out;
  }
  if (scalar_float) {
    std::normal_distribution<float> normal(0.0f, 0.02f);
    std::vector<float> v(elems);
    for (auto& x : v) x = normal(rng);
    for (uint64_t i = 0; i < elems; i += 997) v[i] = 0.0f;
    for (uint64_t i = 5; i < elems; i += 1999) v[i] = -0.0f;
    if (elems > 4000) {
      v[17] = std::numeric_limits<float>::quiet_NaN();
      v[900] = -std::numeric_limits<float>::infinity();
      v[3001] = std::numeric_limits<float>::infinity();
    }
    return *encode_from_f32(dtype, v);
  }
  if (info.block_elems == 1) {
    // Byte-sized floats: mostly finite codes, a few of everything else.
    for (uint64_t i = 0; i < bytes; ++i) {
      const uint64_t r = rng();
      out[i] = static_cast<std::byte>((r & 0x80u) | ((r >> 8) % 0x70u));
    }
    if (bytes > 3000) {
      out[123] = static_cast<std::byte>(0x7f);
      out[2500] = static_cast<std::byte>(0xfc);
    }
    return out;
  }
  // Block types: random quants under plausible scales; one block with a NaN and one with an Inf scale.
  const auto offsets = scale_offsets(dtype);
  for (uint64_t b = 0; b < bytes / info.block_bytes; ++b) {
    for (uint32_t off : offsets) {
      uint16_t h = f32_to_f16(0.0005f + 0.002f * static_cast<float>(rng() % 1000) / 1000.0f);
      if (b == 3) h = 0x7e01;  // NaN
      if (b == 5) h = 0x7c00;  // +Inf
      std::memcpy(out.data() + b * info.block_bytes + off, &h, 2);
    }
  }
  if (dtype == DType::kQ4_K && bytes >= 12 * 144) {
    // The edges of the exact Q4_K sums (docs/COMPUTE.md): quant 0 decoding to +0.0 (every minimum
    // zero), quant 5 decoding to zero (d = dmin, scales 1, minimums 5), and a lone quant whose
    // value needs 25 bits, which float32 rounds (the sums must then follow the tree).
    std::byte* zero_minimums = out.data() + 7 * 144;
    std::memset(zero_minimums + 8, 0, 4);
    for (int j = 0; j < 4; ++j) zero_minimums[4 + j] &= std::byte{0x3f};
    for (int j = 0; j < 4; ++j) zero_minimums[12 + j] &= std::byte{0x0f};
    std::byte* zero_at_five = out.data() + 8 * 144;
    std::memcpy(zero_at_five + 2, zero_at_five, 2);
    std::memset(zero_at_five + 4, 1, 4);
    std::memset(zero_at_five + 8, 5, 4);
    std::memset(zero_at_five + 12, 0x51, 4);
    std::byte* rounded = out.data() + 11 * 144;
    const uint16_t d = 0x1772, dmin = 0x037d;
    std::memcpy(rounded, &d, 2);
    std::memcpy(rounded + 2, &dmin, 2);
    std::memset(rounded + 4, 249, 4);  // scales 57, minimums 33
    std::memset(rounded + 8, 161, 4);
    std::memset(rounded + 12, 0x19, 4);
    std::memset(rounded + 16, 0, 128);
    rounded[16] = std::byte{0x0f};
  }
  return out;
}

/// Every dtype the decoders take (the backends declare which of them they run).
std::vector<DType> decodable_dtypes_for_test() {
  std::vector<DType> v;
  for (int d = 0; d < static_cast<int>(DType::kCount); ++d) {
    if (dtype_decodable(static_cast<DType>(d))) v.push_back(static_cast<DType>(d));
  }
  return v;
}

// ---- Running one instance ----------------------------------------------------------------------

TM_TensorArg tensor_arg(DType dtype, std::vector<uint64_t> shape, uint64_t nbytes) {
  TM_TensorArg a{};
  a.struct_size = sizeof a;
  a.dtype = to_abi_dtype(dtype);
  a.rank = static_cast<uint32_t>(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) a.shape[i] = shape[i];
  a.nbytes = nbytes;
  return a;
}

TM_ExecutionPolicy bitwise() {
  TM_ExecutionPolicy p{};
  p.struct_size = sizeof p;
  p.exactness_floor = TM_EXACT_BITWISE;
  return p;
}

/// The backends to check: every one but the CPU, with a device.
std::vector<const compute::Backend*> backends_under_test(engine::ComputeSession& session) {
  std::vector<const compute::Backend*> out;
  for (const auto& b : session.backends()) {
    if (b->name() != "cpu") out.push_back(b.get());
  }
  return out;
}

/// Why nothing was tested: each non-CPU backend source and its load report.
std::string why_nothing(engine::ComputeSession& session) {
  std::string why;
  for (const auto& r : session.load_reports()) {
    if (r.name == "cpu") continue;
    why += "\n  " + (r.name.empty() ? r.library_path : r.name) + ": " +
           (r.available ? "available" : "unavailable: " + r.detail);
  }
  return why.empty() ? " (no backend besides the CPU was found)" : why;
}

bool declares_bitwise(const compute::Backend& b, const char* op, DType dtype, TM_ShapeClass shape) {
  auto s = b.query(op, to_abi_dtype(dtype), shape);
  return s.ok() && s->level != TM_SUPPORT_NONE && s->exactness == TM_EXACT_BITWISE;
}

/// Runs `op` on `backend` twice: with the inputs copied into buffers of their own (the scheduler's
/// resident path) and with host memory (its streaming path); returns each output's bytes per run.
struct TwoRuns {
  std::vector<std::vector<std::byte>> resident, streamed;
};

Result<TwoRuns> run_both_ways(const compute::Backend& b, const std::vector<TM_TensorArg>& in_templates,
                              const std::vector<const std::byte*>& host_in, const std::vector<TM_TensorArg>& out_templates,
                              std::vector<TM_Attribute> attrs, const char* op_id,
                              TM_Exactness declared = TM_EXACT_BITWISE) {
  TwoRuns runs;
  for (int pass = 0; pass < 2; ++pass) {
    auto& outs = pass == 0 ? runs.resident : runs.streamed;
    std::vector<TM_TensorArg> ins = in_templates;
    std::vector<TM_Buffer*> buffers;
    Status status;
    for (size_t i = 0; i < ins.size() && status.ok(); ++i) {
      if (pass == 0 && !b.host_visible() && ins[i].nbytes > 0) {
        auto buffer = b.allocate(ins[i].nbytes);
        if (!buffer.ok()) {
          status = buffer.status();
          break;
        }
        buffers.push_back(*buffer);
        status = b.write(*buffer, host_in[i], ins[i].nbytes);
        ins[i].buffer = *buffer;
      } else {
        ins[i].host_data = host_in[i];
      }
    }
    std::vector<TM_TensorArg> os = out_templates;
    outs.resize(os.size());
    for (size_t i = 0; i < os.size(); ++i) {
      outs[i].assign(os[i].nbytes, std::byte{0xa5});
      os[i].host_out = outs[i].data();
    }
    Result<TM_ExecutionReport> report = status;
    if (status.ok()) {
      TM_OpInstance instance{sizeof(TM_OpInstance), op_id, ins.data(), static_cast<uint32_t>(ins.size()), os.data(),
                             static_cast<uint32_t>(os.size()), attrs.data(), static_cast<uint32_t>(attrs.size())};
      TM_ExecutionPolicy policy = bitwise();
      policy.exactness_floor = declared;
      policy.max_error_bound = declared == TM_EXACT_BITWISE ? 0 : 1;
      report = b.execute(instance, policy);
    }
    for (TM_Buffer* buffer : buffers) b.release(buffer);
    if (!report.ok()) return report.status();
    if (report->exactness != declared) return Status::Internal(std::string("report is not ") + compute::exactness_name(declared));
  }
  return runs;
}


/// Field-by-field description of the first differing tile (for failure messages).
std::string first_difference(const TM_TileStats* got, const TM_TileStats* want, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(&got[i], &want[i], sizeof(TM_TileStats)) == 0) continue;
    char text[512];
    std::snprintf(text, sizeof text,
                  "tile %zu: count %llu/%llu nan %llu/%llu +inf %llu/%llu -inf %llu/%llu zeros %llu/%llu sum %a/%a "
                  "sum_sq %a/%a min %a/%a max %a/%a absmax %a/%a",
                  i, (unsigned long long)got[i].count, (unsigned long long)want[i].count,
                  (unsigned long long)got[i].nan, (unsigned long long)want[i].nan,
                  (unsigned long long)got[i].pos_inf, (unsigned long long)want[i].pos_inf,
                  (unsigned long long)got[i].neg_inf, (unsigned long long)want[i].neg_inf,
                  (unsigned long long)got[i].zeros, (unsigned long long)want[i].zeros, got[i].sum, want[i].sum,
                  got[i].sum_sq, want[i].sum_sq, static_cast<double>(got[i].min), static_cast<double>(want[i].min),
                  static_cast<double>(got[i].max), static_cast<double>(want[i].max),
                  static_cast<double>(got[i].absmax), static_cast<double>(want[i].absmax));
    return text;
  }
  return "no difference";
}

// ---- The conformance test, driven by the definitions ------------------------------------------------

/// Input bytes for one case tensor: a grid of real tile statistics for a statistics input, else
/// `data` with every block that decodes to a NaN or an infinity zeroed (all-zero bytes decode to
/// zeros in every dtype), for operations that refuse non-finite values.
std::vector<std::byte> finite_blocks(DType dtype, std::vector<std::byte> data) {
  const DTypeInfo& info = dtype_info(dtype);
  std::vector<float> values(info.block_elems);
  for (uint64_t b = 0; b < data.size() / info.block_bytes; ++b) {
    const std::span<std::byte> block(data.data() + b * info.block_bytes, info.block_bytes);
    const bool finite = decode_to_f32(dtype, block, info.block_elems, values.data()).ok() &&
                        std::all_of(values.begin(), values.end(), [](float v) { return std::isfinite(v); });
    if (!finite) std::fill(block.begin(), block.end(), std::byte{0});
  }
  return data;
}

/// make_data's values of `dtype` (only finite ones with `finite_only`).
std::vector<std::byte> case_input(const ops::CaseTensor& t, DType dtype, Data data, uint32_t seed, bool finite_only = false) {
  uint64_t elems = 1;
  for (uint64_t d : t.shape) elems *= d;
  if (dtype == DType::kU8 && t.shape.size() == 3 && t.shape[2] == sizeof(TM_TileStats)) {
    constexpr uint32_t kTile = 8;
    const uint64_t rows = t.shape[0] * kTile, cols = t.shape[1] * kTile;
    const auto values = make_data(DType::kF32, rows * cols, data, seed);
    std::vector<TM_TileStats> grid(t.shape[0] * t.shape[1]);
    EXPECT_TRUE(ops::tile_stats_reference({DType::kF32, values, rows, cols}, {0, rows, 0, cols}, kTile, grid).ok());
    std::vector<std::byte> out(grid.size() * sizeof(TM_TileStats));
    std::memcpy(out.data(), grid.data(), out.size());
    return out;
  }
  auto bytes = make_data(dtype, elems, data, seed);
  return finite_only ? finite_blocks(dtype, std::move(bytes)) : bytes;
}

/// Bytes of later input `i` of `c` (of `dtype`; input 0 is `first`, of `first_dtype`) holding decodable
/// values, as the case's later_inputs asks: its own data, a copy of input 0 (when the dtypes agree),
/// or input 0's decoded values encoded into `dtype` (when there is an encoder for it).
std::vector<std::byte> later_input(const ops::ConformanceCase& c, size_t i, DType dtype, DType first_dtype,
                                   const std::vector<std::byte>& first, Data data, uint32_t seed) {
  using L = ops::ConformanceCase::LaterInput;
  uint64_t elems = 1;
  for (uint64_t d : c.inputs[i].shape) elems *= d;
  if (c.later_inputs == L::kCopyOfFirst && dtype == first_dtype) return first;
  if (c.later_inputs == L::kFirstReencoded && dtype_encodable(dtype)) {
    std::vector<float> values(elems);
    EXPECT_TRUE(decode_to_f32(first_dtype, first, elems, values.data()).ok());
    auto encoded = encode_from_f32(dtype, values);
    EXPECT_TRUE(encoded.ok()) << encoded.status().to_string();
    if (encoded.ok()) return *encoded;
  }
  return case_input(c.inputs[i], dtype, data, seed);
}

uint64_t storage_bytes(DType dtype, const std::vector<uint64_t>& shape) {
  uint64_t elems = 1;
  for (uint64_t d : shape) elems *= d;
  return *dtype_storage_bytes(dtype, elems);
}

/// What one backend did with one definition's cases.
struct Tally {
  int checked = 0, refused = 0, undeclared = 0;
};

/// One backend, by name, against every definition of the registry: each backend is its own test
/// so that they run side by side and a slow device does not hold up the rest.
class EveryOperation : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryOperation, EqualsItsReference) {
  const std::string& name = GetParam();
  auto session = open_session();
  ASSERT_NE(session, nullptr);
  const compute::Backend* backend = nullptr;
  for (const auto& owned : session->backends()) {
    if (owned->name() == name) backend = owned.get();
  }
  // TM_REQUIRE_<NAME> (set by the project's test script where the device exists) turns a missing
  // backend from a skip into a failure.
  std::string require = "TM_REQUIRE_" + name;
  for (char& ch : require) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  std::string why = backend == nullptr ? "not loaded" : backend->unavailable_reason();
  for (const auto& report : session->load_reports()) {
    if (backend == nullptr && report.name == name && !report.detail.empty()) why = report.detail;
  }
  if (why.empty() && !backend->open().ok()) why = backend->unavailable_reason();
  if (!why.empty()) {
    if (name == "cpu" || std::getenv(require.c_str()) != nullptr) FAIL() << name << " is required but " << why << why_nothing(*session);
    GTEST_SKIP() << name << ": " << why;
  }
  const compute::Backend& b = *backend;
  Tally tally;
  std::map<std::string, int> reached;  // cases checked or refused by estimate, per operation
  for (const auto& [id, def] : session->registry().all()) {
    ASSERT_NE(def.reference, nullptr) << id << " has no CPU reference";
    ASSERT_FALSE(def.cases.empty()) << id << " has no conformance case";
    {
      for (const ops::ConformanceCase& c : def.cases) {
        ASSERT_EQ(c.inputs.size(), def.inputs.size()) << id << " " << c.label;
        ASSERT_EQ(c.outputs.size(), def.outputs.size()) << id << " " << c.label;
        const std::vector<DType> dtypes = c.inputs[0].dtype ? std::vector<DType>{*c.inputs[0].dtype} : def.inputs[0].dtypes;
        for (const DType dtype : dtypes) {
          // A later input without a dtype of its own takes input 0's.
          auto input_dtype = [&](size_t i) { return i == 0 ? dtype : c.inputs[i].dtype.value_or(dtype); };
          std::vector<compute::QueryInput> query_inputs;
          for (size_t i = 0; i < c.inputs.size(); ++i) {
            query_inputs.push_back({to_abi_dtype(input_dtype(i)), compute::shape_class_of(c.inputs[i].shape)});
          }
          const auto support = b.query(id, query_inputs);
          ASSERT_TRUE(support.ok()) << b.name() << ": " << support.status().to_string();
          // Bitwise kernels are compared bit for bit; bounded and approximate ones only where the
          // operation says how to compare them (within both results' stated bounds).
          if (support->level == TM_SUPPORT_NONE || (support->exactness != TM_EXACT_BITWISE && def.within_bounds == nullptr)) {
            ++tally.undeclared;
            continue;
          }
          std::vector<TM_Attribute> attrs;
          for (const auto& a : c.attributes) attrs.push_back({sizeof(TM_Attribute), a.name.c_str(), a.i, a.f});
          for (Data data : {Data::kWeights, Data::kRandomBits, Data::kSignedZeros, Data::kSpread}) {
            if (data != Data::kWeights && !c.with_non_finite) continue;
            if (data == Data::kSpread && dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16) continue;
            // The CPU backend's bits on every kind of data are cpu_backend_test's; here it runs the
            // cases once, which keeps this test quick under the sanitizers.
            if (data != Data::kWeights && b.name() == "cpu") continue;
            // Input 0 holds the test's data; a later input of decodable values the data its case's
            // later_inputs asks for; any other later input its case's fixed values.
            std::vector<std::vector<std::byte>> bytes = {
                case_input(c.inputs[0], dtype, data, 7u + static_cast<uint32_t>(dtype) * 5 + static_cast<uint32_t>(data), c.finite_only)};
            for (size_t i = 1; i < c.inputs.size(); ++i) {
              const bool decodable_values = def.inputs[i].dtypes.size() > 1 && c.inputs[i].values.empty();
              if (decodable_values) {
                bytes.push_back(later_input(c, i, input_dtype(i), dtype, bytes[0], data,
                                            1000u * static_cast<uint32_t>(i) + static_cast<uint32_t>(input_dtype(i)) * 5 +
                                                static_cast<uint32_t>(data)));
                continue;
              }
              bytes.emplace_back(c.inputs[i].values.size() * sizeof(uint64_t));
              if (!bytes.back().empty()) std::memcpy(bytes.back().data(), c.inputs[i].values.data(), bytes.back().size());
            }
            std::vector<TM_TensorArg> ins;
            std::vector<const std::byte*> host_in;
            for (size_t i = 0; i < c.inputs.size(); ++i) {
              ins.push_back(tensor_arg(input_dtype(i), c.inputs[i].shape, bytes[i].size()));
              host_in.push_back(bytes[i].data());
            }
            std::vector<TM_TensorArg> out_templates;
            std::vector<std::vector<std::byte>> want;
            for (const ops::CaseTensor& o : c.outputs) {
              const DType out_dtype = o.dtype.value_or(DType::kU8);
              out_templates.push_back(tensor_arg(out_dtype, o.shape, storage_bytes(out_dtype, o.shape)));
              want.emplace_back(out_templates.back().nbytes, std::byte{0x5a});
            }
            // The reference and the estimate see host memory.
            auto instance_over = [&](std::vector<std::vector<std::byte>>& outputs, std::vector<TM_TensorArg>& in_args,
                                     std::vector<TM_TensorArg>& out_args) {
              in_args = ins;
              for (size_t i = 0; i < in_args.size(); ++i) in_args[i].host_data = host_in[i];
              out_args = out_templates;
              for (size_t i = 0; i < out_args.size(); ++i) out_args[i].host_out = outputs[i].data();
              return TM_OpInstance{sizeof(TM_OpInstance), id.c_str(), in_args.data(), static_cast<uint32_t>(in_args.size()),
                                   out_args.data(), static_cast<uint32_t>(out_args.size()), attrs.data(),
                                   static_cast<uint32_t>(attrs.size())};
            };
            std::vector<TM_TensorArg> ref_in, ref_out;
            std::string dtype_label(dtype_name(dtype));
            for (size_t i = 1; i < c.inputs.size(); ++i) {
              if (def.inputs[i].dtypes.size() > 1) dtype_label += " / " + std::string(dtype_name(input_dtype(i)));
            }
            const std::string label = b.name() + ": " + id + " " + dtype_label + " " + data_name(data) + " " + c.label;
            const Status reference = def.reference(instance_over(want, ref_in, ref_out));
            ASSERT_TRUE(reference.ok()) << label << ": the reference failed: " << reference.to_string();
            // Partial support is declared honestly: instances a backend does not take are refused by
            // its estimate, before anything runs, and the scheduler places them elsewhere.
            std::vector<std::vector<std::byte>> probe = want;
            std::vector<TM_TensorArg> probe_in, probe_out;
            if (auto estimate = b.estimate(instance_over(probe, probe_in, probe_out)); !estimate.ok()) {
              ASSERT_EQ(estimate.status().code(), StatusCode::kUnimplemented) << label << ": " << estimate.status().to_string();
              ++tally.refused;
              ++reached[id];
              continue;
            }
            auto runs = run_both_ways(b, ins, host_in, out_templates, attrs, id.c_str(), support->exactness);
            ASSERT_TRUE(runs.ok()) << label << ": " << runs.status().to_string();
            for (const auto* got : {&runs->resident, &runs->streamed}) {
              const char* how = got == &runs->resident ? " (resident)" : " (streamed)";
              ASSERT_EQ(got->size(), want.size()) << label << how;
              if (def.within_bounds != nullptr) {
                const Status agree = def.within_bounds(*got, want);
                ASSERT_TRUE(agree.ok()) << label << how << ": " << agree.message();
                continue;
              }
              for (size_t o = 0; o < want.size(); ++o) {
                const std::string which = label + how + " output " + std::to_string(o);
                // Empty outputs have no storage to compare (memcmp must not see their null data()).
                ASSERT_EQ((*got)[o].size(), want[o].size()) << which;
                if (want[o].empty()) continue;
                if (id == TM_OP_TILE_STATS) {
                  ASSERT_EQ(0, std::memcmp((*got)[o].data(), want[o].data(), want[o].size()))
                      << which << ": "
                      << first_difference(reinterpret_cast<const TM_TileStats*>((*got)[o].data()),
                                          reinterpret_cast<const TM_TileStats*>(want[o].data()),
                                          want[o].size() / sizeof(TM_TileStats));
                } else {
                  ASSERT_EQ(0, std::memcmp((*got)[o].data(), want[o].data(), want[o].size())) << which;
                }
              }
            }
            ++tally.checked;
            ++reached[id];
          }
        }
      }
    }
  }
  std::printf("%s: %d cases equal to the reference (bitwise, or within the stated bounds of bounded operations), %d refused by estimate, %d (case, dtype) not declared\n",
              name.c_str(), tally.checked, tally.refused, tally.undeclared);
  EXPECT_GT(tally.checked, 0) << name << " ran no case";
  // What a backend declares for an operation's values (what `tensormorph backends` shows) must be
  // what it declares for the operation's whole instances: a declared operation no case reached
  // means the backend refuses its real instances (say, over an input that is not values).
  for (const auto& [id, def] : session->registry().all()) {
    if (reached[id] > 0) continue;
    for (const DType dtype : def.inputs[0].dtypes) {
      const auto support = b.query(id, to_abi_dtype(dtype), compute::shape_class_of(def.cases[0].inputs[0].shape));
      if (!support.ok() || support->level == TM_SUPPORT_NONE) continue;
      if (support->exactness != TM_EXACT_BITWISE && def.within_bounds == nullptr) continue;
      ADD_FAILURE() << name << " declares " << id << " for " << dtype_name(dtype) << " (" << support->reason
                    << "), yet it declared none of the operation's conformance cases";
      break;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(BackendConformance, EveryOperation, ::testing::Values("cpu", "webgpu", "opencl", "cuda", "hip"),
                         [](const ::testing::TestParamInfo<std::string>& param) { return param.param; });

TEST(BackendConformance, SchedulerPlacesWhatABackendDeclaresAndFallsBackForTheRest) {
  auto session = open_session();
  ASSERT_NE(session, nullptr);
  const auto backends = backends_under_test(*session);
  if (backends.empty()) GTEST_SKIP() << "no device for any non-CPU backend:" << why_nothing(*session);
  for (const compute::Backend* b : backends) {
    auto only = open_session("only=" + b->name() + "+cpu");
    // A dtype the backend declares runs there; one it does not runs on the CPU, with the reason.
    for (DType dtype : {DType::kBF16, DType::kQ5_K, DType::kI8}) {
      if (!dtype_decodable(dtype)) continue;
      const uint64_t elems = 256 * 64;
      const auto bytes = make_data(dtype, elems, Data::kRandomBits, 99);
      std::vector<float> out(elems);
      compute::OpRequest req;
      req.op = TM_OP_DECODE;
      req.inputs.push_back({to_abi_dtype(dtype), {elems}, bytes, 0});
      req.outputs.push_back({TM_DTYPE_F32, {elems}, std::as_writable_bytes(std::span(out))});
      only->scheduler().set_constraints(*compute::parse_constraints("prefer=" + b->name()));
      auto placed = only->scheduler().run(req);
      ASSERT_TRUE(placed.ok()) << placed.status().to_string();
      ASSERT_TRUE(placed->executed);
      if (declares_bitwise(*b, TM_OP_DECODE, dtype, TM_SHAPE_VECTOR)) {
        EXPECT_EQ(placed->record.backend, b->name()) << placed->record.to_json().dump();
      } else {
        EXPECT_EQ(placed->record.backend, "cpu") << placed->record.to_json().dump();
        EXPECT_NE(placed->record.reason_detail.find("unsupported"), std::string::npos) << placed->record.reason_detail;
      }
    }
  }
}

// ---- Top-k and channel statistics on shapes and data the definitions' cases do not reach --------

enum class Pattern { kPlanted, kAllEqual, kRandomBits, kSignedZeros, kCloseRepeats };

const char* pattern_name(Pattern p) {
  switch (p) {
    case Pattern::kPlanted: return "weights with NaN/Inf/+-0 planted";
    case Pattern::kAllEqual: return "all equal";
    case Pattern::kRandomBits: return "random bits";
    case Pattern::kSignedZeros: return "signed zeros";
    case Pattern::kCloseRepeats: return "close values, each repeated";
  }
  return "?";
}

/// `elems` elements of `dtype` (whole blocks) following `pattern`.
std::vector<std::byte> pattern_data(DType dtype, uint64_t elems, Pattern pattern, uint32_t seed) {
  if (elems == 0) return {};
  std::mt19937_64 rng(seed);
  const DTypeInfo& info = dtype_info(dtype);
  const bool scalar_float = dtype == DType::kF32 || dtype == DType::kF16 || dtype == DType::kBF16;
  switch (pattern) {
    case Pattern::kRandomBits: return make_data(dtype, elems, Data::kRandomBits, seed);
    case Pattern::kSignedZeros: return make_data(dtype, elems, Data::kSignedZeros, seed);
    case Pattern::kCloseRepeats: {
      // Keys that share their top digits, so the selection narrows digit by digit.
      std::vector<float> v(elems);
      for (uint64_t i = 0; i < elems; ++i) {
        v[i] = std::bit_cast<float>(std::bit_cast<uint32_t>(1.0f) + static_cast<uint32_t>((i * 7919) % 1024));
        if (rng() % 2) v[i] = -v[i];
      }
      return *encode_from_f32(DType::kF32, v);
    }
    case Pattern::kAllEqual: {
      if (scalar_float) return *encode_from_f32(dtype, std::vector<float>(elems, -0.0123f));
      std::vector<std::byte> out = make_data(dtype, elems, Data::kWeights, seed);
      for (uint64_t b = 1; b < out.size() / info.block_bytes; ++b) {
        std::memcpy(out.data() + b * info.block_bytes, out.data(), info.block_bytes);  // every block the first
      }
      if (info.block_elems == 1) std::fill(out.begin(), out.end(), std::byte{0x3a});
      return out;
    }
    case Pattern::kPlanted: {
      if (!scalar_float) {
        std::vector<std::byte> out = make_data(dtype, elems, Data::kWeights, seed);
        if (info.block_elems == 1 && !out.empty()) {
          // F8: NaN (both), +-Inf (E5M2), both zeros at random places.
          for (const unsigned code : {0x7fu, 0xffu, 0x7cu, 0xfcu, 0x00u, 0x80u}) out[rng() % out.size()] = static_cast<std::byte>(code);
        }
        return out;
      }
      std::normal_distribution<float> normal(0.0f, 0.02f);
      std::vector<float> v(elems);
      for (auto& x : v) x = normal(rng);
      const float specials[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                                -std::numeric_limits<float>::infinity(), 0.0f, -0.0f, 0.25f, -0.25f};
      for (uint64_t i = 0; i < std::max<uint64_t>(1, elems / 50); ++i) v[rng() % elems] = specials[rng() % 7];
      return *encode_from_f32(dtype, v);
    }
  }
  return {};
}

/// Runs `instance` (host inputs, host outputs) on `b` with `policy`; the outputs' bytes.
Result<std::vector<std::vector<std::byte>>> run_with_policy(const compute::Backend& b, const char* op,
                                                           const std::vector<TM_TensorArg>& in_templates,
                                                           const std::vector<const std::byte*>& host_in,
                                                           const std::vector<TM_TensorArg>& out_templates,
                                                           std::vector<TM_Attribute> attrs, TM_ExecutionPolicy policy) {
  std::vector<TM_TensorArg> ins = in_templates;
  for (size_t i = 0; i < ins.size(); ++i) ins[i].host_data = host_in[i];
  std::vector<TM_TensorArg> os = out_templates;
  std::vector<std::vector<std::byte>> outs(os.size());
  for (size_t i = 0; i < os.size(); ++i) {
    outs[i].assign(os[i].nbytes, std::byte{0xa5});
    os[i].host_out = outs[i].data();
  }
  TM_OpInstance instance{sizeof(TM_OpInstance), op, ins.data(), static_cast<uint32_t>(ins.size()), os.data(),
                         static_cast<uint32_t>(os.size()), attrs.data(), static_cast<uint32_t>(attrs.size())};
  TM_ASSIGN_OR_RETURN(const TM_ExecutionReport report, b.execute(instance, policy));
  if (report.exactness != TM_EXACT_BITWISE) return Status::Internal("report is not bitwise");
  return outs;
}

/// One instance of an analysis: its input, attributes and outputs, run on `b` resident, streamed,
/// and streamed in small chunks (a memory budget that still admits the working memory), each
/// compared bit for bit with the definition's reference. False when `b` refused it by estimate.
bool check_analysis(const compute::Backend& b, const ops::OpDefinition& def, DType dtype,
                    const std::vector<uint64_t>& shape, const std::vector<std::byte>& bytes,
                    std::vector<TM_Attribute> attrs, const std::vector<TM_TensorArg>& out_templates,
                    const std::string& label) {
  const std::vector<TM_TensorArg> ins = {tensor_arg(dtype, shape, bytes.size())};
  const std::vector<const std::byte*> host_in = {bytes.data()};
  std::vector<std::vector<std::byte>> want(out_templates.size());
  std::vector<TM_TensorArg> ref_in = ins, ref_out = out_templates;
  ref_in[0].host_data = bytes.data();
  for (size_t i = 0; i < want.size(); ++i) {
    want[i].assign(out_templates[i].nbytes, std::byte{0x5a});
    ref_out[i].host_out = want[i].data();
  }
  const TM_OpInstance instance{sizeof(TM_OpInstance), def.id.c_str(), ref_in.data(), 1, ref_out.data(),
                               static_cast<uint32_t>(ref_out.size()), attrs.data(), static_cast<uint32_t>(attrs.size())};
  const Status reference = def.reference(instance);
  EXPECT_TRUE(reference.ok()) << label << ": " << reference.to_string();
  if (!reference.ok()) return true;
  auto estimate = b.estimate(instance);
  if (!estimate.ok()) {
    EXPECT_EQ(estimate.status().code(), StatusCode::kUnimplemented) << label << ": " << estimate.status().to_string();
    return false;
  }
  auto compare = [&](const std::vector<std::vector<std::byte>>& got, const char* how) {
    ASSERT_EQ(got.size(), want.size()) << label << how;
    for (size_t o = 0; o < want.size(); ++o) {
      ASSERT_EQ(got[o].size(), want[o].size()) << label << how;
      if (want[o].empty()) continue;
      if (def.id == TM_OP_CHANNEL_STATS) {
        ASSERT_EQ(0, std::memcmp(got[o].data(), want[o].data(), want[o].size()))
            << label << how << " output " << o << ": "
            << first_difference(reinterpret_cast<const TM_TileStats*>(got[o].data()),
                                reinterpret_cast<const TM_TileStats*>(want[o].data()), want[o].size() / sizeof(TM_TileStats));
      } else {
        ASSERT_EQ(0, std::memcmp(got[o].data(), want[o].data(), want[o].size())) << label << how << " output " << o;
      }
    }
  };
  auto both = run_both_ways(b, ins, host_in, out_templates, attrs, def.id.c_str());
  EXPECT_TRUE(both.ok()) << label << ": " << both.status().to_string();
  if (!both.ok()) return true;
  compare(both->resident, " (resident)");
  compare(both->streamed, " (streamed)");
  // Working memory apart from the two chunks; a budget of twice that leaves chunks of a quarter.
  const uint64_t rest = estimate->working_bytes > 2 * bytes.size() ? estimate->working_bytes - 2 * bytes.size() : 0;
  TM_ExecutionPolicy small = bitwise();
  small.memory_budget_bytes = std::max<uint64_t>(2 * rest + (64 << 10), 256 << 10);
  auto chunked = run_with_policy(b, def.id.c_str(), ins, host_in, out_templates, attrs, small);
  // Smaller chunks can need more working memory (channel_stats: shorter row blocks, more partials):
  // an honest refusal, so grow the budget until it runs.
  for (int grow = 0; grow < 4 && !chunked.ok() && chunked.status().code() == StatusCode::kResourceExhausted; ++grow) {
    small.memory_budget_bytes *= 2;
    chunked = run_with_policy(b, def.id.c_str(), ins, host_in, out_templates, attrs, small);
  }
  EXPECT_TRUE(chunked.ok()) << label << " (small chunks): " << chunked.status().to_string();
  if (chunked.ok()) compare(*chunked, " (small chunks)");
  return true;
}

const ops::OpDefinition* definition_of(engine::ComputeSession& session, const char* id) {
  for (const auto& [name, def] : session.registry().all()) {
    if (name == id) return &def;
  }
  return nullptr;
}

/// One device backend, by name, on top_k's and channel_stats' edge shapes and data.
class EdgeShapes : public ::testing::TestWithParam<std::string> {};

TEST_P(EdgeShapes, TopKAndChannelStatsEqualTheReference) {
  auto session = open_session();
  ASSERT_NE(session, nullptr);
  const ops::OpDefinition* top_k = definition_of(*session, TM_OP_TOP_K);
  const ops::OpDefinition* channels = definition_of(*session, TM_OP_CHANNEL_STATS);
  ASSERT_NE(top_k, nullptr);
  ASSERT_NE(channels, nullptr);
  std::map<std::string, int> checked, refused;
  for (const compute::Backend* b : backends_under_test(*session)) {
    if (b->name() != GetParam() || !b->unavailable_reason().empty() || !b->open().ok()) continue;
    for (const DType dtype : decodable_dtypes_for_test()) {
      const uint64_t be = dtype_info(dtype).block_elems;
      const std::string dname(dtype_name(dtype));
      std::mt19937_64 rng(1234 + static_cast<uint32_t>(dtype));
      if (declares_bitwise(*b, TM_OP_TOP_K, dtype, TM_SHAPE_VECTOR)) {
        // Lengths: one block, a few, ragged, and over 2^17 (ties past a segment of 2^16 positions).
        std::vector<uint64_t> lengths = {be, be * 5, be * (1 + rng() % 3000), be * ((200003 + be - 1) / be)};
        for (const uint64_t n : lengths) {
          for (Pattern pattern : {Pattern::kPlanted, Pattern::kAllEqual, Pattern::kRandomBits, Pattern::kSignedZeros,
                                  Pattern::kCloseRepeats}) {
            if (pattern == Pattern::kCloseRepeats && dtype != DType::kF32) continue;
            const auto bytes = pattern_data(dtype, n, pattern, static_cast<uint32_t>(n + static_cast<uint64_t>(pattern)));
            std::vector<uint64_t> ks = {1, 10, n / 3 + 1, n + 5};
            if (n > 100000) ks.push_back(70000);
            for (const uint64_t k : ks) {
              std::vector<TM_Attribute> attrs = {{sizeof(TM_Attribute), TM_ATTR_K, static_cast<int64_t>(k), 0.0}};
              const std::vector<TM_TensorArg> outs = {tensor_arg(DType::kU64, {k}, k * 8), tensor_arg(DType::kF32, {k}, k * 4)};
              const std::string label = b->name() + ": top_k " + dname + " n " + std::to_string(n) + " k " +
                                        std::to_string(k) + " " + pattern_name(pattern);
              (check_analysis(*b, *top_k, dtype, {n}, bytes, attrs, outs, label) ? checked : refused)[b->name()]++;
              if (testing::Test::HasFatalFailure()) return;
            }
          }
        }
      }
      if (declares_bitwise(*b, TM_OP_CHANNEL_STATS, dtype, TM_SHAPE_MATRIX)) {
        std::vector<std::pair<uint64_t, uint64_t>> shapes = {{1, be}, {1, be * 777}, {3, be * 5}, {2048, be * 3}};
        if (be == 1) {
          for (auto shape : {std::pair<uint64_t, uint64_t>{1000, 1}, {4099, 1}, {257, 33}, {3, 4099}, {2048, 600}}) {
            shapes.push_back(shape);
          }
        }
        for (int r = 0; r < 3; ++r) shapes.push_back({1 + rng() % 700, be * (1 + rng() % (be == 1 ? 900 : 6))});
        for (const auto& [rows, cols] : shapes) {
          for (Pattern pattern : {Pattern::kPlanted, Pattern::kAllEqual, Pattern::kRandomBits, Pattern::kSignedZeros}) {
            const auto bytes = pattern_data(dtype, rows * cols, pattern, static_cast<uint32_t>(rows * 31 + cols));
            const std::vector<TM_TensorArg> outs = {tensor_arg(DType::kU8, {rows * sizeof(TM_TileStats)}, rows * sizeof(TM_TileStats)),
                                                    tensor_arg(DType::kU8, {cols * sizeof(TM_TileStats)}, cols * sizeof(TM_TileStats))};
            const std::string label = b->name() + ": channel_stats " + dname + " " + std::to_string(rows) + " x " +
                                      std::to_string(cols) + " " + pattern_name(pattern);
            (check_analysis(*b, *channels, dtype, {rows, cols}, bytes, {}, outs, label) ? checked : refused)[b->name()]++;
            if (testing::Test::HasFatalFailure()) return;
          }
        }
      }
    }
  }
  if (checked.empty()) GTEST_SKIP() << GetParam() << " is unavailable or declares neither tm.top_k@1 nor tm.channel_stats@1 bitwise:" << why_nothing(*session);
  for (const auto& [name, n] : checked) {
    std::printf("%s: %d top_k/channel_stats edge instances bitwise equal to the reference (resident, streamed, small chunks), %d refused by estimate\n",
                name.c_str(), n, refused[name]);
  }
}

INSTANTIATE_TEST_SUITE_P(BackendConformance, EdgeShapes, ::testing::Values("webgpu", "opencl", "cuda", "hip"),
                         [](const ::testing::TestParamInfo<std::string>& param) { return param.param; });

// ---- Uploads -----------------------------------------------------------------------------------

/// Writes and reads back every byte, through each backend's upload path: sizes below and above
/// its staging thresholds, ragged tails, and enough bytes to go round a staging ring more than
/// once; a second write over the first must win.
class Uploads : public ::testing::TestWithParam<std::string> {};

TEST_P(Uploads, ReadBackWhatWasWritten) {
  auto session = open_session();
  ASSERT_NE(session, nullptr);
  const compute::Backend* b = nullptr;
  for (const compute::Backend* candidate : backends_under_test(*session)) {
    if (candidate->name() == GetParam() && candidate->unavailable_reason().empty() && candidate->open().ok()) b = candidate;
  }
  if (b == nullptr || b->host_visible()) GTEST_SKIP() << GetParam() << " is unavailable or host-visible:" << why_nothing(*session);
  constexpr uint64_t kMiB = uint64_t{1} << 20;
  std::mt19937_64 rng(99);
  for (const uint64_t bytes : {uint64_t{3}, uint64_t{4097}, kMiB - 4, kMiB, 16 * kMiB + 7, 67 * kMiB + 3}) {
    std::vector<uint8_t> first(bytes), second(bytes), back(bytes);
    for (auto& v : first) v = static_cast<uint8_t>(rng());
    for (auto& v : second) v = static_cast<uint8_t>(rng());
    auto buffer = b->allocate(bytes);
    ASSERT_TRUE(buffer.ok()) << buffer.status().to_string();
    for (const auto* data : {&first, &second}) {
      ASSERT_TRUE(b->write(*buffer, data->data(), bytes).ok()) << bytes;
      std::fill(back.begin(), back.end(), uint8_t{0xa5});
      const Status read = b->read(*buffer, back.data(), bytes);
      ASSERT_TRUE(read.ok()) << read.to_string();
      EXPECT_EQ(std::memcmp(back.data(), data->data(), bytes), 0) << GetParam() << ": " << bytes << " bytes";
    }
    b->release(*buffer);
  }
}

INSTANTIATE_TEST_SUITE_P(BackendConformance, Uploads, ::testing::Values("webgpu", "opencl", "cuda", "hip"),
                         [](const ::testing::TestParamInfo<std::string>& param) { return param.param; });

// ---- The GPU modules load everywhere, and say why they cannot run -----------------------------

/// What a module says about itself through the bare ABI (no session involved).
struct ModuleFacts {
  bool loaded = false;
  std::string load_error;
  uint32_t abi = 0;
  std::string name;
  bool refuses_other_major = false;
  uint32_t devices = 0;
  std::string why_none;
  bool device_count_ok = false;
};

ModuleFacts probe_module(const fs::path& path) {
  ModuleFacts f;
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char* e = dlerror();
    f.load_error = e ? e : "dlopen failed";
    return f;
  }
  f.loaded = true;
  auto version = reinterpret_cast<TM_PluginAbiVersionFn>(dlsym(lib, TM_PLUGIN_ABI_VERSION_SYMBOL));
  auto get_api = reinterpret_cast<TM_PluginGetApiFn>(dlsym(lib, TM_PLUGIN_GET_API_SYMBOL));
  if (version && get_api) {
    f.abi = version();
    f.refuses_other_major = get_api(TM_PLUGIN_ABI_MAJOR + 1, 0) == nullptr;
    if (const TM_PluginApi* api = get_api(TM_PLUGIN_ABI_MAJOR, TM_PLUGIN_ABI_MINOR)) {
      f.name = api->name ? api->name : "";
      char why[512] = {0};
      TM_Error* error = api->device_count(&f.devices, why, sizeof why);
      f.device_count_ok = error == nullptr;
      if (error) api->error_destroy(error);
      f.why_none = why;
    }
  }
  dlclose(lib);
  return f;
}

TEST(GpuModules, CudaModuleLoadsAndSaysWhyItIsUnavailable) {
  const fs::path path = kPluginDir / "libtm_cuda.so";
  if (!kCudaModuleBuilt) GTEST_SKIP() << "nvcc was not found when this build was configured: no CUDA module";
  ASSERT_TRUE(fs::exists(path)) << path;
  const ModuleFacts f = probe_module(path);
  ASSERT_TRUE(f.loaded) << f.load_error;
  EXPECT_EQ(f.abi, TM_PLUGIN_ABI_VERSION_PACK(TM_PLUGIN_ABI_MAJOR, TM_PLUGIN_ABI_MINOR));
  EXPECT_TRUE(f.refuses_other_major);
  EXPECT_EQ(f.name, "cuda");
  ASSERT_TRUE(f.device_count_ok);
  if (f.devices == 0) {
    EXPECT_FALSE(f.why_none.empty()) << "device_count gave 0 devices without a reason";
    std::printf("cuda module: loaded, no device: %s\n", f.why_none.c_str());
  }
  // Through the host: `tensormorph backends` shows this report.
  auto session = open_session();
  ASSERT_NE(session, nullptr);
  bool reported = false;
  for (const auto& r : session->load_reports()) {
    if (r.library_path.find("libtm_cuda.so") == std::string::npos) continue;
    reported = true;
    EXPECT_EQ(r.name, "cuda");
    EXPECT_FALSE(r.builtin);
    EXPECT_EQ(r.available, f.devices > 0);
    if (!r.available) {
      EXPECT_EQ(r.detail, f.why_none);
    }
  }
  EXPECT_TRUE(reported) << "the session did not load " << path;
}

TEST(GpuModules, HipModuleLoadsAndSaysItIsNotRunHere) {
  const fs::path path = kPluginDir / "libtm_hip.so";
  if (!kHipModuleBuilt) GTEST_SKIP() << "hipcc was not found (or this is a sanitizer build): no HIP module";
  ASSERT_TRUE(fs::exists(path)) << path;
  const ModuleFacts f = probe_module(path);
  if (!f.loaded && f.load_error.find("libamdhip64") != std::string::npos) {
    GTEST_SKIP() << "the HIP runtime is not installed on this machine: " << f.load_error;
  }
  ASSERT_TRUE(f.loaded) << f.load_error;
  EXPECT_TRUE(f.refuses_other_major);
  EXPECT_EQ(f.name, "hip");
  ASSERT_TRUE(f.device_count_ok);
  if (f.devices == 0) {
    EXPECT_NE(f.why_none.find("built, not run on these machines"), std::string::npos) << f.why_none;
    std::printf("hip module: loaded, no device: %s\n", f.why_none.c_str());
  }
  if (::access("/dev/kfd", R_OK | W_OK) != 0) {
    // No AMD GPU driver: the gate (hip_module_gate.cpp) answers without loading the HIP runtime,
    // whose initialisers cost every command ~22 ms.
    EXPECT_EQ(f.devices, 0u);
    std::ifstream maps("/proc/self/maps");
    std::string line;
    while (std::getline(maps, line)) {
      EXPECT_EQ(line.find("libamdhip64"), std::string::npos) << "the HIP runtime was loaded: " << line;
    }
  }
}

}  // namespace
}  // namespace tensormorph
