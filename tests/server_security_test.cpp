// What the viewer's server refuses: foreign Host names (DNS rebinding), state-changing requests
// from other origins or without a JSON body, settings that load code; slow clients starving
// others; a second server on a taken port; a --host that only looks like loopback.
#include <gtest/gtest.h>

#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include <nlohmann/json.hpp>

#include "formats/demo/demo_checkpoint.h"
#include "served_for_test.h"
#include "server/server.h"
#include "test_util.h"

namespace tensormorph {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

// A raw loopback connection, for requests httplib's client would not send.
class RawConnection {
 public:
  explicit RawConnection(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  }
  ~RawConnection() { ::close(fd_); }
  bool connected() const { return connected_; }
  bool send(const std::string& bytes) { return ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size()); }
  // Reads until the server closes or `timeout` passes; nullopt on timeout.
  std::optional<std::string> read_until_closed(std::chrono::milliseconds timeout) {
    std::string out;
    const auto end = Clock::now() + timeout;
    for (;;) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()).count();
      if (left <= 0) return std::nullopt;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) return out;
      out.append(buf, static_cast<size_t>(n));
    }
  }

 private:
  int fd_ = -1;
  bool connected_ = false;
};

// A server with short deadlines, so that each test stays within a few seconds.
class ServerSecurity : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    setenv("TENSORMORPH_CONFIG", settings_file().c_str(), 1);
    ASSERT_TRUE(demo::write_demo_checkpoint(dir_->path() / "demo").ok());
    std::filesystem::create_directories(dir_->path() / "web");
    testing::write_bytes(dir_->path() / "web" / "index.html", "<!doctype html><title>viewer</title>");
    server::ServerOptions options;
    options.build_index = false;
    options.web_dir = dir_->path() / "web";
    options.limits.request_deadline = std::chrono::milliseconds(1500);
    options.limits.pressure_grace = std::chrono::milliseconds(500);
    auto served = testing::ServedForTest::start({(dir_->path() / "demo").string()}, options);
    ASSERT_TRUE(served.ok()) << served.status().to_string();
    served_ = std::move(served).value();
  }
  static void TearDownTestSuite() {
    served_.reset();
    delete dir_;
  }
  static std::filesystem::path settings_file() { return dir_->path() / "settings.json"; }
  static std::string settings_text() {
    return std::filesystem::exists(settings_file()) ? testing::read_bytes(settings_file()) : std::string();
  }
  static std::string host() { return "127.0.0.1:" + std::to_string(served_->port()); }

  static inline testing::TempDir* dir_ = nullptr;
  static inline std::unique_ptr<testing::ServedForTest> served_;
};

// ---- item: DNS rebinding ------------------------------------------------------------------------

TEST_F(ServerSecurity, AnswersOnlyTheHostNamesItIsBoundAs) {
  const std::string port = std::to_string(served_->port());
  for (const std::string& h : std::vector<std::string>{"127.0.0.1:" + port, "localhost:" + port, "LOCALHOST:" + port, "[::1]:" + port}) {
    httplib::Client client("127.0.0.1", served_->port());
    auto res = client.Get("/api/checkpoints", {{"Host", h}});
    ASSERT_TRUE(res) << h;
    EXPECT_EQ(res->status, 200) << h;
  }
  // A rebound name, the right name on another port, a name that only starts like ours: refused,
  // for the API and the static files alike.
  for (const std::string& h :
       std::vector<std::string>{"attacker.example:" + port, "localhost:1", "localhost", "127.0.0.1.attacker.example:" + port}) {
    for (const char* path : {"/api/checkpoints", "/", "/index.html"}) {
      httplib::Client client("127.0.0.1", served_->port());
      auto res = client.Get(path, {{"Host", h}});
      ASSERT_TRUE(res) << h << path;
      EXPECT_EQ(res->status, 421) << h << path << ": " << res->body;
      EXPECT_EQ(json::parse(res->body)["code"], "MISDIRECTED_REQUEST") << h;
      EXPECT_EQ(res->body.find("viewer</title>"), std::string::npos);
    }
  }
  // No Host at all (HTTP/1.0 style) is refused too.
  RawConnection raw(served_->port());
  ASSERT_TRUE(raw.connected());
  ASSERT_TRUE(raw.send("GET /api/checkpoints HTTP/1.0\r\n\r\n"));
  auto reply = raw.read_until_closed(std::chrono::milliseconds(3000));
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->rfind("HTTP/1.1 421", 0), 0u) << *reply;
}

