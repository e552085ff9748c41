// The JSON API of the viewer: routes, their parameters and their answers (docs/VIEWER.md).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "compute/settings.h"
#include "engine/compute_session.h"
#include "server/catalog.h"
#include "server/compression.h"
#include "server/tiles.h"

namespace httplib {
class Server;
}

namespace tensormorph::server {

class CompareStore;

/// Everything the handlers share.
class ApiContext {
 public:
  /// Takes the session and the catalog; `tile_cache_bytes` budgets rendered tiles.
  ApiContext(std::unique_ptr<engine::ComputeSession> session, std::unique_ptr<Catalog> catalog, uint64_t tile_cache_bytes);
  /// Registers every /api route on `http`.
  void register_routes(httplib::Server& http);
  /// The catalog.
  Catalog& catalog() { return *catalog_; }
  /// The scheduler.
  compute::Scheduler& scheduler() { return session_->scheduler(); }

 private:
  /// Checkpoints, tensors, one tensor and locating an element (api_tensors.cpp).
  void register_tensor_routes(httplib::Server& http);
  void register_compute_routes(httplib::Server& http);
  /// The colour scales and palettes (api_colormaps.cpp).
  static void register_colormap_routes(httplib::Server& http);
  /// The Compare mode's routes (api_compare.cpp).
  void register_compare_routes(httplib::Server& http);
  /// A checkpoint's format facts and metadata, long arrays paged (api_metadata.cpp).
  void register_metadata_routes(httplib::Server& http);
  /// One tensor's spectrum and every matrix's spectral metrics (api_spectrum.cpp).
  void register_spectrum_routes(httplib::Server& http);
  /// Remembers an operation that answered "needs consent", for the Compute panel.
  void note_consent_request(nlohmann::ordered_json request);

  std::unique_ptr<engine::ComputeSession> session_;
  std::unique_ptr<Catalog> catalog_;
  TileRenderer renderer_;
  std::shared_ptr<CompareStore> compare_;  // comparisons, difference pyramids and tiles of served pairs
  std::mutex consent_mutex_;
  std::deque<nlohmann::ordered_json> consent_requests_;
  uint64_t consent_sequence_ = 0;
  /// A checkpoint's whole /api/tensors answer, kept while its index is the one it was made from.
  struct Listing {
    std::shared_ptr<const index::IndexContents> contents;
    std::string state;
    std::shared_ptr<const PackedJson> answer;
  };
  std::mutex listing_mutex_;
  std::map<std::pair<size_t, bool>, Listing> listings_;  // by checkpoint id and columns form (listing_mutex_)
  std::mutex settings_mutex_;
  compute::Settings running_;  // what this server uses now (settings_mutex_); the file changes only when asked
};

}  // namespace tensormorph::server
