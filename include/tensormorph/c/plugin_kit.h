/* Tensormorph plugin kit: header-only C helpers for writing a backend plugin against plugin.h —
 * error objects, reading the host's versioned structs, argument and attribute validation for the
 * built-in operations, and the colour mapping of tm.render_tile@1 (the same function the CPU
 * reference uses, so a plugin's pixels are the reference's bytes; the named palettes' control
 * points are in plugin_kit_palettes.h).
 *
 * Everything is `static inline`: include it in any number of translation units, in C (C11) or C++.
 * Validation reports through a TM_KitStatus value; tm_kit_error() turns one into the TM_Error a
 * plugin returns. A plugin that uses the kit's errors sets its table's error_code, error_message
 * and error_destroy to tm_kit_error_code, tm_kit_error_message and tm_kit_error_destroy.
 */
#ifndef TENSORMORPH_C_PLUGIN_KIT_H_
#define TENSORMORPH_C_PLUGIN_KIT_H_

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensormorph/c/plugin.h"
#include "tensormorph/c/plugin_kit_palettes.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------------------------------
 * Status values and error objects */

/** Longest message a kit status or error holds (longer ones are truncated). */
#define TM_KIT_MESSAGE_BYTES 512

/** The outcome of a kit check: code TM_STATUS_OK, or a code and a message. */
typedef struct TM_KitStatus {
  TM_StatusCode code;
  char message[TM_KIT_MESSAGE_BYTES];
} TM_KitStatus;

