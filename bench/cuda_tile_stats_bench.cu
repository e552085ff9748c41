// The CUDA backend on a real GPU, measured in one run:
//   1. device memory bandwidth: a read-only reduction kernel and a device-to-device copy;
//   2. tm.tile_stats@1 on resident data (the module's execute on a device buffer) per dtype, with
//      its ratio to the read bandwidth, the CPU backend on the same bytes, and a bitwise check;
//      then tm.radix_histogram@1's top-digit pass (one pass of an exact quantile), tm.top_k@1
//      (k = 10), tm.channel_stats@1 and tm.diff_stats@1 (against a changed copy, both resident)
//      the same way;
//   3. the scheduler's choices on a host-resident and then a device-resident tensor (records);
//   4. the BF16 tensor written as safetensors for the PyTorch peer (bench/cuda_torch_peer.py).
//
// Usage: cuda_tile_stats_bench [--gib G] [--reps R] [--tile T] [--peer-file PATH] [--json PATH]
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "compute/backend.h"
#include "core/dtype_abi.h"
#include "core/quantize/quantize.h"
#include "formats/safetensors/safetensors.h"
#include "engine/compute_session.h"
#include "compute/ops/reference.h"

namespace tmx = tensormorph;

namespace {

#define CUDA_OK(expr)                                                                          \
  do {                                                                                         \
    cudaError_t e_ = (expr);                                                                   \
    if (e_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s failed: %s\n", #expr, cudaGetErrorString(e_));                  \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

__global__ void read_reduce(const uint4* data, uint64_t words, unsigned long long* sink) {
  uint32_t acc = 0;
  const uint64_t step = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < words; i += step) {
    const uint4 w = __ldcs(data + i);
    acc += w.x ^ w.y ^ w.z ^ w.w;
  }
  if (acc == 0x9e3779b9u) atomicAdd(sink, 1ull);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

/// Median time in ns of `reps` runs of `body` enqueued on the default stream.
template <typename Body>
double time_events(int reps, Body&& body) {
  cudaEvent_t a, b;
  CUDA_OK(cudaEventCreate(&a));
  CUDA_OK(cudaEventCreate(&b));
  std::vector<double> times;
  body();  // warm-up
  CUDA_OK(cudaDeviceSynchronize());
  for (int i = 0; i < reps; ++i) {
    CUDA_OK(cudaEventRecord(a));
    body();
    CUDA_OK(cudaEventRecord(b));
    CUDA_OK(cudaEventSynchronize(b));
    float ms = 0;
    CUDA_OK(cudaEventElapsedTime(&ms, a, b));
    times.push_back(ms * 1e6);
  }
  CUDA_OK(cudaEventDestroy(a));
  CUDA_OK(cudaEventDestroy(b));
  return median(times);
}

struct MemoryBandwidth {
  double read_gbps = 0;
  double copy_gbps = 0;  // bytes read + bytes written
};

MemoryBandwidth measure_memory(uint64_t bytes, int reps) {
  MemoryBandwidth m;
  void* src = nullptr;
  void* dst = nullptr;
  unsigned long long* sink = nullptr;
  CUDA_OK(cudaMalloc(&src, bytes));
  CUDA_OK(cudaMalloc(&dst, bytes));
  CUDA_OK(cudaMalloc(&sink, sizeof *sink));
  CUDA_OK(cudaMemset(src, 0x3c, bytes));
  int sms = 0;
  CUDA_OK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const double read_ns = time_events(reps, [&] {
    read_reduce<<<sms * 8, 512>>>(static_cast<const uint4*>(src), bytes / 16, sink);
  });
  const double copy_ns = time_events(reps, [&] { CUDA_OK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice)); });
  m.read_gbps = static_cast<double>(bytes) / read_ns;
  m.copy_gbps = 2.0 * static_cast<double>(bytes) / copy_ns;
  CUDA_OK(cudaFree(src));
  CUDA_OK(cudaFree(dst));
  CUDA_OK(cudaFree(sink));
  return m;
}

/// Fills `out` in parallel: fill(begin, end, seed) writes bytes [begin, end).
template <typename Fill>
void parallel_fill(uint64_t count, Fill&& fill) {
  const unsigned threads = std::max(1u, std::min(32u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  const uint64_t part = (count + threads - 1) / threads;
  for (unsigned t = 0; t < threads; ++t) {
    const uint64_t begin = std::min(count, t * part), end = std::min(count, begin + part);
    pool.emplace_back([&, begin, end, t] { fill(begin, end, 1234u + t); });
  }
  for (auto& th : pool) th.join();
}

/// Weights-like values: N(0, 0.02) with a few exact zeros.
float weight(std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 0.02f);
  const float v = normal(rng);
  return (rng() & 1023u) == 0 ? 0.0f : v;
}

struct Case {
  tmx::DType dtype;
  uint64_t rows, cols;
  std::vector<std::byte> bytes;
};

Case make_case(tmx::DType dtype, double gib) {
  Case c{dtype, 0, 0, {}};
  const tmx::DTypeInfo& info = tmx::dtype_info(dtype);
  c.cols = 8192;
  const uint64_t row_bytes = c.cols / info.block_elems * info.block_bytes;
  c.rows = std::max<uint64_t>(256, static_cast<uint64_t>(gib * 1073741824.0 / static_cast<double>(row_bytes)) / 256 * 256);
  c.bytes.resize(c.rows * row_bytes);
  const uint64_t elems = c.rows * c.cols;
  std::byte* out = c.bytes.data();
  switch (dtype) {
    case tmx::DType::kF32:
      parallel_fill(elems, [&](uint64_t b, uint64_t e, unsigned seed) {
        std::mt19937 rng(seed);
        for (uint64_t i = b; i < e; ++i) {
          const float v = weight(rng);
          std::memcpy(out + 4 * i, &v, 4);
        }
      });
      break;
    case tmx::DType::kF16:
    case tmx::DType::kBF16:
      parallel_fill(elems, [&](uint64_t b, uint64_t e, unsigned seed) {
        std::mt19937 rng(seed);
        for (uint64_t i = b; i < e; ++i) {
          const uint16_t h = dtype == tmx::DType::kF16 ? tmx::f32_to_f16(weight(rng)) : tmx::f32_to_bf16(weight(rng));
          std::memcpy(out + 2 * i, &h, 2);
        }
      });
      break;
    case tmx::DType::kF8E4M3:
      parallel_fill(elems, [&](uint64_t b, uint64_t e, unsigned seed) {
        std::mt19937 rng(seed);
        for (uint64_t i = b; i < e; ++i) {
          const uint32_t r = rng();
          out[i] = static_cast<std::byte>((r & 0x80u) | ((r >> 8) % 0x70u));  // finite codes
        }
      });
      break;
    default: {
      // Block types: random quants with plausible fp16 scales (the format's own header fields).
      const uint64_t blocks = elems / info.block_elems;
      parallel_fill(blocks, [&](uint64_t b, uint64_t e, unsigned seed) {
        std::mt19937 rng(seed);
        for (uint64_t k = b; k < e; ++k) {
          std::byte* block = out + k * info.block_bytes;
          for (uint32_t i = 0; i < info.block_bytes; ++i) block[i] = static_cast<std::byte>(rng());
          // Q4_K: dmin 1-32x d, as ggml's quantizer makes them (bench/make_bench_checkpoints.py).
          const bool k4 = dtype == tmx::DType::kQ4_K;
          const float r = static_cast<float>(rng() % 100) / 100.0f, r2 = static_cast<float>(rng() % 100) / 100.0f;
          const uint16_t d = tmx::f32_to_f16(k4 ? 5e-5f + 1.5e-4f * r : 0.001f + 0.001f * r);
          const uint16_t dmin = tmx::f32_to_f16(2e-4f + 1.4e-3f * r2);
          uint32_t d_at = 0, dmin_at = 0;
          bool has_min = false;
          if (dtype == tmx::DType::kQ4_K) {
            d_at = 0;
            dmin_at = 2;
            has_min = true;
          } else if (dtype == tmx::DType::kQ6_K) {
            d_at = 208;
          }
          std::memcpy(block + d_at, &d, 2);
          if (has_min) std::memcpy(block + dmin_at, &dmin, 2);
        }
      });
      break;
    }
  }
  return c;
}

const tmx::compute::Backend* find_backend(tmx::engine::ComputeSession& s, const std::string& name) {
  for (const auto& b : s.backends()) {
    if (b->name() == name) return b.get();
  }
  return nullptr;
}

/// A tm.tile_stats@1 instance over the whole matrix.
struct TileStatsInstance {
  TM_TensorArg in{}, out{};
  TM_Attribute attrs[5]{};
  TM_OpInstance op{};
  std::vector<TM_TileStats> stats;

  TileStatsInstance(const Case& c, uint32_t tile, const void* host, TM_Buffer* buffer) {
    const tmx::ops::TileGrid grid = tmx::ops::tile_grid({0, c.rows, 0, c.cols}, tile);
    stats.resize(grid.count());
    in.struct_size = sizeof in;
    in.dtype = tmx::to_abi_dtype(c.dtype);
    in.rank = 2;
    in.shape[0] = c.rows;
    in.shape[1] = c.cols;
    in.host_data = host;
    in.buffer = buffer;
    in.nbytes = c.bytes.size();
    out.struct_size = sizeof out;
    out.dtype = TM_DTYPE_U8;
    out.rank = 1;
    out.shape[0] = stats.size() * sizeof(TM_TileStats);
    out.host_out = stats.data();
    out.nbytes = out.shape[0];
    const char* names[5] = {"row_begin", "row_end", "col_begin", "col_end", "tile"};
    const int64_t values[5] = {0, static_cast<int64_t>(c.rows), 0, static_cast<int64_t>(c.cols), tile};
    for (int i = 0; i < 5; ++i) attrs[i] = {sizeof(TM_Attribute), names[i], values[i], 0.0};
    op = {sizeof op, TM_OP_TILE_STATS, &in, 1, &out, 1, attrs, 5};
  }
};

/// A tm.radix_histogram@1 pass over the top 16 bits of the value key, of all elements.
struct RadixInstance {
  TM_TensorArg in[2]{}, out[2]{};
  TM_Attribute attrs[3]{};
  TM_OpInstance op{};
  std::vector<uint64_t> counts = std::vector<uint64_t>(65536), classes = std::vector<uint64_t>(4);

  RadixInstance(const Case& c, const void* host, TM_Buffer* buffer) {
    in[0].struct_size = in[1].struct_size = out[0].struct_size = out[1].struct_size = sizeof(TM_TensorArg);
    in[0].dtype = tmx::to_abi_dtype(c.dtype);
    in[0].rank = 1;
    in[0].shape[0] = c.rows * c.cols;
    in[0].host_data = host;
    in[0].buffer = buffer;
    in[0].nbytes = c.bytes.size();
    in[1].dtype = TM_DTYPE_U64;
    in[1].rank = 1;
    for (int i = 0; i < 2; ++i) {
      std::vector<uint64_t>& v = i == 0 ? counts : classes;
      out[i].dtype = TM_DTYPE_U64;
      out[i].rank = 1;
      out[i].shape[0] = v.size();
      out[i].host_out = v.data();
      out[i].nbytes = v.size() * sizeof(uint64_t);
    }
    attrs[0] = {sizeof(TM_Attribute), TM_ATTR_KEY, TM_RADIX_KEY_VALUE, 0.0};
    attrs[1] = {sizeof(TM_Attribute), TM_ATTR_SHIFT, 16, 0.0};
    attrs[2] = {sizeof(TM_Attribute), TM_ATTR_BITS, 16, 0.0};
    op = {sizeof op, TM_OP_RADIX_HISTOGRAM, in, 2, out, 2, attrs, 3};
  }
};

/// A tm.top_k@1 instance over all elements.
struct TopKInstance {
  TM_TensorArg in{}, out[2]{};
  TM_Attribute attr{};
  TM_OpInstance op{};
  std::vector<uint64_t> indices;
  std::vector<float> values;

  TopKInstance(const Case& c, uint64_t k, const void* host, TM_Buffer* buffer) : indices(k), values(k) {
    in.struct_size = out[0].struct_size = out[1].struct_size = sizeof(TM_TensorArg);
    in.dtype = tmx::to_abi_dtype(c.dtype);
    in.rank = 1;
    in.shape[0] = c.rows * c.cols;
    in.host_data = host;
    in.buffer = buffer;
    in.nbytes = c.bytes.size();
    out[0].dtype = TM_DTYPE_U64;
    out[1].dtype = TM_DTYPE_F32;
    for (int i = 0; i < 2; ++i) {
      out[i].rank = 1;
      out[i].shape[0] = k;
    }
    out[0].host_out = indices.data();
    out[0].nbytes = k * 8;
    out[1].host_out = values.data();
    out[1].nbytes = k * 4;
    attr = {sizeof(TM_Attribute), TM_ATTR_K, static_cast<int64_t>(k), 0.0};
    op = {sizeof op, TM_OP_TOP_K, &in, 1, out, 2, &attr, 1};
  }
};

/// A tm.channel_stats@1 instance over the matrix.
struct ChannelInstance {
  TM_TensorArg in{}, out[2]{};
  TM_OpInstance op{};
  std::vector<TM_TileStats> rows, cols;

  ChannelInstance(const Case& c, const void* host, TM_Buffer* buffer) : rows(c.rows), cols(c.cols) {
    in.struct_size = out[0].struct_size = out[1].struct_size = sizeof(TM_TensorArg);
    in.dtype = tmx::to_abi_dtype(c.dtype);
    in.rank = 2;
    in.shape[0] = c.rows;
    in.shape[1] = c.cols;
    in.host_data = host;
    in.buffer = buffer;
    in.nbytes = c.bytes.size();
    for (int i = 0; i < 2; ++i) {
      std::vector<TM_TileStats>& v = i == 0 ? rows : cols;
      out[i].dtype = TM_DTYPE_U8;
      out[i].rank = 1;
      out[i].shape[0] = v.size() * sizeof(TM_TileStats);
      out[i].nbytes = out[i].shape[0];
      out[i].host_out = v.data();
    }
    op = {sizeof op, TM_OP_CHANNEL_STATS, &in, 1, out, 2, nullptr, 0};
  }
};

/// A tm.diff_stats@1 instance over the matrix and a same-sized second tensor.
struct DiffInstance {
  TM_TensorArg in[2]{}, out{};
  TM_OpInstance op{};
  std::vector<TM_DiffStats> chunks;

  DiffInstance(const Case& c, const void* host_a, TM_Buffer* a, const void* host_b, TM_Buffer* b)
      : chunks((c.rows * c.cols + TM_DIFF_CHUNK - 1) / TM_DIFF_CHUNK) {
    for (int i = 0; i < 2; ++i) {
      in[i].struct_size = sizeof(TM_TensorArg);
      in[i].dtype = tmx::to_abi_dtype(c.dtype);
      in[i].rank = 1;
      in[i].shape[0] = c.rows * c.cols;
      in[i].nbytes = c.bytes.size();
    }
    in[0].host_data = host_a;
    in[0].buffer = a;
    in[1].host_data = host_b;
    in[1].buffer = b;
    out.struct_size = sizeof(TM_TensorArg);
    out.dtype = TM_DTYPE_U8;
    out.rank = 1;
    out.shape[0] = out.nbytes = chunks.size() * sizeof(TM_DiffStats);
    out.host_out = chunks.data();
    op = {sizeof op, TM_OP_DIFF_STATS, in, 2, &out, 1, nullptr, 0};
  }
};

TM_ExecutionPolicy bitwise_policy() {
  TM_ExecutionPolicy p{};
  p.struct_size = sizeof p;
  p.exactness_floor = TM_EXACT_BITWISE;
  return p;
}

std::string arg_value(int argc, char** argv, const char* name, const char* fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  }
  return fallback;
}

}  // namespace

