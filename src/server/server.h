// `tensormorph serve`: the HTTP server behind the viewer (JSON API, PNG tiles, the web UI's files).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/compute_session.h"
#include "server/connection_limits.h"
#include "tensormorph/open.h"
#include "tensormorph/status.h"

namespace tensormorph::server {

/// How to serve.
struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                                  ///< 0: an ephemeral port
  bool allow_remote = false;                        ///< required to bind anything but loopback
  uint32_t threads = 16;                            ///< request threads (connections served at once)
  uint64_t tile_cache_bytes = uint64_t{256} << 20;  ///< rendered-tile cache budget
  uint64_t fine_stats_bytes = uint64_t{512} << 20;  ///< budget of in-memory statistics pyramids
  std::filesystem::path web_dir;                    ///< the built web UI (web/dist)
  bool build_index = true;                          ///< index the checkpoints in the background
  ConnectionLimits limits;                          ///< deadlines and queue bounds (workers: `threads`)
  OpenOptions open;                                 ///< how the checkpoints are opened (--tp-split)
};

class ApiContext;
class GuardedServer;
class RequestPolicy;

/// A viewer server over the checkpoints it was given.
class ViewerServer {
 public:
  /// Opens `paths` (checkpoint files or directories) and prepares the routes; nothing is bound yet.
  static Result<std::unique_ptr<ViewerServer>> create(const std::vector<std::string>& paths, ServerOptions options,
                                                      std::unique_ptr<engine::ComputeSession> session);
  ~ViewerServer();
  /// Binds the socket (refusing non-loopback hosts without allow_remote, and a port in use) and returns the port.
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
  std::unique_ptr<GuardedServer> http_;
  std::unique_ptr<ApiContext> api_;
  std::shared_ptr<const RequestPolicy> policy_;  // set by bind(): the accepted names include the port
};

/// What a --host names.
struct ResolvedHost {
  std::vector<std::string> addresses;  ///< numeric, as getaddrinfo resolved them
  bool loopback = false;               ///< every address is loopback (127.0.0.0/8, ::1, ::ffff:127.x.y.z)
};

/// Resolves `host` (an address literal, IPv6 with or without brackets, or a name such as
/// localhost); a host that does not resolve is an error naming it.
Result<ResolvedHost> resolve_host(const std::string& host);

/// True when `host` resolves and every address it resolves to is loopback.
bool is_loopback_host(const std::string& host);

}  // namespace tensormorph::server
