// The colour routes: which scales and palettes tiles take, and the 256 colours of a scale under a
// palette (the viewer's colour bar).
#include <httplib.h>

#include "compute/ops/render_tile.h"
#include "server/api.h"
#include "server/http_util.h"

namespace tensormorph::server {
namespace {

using json = nlohmann::ordered_json;

constexpr ops::ColorMap kScales[] = {ops::ColorMap::kDiverging, ops::ColorMap::kSequential, ops::ColorMap::kLogMagnitude};

}  // namespace

void ApiContext::register_colormap_routes(httplib::Server& http) {
  http.Get("/api/colormaps", [](const httplib::Request&, httplib::Response& res) {
    json scales = json::array(), palettes = json::array();
    for (const auto scale : kScales) scales.push_back(std::string(ops::color_map_name(scale)));
    for (const auto& p : ops::named_palettes()) {
      // A scale's own table is drawn from this palette (palette "default"): a coarser drawing.
      json default_for = json::array();
      for (const auto scale : kScales) {
        if (ops::drawn_from(scale) == p.palette) default_for.push_back(std::string(ops::color_map_name(scale)));
      }
      palettes.push_back({{"name", std::string(p.name)}, {"kind", p.diverging ? "diverging" : "sequential"},
                          {"colorblind_safe", p.colorblind_safe}, {"perceptually_uniform", p.perceptually_uniform},
                          {"default_for", std::move(default_for)}});
    }
    reply_json(res, {{"scales", std::move(scales)}, {"palettes", std::move(palettes)}});
  });

  http.Get(R"(/api/colormap/([a-z]{1,16}))", [](const httplib::Request& req, httplib::Response& res) {
    auto map = ops::color_map_from_name(req.matches[1].str());
    if (!map) return reply_error(res, Status::NotFound("no colour scale '" + req.matches[1].str() + "'"));
    auto palette = ops::palette_from_name(param(req, "palette").value_or("default"));
    if (!palette) {
      return reply_error(res, Status::InvalidArgument("no palette '" + param(req, "palette")->substr(0, 40) +
                                                      "' (GET /api/colormaps lists them)"));
    }
    ops::RenderParams check;  // the same rule as a tile's: a palette of the scale's kind
    check.colormap = *map;
    check.palette = *palette;
    check.lo = *map == ops::ColorMap::kLogMagnitude ? 1 : -1;
    check.hi = 2;
    if (Status ok = ops::check_render_params(check); !ok.ok()) return reply_error(res, ok);
    json colours = json::array();
    for (const auto& c : ops::color_map_table(*map, *palette)) colours.push_back({c[0], c[1], c[2]});
    reply_json(res, {{"name", req.matches[1].str()}, {"palette", std::string(ops::palette_name(*palette))},
                     {"colors", colours}});
  });
}

}  // namespace tensormorph::server
