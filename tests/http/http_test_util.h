// tests/http/http_test_util.h: a raw-socket client for the transport tests (connect, send,
// read until an answer ends) and streams the test thread feeds.
// Thread safety: PushStream is fed from any thread; the rest is per call.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "../server/raw_socket.h"
#include "http/http_server.h"

namespace kvw::http::test {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// The raw TCP client the server tests use too.
using server::raw_socket::connect_to;
using server::raw_socket::send_all;

// Reads until `done(text)` holds, the peer closes, or `timeout` passes.
inline std::string read_until(int fd, std::chrono::milliseconds timeout,
                              const std::function<bool(const std::string&)>& done,
                              bool* closed = nullptr) {
  std::string out;
  const auto end = Clock::now() + timeout;
  if (closed) *closed = false;
  char buf[8192];
  while (Clock::now() < end && !done(out)) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) {
      if (closed) *closed = true;
      break;
    }
    out.append(buf, (size_t)n);
  }
  return out;
}

inline bool has_response_end(const std::string& s) {
  return s.find("\r\n0\r\n\r\n") != std::string::npos ||
         (s.find("Content-Length: ") != std::string::npos &&
          s.find("\r\n\r\n") != std::string::npos &&
          s.size() >=
              s.find("\r\n\r\n") + 4 + std::stoul(s.substr(s.find("Content-Length: ") + 16)));
}

inline std::string exchange(int port, const std::string& raw,
                            std::chrono::milliseconds timeout = 5s) {
  const int fd = connect_to(port);
  if (fd < 0) return {};
  send_all(fd, raw);
  std::string r = read_until(fd, timeout, has_response_end);
  ::close(fd);
  return r;
}

inline int status_of(const std::string& r) {
  return r.size() > 12 && r.starts_with("HTTP/1.1 ") ? std::stoi(r.substr(9, 3)) : 0;
}

inline std::string get(const std::string& path) {
  return "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n";
}
inline std::string post(const std::string& path, const std::string& body) {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\n\r\n" + body;
}

// The answer's bytes reach the client before the I/O thread releases the request's memory, so
// a test that has its answer polls for the release.
template <class Server>
bool request_memory_drains(const Server& s, std::chrono::milliseconds timeout = 5000ms) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (s.stats().request_memory.used != 0) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(2ms);
  }
  return true;
}

inline HttpResponse refuse(Refusal r, const HttpRequest&) {
  HttpResponse res;
  res.status = refusal_status(r);
  if (res.status == 503) res.set_header("Retry-After", "1");
  res.set_content("refused", "text/plain");
  return res;
}

// A stream fed by the test thread.
class PushStream : public ResponseStream {
 public:
  explicit PushStream(std::atomic<int>* destroyed = nullptr) : destroyed_(destroyed) {}
  ~PushStream() override {
    if (destroyed_) ++*destroyed_;
  }
  void start(std::function<void()> wake) override {
    std::lock_guard lock(mu_);
    wake_ = std::move(wake);
  }
  void poll(StreamOutput& out) override {
    std::lock_guard lock(mu_);
    if (!head_) {
      head_ = true;
      out.head = true;
      out.content_type = "text/plain";
    }
    for (std::string& c : chunks_) out.data += c;
    chunks_.clear();
    out.end = end_;
  }
  void push(std::string data, bool end = false) {
    std::function<void()> wake;
    {
      std::lock_guard lock(mu_);
      chunks_.push_back(std::move(data));
      end_ = end_ || end;
      wake = wake_;
    }
    if (wake) wake();
  }

 private:
  std::atomic<int>* destroyed_;
  std::mutex mu_;
  std::function<void()> wake_;
  std::deque<std::string> chunks_;
  bool head_ = false;
  bool end_ = false;
};

// 1000 client sockets and 1000 server sockets live in this one process.
inline void raise_fd_limit() {
  rlimit r{};
  if (getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur < r.rlim_max) {
    r.rlim_cur = r.rlim_max;
    setrlimit(RLIMIT_NOFILE, &r);
  }
}

inline HttpServerConfig test_config() {
  HttpServerConfig c;
  c.port = 0;
  c.io_threads = 1;
  c.handler_threads = 1;
  c.max_connections = 4096;
  return c;
}

}  // namespace kvw::http::test
