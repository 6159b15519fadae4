#include "server/http_transport.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "core/check.h"
#include "core/log.h"

namespace kvw::server {
namespace {

double mono_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void close_fd(int fd) {
  ::shutdown(fd, SHUT_RDWR);
  ::close(fd);
}

// Waits for `events`; false on timeout, or for POLLOUT when the peer is gone.
bool wait_fd(int fd, short events, int timeout_ms) {
  pollfd p{fd, events, 0};
  int r;
  do {
    r = ::poll(&p, 1, std::max(0, timeout_ms));
  } while (r < 0 && errno == EINTR);
  if (r <= 0) return false;
  if ((events & POLLOUT) && (p.revents & (POLLERR | POLLHUP))) return false;
  return true;
}

void ip_and_port(const sockaddr_storage& a, std::string& ip, int& port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (a.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(a);
    ::inet_ntop(AF_INET, &v4.sin_addr, buf, sizeof buf);
    port = ntohs(v4.sin_port);
  } else if (a.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(a);
    ::inet_ntop(AF_INET6, &v6.sin6_addr, buf, sizeof buf);
    port = ntohs(v6.sin6_port);
  }
  ip = buf;
}

// One connection's socket for httplib's request processing: buffered reads with the header
// byte cap and per-phase deadlines, blocking writes bounded by the write timeout.
class TransportStream final : public httplib::Stream {
 public:
  TransportStream(int fd, const TransportConfig& cfg) : fd_(fd), cfg_(cfg) {}

  void begin_request() {
    in_headers_ = true;
    header_bytes_ = 0;
    body_expected_ = 0;
    body_read_ = 0;
    refusal_ = 0;
    deadline_ = mono_s() + cfg_.header_timeout_s;
  }
  void headers_done(const httplib::Request& req) {
    in_headers_ = false;
    deadline_ = mono_s() + cfg_.body_timeout_s;
    // httplib adds REMOTE_ADDR and REMOTE_PORT before this point.
    if (req.headers.size() > cfg_.max_headers + 2) refusal_ = 431;
    if (req.has_header("Transfer-Encoding")) {
      body_expected_ = SIZE_MAX;  // chunked: its end is not known here
    } else if (req.has_header("Content-Length")) {
      body_expected_ = std::strtoull(req.get_header_value("Content-Length").c_str(), nullptr, 10);
    }
  }
  // A body that was not read (an answer from the headers alone: 401, 413, 431) would be parsed
  // as the next request: such a connection must close after the response.
  bool body_unread() const { return body_read_ < body_expected_; }
  int refusal() const { return refusal_; }
  void close_after_response() { must_close_ = true; }
  bool must_close() const { return must_close_; }
  bool has_buffered() const { return pos_ < len_; }

  bool is_readable() const override { return pos_ < len_ || wait_fd(fd_, POLLIN, read_wait_ms()); }
  bool is_writable() const override { return wait_fd(fd_, POLLOUT, cfg_.write_timeout_s * 1000); }

  ssize_t read(char* ptr, size_t size) override {
    if (in_headers_) {
      if (header_bytes_ >= cfg_.max_header_bytes) {
        refusal_ = 431;  // httplib answers 400; the error handler turns it into 431
        must_close_ = true;
        return -1;
      }
      size = std::min(size, cfg_.max_header_bytes - header_bytes_);
    }
    if (pos_ == len_) {
      const int wait_ms = read_wait_ms();
      if (wait_ms <= 0 || !wait_fd(fd_, POLLIN, wait_ms)) {
        must_close_ = true;
        return -1;
      }
      ssize_t n;
      do {
        n = ::recv(fd_, buf_, sizeof buf_, 0);
      } while (n < 0 && errno == EINTR);
      if (n <= 0) {
        must_close_ = true;
        return n;
      }
      pos_ = 0;
      len_ = (size_t)n;
    }
    const size_t n = std::min(size, len_ - pos_);
    std::memcpy(ptr, buf_ + pos_, n);
    pos_ += n;
    (in_headers_ ? header_bytes_ : body_read_) += n;
    return (ssize_t)n;
  }

