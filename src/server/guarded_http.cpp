#include "server/guarded_http.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

namespace tensormorph::server {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Set by the queue when it is full: the accepting thread then answers 503 itself.
thread_local bool t_reject_busy = false;
// Set by a handler that wants its connection closed after its response.
thread_local bool t_close_after = false;

// Workers take connections in order; at most `max_pending` wait. A full queue does not block
// the accepting thread: it runs the task inline with t_reject_busy set, which answers 503.
class BoundedQueue final : public httplib::TaskQueue {
 public:
  BoundedQueue(size_t workers, size_t max_pending, std::atomic<size_t>& pending)
      : max_pending_(max_pending), pending_(pending) {
    for (size_t i = 0; i < workers; ++i) threads_.emplace_back([this] { work(); });
  }
  ~BoundedQueue() override { shutdown(); }

  void enqueue(std::function<void()> fn) override {
    {
      std::lock_guard lock(mutex_);
      if (jobs_.size() < max_pending_ && !stopping_) {
        jobs_.push_back(std::move(fn));
        pending_.store(jobs_.size(), std::memory_order_relaxed);
        cv_.notify_one();
        return;
      }
    }
    t_reject_busy = true;
    fn();
    t_reject_busy = false;
  }

  void shutdown() override {
    {
      std::lock_guard lock(mutex_);
      if (stopping_ && threads_.empty()) return;
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

 private:
  void work() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock lock(mutex_);
        cv_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
        // Connections still queued at shutdown are closed by their task (the server is stopped).
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
        pending_.store(jobs_.size(), std::memory_order_relaxed);
      }
      job();
    }
  }

  const size_t max_pending_;
  std::atomic<size_t>& pending_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  bool stopping_ = false;
};

std::string numeric_address(const sockaddr_storage& addr, socklen_t len, int& port) {
  char host[NI_MAXHOST] = {0};
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof host, nullptr, 0, NI_NUMERICHOST) != 0) {
    return {};
  }
  port = addr.ss_family == AF_INET ? ntohs(reinterpret_cast<const sockaddr_in&>(addr).sin_port)
                                   : ntohs(reinterpret_cast<const sockaddr_in6&>(addr).sin6_port);
  return host;
}

// A connection's stream. Reads fail once the current request's deadline has passed (or, while
// other connections wait for a worker, once the request has taken longer than the grace
// period); writes fail once the response's deadline has passed. Waiting happens in short slices
// so that stop() and a growing queue are noticed.
class DeadlineStream final : public httplib::Stream {
 public:
  DeadlineStream(socket_t sock, const GuardedServer& server) : sock_(sock), server_(server) {}

  /// Starts a request whose first byte has arrived (or is buffered).
  void begin_request() {
    request_start_ = Clock::now();
    read_deadline_ = request_start_ + server_.limits().request_deadline;
    write_deadline_.reset();
  }
  bool has_buffered() const { return buffer_begin_ < buffer_end_; }

  /// Waits for the next request: false when the connection is to be closed instead (idle too
  /// long, closed by the peer, the server stopping, or, once `may_yield`, others waiting).
  bool wait_for_request(Clock::time_point since, bool first) {
    if (has_buffered()) return true;
    const auto deadline = since + server_.limits().idle_timeout;
    for (;;) {
      const auto now = Clock::now();
      if (now >= deadline || !server_.accepting()) return false;
      // A kept-alive connection yields at once to waiting ones (a browser reconnects); a new one
      // has the grace period to send its first byte.
      if (server_.pending() > 0 && (!first || now - since >= server_.limits().pressure_grace)) return false;
      const int r = poll_once(POLLIN, deadline - now);
      if (r > 0) return true;
      if (r < 0) return false;
    }
  }

  bool is_readable() const override { return has_buffered() || wait(POLLIN, read_deadline_, true); }
  bool is_writable() const override { return wait(POLLOUT, write_deadline_.value_or(Clock::now() + server_.limits().response_deadline), false); }

