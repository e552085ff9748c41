#include "backend.h"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

#include "kernel_sources.h"

namespace tm_opencl {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
// Work-group lanes beyond this buy nothing for a 4096-slot row and cost local memory.
constexpr size_t kMaxGroupLanes = 256;
// Local memory per lane of a *_group kernel: a double sum, a double sum of squares, 7 stats words.
constexpr size_t kLocalBytesPerLane = 2 * sizeof(double) + 7 * sizeof(uint32_t);

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

Result<uint64_t> parse_unsigned(std::string_view key, std::string_view value, uint64_t low, uint64_t high) {
  uint64_t number = 0;
  bool ok = !value.empty();
  for (char c : value) {
    if (c < '0' || c > '9' ||
        number > (std::numeric_limits<uint64_t>::max() - static_cast<uint64_t>(c - '0')) / 10) {
      ok = false;
      break;
    }
    number = number * 10 + static_cast<uint64_t>(c - '0');
  }
  if (!ok || number < low || number > high) {
    return invalid_argument("opencl: option " + std::string(key) + "=" + std::string(value) +
                            ": expected an integer in [" + std::to_string(low) + ", " + std::to_string(high) + "]");
  }
  return number;
}

HostNanBehaviour probe_host_nan_behaviour() {
  // volatile keeps the compiler from folding these: we want the host FPU's answer, the one the
  // CPU reference decoder's `float(q) * d` gets at run time.
  volatile float zero = 0.0f;
  volatile float infinity = std::numeric_limits<float>::infinity();
  volatile float two = 2.0f;
  volatile float signalling_nan = std::bit_cast<float>(0xff800001u);
  HostNanBehaviour behaviour;
  const float default_nan = zero * infinity;
  const float propagated = two * signalling_nan;
  behaviour.default_nan_bits = std::bit_cast<uint32_t>(default_nan);
  behaviour.propagates_nan_operand = std::bit_cast<uint32_t>(propagated) == 0xffc00001u;
  return behaviour;
}

Result<ClProgram> build_program(const TM_Backend& backend, const char* family_source, const char* build_options,
                                const char* what) {
  const char* sources[] = {kCommonKernelSource, family_source};
  cl_int error = CL_SUCCESS;
  ClProgram program(clCreateProgramWithSource(backend.context.get(), 2, sources, nullptr, &error));
  if (error != CL_SUCCESS) return cl_failure(error, std::string("clCreateProgramWithSource(") + what + ")");
  cl_device_id device = backend.device.device;
  error = clBuildProgram(program.get(), 1, &device, build_options, nullptr, nullptr);
  if (error != CL_SUCCESS) {
    Failure failure = cl_failure(error, std::string("clBuildProgram(") + what + ")");
    size_t log_size = 0;
    if (clGetProgramBuildInfo(program.get(), device, CL_PROGRAM_BUILD_LOG, 0, nullptr, &log_size) == CL_SUCCESS) {
      std::string log(log_size, '\0');
      if (clGetProgramBuildInfo(program.get(), device, CL_PROGRAM_BUILD_LOG, log_size, log.data(), nullptr) ==
          CL_SUCCESS) {
        // Error messages hold TM_KIT_MESSAGE_BYTES: the start of the log says what broke.
        failure.message += "; build log: " + log.substr(0, 300);
      }
    }
    return failure;
  }
  return program;
}

Result<ClKernel> make_kernel(const ClProgram& program, const char* name) {
  cl_int error = CL_SUCCESS;
  ClKernel kernel(clCreateKernel(program.get(), name, &error));
  if (error != CL_SUCCESS) return cl_failure(error, std::string("clCreateKernel(") + name + ")");
  return kernel;
}

Result<TileStatsKernels> build_tile_stats(const TM_Backend& backend, bool f16_input) {
  TileStatsKernels kernels;
  // Deliberately no -cl-fast-relaxed-math, -cl-mad-enable or -cl-denorms-are-zero.
  TMCL_ASSIGN_OR_RETURN(kernels.program,
                        build_program(backend, kTileStatsKernelSource, f16_input ? "-D TM_INPUT_F16=1" : "-D TM_INPUT_F16=0",
                                      f16_input ? "tile_stats F16" : "tile_stats F32"));
  TMCL_ASSIGN_OR_RETURN(kernels.row_seq, make_kernel(kernels.program, "row_stats_seq"));
  TMCL_ASSIGN_OR_RETURN(kernels.row_group, make_kernel(kernels.program, "row_stats_group"));
  TMCL_ASSIGN_OR_RETURN(kernels.tile_seq, make_kernel(kernels.program, "tile_stats_seq"));
  TMCL_ASSIGN_OR_RETURN(kernels.tile_group, make_kernel(kernels.program, "tile_stats_group"));
  return kernels;
}

Result<size_t> kernel_work_group_limit(const TM_Backend& backend, const ClKernel& kernel) {
  size_t limit = 0;
  TMCL_CL_CHECK(clGetKernelWorkGroupInfo(kernel.get(), backend.device.device, CL_KERNEL_WORK_GROUP_SIZE, sizeof limit,
                                         &limit, nullptr),
                "clGetKernelWorkGroupInfo(CL_KERNEL_WORK_GROUP_SIZE)");
  return limit;
}

// The largest power-of-two work-group the *_group kernels can run with on this device.
Result<size_t> choose_group_lanes(const TM_Backend& backend) {
  size_t lanes = std::min(kMaxGroupLanes, backend.caps.max_work_group_size);
  lanes = std::min<size_t>(lanes, static_cast<size_t>(backend.caps.local_memory_bytes / kLocalBytesPerLane));
  for (const TileStatsKernels* kernels : {&backend.tile_stats_f32, &backend.tile_stats_f16}) {
    for (const ClKernel* kernel : {&kernels->row_group, &kernels->tile_group}) {
      TMCL_ASSIGN_OR_RETURN(size_t limit, kernel_work_group_limit(backend, *kernel));
      lanes = std::min(lanes, limit);
    }
  }
  return lanes == 0 ? size_t{1} : std::bit_floor(lanes);
}

// Times one blocking write and one blocking read of `bytes` (after an untimed write that makes the
// implementation really allocate). Failure is not fatal: the traits then say "not measured".
void measure_bandwidth(TM_Backend& backend) {
  const uint64_t bytes = std::min(backend.options.bandwidth_probe_bytes, backend.caps.max_allocation_bytes / 2);
  if (bytes == 0) return;
  std::vector<std::byte> host(static_cast<size_t>(bytes));
  cl_int error = CL_SUCCESS;
  ClMem mem(clCreateBuffer(backend.context.get(), CL_MEM_READ_WRITE, static_cast<size_t>(bytes), nullptr, &error));
  if (error != CL_SUCCESS) return;
  cl_command_queue queue = backend.queue.get();
  const size_t size = static_cast<size_t>(bytes);
  if (clEnqueueWriteBuffer(queue, mem.get(), CL_TRUE, 0, size, host.data(), 0, nullptr, nullptr) != CL_SUCCESS) return;
  using Clock = std::chrono::steady_clock;
  const auto t0 = Clock::now();
  if (clEnqueueWriteBuffer(queue, mem.get(), CL_TRUE, 0, size, host.data(), 0, nullptr, nullptr) != CL_SUCCESS) return;
  const auto t1 = Clock::now();
  if (clEnqueueReadBuffer(queue, mem.get(), CL_TRUE, 0, size, host.data(), 0, nullptr, nullptr) != CL_SUCCESS) return;
  const auto t2 = Clock::now();
  const double write_ns = std::max(1.0, std::chrono::duration<double, std::nano>(t1 - t0).count());
  const double read_ns = std::max(1.0, std::chrono::duration<double, std::nano>(t2 - t1).count());
  backend.host_to_device_gbps = static_cast<double>(bytes) / write_ns;  // bytes per ns == GB/s
  backend.device_to_host_gbps = static_cast<double>(bytes) / read_ns;
  backend.bandwidth_measured = true;
}

}  // namespace