// ---- item: cross-site requests ---------------------------------------------------------------------

TEST_F(ServerSecurity, StateChangesNeedJsonFromTheServersOwnOrigin) {
  const std::string before = settings_text();
  const std::string body = R"({"key": "compute.memory_budget", "value": "12345", "persist": true})";
  const std::string port = std::to_string(served_->port());
  struct Case {
    std::string type;
    httplib::Headers headers;
  };
  // What a foreign page can send: a "simple" text/plain POST (no preflight), or any POST carrying
  // its Origin or a cross-site Sec-Fetch-Site.
  const std::vector<Case> refused = {
      {"text/plain", {}},
      {"text/plain;charset=UTF-8", {{"Origin", "http://127.0.0.1:" + port}}},
      {"application/x-www-form-urlencoded", {}},
      {"application/json", {{"Origin", "http://attacker.example"}}},
      {"application/json", {{"Origin", "null"}}},
      {"application/json", {{"Origin", "http://127.0.0.1:" + port + ".attacker.example"}}},
      {"application/json", {{"Origin", "https://127.0.0.1:" + port}}},
      {"application/json", {{"Sec-Fetch-Site", "cross-site"}}},
      {"application/json", {{"Sec-Fetch-Site", "same-site"}, {"Origin", "http://localhost:" + port}}},
  };
  for (const auto& c : refused) {
    for (const char* path : {"/api/settings", "/api/compute"}) {
      auto res = served_->post(path, path == std::string("/api/settings") ? body : R"({"never": ["cpu"], "persist": true})", c.type, c.headers);
      ASSERT_TRUE(res);
      EXPECT_EQ(res->status, 403) << path << " " << c.type << ": " << res->body;
      EXPECT_EQ(json::parse(res->body)["code"], "FORBIDDEN");
    }
  }
  EXPECT_EQ(settings_text(), before) << "a refused request changed the settings file";
  httplib::Client client("127.0.0.1", served_->port());
  EXPECT_EQ(client.Get("/api/compute")->status, 200);
  EXPECT_EQ(json::parse(client.Get("/api/compute")->body)["constraints"]["mode"], "auto");

  // The viewer's own requests: same origin (any of its names), or no Origin at all (curl, tests).
  for (const httplib::Headers& h : std::vector<httplib::Headers>{
           {}, {{"Origin", "http://127.0.0.1:" + port}, {"Sec-Fetch-Site", "same-origin"}}, {{"Origin", "http://localhost:" + port}},
           {{"Sec-Fetch-Site", "none"}}}) {
    auto res = served_->post("/api/settings", R"({"key": "compute.memory_budget", "value": "0"})", "application/json; charset=utf-8", h);
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 200) << res->body;
  }
}