  ssize_t read(char* ptr, size_t size) override {
    if (size == 0) return 0;
    while (!has_buffered()) {
      if (!wait(POLLIN, read_deadline_, true)) return -1;
      const ssize_t n = ::recv(sock_, buffer_, sizeof buffer_, MSG_DONTWAIT);
      if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
      if (n <= 0) return n;
      buffer_begin_ = 0;
      buffer_end_ = static_cast<size_t>(n);
    }
    const size_t take = std::min(size, buffer_end_ - buffer_begin_);
    std::memcpy(ptr, buffer_ + buffer_begin_, take);
    buffer_begin_ += take;
    return static_cast<ssize_t>(take);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!write_deadline_) write_deadline_ = Clock::now() + server_.limits().response_deadline;
    for (;;) {
      if (!wait(POLLOUT, *write_deadline_, false)) return -1;
      const ssize_t n = ::send(sock_, ptr, size, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n >= 0) return n;
      if (errno != EINTR && errno != EAGAIN && errno != EWOULDBLOCK) return -1;
    }
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    if (getpeername(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) ip = numeric_address(addr, len, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof addr;
    if (getsockname(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) ip = numeric_address(addr, len, port);
  }
  socket_t socket() const override { return sock_; }

 private:
  static constexpr milliseconds kSlice{50};

  // One poll of at most a slice: 1 ready, 0 not yet, -1 failed.
  int poll_once(short events, Clock::duration left) const {
    const auto slice = std::min<Clock::duration>(left, kSlice);
    pollfd p{sock_, events, 0};
    const int r = ::poll(&p, 1, static_cast<int>(std::chrono::duration_cast<milliseconds>(slice).count()) + 1);
    if (r < 0) return errno == EINTR ? 0 : -1;
    if (r == 0) return 0;
    // Hang-ups and errors count as ready: the read or write that follows reports them.
    return 1;
  }

  bool wait(short events, Clock::time_point deadline, bool reading) const {
    for (;;) {
      const auto now = Clock::now();
      if (now >= deadline || !server_.accepting()) return false;
      if (reading && server_.pending() > 0 && now - request_start_ >= server_.limits().pressure_grace) return false;
      const int r = poll_once(events, deadline - now);
      if (r != 0) return r > 0;
    }
  }

  socket_t sock_;
  const GuardedServer& server_;
  Clock::time_point request_start_ = Clock::now();
  Clock::time_point read_deadline_ = Clock::now();
  std::optional<Clock::time_point> write_deadline_;
  char buffer_[4096];
  size_t buffer_begin_ = 0, buffer_end_ = 0;
};

void close_socket(socket_t sock) {
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
}

// The accepting thread's answer when every worker is busy and the queue is full: short,
// never blocking, then the connection is closed.
void reject_busy(socket_t sock) {
  static const std::string kBusy = [] {
    const std::string body = R"({"error": "the viewer is busy; retry shortly", "code": "UNAVAILABLE"})";
    return "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 1\r\n"
           "Connection: close\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
  }();
  [[maybe_unused]] const ssize_t n = ::send(sock, kBusy.data(), kBusy.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  close_socket(sock);
}

}  // namespace

GuardedServer::GuardedServer(ConnectionLimits limits) : limits_(limits) {
  limits_.workers = std::max<uint32_t>(limits_.workers, 1);
  limits_.max_requests_per_connection = std::max<size_t>(limits_.max_requests_per_connection, 1);
  new_task_queue = [this] { return new BoundedQueue(limits_.workers, limits_.max_pending, pending_); };
  // Debian's default options set SO_REUSEPORT, with which a second server binds a taken port and
  // the kernel splits connections between the two. SO_REUSEADDR alone only allows rebinding over
  // connections in TIME_WAIT.
  set_socket_options([](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  set_payload_max_length(limits_.max_body_bytes);
  set_keep_alive_max_count(limits_.max_requests_per_connection);
  set_keep_alive_timeout(std::max<time_t>(1, static_cast<time_t>(limits_.idle_timeout.count() / 1000)));
}

GuardedServer::~GuardedServer() = default;

void GuardedServer::close_after_response() { t_close_after = true; }

Result<int> GuardedServer::bind_exclusive(const std::string& host, int port) {
  errno = 0;
  const int bound = port == 0 ? bind_to_any_port(host) : (bind_to_port(host, port) ? port : -1);
  const int error = errno;
  if (bound <= 0) {
    const std::string where = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(port);
    if (error == EADDRINUSE) {
      return Status::IoError(where + " is already in use (another tensormorph serve?); stop it, or pick another --port (0 picks a free one)");
    }
    return Status::IoError("cannot bind " + where + (error != 0 ? std::string(": ") + std::strerror(error) : std::string()));
  }
  // httplib listens with a backlog of 5; listen() again on a listening socket resizes it.
  if (::listen(svr_sock_, limits_.backlog) != 0) {
    return Status::IoError(std::string("cannot listen: ") + std::strerror(errno));
  }
  return bound;
}

bool GuardedServer::process_and_close_socket(socket_t sock) {
  if (t_reject_busy) {
    reject_busy(sock);
    return false;
  }
  int yes = 1;
  ::setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof yes);
  DeadlineStream stream(sock, *this);
  const std::function<void(httplib::Request&)> no_setup;
  bool ok = false;
  auto since = Clock::now();
  for (size_t left = limits_.max_requests_per_connection; left > 0; --left) {
    if (!stream.wait_for_request(since, left == limits_.max_requests_per_connection)) break;
    stream.begin_request();
    t_close_after = false;
    bool closed = false;
    ok = process_request(stream, left == 1 || !accepting(), closed, no_setup);
    if (!ok || closed || t_close_after) break;
    since = Clock::now();
  }
  t_close_after = false;
  close_socket(sock);
  return ok;
}

}  // namespace tensormorph::server
