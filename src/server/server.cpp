#include "server/server.h"

#include <httplib.h>

#include "server/api.h"
#include "server/http_util.h"
#include "tensormorph/open.h"

namespace tensormorph::server {
namespace {

constexpr const char* kNoWebUi =
    "<!doctype html><title>Tensormorph</title><p>The web UI is not built: run <code>scripts/build-web.sh</code>. "
    "The JSON API is under <a href=\"/api/checkpoints\">/api/</a>.</p>";

}  // namespace

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host == "[::1]" || host.rfind("127.", 0) == 0;
}

Result<std::unique_ptr<ViewerServer>> ViewerServer::create(const std::vector<std::string>& paths, ServerOptions options,
                                                           std::unique_ptr<ops::ComputeSession> session) {
  if (paths.empty()) return Status::InvalidArgument("serve needs at least one checkpoint");
  std::vector<std::unique_ptr<Checkpoint>> checkpoints;
  for (const auto& path : paths) {
    TM_ASSIGN_OR_RETURN(auto opened, open_checkpoint(path));
    checkpoints.push_back(std::move(opened));
  }
  std::unique_ptr<ViewerServer> server(new ViewerServer());
  server->options_ = std::move(options);
  auto catalog = std::make_unique<Catalog>(std::move(checkpoints), paths, server->options_.fine_stats_bytes);
  server->api_ = std::make_unique<ApiContext>(std::move(session), std::move(catalog), server->options_.tile_cache_bytes);
  if (server->options_.build_index) server->api_->catalog().start_indexing(server->api_->scheduler());

  auto http = std::make_unique<httplib::Server>();
  const uint32_t threads = std::max<uint32_t>(server->options_.threads, 1);
  http->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // Headers and body go out in separate writes: without TCP_NODELAY, Nagle + delayed ACK add ~40 ms.
  http->set_tcp_nodelay(true);
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
  if (!is_loopback_host(options_.host) && !options_.allow_remote) {
    return Status::InvalidArgument("refusing to bind " + options_.host +
                                   ": the viewer serves checkpoint contents; pass --allow-remote to bind beyond loopback");
  }
  if (options_.port < 0 || options_.port > 65535) return Status::InvalidArgument("port out of range");
  const int port = options_.port == 0 ? http_->bind_to_any_port(options_.host)
                                      : (http_->bind_to_port(options_.host, options_.port) ? options_.port : -1);
  if (port <= 0) return Status::IoError("cannot bind " + options_.host + ":" + std::to_string(options_.port));
  port_ = port;
  return port;
}

void ViewerServer::run() { http_->listen_after_bind(); }

void ViewerServer::stop() {
  if (http_) http_->stop();
}

std::string ViewerServer::url() const {
  const std::string host = options_.host.find(':') != std::string::npos && options_.host[0] != '[' ? "[" + options_.host + "]" : options_.host;
  return "http://" + host + ":" + std::to_string(port_) + "/";
}

void ViewerServer::wait_for_index() { api_->catalog().wait_for_index(); }

}  // namespace tensormorph::server
