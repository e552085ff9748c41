// Which requests the viewer answers. Checkpoint contents must not reach, and settings must not be
// changed by, a web page of another origin: a request must name the server by a host name it is
// bound as (DNS rebinding points a foreign name at 127.0.0.1), and a state-changing request must
// carry a JSON body from one of the server's own origins (a foreign page can send text/plain
// "simple" requests without a preflight, never application/json).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <httplib.h>

namespace tensormorph::server {

/// Why a request is refused.
struct Refusal {
  int http_status = 403;  ///< 421 (unknown Host) or 403 (foreign origin, wrong content type)
  std::string code;       ///< "MISDIRECTED_REQUEST" or "FORBIDDEN"
  std::string message;    ///< for the user
};

/// The hosts and origins a bound server accepts.
class RequestPolicy {
 public:
  /// Accepts `Host: NAME:PORT` for each of `names` (lower case; IPv6 literals in brackets) and,
  /// with `accept_local_address`, the address a connection arrived on (a wildcard bind's own addresses).
  RequestPolicy(std::vector<std::string> names, int port, bool accept_local_address);
  /// The refusal of `req`, or nullopt when it is served.
  std::optional<Refusal> refuse(const httplib::Request& req) const;
  /// The accepted Host header values ("127.0.0.1:8080", ...).
  const std::vector<std::string>& hosts() const { return hosts_; }

 private:
  bool host_accepted(const std::string& host, const httplib::Request& req) const;

  std::vector<std::string> hosts_;
  int port_;
  bool accept_local_address_;
};

/// `host` as it appears in a URL: IPv6 literals in brackets.
std::string url_host(const std::string& host);

}  // namespace tensormorph::server
