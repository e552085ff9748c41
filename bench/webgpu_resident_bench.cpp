// The WebGPU backend against the CUDA backend on the same GPU, in one run, through the plugin ABI
// alone: uploads (buffer_write from ordinary host memory) and tm.tile_stats@1 on resident F32 and
// BF16 matrices of the same bytes, with a bitwise comparison of the two backends' statistics.
// Prints each rate and the WebGPU / CUDA ratios the performance targets are stated in.
//
// Usage: webgpu_resident_bench [--mib M] [--reps R] [--cuda PATH/libtm_cuda.so]
//   Without --cuda (or without a CUDA device) it measures the WebGPU backend alone.
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "resident_weights.h"
#include "tensormorph/c/plugin.h"

extern "C" const TM_PluginApi* tm_webgpu_backend_get_api(uint32_t host_major, uint32_t host_minor);

namespace {

struct Opened {
  std::string name;
  const TM_PluginApi* api = nullptr;
  TM_Backend* backend = nullptr;
};

bool ok(const TM_PluginApi* api, TM_Error* error, const char* what) {
  if (error == nullptr) return true;
  std::fprintf(stderr, "%s: %s\n", what, api->error_message(error));
  api->error_destroy(error);
  return false;
}

bool open(const TM_PluginApi* api, Opened& out) {
  if (api == nullptr) return false;
  uint32_t count = 0;
  char why[512] = {0};
  if (!ok(api, api->device_count(&count, why, sizeof why), "device_count")) return false;
  if (count == 0) {
    std::printf("%s: no device: %s\n", api->name, why);
    return false;
  }
  TM_BackendCreateArgs args{};
  args.struct_size = sizeof args;
  if (!ok(api, api->backend_create(&args, &out.backend), "backend_create")) return false;
  TM_DeviceTraits traits{};
  traits.struct_size = sizeof traits;
  if (api->device_traits != nullptr) (void)ok(api, api->device_traits(out.backend, &traits), "device_traits");
  out.api = api;
  out.name = api->name;
  std::printf("%s: %s\n", api->name, traits.device_name);
  return true;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Result {
  double upload_gbps = 0;
  double f32_gbps = 0;
  double bf16_gbps = 0;
  std::vector<uint8_t> f32_stats, bf16_stats;
};

/// Runs tile_stats on `bytes` of resident `dtype` data [rows, cols]; median GB/s over `reps`.
double tile_stats_rate(const Opened& b, TM_Buffer* buffer, TM_DType dtype, uint64_t rows, uint64_t cols,
                       uint64_t bytes, int reps, std::vector<uint8_t>& stats) {
  const uint64_t tile = 256;
  const uint64_t tiles = ((rows + tile - 1) / tile) * ((cols + tile - 1) / tile);
  stats.assign(tiles * sizeof(TM_TileStats), 0);
  TM_TensorArg in{};
  in.struct_size = sizeof in;
  in.dtype = dtype;
  in.rank = 2;
  in.shape[0] = rows;
  in.shape[1] = cols;
  in.buffer = buffer;
  in.nbytes = bytes;
  TM_TensorArg out{};
  out.struct_size = sizeof out;
  out.dtype = TM_DTYPE_U8;
  out.rank = 1;
  out.shape[0] = stats.size();
  out.host_out = stats.data();
  out.nbytes = stats.size();
  const TM_Attribute attributes[] = {
      {sizeof(TM_Attribute), TM_ATTR_ROW_BEGIN, 0, 0}, {sizeof(TM_Attribute), TM_ATTR_ROW_END, static_cast<int64_t>(rows), 0},
      {sizeof(TM_Attribute), TM_ATTR_COL_BEGIN, 0, 0}, {sizeof(TM_Attribute), TM_ATTR_COL_END, static_cast<int64_t>(cols), 0},
      {sizeof(TM_Attribute), TM_ATTR_TILE, static_cast<int64_t>(tile), 0}};
  TM_OpInstance op{};
  op.struct_size = sizeof op;
  op.op = TM_OP_TILE_STATS;
  op.inputs = &in;
  op.input_count = 1;
  op.outputs = &out;
  op.output_count = 1;
  op.attributes = attributes;
  op.attribute_count = 5;
  TM_ExecutionPolicy policy{};
  policy.struct_size = sizeof policy;
  std::vector<double> rates;
  for (int r = 0; r < reps + 1; ++r) {
    TM_ExecutionReport report{};
    report.struct_size = sizeof report;
    const double start = now_s();
    if (!ok(b.api, b.api->execute(b.backend, &op, &policy, &report), "tile_stats")) return 0;
    if (r > 0) rates.push_back(static_cast<double>(bytes) / (now_s() - start) / 1e9);  // run 0 compiles
  }
  return median(rates);
}

Result measure(const Opened& b, uint64_t bytes, int reps, const std::vector<uint8_t>& f32, const std::vector<uint8_t>& bf16) {
  Result result;
  TM_Buffer* buffer = nullptr;
  if (!ok(b.api, b.api->buffer_alloc(b.backend, 1, bytes, &buffer), "buffer_alloc")) return result;
  std::vector<double> uploads;
  for (int r = 0; r < 3; ++r) {
    const double start = now_s();
    if (!ok(b.api, b.api->buffer_write(b.backend, buffer, 0, f32.data(), bytes), "buffer_write")) break;
    uint32_t word = 0;  // a read orders after the write: the upload is complete
    (void)ok(b.api, b.api->buffer_read(b.backend, buffer, 0, &word, sizeof word), "buffer_read");
    uploads.push_back(static_cast<double>(bytes) / (now_s() - start) / 1e9);
  }
  result.upload_gbps = uploads.empty() ? 0 : *std::max_element(uploads.begin(), uploads.end());
  const uint64_t cols = 4096;
  result.f32_gbps = tile_stats_rate(b, buffer, TM_DTYPE_F32, bytes / 4 / cols, cols, bytes, reps, result.f32_stats);
  (void)ok(b.api, b.api->buffer_write(b.backend, buffer, 0, bf16.data(), bytes), "buffer_write");
  result.bf16_gbps = tile_stats_rate(b, buffer, TM_DTYPE_BF16, bytes / 2 / cols, cols, bytes, reps, result.bf16_stats);
  b.api->buffer_free(b.backend, buffer);
  std::printf("%-7s upload %8.2f GB/s   tile_stats F32 %8.2f GB/s   BF16 %8.2f GB/s\n", b.name.c_str(),
              result.upload_gbps, result.f32_gbps, result.bf16_gbps);
  return result;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t mib = 1024;
  int reps = 10;
  std::string cuda_path;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--mib" && i + 1 < argc) mib = std::strtoull(argv[++i], nullptr, 10);
    else if (arg == "--reps" && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (arg == "--cuda" && i + 1 < argc) cuda_path = argv[++i];
    else {
      std::fprintf(stderr, "usage: webgpu_resident_bench [--mib M] [--reps R] [--cuda PATH/libtm_cuda.so]\n");
      return 2;
    }
  }
  const uint64_t bytes = (mib << 20) / (4 * 4096 * 256) * (4 * 4096 * 256);  // whole 256-row bands of F32
  const auto [f32, bf16] = tensormorph::bench::resident_weights(bytes);
  std::printf("resident %llu MiB, tile 256, %d repetitions (median)\n", static_cast<unsigned long long>(bytes >> 20), reps);

  Opened webgpu;
  if (!open(tm_webgpu_backend_get_api(TM_PLUGIN_ABI_MAJOR, TM_PLUGIN_ABI_MINOR), webgpu)) return 1;
  const Result w = measure(webgpu, bytes, reps, f32, bf16);

  if (cuda_path.empty()) return 0;
  void* library = dlopen(cuda_path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    std::printf("cuda: %s\n", dlerror());
    return 0;
  }
  auto get_api = reinterpret_cast<TM_PluginGetApiFn>(dlsym(library, TM_PLUGIN_GET_API_SYMBOL));
  Opened cuda;
  if (get_api == nullptr || !open(get_api(TM_PLUGIN_ABI_MAJOR, TM_PLUGIN_ABI_MINOR), cuda)) return 0;
  const Result c = measure(cuda, bytes, reps, f32, bf16);
  std::printf("webgpu / cuda: tile_stats F32 %.2f (target >= 0.50), BF16 %.2f (target >= 0.50), upload %.2f\n",
              w.f32_gbps / c.f32_gbps, w.bf16_gbps / c.bf16_gbps, w.upload_gbps / c.upload_gbps);
  std::printf("statistics bitwise equal: F32 %s, BF16 %s\n", w.f32_stats == c.f32_stats ? "yes" : "NO",
              w.bf16_stats == c.bf16_stats ? "yes" : "NO");
  cuda.api->backend_destroy(cuda.backend);
  webgpu.api->backend_destroy(webgpu.backend);
  return w.f32_stats == c.f32_stats && w.bf16_stats == c.bf16_stats ? 0 : 1;
}
