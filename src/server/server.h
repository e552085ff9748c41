// `tensormorph serve`: the HTTP server behind the viewer (JSON API, PNG tiles, the web UI's files).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "ops/compute_session.h"
#include "tensormorph/status.h"

namespace httplib {
class Server;
}

namespace tensormorph::server {

/// How to serve.
struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                                  ///< 0: an ephemeral port
  bool allow_remote = false;                        ///< required to bind anything but loopback
  uint32_t threads = 8;                             ///< request threads
  uint64_t tile_cache_bytes = uint64_t{256} << 20;  ///< rendered-tile cache budget
  uint64_t fine_stats_bytes = uint64_t{512} << 20;  ///< budget of in-memory statistics pyramids
  std::filesystem::path web_dir;                    ///< the built web UI (web/dist)
  bool build_index = true;                          ///< index the checkpoints in the background
};

class ApiContext;

/// A viewer server over the checkpoints it was given.
class ViewerServer {
 public:
  /// Opens `paths` (checkpoint files or directories) and prepares the routes; nothing is bound yet.
  static Result<std::unique_ptr<ViewerServer>> create(const std::vector<std::string>& paths, ServerOptions options,
                                                      std::unique_ptr<ops::ComputeSession> session);
  ~ViewerServer();
  /// Binds the socket (refusing non-loopback hosts without allow_remote) and returns the port.
  Result<int> bind();
  /// Serves until stop() (call after bind()).
  void run();
  /// Stops serving; run() returns.
  void stop();
  /// "http://HOST:PORT/" once bound.
  std::string url() const;
  /// Waits for the background indexing (tests).
  void wait_for_index();

 private:
  ViewerServer() = default;
  ServerOptions options_;
  int port_ = 0;
  std::unique_ptr<httplib::Server> http_;
  std::unique_ptr<ApiContext> api_;
};

/// True for 127.0.0.0/8, ::1 and "localhost".
bool is_loopback_host(const std::string& host);

}  // namespace tensormorph::server