/** Sets `status` to `code` with a printf-style message; returns 0 so checks read `return tm_kit_fail(...)`. */
static inline int tm_kit_fail(TM_KitStatus* status, TM_StatusCode code, const char* format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static inline int tm_kit_fail(TM_KitStatus* status, TM_StatusCode code, const char* format, ...) {
  va_list args;
  status->code = code;
  va_start(args, format);
  vsnprintf(status->message, sizeof status->message, format, args);
  va_end(args);
  return 0;
}

/** A clean status (TM_STATUS_OK, empty message). */
static inline TM_KitStatus tm_kit_ok(void) {
  TM_KitStatus status;
  status.code = TM_STATUS_OK;
  status.message[0] = '\0';
  return status;
}

/* The kit's error object; TM_Error pointers a kit-using plugin returns point at one. */
typedef struct TM_KitError {
  TM_StatusCode code;
  int is_static; /* 1 for the out-of-memory fallback, which is never freed */
  char message[TM_KIT_MESSAGE_BYTES];
} TM_KitError;

/* Handed out when allocating an error fails (one per translation unit; each is marked static, so
 * any unit's tm_kit_error_destroy leaves it alone). */
static inline TM_KitError* tm_kit_out_of_memory_error(void) {
  static TM_KitError error = {TM_STATUS_RESOURCE_EXHAUSTED, 1, "out of memory while reporting an error"};
  return &error;
}

/** A new error object with `code` and a printf-style message (never NULL). */
static inline TM_Error* tm_kit_error(TM_StatusCode code, const char* format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
static inline TM_Error* tm_kit_error(TM_StatusCode code, const char* format, ...) {
  TM_KitError* error = (TM_KitError*)malloc(sizeof(TM_KitError));
  va_list args;
  if (error == NULL) return (TM_Error*)tm_kit_out_of_memory_error();
  error->code = code;
  error->is_static = 0;
  va_start(args, format);
  vsnprintf(error->message, sizeof error->message, format, args);
  va_end(args);
  return (TM_Error*)error;
}

/** NULL for an OK status, else a new error object carrying it. */
static inline TM_Error* tm_kit_error_from(const TM_KitStatus* status) {
  if (status->code == TM_STATUS_OK) return NULL;
  return tm_kit_error(status->code, "%s", status->message);
}

/** The error_code entry of a plugin using the kit's errors. */
static inline TM_StatusCode tm_kit_error_code(const TM_Error* error) {
  return error == NULL ? TM_STATUS_OK : ((const TM_KitError*)error)->code;
}

/** The error_message entry. */
static inline const char* tm_kit_error_message(const TM_Error* error) {
  return error == NULL ? "" : ((const TM_KitError*)error)->message;
}

/** The error_destroy entry. */
static inline void tm_kit_error_destroy(TM_Error* error) {
  if (error != NULL && !((TM_KitError*)error)->is_static) free(error);
}

/* ------------------------------------------------------------------------------------------------
 * Versioned structs: read what the host gave (up to its struct_size), write what it has room for */

/** The struct_size field of the struct at `p`, read without assuming its alignment. */
static inline size_t tm_kit_struct_size(const void* p) {
  size_t size = 0;
  memcpy(&size, p, sizeof size);
  return size;
}

/** Copies the host's struct `src` into `dst` (`dst_size` bytes): at most its struct_size bytes, the
 *  rest zero; dst's struct_size becomes dst_size. */
static inline void tm_kit_read_struct(void* dst, size_t dst_size, const void* src) {
  size_t taken = tm_kit_struct_size(src);
  if (taken > dst_size) taken = dst_size;
  memset(dst, 0, dst_size);
  if (taken >= sizeof(size_t)) memcpy(dst, src, taken);
  memcpy(dst, &dst_size, sizeof dst_size);
}

/** Copies `src` (`src_size` bytes) into the host's struct `dst` without writing past dst's
 *  struct_size (0: src_size), keeping that struct_size; 0 (nothing written) when dst's
 *  struct_size cannot even hold the size field. */
static inline int tm_kit_write_struct(void* dst, const void* src, size_t src_size) {
  size_t room = tm_kit_struct_size(dst);
  if (room == 0 || room > src_size) room = src_size;
  if (room < sizeof(size_t)) return 0;
  memcpy(dst, src, room);
  memcpy(dst, &room, sizeof room);
  return 1;
}

/** Element `index` of a host array of TM_TensorArg (the stride is element 0's struct_size, which
 *  every element must repeat); `what` names the array in messages ("tile_stats: inputs"). */
static inline int tm_kit_tensor_at(const char* what, const TM_TensorArg* array, uint32_t index, TM_TensorArg* out,
                                   TM_KitStatus* status) {
  size_t stride;
  const unsigned char* element;
  if (array == NULL) return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s: the array is null", what);
  stride = tm_kit_struct_size(array);
  if (stride < sizeof(size_t)) {
    return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s: struct_size %zu is too small", what, stride);
  }
  element = (const unsigned char*)array + (size_t)index * stride;
  if (tm_kit_struct_size(element) != stride) {
    return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s[%u]: struct_size %zu differs from element 0's %zu", what,
                       index, tm_kit_struct_size(element), stride);
  }
  tm_kit_read_struct(out, sizeof *out, element);
  return 1;
}

/* ------------------------------------------------------------------------------------------------
 * Element types */

/** The dtype id a host wrote into an enum field, read as an int (an out-of-range value must not be
 *  loaded as the enum type). */
static inline int tm_kit_dtype_id(const TM_DType* field) {
  int id = 0;
  memcpy(&id, field, sizeof id);
  return id;
}

/** Elements per block and bytes per block of the dtype id `dtype` (scalars: 1 and the element's bytes; packed
 *  sub-byte floats: 8 elements in 4 or 6 bytes); 0 when the id is unknown. */
static inline int tm_kit_dtype_block(int dtype, uint32_t* block_elems, uint32_t* block_bytes) {
  uint32_t e = 1, b = 0;
  switch (dtype) {
    case TM_DTYPE_BOOL: case TM_DTYPE_U8: case TM_DTYPE_I8:
    case TM_DTYPE_F8_E4M3: case TM_DTYPE_F8_E5M2: case TM_DTYPE_F8_E8M0: b = 1; break;
    case TM_DTYPE_U16: case TM_DTYPE_I16: case TM_DTYPE_F16: case TM_DTYPE_BF16: b = 2; break;
    case TM_DTYPE_U32: case TM_DTYPE_I32: case TM_DTYPE_F32: b = 4; break;
    case TM_DTYPE_U64: case TM_DTYPE_I64: case TM_DTYPE_F64: case TM_DTYPE_C64: b = 8; break;
    case TM_DTYPE_F4_E2M1: e = 2; b = 1; break;
    case TM_DTYPE_F6_E2M3: case TM_DTYPE_F6_E3M2: e = 4; b = 3; break;
    case TM_DTYPE_Q4_0: e = 32; b = 18; break;
    case TM_DTYPE_Q4_1: e = 32; b = 20; break;
    case TM_DTYPE_Q5_0: e = 32; b = 22; break;
    case TM_DTYPE_Q5_1: e = 32; b = 24; break;
    case TM_DTYPE_Q8_0: e = 32; b = 34; break;
    case TM_DTYPE_Q8_1: e = 32; b = 36; break;
    case TM_DTYPE_Q2_K: e = 256; b = 84; break;
    case TM_DTYPE_Q3_K: e = 256; b = 110; break;
    case TM_DTYPE_Q4_K: e = 256; b = 144; break;
    case TM_DTYPE_Q5_K: e = 256; b = 176; break;
    case TM_DTYPE_Q6_K: e = 256; b = 210; break;
    case TM_DTYPE_Q8_K: e = 256; b = 292; break;
    case TM_DTYPE_IQ2_XXS: e = 256; b = 66; break;
    case TM_DTYPE_IQ2_XS: e = 256; b = 74; break;
    case TM_DTYPE_IQ3_XXS: e = 256; b = 98; break;
    case TM_DTYPE_IQ1_S: e = 256; b = 50; break;
    case TM_DTYPE_IQ4_NL: e = 32; b = 18; break;
    case TM_DTYPE_IQ3_S: e = 256; b = 110; break;
    case TM_DTYPE_IQ2_S: e = 256; b = 82; break;
    case TM_DTYPE_IQ4_XS: e = 256; b = 136; break;
    case TM_DTYPE_IQ1_M: e = 256; b = 56; break;
    case TM_DTYPE_TQ1_0: e = 256; b = 54; break;
    case TM_DTYPE_TQ2_0: e = 256; b = 66; break;
    case TM_DTYPE_MXFP4: e = 32; b = 17; break;
    default: return 0;
  }
  *block_elems = e;
  *block_bytes = b;
  return 1;
}

/** The element count of a tensor argument (rank <= 8, no overflow). */
static inline int tm_kit_element_count(const TM_TensorArg* arg, const char* role, uint64_t* count,
                                       TM_KitStatus* status) {
  uint64_t n = 1;
  uint32_t d;
  if (arg->rank > 8) return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s has rank %u (at most 8)", role, arg->rank);
  for (d = 0; d < arg->rank; ++d) {
    if (arg->shape[d] != 0 && n > UINT64_MAX / arg->shape[d]) {
      return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s: the element count overflows 64 bits", role);
    }
    n *= arg->shape[d];
  }
  *count = n;
  return 1;
}

/** Checks a tensor argument: a known dtype, whole blocks, nbytes matching, exactly one of host
 *  memory and a buffer (none when empty), and byte_offset + nbytes not overflowing. */
static inline int tm_kit_check_tensor(const TM_TensorArg* arg, const char* role, int is_output, uint64_t* elems,
                                      TM_KitStatus* status) {
  uint32_t be = 0, bb = 0;
  int host;
  const int dtype = tm_kit_dtype_id(&arg->dtype);
  if (!tm_kit_dtype_block(dtype, &be, &bb)) {
    return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s has unknown dtype id %d", role, dtype);
  }
  if (!tm_kit_element_count(arg, role, elems, status)) return 0;
  if (*elems % be != 0) {
    return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s: %llu elements are not whole blocks of %u", role,
                       (unsigned long long)*elems, be);
  }
  if (*elems / be > UINT64_MAX / bb || arg->nbytes != *elems / be * bb) {
    return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s takes %llu bytes, but nbytes is %llu", role,
                       (unsigned long long)(*elems / be * bb), (unsigned long long)arg->nbytes);
  }
  host = is_output ? arg->host_out != NULL : arg->host_data != NULL;
  if (host && arg->buffer != NULL) {
    return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s sets both host memory and a buffer", role);
  }
  if (!host && arg->buffer == NULL && arg->nbytes != 0) {
    return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s has neither host memory nor a buffer", role);
  }
  if (arg->byte_offset > UINT64_MAX - arg->nbytes) {
    return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s byte_offset overflows", role);
  }
  return 1;
}

