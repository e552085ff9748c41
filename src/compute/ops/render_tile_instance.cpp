// tm.render_tile@1's definition, its ladder rung, and the reading of its instances (shared by
// backends so every backend refuses the same malformed instances with the same messages).
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "core/dtype_abi.h"
#include "compute/ops/definitions.h"
#include "compute/ops/render_tile.h"
#include "tensormorph/c/plugin_kit.h"

namespace tensormorph::ops {
namespace {

const std::vector<std::string> kAttributes = {kAttrSource, kAttrRowBegin, kAttrColBegin, kAttrCell, kAttrMagnify,
                                              kAttrStat,   kAttrColormap, kAttrLo,       kAttrHi};

Status invalid(const std::string& what) { return Status::InvalidArgument("render_tile: " + what); }

Result<TensorArgument> read_tensor(const TM_TensorArg* array, const char* role, bool output) {
  if (array == nullptr) return invalid(std::string(role) + " array is null");
  TensorArgument t;
  t.arg = read_abi_struct(array);
  auto dtype = from_abi_dtype(t.arg.dtype);
  if (!dtype) return invalid(std::string(role) + " has an unknown dtype");
  t.dtype = *dtype;
  if (t.arg.rank > 8) return invalid(std::string(role) + " has rank > 8");
  TM_ASSIGN_OR_RETURN(t.elems, checked_element_count(std::span<const uint64_t>(t.arg.shape, t.arg.rank)));
  TM_ASSIGN_OR_RETURN(const uint64_t bytes, dtype_storage_bytes(t.dtype, t.elems));
  if (bytes != t.arg.nbytes) return invalid(std::string(role) + ": nbytes does not match its dtype and shape");
  const bool host = output ? t.arg.host_out != nullptr : t.arg.host_data != nullptr;
  if (host == (t.arg.buffer != nullptr)) return invalid(std::string(role) + " needs exactly one of host memory and a buffer");
  uint64_t end = 0;
  if (__builtin_add_overflow(t.arg.byte_offset, t.arg.nbytes, &end)) return invalid(std::string(role) + " offset overflows");
  return t;
}

Result<std::map<std::string, TM_Attribute>> read_attributes(const TM_OpInstance& instance) {
  std::map<std::string, TM_Attribute> found;
  if (instance.attribute_count > 0 && instance.attributes == nullptr) return invalid("attribute array is null");
  const size_t stride = instance.attribute_count > 0 ? instance.attributes->struct_size : 0;
  if (instance.attribute_count > 0 && stride < sizeof(size_t)) return invalid("attribute struct_size is too small");
  for (uint32_t i = 0; i < instance.attribute_count; ++i) {
    const auto* element =
        reinterpret_cast<const TM_Attribute*>(reinterpret_cast<const std::byte*>(instance.attributes) + i * stride);
    const TM_Attribute attr = read_abi_struct(element);
    if (attr.name == nullptr) return invalid("attribute " + std::to_string(i) + " has no name");
    if (std::find(kAttributes.begin(), kAttributes.end(), attr.name) == kAttributes.end()) {
      return invalid(std::string("unknown attribute '") + attr.name + "'");
    }
    if (!found.emplace(attr.name, attr).second) return invalid(std::string("attribute '") + attr.name + "' given twice");
  }
  for (const auto& name : kAttributes) {
    if (!found.count(name)) return invalid("missing attribute '" + name + "'");
  }
  for (const auto& [name, attr] : found) {
    if (name != kAttrLo && name != kAttrHi && attr.i < 0) return invalid("attribute '" + name + "' is negative");
  }
  return found;
}

}  // namespace

std::string_view pixel_stat_name(PixelStat stat) {
  static constexpr std::string_view kNames[] = {"mean", "absmax", "min", "max", "envelope", "std", "nonfinite"};
  return kNames[static_cast<size_t>(stat)];
}

std::optional<PixelStat> pixel_stat_from_name(std::string_view name) {
  for (int64_t i = 0; i <= static_cast<int64_t>(PixelStat::kNonFinite); ++i) {
    if (pixel_stat_name(static_cast<PixelStat>(i)) == name) return static_cast<PixelStat>(i);
  }
  return std::nullopt;
}

std::string_view color_map_name(ColorMap map) {
  static constexpr std::string_view kNames[] = {"diverging", "sequential", "log"};
  return kNames[static_cast<size_t>(map)];
}

std::optional<ColorMap> color_map_from_name(std::string_view name) {
  for (int64_t i = 0; i <= static_cast<int64_t>(ColorMap::kLogMagnitude); ++i) {
    if (color_map_name(static_cast<ColorMap>(i)) == name) return static_cast<ColorMap>(i);
  }
  return std::nullopt;
}

bool is_render_op(std::string_view id) { return id == kOpRenderTile || id == kOpRenderTileSampled; }

Result<RenderArgs> parse_render_tile(const TM_OpInstance& op) {
  const TM_OpInstance instance = read_abi_struct(&op);
  if (instance.op == nullptr || !is_render_op(instance.op)) return invalid("instance names another operation");
  if (instance.input_count != 1 || instance.output_count != 1) return invalid("takes 1 input and 1 output");
  RenderArgs args;
  TM_ASSIGN_OR_RETURN(args.input, read_tensor(instance.inputs, "input", false));
  TM_ASSIGN_OR_RETURN(args.output, read_tensor(instance.outputs, "output", true));
  TM_ASSIGN_OR_RETURN(auto attrs, read_attributes(instance));
  RenderParams& p = args.params;
  if (attrs.at(kAttrSource).i > 1 || attrs.at(kAttrStat).i > 6) return invalid("source or stat out of range");
  const int64_t colormap = attrs.at(kAttrColormap).i;
  if (const char* problem = tm_kit_colormap_problem(colormap)) {
    return invalid("colormap " + std::to_string(colormap) + ": " + problem);
  }
  p.source = static_cast<RenderSource>(attrs.at(kAttrSource).i);
  p.row_begin = static_cast<uint64_t>(attrs.at(kAttrRowBegin).i);
  p.col_begin = static_cast<uint64_t>(attrs.at(kAttrColBegin).i);
  p.cell = static_cast<uint64_t>(attrs.at(kAttrCell).i);
  p.magnify = static_cast<uint32_t>(std::min<int64_t>(attrs.at(kAttrMagnify).i, kMaxMagnify + 1));
  p.stat = static_cast<PixelStat>(attrs.at(kAttrStat).i);
  p.colormap = static_cast<ColorMap>(colormap & TM_COLORMAP_SCALE_MASK);
  p.palette = static_cast<Palette>(colormap >> TM_COLORMAP_PALETTE_SHIFT);
  p.lo = attrs.at(kAttrLo).f;
  p.hi = attrs.at(kAttrHi).f;
  p.sampled = std::string_view(instance.op) == kOpRenderTileSampled;
  TM_RETURN_IF_ERROR(check_render_params(p));
  const TM_TensorArg& in = args.input.arg;
  if (p.source == RenderSource::kValues) {
    if (in.rank != 2) return invalid("a values input has rank 2");
  } else if (in.rank != 3 || args.input.dtype != DType::kU8 || in.shape[2] != sizeof(TM_TileStats)) {
    return invalid("a statistics input is U8[grid_rows, grid_cols, 72]");
  }
  args.rows = in.shape[0];
  args.cols = in.shape[1];
  if (p.row_begin > args.rows || p.col_begin > args.cols) return invalid("the tile starts outside the input");
  if (p.source == RenderSource::kValues) TM_RETURN_IF_ERROR(matrix_row_bytes(args.input.dtype, args.cols).status());
  const TM_TensorArg& out = args.output.arg;
  if (args.output.dtype != DType::kU8 || out.rank != 3 || out.shape[0] != kRenderTilePixels ||
      out.shape[1] != kRenderTilePixels || out.shape[2] != 4) {
    return invalid("output must be U8[256, 256, 4]");
  }
  return args;
}

}  // namespace tensormorph::ops
