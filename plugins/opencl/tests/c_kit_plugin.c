/* A backend plugin written in strict C11 against plugin.h and plugin_kit.h alone. It renders
 * tm.render_tile@1 from a statistics grid in host memory on the host CPU, validating instances
 * with tm_kit_parse_render_tile and colouring with tm_kit_pixel_colour, and declines everything
 * else. Its error entries are the kit's. The tests load it as a host would, which shows that a C
 * plugin needs nothing beyond the two headers. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensormorph/c/plugin.h"
#include "tensormorph/c/plugin_kit.h"

#define C_KIT_EXPORT __attribute__((visibility("default")))

/* This plugin's backend: the host CPU, with nothing to hold. */
struct TM_Backend {
  uint32_t device_index;
};

/** Writes `value` (`size` bytes) into the host's struct `out`, which needs room for struct_size. */
static TM_Error* ck_write(void* out, const void* value, size_t size, const char* function) {
  const size_t room = tm_kit_struct_size(out);
  if (room != 0 && room < sizeof(size_t)) {
    return tm_kit_error(TM_STATUS_INVALID_ARGUMENT, "c_kit: %s: struct_size %zu is too small", function, room);
  }
  tm_kit_write_struct(out, value, size);
  return NULL;
}

/** device_count: one device, the host CPU. */
static TM_Error* ck_device_count(uint32_t* count, char* why_none, size_t why_len) {
  if (count == NULL) return tm_kit_error(TM_STATUS_INVALID_ARGUMENT, "c_kit: device_count: count is null");
  *count = 1;
  if (why_none != NULL && why_len > 0) why_none[0] = '\0';
  return NULL;
}

/** backend_create: device 0 only. */
static TM_Error* ck_backend_create(const TM_BackendCreateArgs* args, TM_Backend** out) {
  TM_BackendCreateArgs a;
  if (out == NULL) return tm_kit_error(TM_STATUS_INVALID_ARGUMENT, "c_kit: backend_create: out is null");
  *out = NULL;
  if (args == NULL) return tm_kit_error(TM_STATUS_INVALID_ARGUMENT, "c_kit: backend_create: args is null");
  tm_kit_read_struct(&a, sizeof a, args);
  if (a.device_index != 0) {
    return tm_kit_error(TM_STATUS_INVALID_ARGUMENT, "c_kit: device_index %u is out of range (1 device)", a.device_index);
  }
  *out = (TM_Backend*)malloc(sizeof(TM_Backend));
  if (*out == NULL) return tm_kit_error(TM_STATUS_RESOURCE_EXHAUSTED, "c_kit: out of memory");
  (*out)->device_index = 0;
  return NULL;
}

/** backend_destroy. */
static void ck_backend_destroy(TM_Backend* backend) { free(backend); }

/** device_traits: host memory only, so no memory spaces of its own. */
static TM_Error* ck_device_traits(TM_Backend* backend, TM_DeviceTraits* out) {
  TM_DeviceTraits traits;
  if (backend == NULL || out == NULL) return tm_kit_error(TM_STATUS_INVALID_ARGUMENT, "c_kit: device_traits: null argument");
  memset(&traits, 0, sizeof traits);
  traits.struct_size = sizeof traits;
  snprintf(traits.device_name, sizeof traits.device_name, "host CPU (C kit test plugin)");
  traits.host_memory_visible = 1;
  traits.compute_units = 1;
  return ck_write(out, &traits, sizeof traits, "device_traits");
}

/** query: FULL and BITWISE for tm.render_tile@1 of a statistics grid (U8, TENSOR), else NONE. */
static TM_Error* ck_query(TM_Backend* backend, const TM_OpQuery* question, TM_OpSupport* out) {
  TM_OpQuery q;
  TM_OpSupport support;
  if (backend == NULL || question == NULL || out == NULL) {
    return tm_kit_error(TM_STATUS_INVALID_ARGUMENT, "c_kit: query: null argument");
  }
  tm_kit_read_struct(&q, sizeof q, question);
  if (q.op == NULL) return tm_kit_error(TM_STATUS_INVALID_ARGUMENT, "c_kit: query: the operation id is null");
  memset(&support, 0, sizeof support);
  support.struct_size = sizeof support;
  support.exactness = TM_EXACT_BITWISE;
  if (strcmp(q.op, TM_OP_RENDER_TILE) == 0 && q.input_dtype == TM_DTYPE_U8 && q.shape_class == TM_SHAPE_TENSOR) {
    support.level = TM_SUPPORT_FULL;
  } else {
    support.level = TM_SUPPORT_NONE;
    snprintf(support.reason, sizeof support.reason,
             "c_kit plugin renders " TM_OP_RENDER_TILE " from statistics grids (U8, TENSOR) only");
  }
  return ck_write(out, &support, sizeof support, "query");
}