/* ------------------------------------------------------------------------------------------------
 * Attributes */

/** One attribute an operation takes. */
typedef struct TM_KitAttributeSpec {
  const char* name;  /* a TM_ATTR_* constant */
  int is_float;      /* 1: read `f`; 0: read `i` */
  double min, max;   /* the valid range (inclusive) */
} TM_KitAttributeSpec;

/** Reads the instance's attributes against `specs` (all required): unknown names, duplicates,
 *  missing ones and values out of range are INVALID_ARGUMENT. values[k] receives specs[k]'s value. */
static inline int tm_kit_read_attributes(const char* op, const TM_OpInstance* instance,
                                         const TM_KitAttributeSpec* specs, size_t spec_count,
                                         TM_Attribute* values, TM_KitStatus* status) {
  size_t stride, k;
  uint32_t i;
  unsigned char seen[32] = {0};
  if (spec_count > sizeof seen) return tm_kit_fail(status, TM_STATUS_INTERNAL, "%s: too many attribute specs", op);
  if (instance->attribute_count > 0 && instance->attributes == NULL) {
    return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s: attribute array is null", op);
  }
  stride = instance->attribute_count > 0 ? tm_kit_struct_size(instance->attributes) : 0;
  if (instance->attribute_count > 0 && stride < sizeof(size_t)) {
    return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s: attribute struct_size is too small", op);
  }
  for (i = 0; i < instance->attribute_count; ++i) {
    TM_Attribute a;
    tm_kit_read_struct(&a, sizeof a, (const unsigned char*)instance->attributes + (size_t)i * stride);
    if (a.name == NULL) return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s: attribute %u has no name", op, i);
    for (k = 0; k < spec_count && strcmp(a.name, specs[k].name) != 0; ++k) {
    }
    if (k == spec_count) return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s: unknown attribute '%s'", op, a.name);
    if (seen[k]) return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s: attribute '%s' given twice", op, a.name);
    seen[k] = 1;
    if (specs[k].is_float ? !(a.f >= specs[k].min && a.f <= specs[k].max)
                          : ((double)a.i < specs[k].min || (double)a.i > specs[k].max)) {
      return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s: attribute '%s' is out of range [%g, %g]", op, a.name,
                         specs[k].min, specs[k].max);
    }
    values[k] = a;
  }
  for (k = 0; k < spec_count; ++k) {
    if (!seen[k]) return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s: missing attribute '%s'", op, specs[k].name);
  }
  return 1;
}