  ssize_t write(const char* ptr, size_t size) override {
    size_t off = 0;
    while (off < size) {
      if (!wait_fd(fd_, POLLOUT, cfg_.write_timeout_s * 1000)) return -1;
      const ssize_t n = ::send(fd_, ptr + off, size - off, MSG_NOSIGNAL);
      if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (n < 0) return -1;
      off += (size_t)n;
    }
    return (ssize_t)size;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    if (::getpeername(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0) ip_and_port(a, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    if (::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0) ip_and_port(a, ip, port);
  }
  socket_t socket() const override { return fd_; }

 private:
  // Per-read wait: the read timeout, cut short by the phase deadline.
  int read_wait_ms() const {
    const double left = deadline_ - mono_s();
    return (int)std::min<double>(cfg_.read_timeout_s * 1000.0, left * 1000.0);
  }

  const int fd_;
  const TransportConfig& cfg_;
  char buf_[16384];
  size_t pos_ = 0, len_ = 0;
  bool in_headers_ = true;
  size_t header_bytes_ = 0;
  size_t body_expected_ = 0, body_read_ = 0;
  int refusal_ = 0;
  bool must_close_ = false;
  double deadline_ = 0;
};

thread_local TransportStream* tl_stream = nullptr;

// httplib hands accepted sockets to the task queue; ours runs the hand-off to the gate inline
// on the listener thread (it only registers the socket).
class InlineQueue final : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

// The gate's own answers (it has no httplib Request to route): OpenAI error JSON, then close.
std::string gate_response(int status, const char* reason, const char* code, const char* message) {
  const std::string body = std::string(R"({"error":{"message":")") + message +
                           R"(","type":"invalid_request_error","param":null,"code":")" + code +
                           "\"}}";
  return "HTTP/1.1 " + std::to_string(status) + " " + reason +
         "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

void send_refusal_and_close(int fd, int status) {
  static const std::string r408 = gate_response(
      408, "Request Timeout", "timeout", "request headers not complete within --header-timeout");
  static const std::string r431 =
      gate_response(431, "Request Header Fields Too Large", "headers_too_large",
                    "request line and headers over the size limit");
  const std::string& r = status == 408 ? r408 : r431;
  (void)!::send(fd, r.data(), r.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  close_fd(fd);
}

}  // namespace

GatedHttpServer::GatedHttpServer(TransportConfig cfg) : cfg_(std::move(cfg)) {
  new_task_queue = [] { return new InlineQueue; };
  set_read_timeout(cfg_.read_timeout_s);
  set_write_timeout(cfg_.write_timeout_s);
  set_keep_alive_timeout(cfg_.keep_alive_timeout_s);
  set_keep_alive_max_count(cfg_.keep_alive_max_count);
  // SSE writes one small chunk per token: without TCP_NODELAY, Nagle holds each one until the
  // previous is acknowledged, and tokens arrive in bursts. Accepted sockets inherit it.
  set_tcp_nodelay(true);
  set_socket_options([this](socket_t sock) {
    int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listen_fd_ = sock;
  });
  peek_.resize(cfg_.max_header_bytes + 1);
}

GatedHttpServer::~GatedHttpServer() {
  stop();
  shutdown();
}

int GatedHttpServer::bind(const std::string& host, int port) {
  const int bound = port == 0 ? bind_to_any_port(host) : (bind_to_port(host, port) ? port : -1);
  if (bound <= 0) return -1;
  // httplib listened with its compiled-in backlog (5); listen() again only resizes the queue.
  if (listen_fd_ >= 0 && ::listen(listen_fd_, cfg_.listen_backlog) != 0) {
    LOG(WARN, server) << "listen backlog " << cfg_.listen_backlog << ": " << std::strerror(errno);
  }
  epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
  CHECK(epoll_fd_ >= 0) << "epoll_create1: " << std::strerror(errno);
  workers_ = std::make_unique<httplib::ThreadPool>((size_t)cfg_.worker_threads);
  gate_ = std::thread([this] { gate_loop(); });
  return bound;
}

void GatedHttpServer::serve() {
  listen_after_bind();
}

void GatedHttpServer::shutdown() {
  stopping_.store(true);
  if (gate_.joinable()) gate_.join();
  if (workers_) {
    workers_->shutdown();
    workers_.reset();
  }
  std::lock_guard lock(mu_);
  for (const auto& [fd, w] : waiting_) close_fd(fd);
  waiting_.clear();
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  epoll_fd_ = -1;
}

int GatedHttpServer::current_header_refusal() {
  return tl_stream ? tl_stream->refusal() : 0;
}

void GatedHttpServer::current_close_after_response() {
  if (tl_stream) tl_stream->close_after_response();
}

bool GatedHttpServer::process_and_close_socket(socket_t sock) {
  enter_gate(sock, cfg_.keep_alive_max_count);
  return true;
}

void GatedHttpServer::enter_gate(int fd, size_t requests_left) {
  std::lock_guard lock(mu_);
  if (stopping_.load() || epoll_fd_ < 0) {
    close_fd(fd);
    return;
  }
  waiting_[fd] = Waiting{mono_s(), 0, requests_left};
  // Edge-triggered: each arrival of bytes wakes the gate once; bytes already there count.
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
  ev.data.fd = fd;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev) != 0) {
    waiting_.erase(fd);
    close_fd(fd);
  }
}

void GatedHttpServer::gate_loop() {
  std::vector<epoll_event> events(256);
  double last_sweep = 0;
  while (!stopping_.load()) {
    const int n = ::epoll_wait(epoll_fd_, events.data(), (int)events.size(), 50);
    const double now = mono_s();
    for (int i = 0; i < n; ++i) on_readable(events[i].data.fd, now);
    if (now - last_sweep >= 0.1) {
      sweep(now);
      last_sweep = now;
    }
  }
}

void GatedHttpServer::on_readable(int fd, double now) {
  size_t requests_left = 0;
  {
    std::lock_guard lock(mu_);
    auto it = waiting_.find(fd);
    if (it == waiting_.end()) return;
    ssize_t n;
    do {
      n = ::recv(fd, peek_.data(), peek_.size(), MSG_PEEK | MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    if (n <= 0) {  // closed by the peer, or reset
      ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
      waiting_.erase(it);
      close_fd(fd);
      return;
    }
    if (it->second.first_byte == 0) it->second.first_byte = now;
    const std::string_view seen(peek_.data(), (size_t)n);
    const bool complete = seen.find("\r\n\r\n") != std::string_view::npos;
    if (!complete && (size_t)n < peek_.size()) return;  // wait for more
    requests_left = it->second.requests_left;
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
    waiting_.erase(it);
    if (!complete) {  // over the limit with no end in sight
      refuse(fd, 431);
      return;
    }
  }
  workers_->enqueue([this, fd, requests_left] { serve_connection(fd, requests_left); });
}

void GatedHttpServer::refuse(int fd, int status) {
  if (cfg_.on_gate_refusal) cfg_.on_gate_refusal(status);  // counted before the client sees it
  send_refusal_and_close(fd, status);
}

void GatedHttpServer::sweep(double now) {
  std::lock_guard lock(mu_);
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    const Waiting& w = it->second;
    const bool idle_expired = w.first_byte == 0 && now - w.since > cfg_.keep_alive_timeout_s;
    const bool headers_late = w.first_byte > 0 && now - w.first_byte > cfg_.header_timeout_s;
    if (!idle_expired && !headers_late) {
      ++it;
      continue;
    }
    ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, it->first, nullptr);
    if (headers_late) {
      refuse(it->first, 408);
    } else {
      close_fd(it->first);
    }
    it = waiting_.erase(it);
  }
}

void GatedHttpServer::serve_connection(int fd, size_t requests_left) {
  TransportStream strm(fd, cfg_);
  tl_stream = &strm;
  for (;;) {
    strm.begin_request();
    const bool last = requests_left <= 1 || stopping_.load();
    bool client_closed = false;
    const bool ok = process_request(strm, last, client_closed,
                                    [&strm](httplib::Request& req) { strm.headers_done(req); });
    --requests_left;
    if (!ok || last || client_closed || strm.must_close() || strm.body_unread() ||
        stopping_.load()) {
      tl_stream = nullptr;
      close_fd(fd);
      return;
    }
    // Pipelined bytes are already in our buffer: the gate cannot see them, so go on here.
    if (!strm.has_buffered()) break;
  }
  tl_stream = nullptr;
  enter_gate(fd, requests_left);
}

}  // namespace kvw::server
