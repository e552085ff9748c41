// An httplib::Server whose connections cannot starve each other: deadlines on every read and
// write, a bounded queue of waiting connections, and slow or idle connections given up while
// others wait. Debian's cpp-httplib is a prebuilt shared library (its CPPHTTPLIB_* limits are
// fixed at 8 threads with unbounded queueing, a 5 s timeout per read, and a backlog of 5), so the
// connection loop is replaced here rather than configured.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>

#include <httplib.h>

#include "server/connection_limits.h"
#include "tensormorph/status.h"

namespace tensormorph::server {

/// httplib::Server with its own connection loop (see the file comment).
class GuardedServer : public httplib::Server {
 public:
  /// A server with these limits; bind with bind_exclusive().
  explicit GuardedServer(ConnectionLimits limits);
  ~GuardedServer() override;
  /// Binds host:port (0: an ephemeral port) with SO_REUSEADDR only, so a port another server
  /// listens on is refused; returns the port, or the error (an address in use says so).
  Result<int> bind_exclusive(const std::string& host, int port);
  /// Closes the connection after the response being prepared on this thread (a refused
  /// request's body is left unread, so the connection cannot carry another request).
  static void close_after_response();
  /// Connections accepted and waiting for a worker.
  size_t pending() const { return pending_.load(std::memory_order_relaxed); }
  /// The limits in force.
  const ConnectionLimits& limits() const { return limits_; }
  /// False once stop() was called.
  bool accepting() const { return svr_sock_ != INVALID_SOCKET; }

 private:
  bool process_and_close_socket(socket_t sock) override;

  ConnectionLimits limits_;
  std::atomic<size_t> pending_{0};
};

}  // namespace tensormorph::server