/* Reads the single input and output of `instance`, named `op`, into `in` / `out`. */
static inline int tm_kit_read_io(const char* op, const TM_OpInstance* instance, TM_TensorArg* in, uint64_t* in_elems,
                                 TM_TensorArg* out, uint64_t* out_elems, TM_KitStatus* status) {
  char role[160];
  if (instance->input_count != 1 || instance->output_count != 1) {
    return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s: takes 1 input and 1 output, got %u and %u", op,
                       instance->input_count, instance->output_count);
  }
  snprintf(role, sizeof role, "%s: inputs", op);
  if (!tm_kit_tensor_at(role, instance->inputs, 0, in, status)) return 0;
  snprintf(role, sizeof role, "%s: outputs", op);
  if (!tm_kit_tensor_at(role, instance->outputs, 0, out, status)) return 0;
  snprintf(role, sizeof role, "%s: input", op);
  if (!tm_kit_check_tensor(in, role, 0, in_elems, status)) return 0;
  snprintf(role, sizeof role, "%s: output", op);
  return tm_kit_check_tensor(out, role, 1, out_elems, status);
}

/** Reads the host's instance and checks it names `op`. */
static inline int tm_kit_read_instance(const TM_OpInstance* instance, const char* op, TM_OpInstance* out,
                                       TM_KitStatus* status) {
  if (instance == NULL) return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s: the instance is null", op);
  tm_kit_read_struct(out, sizeof *out, instance);
  if (out->op == NULL || strcmp(out->op, op) != 0) {
    return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s: instance names operation '%s'", op,
                       out->op ? out->op : "(null)");
  }
  return 1;
}

/* ------------------------------------------------------------------------------------------------
 * The built-in operations' instances, validated */

/** A validated tm.tile_stats@1 instance. */
typedef struct TM_KitTileStats {
  TM_TensorArg input, output;
  uint64_t rows, cols;                          /* the matrix */
  uint64_t row_begin, row_end, col_begin, col_end;  /* the view */
  uint32_t tile;
  uint64_t tiles_down, tiles_across;            /* the view's tile grid */
} TM_KitTileStats;

/** Validates a tm.tile_stats@1 instance: a 2-D input of whole blocks per row, the view inside it,
 *  T a power of two in [8, 4096], and an output of exactly one TM_TileStats per tile. */
