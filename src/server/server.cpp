#include "server/server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <algorithm>

#include <httplib.h>

#include "server/api.h"
#include "server/compression.h"
#include "server/guarded_http.h"
#include "server/http_util.h"
#include "server/request_policy.h"
#include "tensormorph/open.h"

namespace tensormorph::server {
namespace {

constexpr const char* kNoWebUi =
    "<!doctype html><title>Tensormorph</title><p>The web UI is not built: run <code>scripts/build-web.sh</code>. "
    "The JSON API is under <a href=\"/api/checkpoints\">/api/</a>.</p>";

bool is_loopback_address(const sockaddr* addr) {
  if (addr->sa_family == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in*>(addr)->sin_addr.s_addr) >> 24) == 127;
  }
  if (addr->sa_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(&a) || (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127);
  }
  return false;
}

}  // namespace

Result<ResolvedHost> resolve_host(const std::string& host) {
  std::string name = host;
  if (name.size() >= 2 && name.front() == '[' && name.back() == ']') name = name.substr(1, name.size() - 2);
  if (name.empty()) return Status::InvalidArgument("--host is empty");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  // Address literals first, so they never reach a resolver.
  hints.ai_flags = AI_NUMERICHOST;
  addrinfo* found = nullptr;
  int rc = getaddrinfo(name.c_str(), nullptr, &hints, &found);
  if (rc == EAI_NONAME) {
    hints.ai_flags = 0;
    rc = getaddrinfo(name.c_str(), nullptr, &hints, &found);
  }
  if (rc != 0 || found == nullptr) {
    return Status::InvalidArgument("--host '" + host.substr(0, 200) + "' does not resolve (" + gai_strerror(rc) +
                                   "); give an address such as 127.0.0.1 or ::1, or a name that resolves");
  }
  ResolvedHost out;
  out.loopback = true;
  for (const addrinfo* a = found; a; a = a->ai_next) {
    out.loopback = out.loopback && is_loopback_address(a->ai_addr);
    char text[NI_MAXHOST] = {0};
    if (getnameinfo(a->ai_addr, a->ai_addrlen, text, sizeof text, nullptr, 0, NI_NUMERICHOST) == 0 &&
        std::find(out.addresses.begin(), out.addresses.end(), text) == out.addresses.end()) {
      out.addresses.emplace_back(text);
    }
  }
  freeaddrinfo(found);
  return out;
}

bool is_loopback_host(const std::string& host) {
  auto resolved = resolve_host(host);
  return resolved.ok() && resolved->loopback;
}

namespace {

// The answer to a refused request, before any route or static file sees it.
void refuse(httplib::Response& res, const Refusal& refusal) {
  reply_json(res, {{"error", refusal.message}, {"code", refusal.code}}, refusal.http_status);
  res.set_header("Connection", "close");
  GuardedServer::close_after_response();
}

}  // namespace

Result<std::unique_ptr<ViewerServer>> ViewerServer::create(const std::vector<std::string>& paths, ServerOptions options,
                                                           std::unique_ptr<engine::ComputeSession> session) {
  if (paths.empty()) return Status::InvalidArgument("serve needs at least one checkpoint");
  std::vector<std::unique_ptr<Checkpoint>> checkpoints;
  for (const auto& path : paths) {
    TM_ASSIGN_OR_RETURN(auto opened, open_checkpoint(path, options.open));
    checkpoints.push_back(std::move(opened));
  }
  std::unique_ptr<ViewerServer> server(new ViewerServer());
  server->options_ = std::move(options);
  auto catalog = std::make_unique<Catalog>(std::move(checkpoints), paths, server->options_.fine_stats_bytes);
  server->api_ = std::make_unique<ApiContext>(std::move(session), std::move(catalog), server->options_.tile_cache_bytes);
  if (server->options_.build_index) server->api_->catalog().start_indexing(server->api_->scheduler());

  ConnectionLimits limits = server->options_.limits;
  limits.workers = std::max<uint32_t>(server->options_.threads, 1);
  auto http = std::make_unique<GuardedServer>(limits);
  // Hosts and origins are checked before routing, so static files are covered too.
  http->set_pre_routing_handler([raw = server.get()](const httplib::Request& req, httplib::Response& res) {
    // bind() sets the policy before run() starts the threads that call this.
    const RequestPolicy* policy = raw->policy_.get();
    if (policy == nullptr) return httplib::Server::HandlerResponse::Unhandled;
    if (auto refusal = policy->refuse(req)) {
      refuse(res, *refusal);
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  // Headers and body go out in separate writes: without TCP_NODELAY, Nagle + delayed ACK add ~40 ms.
  http->set_tcp_nodelay(true);
  http->set_post_routing_handler(compress_response);
  http->set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    reply_error(res, Status::Internal("unexpected failure while answering"));
  });
  server->api_->register_routes(*http);
  // Unknown /api routes answer JSON, not the UI's index page.
  http->Get(R"(/api/.*)", [](const httplib::Request& req, httplib::Response& res) {
    reply_error(res, Status::NotFound("no route " + req.path.substr(0, 200)));
  });
  const auto& web = server->options_.web_dir;
  if (!web.empty() && std::filesystem::exists(web / "index.html")) {
    set_web_file_types(*http);
    http->set_mount_point("/", web.string());
  } else {
    http->Get("/", [](const httplib::Request&, httplib::Response& res) { res.set_content(kNoWebUi, "text/html"); });
  }
  server->http_ = std::move(http);
  return server;
}

ViewerServer::~ViewerServer() {
  stop();
  if (api_) api_->catalog().wait_for_index();
}

Result<int> ViewerServer::bind() {
  TM_ASSIGN_OR_RETURN(ResolvedHost resolved, resolve_host(options_.host));
  if (!resolved.loopback && !options_.allow_remote) {
    return Status::InvalidArgument("refusing to bind " + options_.host +
                                   ": it is not only loopback, and the viewer serves checkpoint contents; pass "
                                   "--allow-remote to bind beyond loopback");
  }
  if (options_.port < 0 || options_.port > 65535) return Status::InvalidArgument("port out of range");
  std::string host = options_.host;
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  TM_ASSIGN_OR_RETURN(const int port, http_->bind_exclusive(host, options_.port));
  port_ = port;
  std::vector<std::string> names{host};
  // Beyond loopback, the addresses the given name resolves to are names of the server too.
  if (!resolved.loopback) names.insert(names.end(), resolved.addresses.begin(), resolved.addresses.end());
  policy_ = std::make_shared<const RequestPolicy>(names, port, options_.allow_remote && !resolved.loopback);
  return port;
}

void ViewerServer::run() { http_->listen_after_bind(); }

void ViewerServer::stop() {
  if (http_) http_->stop();
}

std::string ViewerServer::url() const { return "http://" + url_host(options_.host) + ":" + std::to_string(port_) + "/"; }

void ViewerServer::wait_for_index() { api_->catalog().wait_for_index(); }

}  // namespace tensormorph::server
