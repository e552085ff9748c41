#include "plugin_host.h"

#include <dlfcn.h>

namespace tm_opencl_test {

std::unique_ptr<PluginLibrary> PluginLibrary::open(const std::string& path, std::string& error) {
  std::unique_ptr<PluginLibrary> library(new PluginLibrary());
  library->handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library->handle_ == nullptr) {
    error = std::string("dlopen: ") + dlerror();
    return nullptr;
  }
  library->abi_version =
      reinterpret_cast<TM_PluginAbiVersionFn>(dlsym(library->handle_, TM_PLUGIN_ABI_VERSION_SYMBOL));
  library->get_api = reinterpret_cast<TM_PluginGetApiFn>(dlsym(library->handle_, TM_PLUGIN_GET_API_SYMBOL));
  if (library->abi_version == nullptr || library->get_api == nullptr) {
    error = path + " does not export " TM_PLUGIN_ABI_VERSION_SYMBOL " and " TM_PLUGIN_GET_API_SYMBOL;
    return nullptr;
  }
  return library;
}

PluginLibrary::~PluginLibrary() {
  if (handle_ != nullptr) dlclose(handle_);
}

const TM_PluginApi* negotiate_api(const PluginLibrary& library, std::string& error) {
  const uint32_t version = library.abi_version();
  const uint32_t major = version >> 16;
  if (major != TM_PLUGIN_ABI_MAJOR) {
    error = "plugin speaks ABI major " + std::to_string(major) + ", host speaks " + std::to_string(TM_PLUGIN_ABI_MAJOR);
    return nullptr;
  }
  const TM_PluginApi* api = library.get_api(TM_PLUGIN_ABI_MAJOR, TM_PLUGIN_ABI_MINOR);
  if (api == nullptr) error = "plugin returned no function table";
  return api;
}

CallResult take_error(const TM_PluginApi* api, TM_Error* error) {
  CallResult result;
  if (error == nullptr) return result;
  result.code = api->error_code(error);
  result.message = api->error_message(error);
  api->error_destroy(error);
  return result;
}

TM_TensorArg tensor_arg(TM_DType dtype, std::vector<uint64_t> shape) {
  TM_TensorArg arg{};
  arg.struct_size = sizeof arg;
  arg.dtype = dtype;
  arg.rank = static_cast<uint32_t>(shape.size());
  for (size_t i = 0; i < shape.size() && i < 8; ++i) arg.shape[i] = shape[i];
  return arg;
}

TM_Attribute int_attribute(const char* name, int64_t value) {
  TM_Attribute attribute{};
  attribute.struct_size = sizeof attribute;
  attribute.name = name;
  attribute.i = value;
  return attribute;
}

TM_Attribute float_attribute(const char* name, double value) {
  TM_Attribute attribute{};
  attribute.struct_size = sizeof attribute;
  attribute.name = name;
  attribute.f = value;
  return attribute;
}

TM_OpInstance* OpCall::instance() {
  raw = TM_OpInstance{};
  raw.struct_size = sizeof raw;
  raw.op = op.c_str();
  raw.inputs = inputs.data();
  raw.input_count = static_cast<uint32_t>(inputs.size());
  raw.outputs = outputs.data();
  raw.output_count = static_cast<uint32_t>(outputs.size());
  raw.attributes = attributes.data();
  raw.attribute_count = static_cast<uint32_t>(attributes.size());
  return &raw;
}