static inline int tm_kit_parse_tile_stats(const TM_OpInstance* instance, TM_KitTileStats* job, TM_KitStatus* status) {
  static const TM_KitAttributeSpec specs[] = {
      {TM_ATTR_ROW_BEGIN, 0, 0, 9.2233720368547758e18}, {TM_ATTR_ROW_END, 0, 0, 9.2233720368547758e18},
      {TM_ATTR_COL_BEGIN, 0, 0, 9.2233720368547758e18}, {TM_ATTR_COL_END, 0, 0, 9.2233720368547758e18},
      {TM_ATTR_TILE, 0, 8, 4096}};
  const char* op = TM_OP_TILE_STATS;
  TM_OpInstance in;
  TM_Attribute v[5];
  uint64_t in_elems = 0, out_elems = 0, tile;
  uint32_t be = 0, bb = 0;
  if (!tm_kit_read_instance(instance, op, &in, status)) return 0;
  if (!tm_kit_read_io(op, &in, &job->input, &in_elems, &job->output, &out_elems, status)) return 0;
  if (!tm_kit_read_attributes(op, &in, specs, 5, v, status)) return 0;
  if (job->input.rank != 2) {
    return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s: input has rank %u, not 2", op, job->input.rank);
  }
  job->rows = job->input.shape[0];
  job->cols = job->input.shape[1];
  tm_kit_dtype_block(tm_kit_dtype_id(&job->input.dtype), &be, &bb);
  if (job->cols % be != 0) {
    return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s: %llu columns are not whole blocks of %u", op,
                       (unsigned long long)job->cols, be);
  }
  job->row_begin = (uint64_t)v[0].i;
  job->row_end = (uint64_t)v[1].i;
  job->col_begin = (uint64_t)v[2].i;
  job->col_end = (uint64_t)v[3].i;
  tile = (uint64_t)v[4].i;
  if ((tile & (tile - 1)) != 0) {
    return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s: tile %llu is not a power of two in [8, 4096]", op,
                       (unsigned long long)tile);
  }
  job->tile = (uint32_t)tile;
  if (job->row_begin > job->row_end || job->row_end > job->rows || job->col_begin > job->col_end ||
      job->col_end > job->cols) {
    return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT,
                       "%s: the view [%llu, %llu) x [%llu, %llu) is not inside the %llu x %llu matrix", op,
                       (unsigned long long)job->row_begin, (unsigned long long)job->row_end,
                       (unsigned long long)job->col_begin, (unsigned long long)job->col_end,
                       (unsigned long long)job->rows, (unsigned long long)job->cols);
  }
  job->tiles_down = (job->row_end - job->row_begin + tile - 1) / tile;
  job->tiles_across = (job->col_end - job->col_begin + tile - 1) / tile;
  if (job->tiles_across != 0 && job->tiles_down > UINT64_MAX / sizeof(TM_TileStats) / job->tiles_across) {
    return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s: the tile count overflows", op);
  }
  if (job->output.dtype != TM_DTYPE_U8 || job->output.rank != 1 ||
      out_elems != job->tiles_down * job->tiles_across * sizeof(TM_TileStats)) {
    return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT,
                       "%s: the view's %llu x %llu tiles need an output U8[%llu], got %llu bytes", op,
                       (unsigned long long)job->tiles_down, (unsigned long long)job->tiles_across,
                       (unsigned long long)(job->tiles_down * job->tiles_across * sizeof(TM_TileStats)),
                       (unsigned long long)out_elems);
  }
  return 1;
}

/** A validated tm.decode@1 instance. */
typedef struct TM_KitDecode {
  TM_TensorArg input, output;
  uint64_t elements;
} TM_KitDecode;

/** Validates a tm.decode@1 instance: no attributes, an F32 output of the input's element count. */
static inline int tm_kit_parse_decode(const TM_OpInstance* instance, TM_KitDecode* job, TM_KitStatus* status) {
  const char* op = TM_OP_DECODE;
  TM_OpInstance in;
  uint64_t out_elems = 0;
  if (!tm_kit_read_instance(instance, op, &in, status)) return 0;
  if (!tm_kit_read_io(op, &in, &job->input, &job->elements, &job->output, &out_elems, status)) return 0;
  if (!tm_kit_read_attributes(op, &in, NULL, 0, NULL, status)) return 0;
  if (job->output.dtype != TM_DTYPE_F32) {
    return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s: output dtype is not F32", op);
  }
  if (out_elems != job->elements) {
    return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s: output holds %llu elements, the input %llu", op,
                       (unsigned long long)out_elems, (unsigned long long)job->elements);
  }
  return 1;
}