/** Validates a render instance with the kit and refuses what this plugin does not run. */
static TM_Error* ck_parse(const TM_OpInstance* instance, TM_KitRenderTile* job) {
  TM_OpInstance head;
  TM_KitStatus status = tm_kit_ok();
  if (instance == NULL) return tm_kit_error(TM_STATUS_INVALID_ARGUMENT, "c_kit: the operation instance is null");
  tm_kit_read_struct(&head, sizeof head, instance);
  if (head.op == NULL) return tm_kit_error(TM_STATUS_INVALID_ARGUMENT, "c_kit: the operation id is null");
  if (strcmp(head.op, TM_OP_RENDER_TILE) != 0 && strcmp(head.op, TM_OP_RENDER_TILE_SAMPLED) != 0) {
    return tm_kit_error(TM_STATUS_UNIMPLEMENTED, "c_kit plugin does not implement %s", head.op);
  }
  if (!tm_kit_parse_render_tile(instance, job, &status)) return tm_kit_error_from(&status);
  if (job->sampled || job->source != TM_RENDER_SOURCE_TILE_STATS) {
    return tm_kit_error(TM_STATUS_UNIMPLEMENTED, "c_kit plugin renders " TM_OP_RENDER_TILE " from statistics only");
  }
  if (job->input.buffer != NULL || job->output.buffer != NULL) {
    return tm_kit_error(TM_STATUS_UNIMPLEMENTED, "c_kit plugin has no buffers: pass host memory");
  }
  return NULL;
}

/** estimate: colouring 256 x 256 pixels. */
static TM_Error* ck_estimate(TM_Backend* backend, const TM_OpInstance* instance, TM_CostEstimate* out) {
  TM_KitRenderTile job;
  TM_CostEstimate estimate;
  TM_Error* error;
  if (backend == NULL || out == NULL) return tm_kit_error(TM_STATUS_INVALID_ARGUMENT, "c_kit: estimate: null argument");
  error = ck_parse(instance, &job);
  if (error != NULL) return error;
  memset(&estimate, 0, sizeof estimate);
  estimate.struct_size = sizeof estimate;
  estimate.compute_ns = (double)TM_RENDER_TILE_PIXELS * TM_RENDER_TILE_PIXELS * 20.0;
  estimate.bytes_written = job.output.nbytes;
  return ck_write(out, &estimate, sizeof estimate, "estimate");
}

/** execute: pixel (y, x) shows grid cell (row_begin + y / magnify, col_begin + x / magnify). */
static TM_Error* ck_execute(TM_Backend* backend, const TM_OpInstance* instance, const TM_ExecutionPolicy* policy,
                            TM_ExecutionReport* report) {
  TM_KitRenderTile job;
  TM_ExecutionReport filled;
  TM_Error* error;
  const unsigned char* grid;
  unsigned char* rgba;
  uint64_t shown = 0;
  uint32_t y, x;
  (void)policy; /* BITWISE meets every exactness floor, and the render needs no device memory */
  if (backend == NULL) return tm_kit_error(TM_STATUS_INVALID_ARGUMENT, "c_kit: execute: backend is null");
  error = ck_parse(instance, &job);
  if (error != NULL) return error;
  grid = job.input.nbytes > 0 ? (const unsigned char*)job.input.host_data + job.input.byte_offset : NULL;
  rgba = (unsigned char*)job.output.host_out + job.output.byte_offset;
  for (y = 0; y < TM_RENDER_TILE_PIXELS; ++y) {
    const uint64_t gy = job.row_begin + y / job.magnify;
    for (x = 0; x < TM_RENDER_TILE_PIXELS; ++x) {
      const uint64_t gx = job.col_begin + x / job.magnify;
      unsigned char* pixel = rgba + ((size_t)y * TM_RENDER_TILE_PIXELS + x) * 4;
      if (gy < job.rows && gx < job.cols) {
        TM_TileStats s;
        memcpy(&s, grid + (gy * job.cols + gx) * sizeof(TM_TileStats), sizeof s);
        tm_kit_pixel_colour(&s, job.stat, job.colormap, job.lo, job.hi, pixel);
        ++shown;
      } else {
        memset(pixel, 0, 4);
      }
    }
  }
  if (report == NULL) return NULL;
  memset(&filled, 0, sizeof filled);
  filled.struct_size = sizeof filled;
  filled.exactness = TM_EXACT_BITWISE;
  filled.bytes_read = shown * sizeof(TM_TileStats);
  filled.bytes_written = job.output.nbytes;
  filled.output_nbytes[0] = job.output.nbytes;
  return ck_write(report, &filled, sizeof filled, "execute");
}

/* The table; the buffer entries stay NULL: the plugin works in host memory only. */
static const TM_PluginApi kApi = {
    .struct_size = sizeof(TM_PluginApi),
    .abi_major = TM_PLUGIN_ABI_MAJOR,
    .abi_minor = TM_PLUGIN_ABI_MINOR,
    .name = "c_kit",
    .version = "1.0.0",
    .error_code = tm_kit_error_code,
    .error_message = tm_kit_error_message,
    .error_destroy = tm_kit_error_destroy,
    .device_count = ck_device_count,
    .backend_create = ck_backend_create,
    .backend_destroy = ck_backend_destroy,
    .device_traits = ck_device_traits,
    .query = ck_query,
    .estimate = ck_estimate,
    .execute = ck_execute,
};

/** The ABI version this plugin was built against. */
C_KIT_EXPORT uint32_t tm_plugin_abi_version(void) {
  return TM_PLUGIN_ABI_VERSION_PACK(TM_PLUGIN_ABI_MAJOR, TM_PLUGIN_ABI_MINOR);
}

/** The function table for a host of this major version, else NULL. */
C_KIT_EXPORT const TM_PluginApi* tm_plugin_get_api(uint32_t host_major, uint32_t host_minor) {
  (void)host_minor;
  return host_major == TM_PLUGIN_ABI_MAJOR ? &kApi : NULL;
}