Result<BackendOptions> parse_backend_options(const char* text) {
  BackendOptions options;
  if (text == nullptr) return options;
  std::string_view rest(text);
  while (!rest.empty()) {
    const size_t end = rest.find(';');
    const std::string_view item = trim(rest.substr(0, end));
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    if (item.empty()) continue;
    const size_t equals = item.find('=');
    if (equals == std::string_view::npos) {
      return invalid_argument("opencl: option '" + std::string(item) + "' is not key=value");
    }
    const std::string_view key = trim(item.substr(0, equals));
    const std::string_view value = trim(item.substr(equals + 1));
    if (key == "bandwidth_probe_mib") {
      TMCL_ASSIGN_OR_RETURN(uint64_t mib, parse_unsigned(key, value, 0, 4096));
      options.bandwidth_probe_bytes = mib * kMiB;
    } else if (key == "staging_mib") {
      TMCL_ASSIGN_OR_RETURN(uint64_t mib, parse_unsigned(key, value, 1, 4096));
      options.staging_bytes = mib * kMiB;
    } else if (key == "reduction") {
      if (value == "auto") options.reduction = Reduction::kAuto;
      else if (value == "seq") options.reduction = Reduction::kSequential;
      else if (value == "group") options.reduction = Reduction::kWorkGroup;
      else return invalid_argument("opencl: option reduction=" + std::string(value) + ": expected auto, seq or group");
    } else if (key == "assume_no_denormals") {
      TMCL_ASSIGN_OR_RETURN(uint64_t flag, parse_unsigned(key, value, 0, 1));
      options.assume_no_denormals = flag == 1;
    } else if (key == "assume_no_fp64") {
      TMCL_ASSIGN_OR_RETURN(uint64_t flag, parse_unsigned(key, value, 0, 1));
      options.assume_no_fp64 = flag == 1;
    } else {
      return invalid_argument("opencl: unknown option '" + std::string(key) +
                              "' (known: bandwidth_probe_mib, staging_mib, reduction, assume_no_denormals, "
                              "assume_no_fp64)");
    }
  }
  return options;
}