/** A validated tm.render_tile@1 / tm.render_tile_sampled@1 instance. */
typedef struct TM_KitRenderTile {
  TM_TensorArg input, output;
  uint64_t rows, cols;  /* the matrix (values) or the statistics grid */
  int64_t source, stat, colormap;
  uint64_t row_begin, col_begin, cell;
  uint32_t magnify;
  double lo, hi;
  int sampled;          /* 1 for tm.render_tile_sampled@1 */
} TM_KitRenderTile;

/** Why `colormap` is not a valid colormap attribute (a scale with a palette of its kind), or NULL. */
static inline const char* tm_kit_colormap_problem(int64_t colormap) {
  const int64_t scale = colormap & TM_COLORMAP_SCALE_MASK, palette = colormap >> TM_COLORMAP_PALETTE_SHIFT;
  if (colormap < 0 || scale > TM_COLORMAP_LOG_MAGNITUDE) return "unknown colour scale";
  if (palette > TM_PALETTE_LAST) return "unknown palette";
  if (palette == TM_PALETTE_DEFAULT) return NULL;
  if ((palette == TM_PALETTE_COOLWARM || palette == TM_PALETTE_RDBU) != (scale == TM_COLORMAP_DIVERGING)) {
    return scale == TM_COLORMAP_DIVERGING ? "the diverging scale takes a diverging palette"
                                          : "a diverging palette goes with the diverging scale only";
  }
  return NULL;
}

/** Validates a render instance: the attributes (powers of two, cell 1 with magnify > 1 and with
 *  statistics, a scale with a palette of its kind, finite lo < hi, 0 < lo for the log scale), the
 *  input's form for its source, the tile starting inside the input, and a U8[256, 256, 4] output. */
