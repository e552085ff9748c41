#include "server/request_policy.h"

#include <algorithm>
#include <cctype>

namespace tensormorph::server {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// A header value as shown in a message: short, printable.
std::string shown(const std::string& value) {
  std::string out;
  for (char c : value.substr(0, 80)) out += std::isprint(static_cast<unsigned char>(c)) ? c : '?';
  return out;
}

bool is_json_content_type(const std::string& value) {
  const std::string v = lower(value);
  const std::string media = v.substr(0, v.find(';'));
  const auto first = media.find_first_not_of(" \t"), last = media.find_last_not_of(" \t");
  return first != std::string::npos && media.substr(first, last - first + 1) == "application/json";
}

}  // namespace

std::string url_host(const std::string& host) {
  return host.find(':') != std::string::npos && host.front() != '[' ? "[" + host + "]" : host;
}

RequestPolicy::RequestPolicy(std::vector<std::string> names, int port, bool accept_local_address)
    : port_(port), accept_local_address_(accept_local_address) {
  for (const char* fixed : {"127.0.0.1", "localhost", "[::1]"}) names.emplace_back(fixed);
  for (const auto& name : names) {
    const std::string host = lower(url_host(name)) + ":" + std::to_string(port);
    if (std::find(hosts_.begin(), hosts_.end(), host) == hosts_.end()) hosts_.push_back(host);
  }
}

bool RequestPolicy::host_accepted(const std::string& value, const httplib::Request& req) const {
  std::string host = lower(value);
  // Browsers leave out the default port.
  if (port_ == 80 && host.find(':', host.rfind(']') == std::string::npos ? 0 : host.rfind(']')) == std::string::npos) {
    host += ":80";
  }
  if (std::find(hosts_.begin(), hosts_.end(), host) != hosts_.end()) return true;
  if (!accept_local_address_ || req.local_addr.empty()) return false;
  // An address literal cannot be rebound; the connection's own local address is what a remote
  // client of a wildcard bind types.
  std::string local = lower(req.local_addr);
  if (local.rfind("::ffff:", 0) == 0 && local.find('.') != std::string::npos) local = local.substr(7);
  return host == url_host(local) + ":" + std::to_string(port_);
}

std::optional<Refusal> RequestPolicy::refuse(const httplib::Request& req) const {
  if (!req.has_header("Host") || !host_accepted(req.get_header_value("Host"), req)) {
    return Refusal{421, "MISDIRECTED_REQUEST",
                   "this server answers only to " + hosts_.front() + " and the other names it is bound as, not Host '" +
                       shown(req.get_header_value("Host")) + "'"};
  }
  if (req.method == "GET" || req.method == "HEAD") return std::nullopt;
  if (req.has_header("Origin")) {
    const std::string origin = lower(req.get_header_value("Origin"));
    const bool own = std::any_of(hosts_.begin(), hosts_.end(), [&](const std::string& h) { return origin == "http://" + h; }) ||
                     (origin.rfind("http://", 0) == 0 && host_accepted(origin.substr(7), req));
    if (!own) {
      return Refusal{403, "FORBIDDEN", "cross-origin request from '" + shown(req.get_header_value("Origin")) + "' refused"};
    }
  }
  if (req.has_header("Sec-Fetch-Site")) {
    const std::string site = lower(req.get_header_value("Sec-Fetch-Site"));
    if (site != "same-origin" && site != "none") {
      return Refusal{403, "FORBIDDEN", "cross-site request (Sec-Fetch-Site: " + shown(site) + ") refused"};
    }
  }
  if (!is_json_content_type(req.get_header_value("Content-Type"))) {
    return Refusal{403, "FORBIDDEN", "state-changing requests need Content-Type: application/json"};
  }
  return std::nullopt;
}

}  // namespace tensormorph::server