Result<std::unique_ptr<TM_Backend>> create_backend(const TM_BackendCreateArgs& args) {
  auto backend = std::make_unique<TM_Backend>();
  TMCL_ASSIGN_OR_RETURN(backend->options, parse_backend_options(args.options));
  DeviceList list = list_devices();
  if (list.devices.empty()) return Failure{TM_STATUS_NOT_FOUND, "opencl: no device: " + list.why_none};
  if (args.device_index >= list.devices.size()) {
    return invalid_argument("opencl: device_index " + std::to_string(args.device_index) + " is out of range (" +
                            std::to_string(list.devices.size()) + " OpenCL device(s))");
  }
  backend->device = list.devices[args.device_index];
  TMCL_ASSIGN_OR_RETURN(backend->caps, read_device_caps(backend->device));

  cl_int error = CL_SUCCESS;
  const cl_context_properties properties[] = {
      CL_CONTEXT_PLATFORM, reinterpret_cast<cl_context_properties>(backend->device.platform), 0};
  *backend->context.receive() = clCreateContext(properties, 1, &backend->device.device, nullptr, nullptr, &error);
  if (error != CL_SUCCESS) return cl_failure(error, "clCreateContext");
  *backend->queue.receive() =
      clCreateCommandQueue(backend->context.get(), backend->device.device, CL_QUEUE_PROFILING_ENABLE, &error);
  if (error != CL_SUCCESS) return cl_failure(error, "clCreateCommandQueue");

  backend->tile_stats_available = backend->caps.fp64 && !backend->options.assume_no_fp64;
  if (backend->tile_stats_available) {
    TMCL_ASSIGN_OR_RETURN(backend->tile_stats_f32, build_tile_stats(*backend, false));
    TMCL_ASSIGN_OR_RETURN(backend->tile_stats_f16, build_tile_stats(*backend, true));
    TMCL_ASSIGN_OR_RETURN(backend->group_lanes, choose_group_lanes(*backend));
    const bool gpu = (backend->caps.type & CL_DEVICE_TYPE_GPU) != 0;
    switch (backend->options.reduction) {
      case Reduction::kAuto: backend->use_group_reduction = gpu && backend->group_lanes > 1; break;
      case Reduction::kSequential: backend->use_group_reduction = false; break;
      case Reduction::kWorkGroup: backend->use_group_reduction = true; break;
    }
  }
  TMCL_ASSIGN_OR_RETURN(backend->decode_program, build_program(*backend, kDecodeKernelSource, "", "decode Q8_0"));
  TMCL_ASSIGN_OR_RETURN(backend->decode_q8_0, make_kernel(backend->decode_program, "decode_q8_0"));
  backend->decode_bitwise = backend->caps.fp32_denormals && backend->caps.fp32_round_to_nearest &&
                            !backend->options.assume_no_denormals;
  backend->host_nan = probe_host_nan_behaviour();
  measure_bandwidth(*backend);
  return backend;
}