static inline int tm_kit_parse_render_tile(const TM_OpInstance* instance, TM_KitRenderTile* job, TM_KitStatus* status) {
  static const TM_KitAttributeSpec specs[] = {
      {TM_ATTR_SOURCE, 0, 0, 1},
      {TM_ATTR_ROW_BEGIN, 0, 0, 9.2233720368547758e18},
      {TM_ATTR_COL_BEGIN, 0, 0, 9.2233720368547758e18},
      {TM_ATTR_CELL, 0, 1, TM_RENDER_MAX_CELL},
      {TM_ATTR_MAGNIFY, 0, 1, TM_RENDER_MAX_MAGNIFY},
      {TM_ATTR_STAT, 0, TM_PIXEL_STAT_MEAN, TM_PIXEL_STAT_NON_FINITE},
      {TM_ATTR_COLORMAP, 0, 0, TM_COLORMAP_MAX},
      {TM_ATTR_LO, 1, -1.7976931348623157e308, 1.7976931348623157e308},
      {TM_ATTR_HI, 1, -1.7976931348623157e308, 1.7976931348623157e308}};
  TM_OpInstance in;
  TM_Attribute v[9];
  uint64_t in_elems = 0, out_elems = 0;
  const char* op;
  if (instance == NULL) return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "render_tile: the instance is null");
  tm_kit_read_struct(&in, sizeof in, instance);
  if (in.op == NULL || (strcmp(in.op, TM_OP_RENDER_TILE) != 0 && strcmp(in.op, TM_OP_RENDER_TILE_SAMPLED) != 0)) {
    return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "render_tile: instance names operation '%s'",
                       in.op ? in.op : "(null)");
  }
  op = in.op;
  job->sampled = strcmp(in.op, TM_OP_RENDER_TILE_SAMPLED) == 0;
  if (!tm_kit_read_io(op, &in, &job->input, &in_elems, &job->output, &out_elems, status)) return 0;
  if (!tm_kit_read_attributes(op, &in, specs, 9, v, status)) return 0;
  job->source = v[0].i;
  job->row_begin = (uint64_t)v[1].i;
  job->col_begin = (uint64_t)v[2].i;
  job->cell = (uint64_t)v[3].i;
  job->magnify = (uint32_t)v[4].i;
  job->stat = v[5].i;
  job->colormap = v[6].i;
  job->lo = v[7].f;
  job->hi = v[8].f;
  if ((job->cell & (job->cell - 1)) != 0 || (job->magnify & (job->magnify - 1)) != 0) {
    return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s: cell and magnify must be powers of two", op);
  }
  if (job->magnify > 1 && job->cell > 1) return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s: magnify > 1 needs cell 1", op);
  if (job->source == TM_RENDER_SOURCE_TILE_STATS && job->cell != 1) {
    return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s: a statistics grid renders with cell 1", op);
  }
  if (tm_kit_colormap_problem(job->colormap) != NULL) {
    return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s: colormap %lld: %s", op, (long long)job->colormap,
                       tm_kit_colormap_problem(job->colormap));
  }
  if (!(job->lo < job->hi)) return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s: the range needs lo < hi", op);
  if ((job->colormap & TM_COLORMAP_SCALE_MASK) == TM_COLORMAP_LOG_MAGNITUDE && !(job->lo > 0)) {
    return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s: the log colour map needs 0 < lo", op);
  }
  if ((job->colormap & TM_COLORMAP_SCALE_MASK) == TM_COLORMAP_DIVERGING && !(fmax(fabs(job->lo), fabs(job->hi)) > 0)) {
    return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s: the diverging range is empty", op);
  }
  if (job->source == TM_RENDER_SOURCE_VALUES) {
    uint32_t be = 0, bb = 0;
    if (job->input.rank != 2) return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s: a values input has rank 2", op);
    tm_kit_dtype_block(tm_kit_dtype_id(&job->input.dtype), &be, &bb);
    if (job->input.shape[1] % be != 0) {
      return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s: the columns are not whole blocks", op);
    }
  } else if (job->input.rank != 3 || job->input.dtype != TM_DTYPE_U8 || job->input.shape[2] != sizeof(TM_TileStats)) {
    return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s: a statistics input is U8[grid_rows, grid_cols, 72]", op);
  }
  job->rows = job->input.shape[0];
  job->cols = job->input.shape[1];
  if (job->row_begin > job->rows || job->col_begin > job->cols) {
    return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s: the tile starts outside the input", op);
  }
  if (job->output.dtype != TM_DTYPE_U8 || job->output.rank != 3 || job->output.shape[0] != TM_RENDER_TILE_PIXELS ||
      job->output.shape[1] != TM_RENDER_TILE_PIXELS || job->output.shape[2] != 4) {
    return tm_kit_fail(status, TM_STATUS_INVALID_ARGUMENT, "%s: output must be U8[256, 256, 4]", op);
  }
  return 1;
}

/* ------------------------------------------------------------------------------------------------
 * tm.render_tile@1's colours: plain float64 arithmetic, the CPU reference's own code */

/* Control points, evenly spaced, of each colormap value: a named palette's (plugin_kit_palettes.h),
 * or for palette 0 the scale's own table, a coarser drawing of a published one (these colours are
 * the ABI 1.3 colours and stay bit for bit): diverging, Moreland's cool-warm (blue, grey, red)
 * centred on zero; sequential, viridis; log magnitude, magma. */
static inline const unsigned char (*tm_kit_colormap_points(int64_t colormap, size_t* count))[3] {
  static const unsigned char diverging[7][3] = {{59, 76, 192},   {124, 159, 249}, {192, 212, 245}, {221, 221, 221},
                                                {242, 203, 183}, {238, 133, 105}, {180, 4, 38}};
  static const unsigned char viridis[10][3] = {{68, 1, 84},    {72, 40, 120},  {62, 74, 137},  {49, 104, 142},
                                               {38, 130, 142}, {31, 158, 137}, {53, 183, 121}, {109, 205, 89},
                                               {180, 222, 44}, {253, 231, 37}};
  static const unsigned char magma[9][3] = {{0, 0, 4},       {28, 16, 68},   {79, 18, 123},
                                            {129, 37, 129},  {181, 54, 122}, {229, 80, 100},
                                            {251, 135, 97},  {254, 194, 135}, {252, 253, 191}};
  const unsigned char(*named)[3] = tm_kit_palette_points(colormap >> TM_COLORMAP_PALETTE_SHIFT, count);
  if (named != NULL) return named;
  colormap &= TM_COLORMAP_SCALE_MASK;
  if (colormap == TM_COLORMAP_SEQUENTIAL) {
    *count = 10;
    return viridis;
  }
  if (colormap == TM_COLORMAP_LOG_MAGNITUDE) {
    *count = 9;
    return magma;
  }
  *count = 7;
  return diverging;
}

