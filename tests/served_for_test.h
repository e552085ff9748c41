// A real viewer server for the tests of its HTTP routes: bound to an ephemeral loopback port and
// served on a thread for the object's lifetime, with the requests those tests make.
#pragma once

#include <httplib.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/server.h"
#include "tensormorph/status.h"

namespace tensormorph::testing {

/// A ViewerServer running on a thread on 127.0.0.1 and an ephemeral port; stopped and joined when the object dies.
class ServedForTest {
 public:
  /// Opens the default compute session (with `compute_spec`, "" = the settings file's), creates a
  /// server for `paths` with `options` on port 0, binds it and starts serving.
  static Result<std::unique_ptr<ServedForTest>> start(const std::vector<std::string>& paths, server::ServerOptions options,
                                                      const std::string& compute_spec = "");
  ~ServedForTest();
  ServedForTest(const ServedForTest&) = delete;
  ServedForTest& operator=(const ServedForTest&) = delete;

  /// The port the server listens on.
  int port() const { return port_; }
  /// Waits until the background index of every checkpoint is built.
  void wait_for_index() { server_->wait_for_index(); }

  /// GET `path`.
  httplib::Result get(const std::string& path) const;
  /// GET `path`, expecting `status` and a JSON body (failing the test otherwise); the parsed body, or null when no answer came.
  nlohmann::json get_json(const std::string& path, int status = 200) const;
  /// POST `body` of `type` to `path` with `headers`.
  httplib::Result post(const std::string& path, const std::string& body, const std::string& type,
                       const httplib::Headers& headers = {}) const;
  /// POST the JSON `body` to `path`, failing the test unless the answer is 200.
  void post_ok(const std::string& path, const std::string& body) const;

 private:
  /// A client of the server that waits as long as an analysis computed on request may take.
  httplib::Client client() const;
  ServedForTest(std::unique_ptr<server::ViewerServer> server, int port);
  std::unique_ptr<server::ViewerServer> server_;
  int port_;
  std::thread thread_;
};

}  // namespace tensormorph::testing
