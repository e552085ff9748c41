// The limits of the viewer's connections (server/guarded_http.h enforces them).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

namespace tensormorph::server {

/// What one connection may take from the server.
struct ConnectionLimits {
  uint32_t workers = 16;                                ///< connections served at once
  uint32_t max_pending = 256;                           ///< accepted connections waiting for a worker; more get 503
  std::chrono::milliseconds request_deadline{10000};    ///< one request's line, headers and body, from its first byte
  std::chrono::milliseconds response_deadline{30000};   ///< writing one response, from its first byte
  std::chrono::milliseconds idle_timeout{5000};         ///< keep-alive wait for the next request
  std::chrono::milliseconds pressure_grace{1000};       ///< while connections wait, a request still arriving after this is dropped
  size_t max_requests_per_connection = 100;             ///< keep-alive requests on one connection
  int backlog = 512;                                    ///< listen backlog
  size_t max_body_bytes = size_t{64} << 10;             ///< request bodies (ours are small JSON objects)
};

}  // namespace tensormorph::server