int main(int argc, char** argv) {
  const double gib = std::atof(arg_value(argc, argv, "--gib", "1").c_str());
  const int reps = std::atoi(arg_value(argc, argv, "--reps", "20").c_str());
  const uint32_t tile = static_cast<uint32_t>(std::atoi(arg_value(argc, argv, "--tile", "256").c_str()));
  const std::string peer_file = arg_value(argc, argv, "--peer-file", "/tmp/tm_bench_bf16.safetensors");
  const std::string json_path = arg_value(argc, argv, "--json", "");

  cudaDeviceProp props{};
  CUDA_OK(cudaGetDeviceProperties(&props, 0));
  std::printf("device: %s, %d SMs, %.1f GiB\n", props.name, props.multiProcessorCount,
              static_cast<double>(props.totalGlobalMem) / 1073741824.0);
  const MemoryBandwidth memory = measure_memory(uint64_t{4} << 30, reps);
  std::printf("memory: read-only reduction %.0f GB/s, device-to-device copy %.0f GB/s (read + write)\n",
              memory.read_gbps, memory.copy_gbps);

  tmx::engine::SessionOptions options;
  options.extra_plugin_dirs = {TM_PLUGIN_BUILD_DIR};
  auto session = tmx::engine::ComputeSession::open(options);
  if (!session.ok()) {
    std::fprintf(stderr, "session: %s\n", session.status().to_string().c_str());
    return 1;
  }
  for (const auto& r : (*session)->load_reports()) {
    std::printf("backend %s: %s%s\n", r.name.c_str(), r.available ? "available" : "unavailable",
                r.detail.empty() ? "" : (": " + r.detail).c_str());
  }
  const tmx::compute::Backend* gpu = find_backend(**session, "cuda");
  const tmx::compute::Backend* cpu = find_backend(**session, "cpu");
  if (gpu == nullptr || cpu == nullptr) {
    std::fprintf(stderr, "the cuda and cpu backends are both needed\n");
    return 1;
  }
  const TM_DeviceTraits& traits = gpu->traits();
  std::printf("cuda traits: %s; link to device %.1f GB/s, to host %.1f GB/s\n", traits.device_name,
              traits.host_to_device_gbps, traits.device_to_host_gbps);

  nlohmann::ordered_json report = {{"device", props.name},
                                   {"read_gbps", memory.read_gbps},
                                   {"copy_gbps", memory.copy_gbps},
                                   {"cuda_traits", traits.device_name},
                                   {"tile", tile}};
  report["cases"] = nlohmann::ordered_json::array();
  std::printf("\n%-8s %-14s %9s %12s %8s %10s %10s %8s %12s %8s %8s\n", "dtype", "shape", "GiB", "GPU GB/s", "of read",
              "CPU GB/s", "upload", "bitwise", "radix GB/s", "of read", "bitwise");
  Case bf16_case{tmx::DType::kBF16, 0, 0, {}};
  for (tmx::DType dtype : {tmx::DType::kBF16, tmx::DType::kF16, tmx::DType::kF32, tmx::DType::kQ4_K, tmx::DType::kQ8_0,
                          tmx::DType::kQ6_K, tmx::DType::kQ4_0, tmx::DType::kF8E4M3}) {
    Case c = make_case(dtype, gib);
    auto buffer = gpu->allocate(c.bytes.size());
    if (!buffer.ok()) {
      std::fprintf(stderr, "allocate: %s\n", buffer.status().to_string().c_str());
      return 1;
    }
    const auto up0 = std::chrono::steady_clock::now();
    tmx::Status written = gpu->write(*buffer, c.bytes.data(), c.bytes.size());
    const double upload_ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - up0).count();
    if (!written.ok()) {
      std::fprintf(stderr, "write: %s\n", written.to_string().c_str());
      return 1;
    }
    TileStatsInstance on_gpu(c, tile, nullptr, *buffer);
    std::vector<double> times;
    uint64_t bytes_read = 0;
    for (int i = 0; i < reps + 2; ++i) {
      auto r = gpu->execute(on_gpu.op, bitwise_policy());
      if (!r.ok()) {
        std::fprintf(stderr, "cuda execute: %s\n", r.status().to_string().c_str());
        return 1;
      }
      bytes_read = r->bytes_read;
      if (i >= 2) times.push_back(r->device_ns);
    }
    const double gpu_ns = median(times);
    TileStatsInstance on_cpu(c, tile, c.bytes.data(), nullptr);
    auto cr = cpu->execute(on_cpu.op, bitwise_policy());
    if (!cr.ok()) {
      std::fprintf(stderr, "cpu execute: %s\n", cr.status().to_string().c_str());
      return 1;
    }
    const bool same = std::memcmp(on_gpu.stats.data(), on_cpu.stats.data(), on_gpu.stats.size() * sizeof(TM_TileStats)) == 0;
    RadixInstance radix_gpu(c, nullptr, *buffer), radix_cpu(c, c.bytes.data(), nullptr);
    std::vector<double> radix_times;
    for (int i = 0; i < reps + 2; ++i) {
      auto r = gpu->execute(radix_gpu.op, bitwise_policy());
      if (!r.ok()) {
        std::fprintf(stderr, "cuda radix execute: %s\n", r.status().to_string().c_str());
        return 1;
      }
      if (i >= 2) radix_times.push_back(r->device_ns);
    }
    auto rc = cpu->execute(radix_cpu.op, bitwise_policy());
    if (!rc.ok()) {
      std::fprintf(stderr, "cpu radix execute: %s\n", rc.status().to_string().c_str());
      return 1;
    }
    const bool radix_same = radix_gpu.counts == radix_cpu.counts && radix_gpu.classes == radix_cpu.classes;
    const double radix_gbps = static_cast<double>(c.bytes.size()) / median(radix_times);
    const double gpu_gbps = static_cast<double>(bytes_read) / gpu_ns;
    const double cpu_gbps = static_cast<double>(cr->bytes_read) / cr->device_ns;
    const std::string shape = std::to_string(c.rows) + "x" + std::to_string(c.cols);
    std::printf("%-8s %-14s %9.2f %12.0f %7.1f%% %10.1f %7.1f GB/s %8s %12.0f %7.1f%% %8s\n",
                std::string(tmx::dtype_name(dtype)).c_str(), shape.c_str(), static_cast<double>(c.bytes.size()) / 1073741824.0,
                gpu_gbps, 100.0 * gpu_gbps / memory.read_gbps, cpu_gbps, static_cast<double>(c.bytes.size()) / upload_ns,
                same ? "yes" : "NO", radix_gbps, 100.0 * radix_gbps / memory.read_gbps, radix_same ? "yes" : "NO");
    report["cases"].push_back({{"dtype", std::string(tmx::dtype_name(dtype))},
                               {"shape", shape},
                               {"bytes", c.bytes.size()},
                               {"gpu_ms", gpu_ns / 1e6},
                               {"gpu_gbps", gpu_gbps},
                               {"of_read_bandwidth", gpu_gbps / memory.read_gbps},
                               {"cpu_gbps", cpu_gbps},
                               {"upload_gbps", static_cast<double>(c.bytes.size()) / upload_ns},
                               {"bitwise_equal_to_cpu", same},
                               {"radix_gbps", radix_gbps},
                               {"radix_of_read_bandwidth", radix_gbps / memory.read_gbps},
                               {"radix_bitwise_equal_to_cpu", radix_same}});
    // tm.top_k@1 (k = 10, the outliers command's default) and tm.channel_stats@1 on the same
    // resident bytes: device time of the kernels (top_k: its passes; the wall time adds the host's
    // sort and the syncs between passes), against the read bandwidth measured above.
    TopKInstance topk_gpu(c, 10, nullptr, *buffer), topk_cpu(c, 10, c.bytes.data(), nullptr);
    ChannelInstance chan_gpu(c, nullptr, *buffer), chan_cpu(c, c.bytes.data(), nullptr);
    std::vector<double> topk_times, topk_walls, chan_times;
    uint64_t topk_bytes = 0;
    for (int i = 0; i < reps + 2; ++i) {
      const auto w0 = std::chrono::steady_clock::now();
      auto r = gpu->execute(topk_gpu.op, bitwise_policy());
      const double wall = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - w0).count();
      if (!r.ok()) {
        std::fprintf(stderr, "cuda top_k execute: %s\n", r.status().to_string().c_str());
        return 1;
      }
      topk_bytes = r->bytes_read;
      auto q = gpu->execute(chan_gpu.op, bitwise_policy());
      if (!q.ok()) {
        std::fprintf(stderr, "cuda channel_stats execute: %s\n", q.status().to_string().c_str());
        return 1;
      }
      if (i >= 2) {
        topk_times.push_back(r->device_ns);
        topk_walls.push_back(wall);
        chan_times.push_back(q->device_ns);
      }
    }
    auto tc = cpu->execute(topk_cpu.op, bitwise_policy());
    auto qc = cpu->execute(chan_cpu.op, bitwise_policy());
    if (!tc.ok() || !qc.ok()) {
      std::fprintf(stderr, "cpu top_k / channel_stats execute failed\n");
      return 1;
    }
    const bool topk_same = topk_gpu.indices == topk_cpu.indices &&
                           std::memcmp(topk_gpu.values.data(), topk_cpu.values.data(), topk_gpu.values.size() * 4) == 0;
    const bool chan_same =
        std::memcmp(chan_gpu.rows.data(), chan_cpu.rows.data(), chan_gpu.rows.size() * sizeof(TM_TileStats)) == 0 &&
        std::memcmp(chan_gpu.cols.data(), chan_cpu.cols.data(), chan_gpu.cols.size() * sizeof(TM_TileStats)) == 0;
    const double bytes = static_cast<double>(c.bytes.size());
    const double topk_gbps = bytes / median(topk_times), topk_wall_gbps = bytes / median(topk_walls);
    const double chan_gbps = bytes / median(chan_times);
    const double topk_cpu_gbps = bytes / tc->device_ns, chan_cpu_gbps = bytes / qc->device_ns;
    std::printf("%-8s   top_k k=10: %6.0f GB/s %5.1f%% of read (%llu passes; wall %5.0f GB/s), CPU %5.1f GB/s, bitwise %s;"
                " channel_stats: %6.0f GB/s %5.1f%% of read, CPU %5.1f GB/s, bitwise %s\n",
                std::string(tmx::dtype_name(dtype)).c_str(), topk_gbps, 100.0 * topk_gbps / memory.read_gbps,
                static_cast<unsigned long long>(topk_bytes / c.bytes.size()), topk_wall_gbps, topk_cpu_gbps,
                topk_same ? "yes" : "NO", chan_gbps, 100.0 * chan_gbps / memory.read_gbps, chan_cpu_gbps,
                chan_same ? "yes" : "NO");
    auto& last = report["cases"].back();
    last["top_k_gbps"] = topk_gbps;
    last["top_k_of_read_bandwidth"] = topk_gbps / memory.read_gbps;
    last["top_k_wall_gbps"] = topk_wall_gbps;
    last["top_k_passes"] = topk_bytes / c.bytes.size();
    last["top_k_cpu_gbps"] = topk_cpu_gbps;
    last["top_k_bitwise_equal_to_cpu"] = topk_same;
    last["channel_stats_gbps"] = chan_gbps;
    last["channel_stats_of_read_bandwidth"] = chan_gbps / memory.read_gbps;
    last["channel_stats_cpu_gbps"] = chan_cpu_gbps;
    last["channel_stats_bitwise_equal_to_cpu"] = chan_same;
    // tm.diff_stats@1 of this tensor against a copy with every 4099th byte changed, both resident:
    // the figure of `diff` on a GPU holding both checkpoints, as bytes of both inputs per second.
    std::vector<std::byte> changed = c.bytes;
    for (size_t i = 0; i < changed.size(); i += 4099) changed[i] = static_cast<std::byte>(static_cast<uint8_t>(changed[i]) ^ 1u);
    auto second = gpu->allocate(changed.size());
    if (!second.ok() || !gpu->write(*second, changed.data(), changed.size()).ok()) {
      std::fprintf(stderr, "second buffer for diff_stats failed\n");
      return 1;
    }
    DiffInstance diff_gpu(c, nullptr, *buffer, nullptr, *second), diff_cpu(c, c.bytes.data(), nullptr, changed.data(), nullptr);
    std::vector<double> diff_times;
    for (int i = 0; i < reps + 2; ++i) {
      auto r = gpu->execute(diff_gpu.op, bitwise_policy());
      if (!r.ok()) {
        std::fprintf(stderr, "cuda diff_stats execute: %s\n", r.status().to_string().c_str());
        return 1;
      }
      if (i >= 2) diff_times.push_back(r->device_ns);
    }
    auto dc = cpu->execute(diff_cpu.op, bitwise_policy());
    if (!dc.ok()) {
      std::fprintf(stderr, "cpu diff_stats execute: %s\n", dc.status().to_string().c_str());
      return 1;
    }
    const bool diff_same =
        std::memcmp(diff_gpu.chunks.data(), diff_cpu.chunks.data(), diff_gpu.chunks.size() * sizeof(TM_DiffStats)) == 0;
    const double diff_gbps = 2 * bytes / median(diff_times), diff_cpu_gbps = 2 * bytes / dc->device_ns;
    std::printf("%-8s   diff_stats (both resident): %6.0f GB/s of both inputs %5.1f%% of read, CPU %5.1f GB/s, bitwise %s\n",
                std::string(tmx::dtype_name(dtype)).c_str(), diff_gbps, 100.0 * diff_gbps / memory.read_gbps, diff_cpu_gbps,
                diff_same ? "yes" : "NO");
    last["diff_stats_gbps"] = diff_gbps;
    last["diff_stats_of_read_bandwidth"] = diff_gbps / memory.read_gbps;
    last["diff_stats_cpu_gbps"] = diff_cpu_gbps;
    last["diff_stats_bitwise_equal_to_cpu"] = diff_same;
    gpu->release(*second);
    gpu->release(*buffer);
    if (dtype == tmx::DType::kBF16) bf16_case = std::move(c);
  }

  // The scheduler on one BF16 band: host-resident first, then resident after one preferred run.
  std::printf("\nscheduler placements (BF16 %llux%llu, %.2f GiB):\n", static_cast<unsigned long long>(bf16_case.rows),
              static_cast<unsigned long long>(bf16_case.cols), static_cast<double>(bf16_case.bytes.size()) / 1073741824.0);
  tmx::compute::Scheduler& scheduler = (*session)->scheduler();
  report["placements"] = nlohmann::ordered_json::array();
  const tmx::ops::TileGrid grid = tmx::ops::tile_grid({0, bf16_case.rows, 0, bf16_case.cols}, tile);
  std::vector<TM_TileStats> out(grid.count());
  for (const char* step : {"auto (host-resident)", "prefer=cuda (copies it in)", "auto (now resident)"}) {
    tmx::compute::Constraints constraints;
    if (std::strncmp(step, "prefer", 6) == 0) constraints = *tmx::compute::parse_constraints("prefer=cuda");
    scheduler.set_constraints(constraints);
    tmx::compute::OpRequest req;
    req.op = TM_OP_TILE_STATS;
    req.inputs.push_back({TM_DTYPE_BF16, {bf16_case.rows, bf16_case.cols}, bf16_case.bytes, 0x5eedull});
    req.outputs.push_back({TM_DTYPE_U8, {out.size() * sizeof(TM_TileStats)}, std::as_writable_bytes(std::span(out))});
    req.attributes = {{TM_ATTR_ROW_BEGIN, 0, 0}, {TM_ATTR_ROW_END, static_cast<int64_t>(bf16_case.rows), 0}, {TM_ATTR_COL_BEGIN, 0, 0},
                      {TM_ATTR_COL_END, static_cast<int64_t>(bf16_case.cols), 0}, {TM_ATTR_TILE, tile, 0}};
    auto placed = scheduler.run(req);
    if (!placed.ok() || !placed->executed) {
      std::fprintf(stderr, "scheduler: %s\n", placed.ok() ? placed->needs_consent_reason.c_str()
                                                          : placed.status().to_string().c_str());
      return 1;
    }
    const auto& r = placed->record;
    std::printf("  %-28s -> %-5s (%s: %s), estimated %.2f ms, measured %.2f ms, moved %.2f GiB\n", step,
                r.backend.c_str(), tmx::compute::placement_reason_name(r.reason), r.reason_detail.c_str(),
                r.estimated_ns / 1e6, r.measured_ns / 1e6, static_cast<double>(r.bytes_moved) / 1073741824.0);
    auto j = r.to_json();
    j["step"] = step;
    report["placements"].push_back(j);
  }

  if (!peer_file.empty()) {
    const tmx::safetensors::TensorToWrite tensors[] = {
        {"bench.bf16", tmx::DType::kBF16, {bf16_case.rows, bf16_case.cols}, bf16_case.bytes}};
    tmx::Status s = tmx::safetensors::write_file(peer_file, tensors, {});
    std::printf("\nBF16 tensor for the PyTorch peer: %s (%s)\n", peer_file.c_str(), s.ok() ? "written" : s.to_string().c_str());
  }
  if (!json_path.empty()) {
    std::ofstream(json_path) << report.dump(2) << "\n";
  }
  return 0;
}
