// `tensormorph serve PATH... [--host H] [--port N]`: the viewer's HTTP server.
#include <csignal>
#include <cstdio>
#include <iostream>
#include <pthread.h>
#include <thread>

#include "cli/commands.h"
#include "server/server.h"

namespace tensormorph::cli {
namespace {

namespace fs = std::filesystem;

struct ServeArgs {
  std::vector<std::string> paths;
  server::ServerOptions options;
  uint64_t tile_cache_mb = 256;
  std::string web_dir;
  bool no_index = false;
  ComputeOptions compute;
};

// The built UI: --web, else web/dist beside the source tree this binary was built from.
fs::path web_dir(const std::string& flag) {
  if (!flag.empty()) return flag;
  return TM_WEB_DIST_DIR;
}

int run_serve(ServeArgs& args) {
  args.compute.opening = compute::DeviceOpening::kAtLoad;
  auto session = open_session_or_report(args.compute);
  if (!session) return kExitUserError;
  args.options.tile_cache_bytes = args.tile_cache_mb << 20;
  args.options.web_dir = web_dir(args.web_dir);
  args.options.build_index = !args.no_index;
  if (!server::is_loopback_host(args.options.host) && args.options.allow_remote) {
    std::cerr << "tensormorph: warning: serving on " << args.options.host
              << ": anyone who can reach this address can read the checkpoints' contents\n";
  }
  // Block SIGINT/SIGTERM in every thread; one thread waits for them and stops the server.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  auto created = server::ViewerServer::create(args.paths, args.options, std::move(session));
  if (!created.ok()) {
    print_error(created.status().message());
    return kExitUserError;
  }
  auto& viewer = **created;
  auto port = viewer.bind();
  if (!port.ok()) {
    print_error(port.status().message());
    return kExitUserError;
  }
  std::cout << "Tensormorph viewer: " << viewer.url() << "  (Ctrl-C stops)" << std::endl;
  std::thread waiter([&viewer, signals] {
    int received = 0;
    sigwait(&signals, &received);
    viewer.stop();
  });
  viewer.run();
  // If run() ended on its own, wake the waiter so it can be joined.
  pthread_kill(waiter.native_handle(), SIGTERM);
  waiter.join();
  return kExitOk;
}

}  // namespace

Command add_serve_command(CLI::App& app) {
  auto args = std::make_shared<ServeArgs>();
  CLI::App* sub = app.add_subcommand("serve", "Serve the viewer: deep-zoom heatmaps, statistics and the Compute panel");
  sub->add_option("PATH", args->paths, "Checkpoints to serve (files, index JSON or directories)")->required();
  sub->add_option("--host", args->options.host, "Address to bind (default 127.0.0.1)");
  sub->add_option("--port", args->options.port, "Port (default 8080; 0 picks a free one)")->check(CLI::Range(0, 65535));
  sub->add_flag("--allow-remote", args->options.allow_remote, "Allow binding an address beyond loopback");
  sub->add_option("--threads", args->options.threads, "Request threads: connections served at once (default 16)")->check(CLI::Range(1, 256));
  sub->add_option("--tile-cache-mb", args->tile_cache_mb, "Rendered-tile cache budget in MiB (default 256)")
      ->check(CLI::Range(0, 1 << 20));
  sub->add_option("--web", args->web_dir, "Directory of the built web UI (default: web/dist of the source tree)");
  sub->add_flag("--no-index", args->no_index, "Do not build or refresh the index in the background");
  sub->add_option("--compute", args->compute.spec, "Placement constraints: prefer=X,never=Y,only=Z or auto");
  sub->add_option("--plugin-dir", args->compute.plugin_dirs, "Extra plugin directories to search (before plugins.path)");
  add_open_options(sub, args->options.open);
  return {sub, [args] { return run_serve(*args); }};
}

}  // namespace tensormorph::cli