TEST_F(ServerSecurity, PluginsPathIsNeverSetOverHttp) {
  const std::string before = settings_text();
  for (const char* persist : {"true", "false"}) {
    auto res = served_->post("/api/settings", std::string(R"({"key": "plugins.path", "value": "/tmp/attacker", "persist": )") + persist + "}",
                             "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(res->status, 403) << res->body;
    EXPECT_EQ(json::parse(res->body)["code"], "FORBIDDEN");
  }
  EXPECT_EQ(settings_text(), before);
  // Still shown, read-only.
  const json s = json::parse(httplib::Client("127.0.0.1", served_->port()).Get("/api/settings")->body);
  EXPECT_TRUE(s["values"].contains("plugins.path"));
  EXPECT_EQ(s["read_only"], json::array({"plugins.path"}));
}

TEST_F(ServerSecurity, ComputeTogglesChangeTheRunningServerAndPersistOnlyWhenAsked) {
  const std::string before = settings_text();
  auto set = served_->post("/api/compute", R"({"prefer": ["cpu"]})", "application/json");
  ASSERT_EQ(set->status, 200) << set->body;
  EXPECT_EQ(json::parse(set->body)["persisted"], false);
  httplib::Client client("127.0.0.1", served_->port());
  EXPECT_EQ(json::parse(client.Get("/api/compute")->body)["constraints"]["prefer"], json::array({"cpu"}));
  EXPECT_EQ(settings_text(), before) << "a toggle without persist changed the settings file";

  auto budget = served_->post("/api/settings", R"({"key": "compute.memory_budget", "value": "4096"})", "application/json");
  ASSERT_EQ(budget->status, 200) << budget->body;
  EXPECT_EQ(json::parse(budget->body)["persisted"], false);
  const json running = json::parse(client.Get("/api/settings")->body);
  EXPECT_EQ(running["running"]["compute.memory_budget"], "4096") << running.dump();
  EXPECT_EQ(settings_text(), before);

  // "Save as default".
  ASSERT_EQ(served_->post("/api/compute", R"({"prefer": ["cpu"], "persist": true})", "application/json")->status, 200);
  EXPECT_NE(settings_text().find("cpu"), std::string::npos);
  ASSERT_EQ(served_->post("/api/settings", R"({"key": "compute.memory_budget", "value": "8K", "persist": true})", "application/json")->status, 200);
  EXPECT_EQ(json::parse(client.Get("/api/settings")->body)["values"]["compute.memory_budget"], "8192");
  EXPECT_EQ(served_->post("/api/compute", R"({"mode": "auto", "persist": "yes"})", "application/json")->status, 400);
  ASSERT_EQ(served_->post("/api/compute", R"({"mode": "auto", "persist": true})", "application/json")->status, 200);
  ASSERT_EQ(served_->post("/api/settings", R"({"key": "compute.memory_budget", "value": "0", "persist": true})", "application/json")->status, 200);
}

TEST_F(ServerSecurity, LargeBodiesAreRefused) {
  auto res = served_->post("/api/settings", std::string(100 << 10, ' '), "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 413);
}

// ---- item: slow clients ----------------------------------------------------------------------------

TEST_F(ServerSecurity, SlowHalfOpenRequestsDoNotStopTheViewer) {
  // More stalled requests than request threads (16), each a partial request line.
  std::vector<std::unique_ptr<RawConnection>> stalled;
  for (int i = 0; i < 20; ++i) {
    stalled.push_back(std::make_unique<RawConnection>(served_->port()));
    ASSERT_TRUE(stalled.back()->connected());
    ASSERT_TRUE(stalled.back()->send("GET /api/checkpoints HT"));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto start = Clock::now();
  httplib::Client client("127.0.0.1", served_->port());
  client.set_read_timeout(3, 0);
  client.set_connection_timeout(3, 0);
  auto res = client.Get("/api/checkpoints");
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  ASSERT_TRUE(res) << "no answer while 20 requests stall (" << seconds << " s)";
  EXPECT_EQ(res->status, 200);
  EXPECT_LT(seconds, 2.5);
}

TEST_F(ServerSecurity, ATricklingRequestIsClosedAtItsDeadline) {
  // One byte every 200 ms never trips a per-read timeout; the request's deadline (1.5 s here) ends it.
  RawConnection raw(served_->port());
  ASSERT_TRUE(raw.connected());
  const std::string request = "GET /api/checkpoints HTTP/1.1\r\nHost: " + host() + "\r\nX-Slow: " + std::string(60, 'a');
  const auto start = Clock::now();
  bool closed = false;
  for (char c : request) {
    if (!raw.send(std::string(1, c))) {
      closed = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (Clock::now() - start > std::chrono::seconds(6)) break;
  }
  if (!closed) closed = raw.read_until_closed(std::chrono::milliseconds(1000)).has_value();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_TRUE(closed) << "still open after " << seconds << " s";
  EXPECT_LT(seconds, 4.0);
  EXPECT_GT(seconds, 1.2);
}

TEST(ServerQueue, AFullQueueAnswers503AtOnce) {
  testing::TempDir dir;
  ASSERT_TRUE(demo::write_demo_checkpoint(dir.path()).ok());
  server::ServerOptions options;
  options.build_index = false;
  options.threads = 2;
  options.limits.max_pending = 2;
  options.limits.request_deadline = std::chrono::milliseconds(3000);
  options.limits.pressure_grace = std::chrono::milliseconds(3000);
  auto served = testing::ServedForTest::start({dir.path().string()}, options, "auto");
  ASSERT_TRUE(served.ok()) << served.status().to_string();
  const int port = (*served)->port();
  {
    // Two stall on the workers, two wait in the queue; the fifth is turned away.
    std::vector<std::unique_ptr<RawConnection>> stalled;
    for (int i = 0; i < 4; ++i) {
      stalled.push_back(std::make_unique<RawConnection>(port));
      ASSERT_TRUE(stalled.back()->send("GET / HT"));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    RawConnection fifth(port);
    ASSERT_TRUE(fifth.send("GET /api/checkpoints HTTP/1.1\r\nHost: 127.0.0.1:" + std::to_string(port) + "\r\n\r\n"));
    auto reply = fifth.read_until_closed(std::chrono::milliseconds(1000));
    ASSERT_TRUE(reply) << "no quick answer with the queue full";
    EXPECT_EQ(reply->rfind("HTTP/1.1 503", 0), 0u) << *reply;
  }
}

// ---- item: a taken port ----------------------------------------------------------------------------

TEST(ServerBind, RefusesAPortAnotherServerListensOn) {
  testing::TempDir dir;
  ASSERT_TRUE(demo::write_demo_checkpoint(dir.path()).ok());
  server::ServerOptions options;
  options.build_index = false;
  auto first = testing::ServedForTest::start({dir.path().string()}, options, "auto");
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  const int port = (*first)->port();
  auto session = engine::open_default_session("auto");
  ASSERT_TRUE(session.ok());
  options.port = port;
  auto second = server::ViewerServer::create({dir.path().string()}, options, std::move(session).value());
  ASSERT_TRUE(second.ok());
  auto bound = (*second)->bind();
  ASSERT_FALSE(bound.ok()) << "a second server bound the taken port " << port;
  EXPECT_NE(bound.status().message().find("127.0.0.1:" + std::to_string(port) + " is already in use"), std::string::npos)
      << bound.status().message();
  // The command says so and exits 1 (timeout: a server that did start would run forever).
  const std::string cmd = "timeout 30 " + std::string(TM_CLI_PATH) + " serve '" + dir.path().string() +
                          "' --no-index --port " + std::to_string(port) + " >/dev/null 2>'" + (dir.path() / "err").string() + "'";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
  EXPECT_NE(testing::read_bytes(dir.path() / "err").find("is already in use (another tensormorph serve?)"), std::string::npos)
      << testing::read_bytes(dir.path() / "err");
}

// ---- item: the loopback check resolves -------------------------------------------------------------

TEST(ServerBind, LoopbackMeansEveryResolvedAddressIsLoopback) {
  for (const char* host : {"127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost", "::ffff:127.0.0.1"}) {
    EXPECT_TRUE(server::is_loopback_host(host)) << host;
  }
  for (const char* host : {"0.0.0.0", "::", "128.0.0.1", "::ffff:10.0.0.1", "127.foo.invalid", "127.0.0.1.invalid", ""}) {
    EXPECT_FALSE(server::is_loopback_host(host)) << host;
  }
  auto unresolved = server::resolve_host("127.foo.invalid");
  ASSERT_FALSE(unresolved.ok());
  EXPECT_NE(unresolved.status().message().find("does not resolve"), std::string::npos);

  testing::TempDir dir;
  ASSERT_TRUE(demo::write_demo_checkpoint(dir.path()).ok());
  for (const char* host : {"127.foo.invalid", "0.0.0.0"}) {
    auto session = engine::open_default_session("auto");
    ASSERT_TRUE(session.ok());
    server::ServerOptions options;
    options.host = host;
    options.port = 0;
    options.build_index = false;
    auto created = server::ViewerServer::create({dir.path().string()}, options, std::move(session).value());
    ASSERT_TRUE(created.ok());
    auto bound = (*created)->bind();
    EXPECT_EQ(bound.status().code(), StatusCode::kInvalidArgument) << host;
  }
}

}  // namespace
}  // namespace tensormorph