/** Entry `index` (0..255) of a colormap value's 256-entry table, as RGB. */
static inline void tm_kit_colormap_entry(int64_t colormap, size_t index, unsigned char rgb[3]) {
  size_t count = 0, k, c;
  const unsigned char(*points)[3] = tm_kit_colormap_points(colormap, &count);
  const double x = (double)index / 255.0 * (double)(count - 1);
  double f, value;
  k = (size_t)x;
  if (k > count - 2) k = count - 2;
  f = x - (double)k;
  for (c = 0; c < 3; ++c) {
    value = floor((double)points[k][c] + ((double)points[k + 1][c] - (double)points[k][c]) * f + 0.5);
    rgb[c] = (unsigned char)(value < 0 ? 0 : value > 255 ? 255 : value);
  }
}

/* Position of t in [0, 1] on a 256-entry table (0 for NaN). */
static inline size_t tm_kit_table_index(double t) {
  if (!(t > 0)) return 0;
  if (t >= 1) return 255;
  return (size_t)floor(t * 255.0 + 0.5);
}

/** The colour of a pixel whose block has statistics `s`, under the render attributes given.
 *  Non-finite elements always show (NaN magenta, +Inf orange, -Inf cyan); empty blocks are
 *  transparent. */
static inline void tm_kit_pixel_colour(const TM_TileStats* s, int64_t stat, int64_t colormap, double lo, double hi,
                                       unsigned char rgba[4]) {
  double mean, v = 0;
  size_t index = 0;
  rgba[3] = 255;
  if (s->count == 0) {
    rgba[0] = rgba[1] = rgba[2] = rgba[3] = 0;
    return;
  }
  if (s->nan > 0 || s->pos_inf > 0 || s->neg_inf > 0 || stat == TM_PIXEL_STAT_NON_FINITE) {
    const unsigned char* c = s->nan > 0 ? (const unsigned char*)"\xff\x00\xff"
                             : s->pos_inf > 0 ? (const unsigned char*)"\xff\x8c\x00"
                             : s->neg_inf > 0 ? (const unsigned char*)"\x00\xe6\xff"
                                              : (const unsigned char*)"\x30\x30\x30";
    rgba[0] = c[0];
    rgba[1] = c[1];
    rgba[2] = c[2];
    return;
  }
  mean = s->sum / (double)s->count;
  switch (stat) {
    case TM_PIXEL_STAT_MEAN: v = mean; break;
    case TM_PIXEL_STAT_ABSMAX: v = s->absmax; break;
    case TM_PIXEL_STAT_MIN: v = s->min; break;
    case TM_PIXEL_STAT_MAX: v = s->max; break;
    case TM_PIXEL_STAT_ENVELOPE: v = fabsf(s->min) > fabsf(s->max) ? s->min : s->max; break;
    case TM_PIXEL_STAT_STD: {
      const double variance = s->sum_sq / (double)s->count - mean * mean;
      v = sqrt(variance > 0.0 ? variance : 0.0);
      break;
    }
    default: break;
  }
  if ((colormap & TM_COLORMAP_SCALE_MASK) == TM_COLORMAP_DIVERGING) {
    const double m = fmax(fabs(lo), fabs(hi));
    double r = v / m;
    r = r < -1.0 ? -1.0 : r > 1.0 ? 1.0 : r;
    index = tm_kit_table_index((r + 1.0) / 2.0);
  } else if ((colormap & TM_COLORMAP_SCALE_MASK) == TM_COLORMAP_SEQUENTIAL) {
    index = tm_kit_table_index((v - lo) / (hi - lo));
  } else {
    const double a = fabs(v);
    if (a > 0) {
      const double l0 = log10(lo);
      index = tm_kit_table_index((log10(a) - l0) / (log10(hi) - l0));
    }
  }
  tm_kit_colormap_entry(colormap, index, rgba);
}

#ifdef __cplusplus
}  /* extern "C" */
#endif

#endif /* TENSORMORPH_C_PLUGIN_KIT_H_ */
