#include "served_for_test.h"

#include <gtest/gtest.h>

#include "engine/compute_session.h"

namespace tensormorph::testing {

Result<std::unique_ptr<ServedForTest>> ServedForTest::start(const std::vector<std::string>& paths,
                                                            server::ServerOptions options, const std::string& compute_spec) {
  TM_ASSIGN_OR_RETURN(auto session, engine::open_default_session(compute_spec));
  options.port = 0;
  TM_ASSIGN_OR_RETURN(auto server, server::ViewerServer::create(paths, options, std::move(session)));
  TM_ASSIGN_OR_RETURN(const int port, server->bind());
  return std::unique_ptr<ServedForTest>(new ServedForTest(std::move(server), port));
}

ServedForTest::ServedForTest(std::unique_ptr<server::ViewerServer> server, int port)
    : server_(std::move(server)), port_(port), thread_([this] { server_->run(); }) {}

ServedForTest::~ServedForTest() {
  server_->stop();
  thread_.join();
}

httplib::Result ServedForTest::get(const std::string& path) const {
  return client().Get(path.c_str());
}

httplib::Client ServedForTest::client() const {
  httplib::Client c("127.0.0.1", port_);
  // Analyses computed on request (a spectrum) take seconds on a loaded 2-core machine under the
  // sanitizers: wait for them rather than fail on the client's 5 s default.
  c.set_read_timeout(120, 0);
  return c;
}

nlohmann::json ServedForTest::get_json(const std::string& path, int status) const {
  auto res = get(path);
  EXPECT_TRUE(res) << path;
  if (!res) return {};
  EXPECT_EQ(res->status, status) << path << ": " << res->body;
  EXPECT_EQ(res->get_header_value("Content-Type"), "application/json; charset=utf-8") << path;
  return nlohmann::json::parse(res->body);
}

httplib::Result ServedForTest::post(const std::string& path, const std::string& body, const std::string& type,
                                    const httplib::Headers& headers) const {
  return client().Post(path.c_str(), headers, body, type.c_str());
}

void ServedForTest::post_ok(const std::string& path, const std::string& body) const {
  auto res = post(path, body, "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << path << " " << body << ": " << res->body;
}

}  // namespace tensormorph::testing