OpCall tile_stats_call(TM_DType dtype, uint64_t rows, uint64_t cols, const void* data, uint64_t element_bytes,
                       uint64_t row_begin, uint64_t row_end, uint64_t col_begin, uint64_t col_end, uint64_t tile,
                       std::vector<TM_TileStats>& out) {
  OpCall call;
  call.op = TM_OP_TILE_STATS;
  TM_TensorArg input = tensor_arg(dtype, {rows, cols});
  input.host_data = data;
  input.nbytes = rows * cols * element_bytes;
  call.inputs.push_back(input);
  const uint64_t tiles = ((row_end - row_begin + tile - 1) / tile) * ((col_end - col_begin + tile - 1) / tile);
  out.assign(tiles, TM_TileStats{});
  TM_TensorArg output = tensor_arg(TM_DTYPE_U8, {tiles * sizeof(TM_TileStats)});
  output.host_out = out.data();
  output.nbytes = tiles * sizeof(TM_TileStats);
  call.outputs.push_back(output);
  call.attributes = {int_attribute("row_begin", static_cast<int64_t>(row_begin)),
                     int_attribute("row_end", static_cast<int64_t>(row_end)),
                     int_attribute("col_begin", static_cast<int64_t>(col_begin)),
                     int_attribute("col_end", static_cast<int64_t>(col_end)),
                     int_attribute("tile", static_cast<int64_t>(tile))};
  return call;
}

OpCall decode_q8_0_call(const void* data, uint64_t blocks, std::vector<float>& out) {
  OpCall call;
  call.op = TM_OP_DECODE;
  TM_TensorArg input = tensor_arg(TM_DTYPE_Q8_0, {blocks * 32});
  input.host_data = data;
  input.nbytes = blocks * 34;
  call.inputs.push_back(input);
  out.assign(blocks * 32, 0.0f);
  TM_TensorArg output = tensor_arg(TM_DTYPE_F32, {blocks * 32});
  output.host_out = out.data();
  output.nbytes = blocks * 32 * sizeof(float);
  call.outputs.push_back(output);
  return call;
}

namespace {

// The call around `input` with `params`' nine attributes and a 256 x 256 RGBA output.
OpCall render_call(const TM_TensorArg& input, const RenderParams& params, std::vector<uint8_t>& out) {
  OpCall call;
  call.op = TM_OP_RENDER_TILE;
  call.inputs.push_back(input);
  out.assign(uint64_t{TM_RENDER_TILE_PIXELS} * TM_RENDER_TILE_PIXELS * 4, 0xa5);
  TM_TensorArg output = tensor_arg(TM_DTYPE_U8, {TM_RENDER_TILE_PIXELS, TM_RENDER_TILE_PIXELS, 4});
  output.host_out = out.data();
  output.nbytes = out.size();
  call.outputs.push_back(output);
  call.attributes = {int_attribute(TM_ATTR_SOURCE, params.source),
                     int_attribute(TM_ATTR_ROW_BEGIN, static_cast<int64_t>(params.row_begin)),
                     int_attribute(TM_ATTR_COL_BEGIN, static_cast<int64_t>(params.col_begin)),
                     int_attribute(TM_ATTR_CELL, static_cast<int64_t>(params.cell)),
                     int_attribute(TM_ATTR_MAGNIFY, static_cast<int64_t>(params.magnify)),
                     int_attribute(TM_ATTR_STAT, params.stat),
                     int_attribute(TM_ATTR_COLORMAP, params.colormap),
                     float_attribute(TM_ATTR_LO, params.lo),
                     float_attribute(TM_ATTR_HI, params.hi)};
  return call;
}

}  // namespace

OpCall render_values_call(TM_DType dtype, uint64_t rows, uint64_t cols, const void* data, uint64_t nbytes,
                          const RenderParams& params, std::vector<uint8_t>& out) {
  TM_TensorArg input = tensor_arg(dtype, {rows, cols});
  input.host_data = data;
  input.nbytes = nbytes;
  return render_call(input, params, out);
}

OpCall render_stats_call(const TM_TileStats* grid, uint64_t rows, uint64_t cols, const RenderParams& params,
                         std::vector<uint8_t>& out) {
  TM_TensorArg input = tensor_arg(TM_DTYPE_U8, {rows, cols, sizeof(TM_TileStats)});
  input.host_data = grid;
  input.nbytes = rows * cols * sizeof(TM_TileStats);
  return render_call(input, params, out);
}

}  // namespace tm_opencl_test