TM_DeviceTraits device_traits_of(const TM_Backend& backend) {
  TM_DeviceTraits traits{};
  traits.struct_size = sizeof traits;
  std::snprintf(traits.device_name, sizeof traits.device_name, "%s", backend.caps.name.c_str());
  traits.memory_bytes = backend.caps.global_memory_bytes;
  traits.memory_space_count = 1;
  traits.host_memory_visible = backend.caps.host_unified_memory ? 1u : 0u;
  // Reported even on unified-memory devices: execute and buffer_write still copy through them.
  traits.host_to_device_gbps = backend.host_to_device_gbps;
  traits.device_to_host_gbps = backend.device_to_host_gbps;
  traits.bandwidth_measured = backend.bandwidth_measured ? 1u : 0u;
  traits.compute_units = backend.caps.compute_units;
  traits.runs_on_host_cores = (backend.caps.type & CL_DEVICE_TYPE_CPU) != 0 ? 1u : 0u;
  return traits;
}

Status check_buffer_range(const TM_Backend& backend, const TM_Buffer& buffer, uint64_t offset, uint64_t bytes,
                          const char* what) {
  if (buffer.owner != &backend) {
    return invalid_argument(std::string("opencl: ") + what + ": the buffer belongs to another backend");
  }
  uint64_t end = 0;
  if (__builtin_add_overflow(offset, bytes, &end) || end > buffer.bytes) {
    return invalid_argument(std::string("opencl: ") + what + ": bytes [" + std::to_string(offset) + ", +" +
                            std::to_string(bytes) + ") run past the buffer's " + std::to_string(buffer.bytes) +
                            " bytes");
  }
  return {};
}

Result<std::unique_ptr<TM_Buffer>> allocate_buffer(TM_Backend& backend, uint32_t memory_space, uint64_t bytes) {
  if (memory_space != kDeviceMemorySpace) {
    return invalid_argument("opencl: buffer_alloc: memory space " + std::to_string(memory_space) +
                            " is not this plugin's (it owns space 1, device global memory)");
  }
  if (bytes == 0) return invalid_argument("opencl: buffer_alloc: zero bytes requested");
  if (bytes > backend.caps.max_allocation_bytes || bytes > std::numeric_limits<size_t>::max()) {
    return resource_exhausted("opencl: buffer_alloc: " + std::to_string(bytes) +
                              " bytes exceed the device's largest allocation (CL_DEVICE_MAX_MEM_ALLOC_SIZE = " +
                              std::to_string(backend.caps.max_allocation_bytes) + ")");
  }
  auto buffer = std::make_unique<TM_Buffer>();
  buffer->owner = &backend;
  buffer->bytes = bytes;
  cl_int error = CL_SUCCESS;
  *buffer->mem.receive() =
      clCreateBuffer(backend.context.get(), CL_MEM_READ_WRITE, static_cast<size_t>(bytes), nullptr, &error);
  if (error != CL_SUCCESS) return cl_failure(error, "clCreateBuffer");
  return buffer;
}

Status write_buffer(TM_Backend& backend, TM_Buffer& buffer, uint64_t offset, const void* src, uint64_t bytes) {
  TMCL_RETURN_IF_ERROR(check_buffer_range(backend, buffer, offset, bytes, "buffer_write"));
  if (bytes == 0) return {};
  if (src == nullptr) return invalid_argument("opencl: buffer_write: null source");
  std::lock_guard lock(backend.mutex);
  TMCL_CL_CHECK(clEnqueueWriteBuffer(backend.queue.get(), buffer.mem.get(), CL_TRUE, static_cast<size_t>(offset),
                                     static_cast<size_t>(bytes), src, 0, nullptr, nullptr),
                "clEnqueueWriteBuffer");
  return {};
}

Status read_buffer(TM_Backend& backend, TM_Buffer& buffer, uint64_t offset, void* dst, uint64_t bytes) {
  TMCL_RETURN_IF_ERROR(check_buffer_range(backend, buffer, offset, bytes, "buffer_read"));
  if (bytes == 0) return {};
  if (dst == nullptr) return invalid_argument("opencl: buffer_read: null destination");
  std::lock_guard lock(backend.mutex);
  TMCL_CL_CHECK(clEnqueueReadBuffer(backend.queue.get(), buffer.mem.get(), CL_TRUE, static_cast<size_t>(offset),
                                    static_cast<size_t>(bytes), dst, 0, nullptr, nullptr),
                "clEnqueueReadBuffer");
  return {};
}

}  // namespace tm_opencl
