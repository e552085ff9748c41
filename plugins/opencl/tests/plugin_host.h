// A minimal plugin host for the tests: loads a plugin with dlopen following the ABI's rules,
// and builds operation instances. It knows the plugin only through the C header.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tensormorph/c/plugin.h"

namespace tm_opencl_test {

/// An open plugin library and its two entry points.
class PluginLibrary {
 public:
  /// dlopens `path` and resolves both symbols; on failure returns null and sets `error`.
  static std::unique_ptr<PluginLibrary> open(const std::string& path, std::string& error);
  ~PluginLibrary();
  PluginLibrary(const PluginLibrary&) = delete;
  PluginLibrary& operator=(const PluginLibrary&) = delete;

  /// The exported tm_plugin_abi_version.
  TM_PluginAbiVersionFn abi_version = nullptr;
  /// The exported tm_plugin_get_api.
  TM_PluginGetApiFn get_api = nullptr;

 private:
  PluginLibrary() = default;
  void* handle_ = nullptr;
};

/// The host's loading rule: check the major version first and only then ask for the table.
/// Returns null with `error` set when the plugin must be refused.
const TM_PluginApi* negotiate_api(const PluginLibrary& library, std::string& error);

/// A plugin call's outcome, with the error object already released.
struct CallResult {
  TM_StatusCode code = TM_STATUS_OK;  ///< OK when the call returned NULL
  std::string message;                ///< the error's message
};

/// Converts (and destroys) a returned error.
CallResult take_error(const TM_PluginApi* api, TM_Error* error);

/// A backend that is destroyed with its plugin's backend_destroy.
struct BackendDeleter {
  const TM_PluginApi* api = nullptr;  ///< the plugin that made it
  /// Destroys the backend.
  void operator()(TM_Backend* backend) const { api->backend_destroy(backend); }
};
/// An owned backend.
using BackendPtr = std::unique_ptr<TM_Backend, BackendDeleter>;

/// A buffer that is freed with its plugin's buffer_free.
struct BufferDeleter {
  const TM_PluginApi* api = nullptr;  ///< the plugin that made it
  TM_Backend* backend = nullptr;      ///< the backend that owns it
  /// Frees the buffer.
  void operator()(TM_Buffer* buffer) const { api->buffer_free(backend, buffer); }
};
/// An owned buffer.
using BufferPtr = std::unique_ptr<TM_Buffer, BufferDeleter>;

/// Stores `value` into an enum field even when it lies outside the enum (as a buggy host could),
/// without ever loading it as the enum type.
template <typename Enum>
void store_raw_enum(Enum& field, int value) {
  static_assert(sizeof(Enum) == sizeof(int));
  std::memcpy(&field, &value, sizeof value);
}

/// A tensor argument with struct_size set and everything else zero.
TM_TensorArg tensor_arg(TM_DType dtype, std::vector<uint64_t> shape);

/// An integer attribute.
TM_Attribute int_attribute(const char* name, int64_t value);
/// A floating-point attribute.
TM_Attribute float_attribute(const char* name, double value);

/// One operation call under construction; `instance()` wires the pointers.
struct OpCall {
  std::string op;                        ///< operation id
  std::vector<TM_TensorArg> inputs;      ///< input arguments
  std::vector<TM_TensorArg> outputs;     ///< output arguments
  std::vector<TM_Attribute> attributes;  ///< attributes
  TM_OpInstance raw{};                   ///< the instance handed to the plugin

  /// The instance, pointing into this object's vectors.
  TM_OpInstance* instance();
};

/// A tile_stats call over `data` (rows x cols of `dtype`) for the view and tile, writing to `out`
/// (resized to the tile count).
OpCall tile_stats_call(TM_DType dtype, uint64_t rows, uint64_t cols, const void* data, uint64_t element_bytes,
                       uint64_t row_begin, uint64_t row_end, uint64_t col_begin, uint64_t col_end, uint64_t tile,
                       std::vector<TM_TileStats>& out);

/// A decode call of `blocks` Q8_0 blocks at `data`, writing to `out` (resized).
OpCall decode_q8_0_call(const void* data, uint64_t blocks, std::vector<float>& out);

/// The attributes of a tm.render_tile@1 instance.
struct RenderParams {
  int64_t source = TM_RENDER_SOURCE_VALUES;  ///< TM_RENDER_SOURCE_*
  uint64_t row_begin = 0;                    ///< first element row (values) or grid row (statistics)
  uint64_t col_begin = 0;                    ///< first element column or grid column
  uint64_t cell = 8;                         ///< elements per pixel side (1 for statistics)
  uint64_t magnify = 1;                      ///< pixels per element side
  int64_t stat = TM_PIXEL_STAT_MEAN;         ///< TM_PIXEL_STAT_*
  int64_t colormap = TM_COLORMAP_DIVERGING;  ///< TM_COLORMAP_*
  double lo = -0.05, hi = 0.05;              ///< the colour range
};

/// A render of `dtype` values, a rows x cols matrix of `nbytes` at `data`, into `out` (resized to
/// 256 x 256 RGBA).
OpCall render_values_call(TM_DType dtype, uint64_t rows, uint64_t cols, const void* data, uint64_t nbytes,
                          const RenderParams& params, std::vector<uint8_t>& out);

/// A render of a row-major rows x cols grid of tile statistics at `grid` into `out` (resized).
OpCall render_stats_call(const TM_TileStats* grid, uint64_t rows, uint64_t cols, const RenderParams& params,
                         std::vector<uint8_t>& out);

}  // namespace tm_opencl_test
