// loadgen/http_client.cc: epoll event handling, request writing and response parsing.
// A connection is either connecting, writing a request, reading a response or idle in the pool.
// Closed connections are parked until the end of poll() because the same epoll batch may still
// name them.
#include "loadgen/http_client.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/check.h"

namespace kvw::loadgen {

double monotonic_s() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

Result<Url> parse_url(const std::string& url) {
  std::string rest = url;
  if (rest.rfind("https://", 0) == 0) return Error{"'" + url + "': https is not supported"};
  if (rest.rfind("http://", 0) == 0) rest = rest.substr(7);
  Url u;
  const auto slash = rest.find('/');
  std::string hostport = rest.substr(0, slash);
  if (slash != std::string::npos) u.path_prefix = rest.substr(slash);
  while (!u.path_prefix.empty() && u.path_prefix.back() == '/') u.path_prefix.pop_back();
  const auto colon = hostport.rfind(':');
  if (colon != std::string::npos && hostport.find(']') == std::string::npos) {
    try {
      u.port = std::stoi(hostport.substr(colon + 1));
    } catch (...) {
      return Error{"'" + url + "': bad port"};
    }
    hostport = hostport.substr(0, colon);
  }
  if (hostport.empty() || u.port <= 0 || u.port > 65535)
    return Error{"'" + url + "': bad host:port"};
  u.host = hostport;
  return u;
}

struct HttpClient::Connection {
  enum class State { kConnecting, kWriting, kReading, kIdle, kClosed };
  enum class Phase { kHead, kLength, kChunkSize, kChunkData, kChunkEnd, kTrailers, kUntilClose };
  int fd = -1;
  size_t slot = 0;  // index in connections_
  State state = State::kClosed;
  HttpRequest request;
  HttpHandler* handler = nullptr;
  double deadline_s = 0;
  std::string out;  // serialised request
  size_t out_off = 0;
  std::string line;  // response head, or a partial chunk-size / trailer line
  Phase phase = Phase::kHead;
  uint64_t remaining = 0;
  bool keep_alive = true;
  bool reused = false;     // sent on a pooled connection: a stale close earns one retry
  bool got_bytes = false;  // any response byte received
  std::string deferred_error;
};

using Conn = HttpClient::Connection;

namespace {
constexpr uint32_t kReadEvents = EPOLLIN | EPOLLRDHUP;

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

std::string serialise(const HttpRequest& r, const std::string& host) {
  std::string s = r.method + " " + r.path + " HTTP/1.1\r\nHost: " + host +
                  "\r\nUser-Agent: kvwarden-bench\r\nAccept: */*\r\nConnection: keep-alive\r\n";
  if (!r.body.empty() || r.method == "POST") {
    s += "Content-Type: " + r.content_type +
         "\r\nContent-Length: " + std::to_string(r.body.size()) + "\r\n";
  }
  s += "\r\n";
  s += r.body;
  return s;
}
}  // namespace

Result<std::unique_ptr<HttpClient>> HttpClient::create(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (rc != 0 || res == nullptr) return Error{"cannot resolve '" + host + "': " + gai_strerror(rc)};
  std::vector<uint8_t> addr(reinterpret_cast<uint8_t*>(res->ai_addr),
                            reinterpret_cast<uint8_t*>(res->ai_addr) + res->ai_addrlen);
  freeaddrinfo(res);
  const int epfd = epoll_create1(EPOLL_CLOEXEC);
  if (epfd < 0) return Error{std::string("epoll_create1: ") + std::strerror(errno)};
  auto client = std::unique_ptr<HttpClient>(new HttpClient(epfd, std::move(addr)));
  client->host_header_ = host + ":" + std::to_string(port);
  return client;
}

HttpClient::HttpClient(int epoll_fd, std::vector<uint8_t> addr)
    : epoll_fd_(epoll_fd), addr_(std::move(addr)) {}

HttpClient::~HttpClient() {
  for (auto& c : connections_)
    if (c->fd >= 0) ::close(c->fd);
  ::close(epoll_fd_);
}

size_t HttpClient::num_in_flight() const {
  return in_flight_;
}

void HttpClient::start(HttpRequest request, HttpHandler* handler) {
  Connection* c = nullptr;
  if (!idle_.empty()) {
    c = idle_.back();
    idle_.pop_back();
    c->reused = true;
  } else {
    auto owned = std::make_unique<Connection>();
    owned->slot = connections_.size();
    c = owned.get();
    connections_.push_back(std::move(owned));
    c->reused = false;
  }
  ++in_flight_;
  c->handler = handler;
  c->deadline_s = monotonic_s() + request.timeout_s;
  c->out = serialise(request, host_header_);
  c->request = std::move(request);
  open_and_send(c);
}

// Resets the response state and sends c->out, connecting first if the socket is not open.
void HttpClient::open_and_send(Connection* c) {
  c->out_off = 0;
  c->line.clear();
  c->phase = Connection::Phase::kHead;
  c->got_bytes = false;
  c->keep_alive = true;
  if (c->fd >= 0) {
    c->state = Connection::State::kWriting;
    handle_writable(c);
    return;
  }
  const auto* sa = reinterpret_cast<const sockaddr*>(addr_.data());
  c->fd = ::socket(sa->sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (c->fd < 0) {
    c->deferred_error = std::string("connect: socket: ") + std::strerror(errno);
    deferred_.push_back(c);
    return;
  }
  ++num_opened_;
  const int one = 1;
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  const int rc = ::connect(c->fd, sa, static_cast<socklen_t>(addr_.size()));
  if (rc < 0 && errno != EINPROGRESS) {
    c->deferred_error = std::string("connect: ") + std::strerror(errno);
    deferred_.push_back(c);
    return;
  }
  c->state = Connection::State::kConnecting;
  epoll_event ev{};
  ev.events = EPOLLOUT | kReadEvents;
  ev.data.ptr = c;
  CHECK(epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, c->fd, &ev) == 0) << std::strerror(errno);
}

void HttpClient::poll(int timeout_ms) {
  if (!deferred_.empty()) timeout_ms = 0;
  epoll_event events[256];
  const int n = epoll_wait(epoll_fd_, events, 256, std::max(0, timeout_ms));
  for (int i = 0; i < n; ++i) {
    auto* c = static_cast<Connection*>(events[i].data.ptr);
    if (c->state != Connection::State::kClosed) on_event(c, events[i].events);
  }
  // Failures found inside start() are reported here so callbacks never re-enter start().
  auto deferred = std::move(deferred_);
  deferred_.clear();
  for (Connection* c : deferred) {
    if (c->handler != nullptr) finish(c, c->deferred_error);
  }
  expire_timeouts();
  graveyard_.clear();
}

void HttpClient::on_event(Connection* c, uint32_t events) {
  if (c->state == Connection::State::kConnecting) {
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return finish(c, std::string("connect: ") + std::strerror(err));
    if (!(events & EPOLLOUT)) return;
    c->state = Connection::State::kWriting;
  }
  if (c->state == Connection::State::kWriting && (events & EPOLLOUT)) return handle_writable(c);
  if (events & (EPOLLIN | EPOLLRDHUP | EPOLLHUP | EPOLLERR)) handle_readable(c);
}

void HttpClient::handle_writable(Connection* c) {
  while (c->out_off < c->out.size()) {
    const ssize_t w =
        ::send(c->fd, c->out.data() + c->out_off, c->out.size() - c->out_off, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN) {
      epoll_event ev{};
      ev.events = EPOLLOUT | kReadEvents;
      ev.data.ptr = c;
      epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c->fd, &ev);
      return;
    }
    if (w <= 0) return fail_io(c, std::string("send: ") + std::strerror(errno));
    c->out_off += static_cast<size_t>(w);
  }
  c->state = Connection::State::kReading;
  c->out.clear();
  epoll_event ev{};
  ev.events = kReadEvents;
  ev.data.ptr = c;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, c->fd, &ev);
}

// A pooled connection the server already closed fails before any byte: retry once, fresh.
void HttpClient::fail_io(Connection* c, const std::string& error) {
  if (c->reused && !c->got_bytes) {
    c->reused = false;
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd, nullptr);
    ::close(c->fd);
    c->fd = -1;
    c->out = serialise(c->request, host_header_);
    open_and_send(c);
    return;
  }
  finish(c, error);
}

void HttpClient::handle_readable(Connection* c) {
  char buf[65536];
  for (;;) {
    const ssize_t r = ::recv(c->fd, buf, sizeof buf, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 && errno == EAGAIN) return;
    if (c->state == Connection::State::kIdle) return close_connection(c);  // closed or stray bytes
    if (r < 0) return fail_io(c, std::string("recv: ") + std::strerror(errno));
    if (r == 0) {
      if (c->phase == Connection::Phase::kUntilClose) return finish(c, "");
      return fail_io(c, c->got_bytes ? "reset: connection closed mid-response" : "reset: closed");
    }
    c->got_bytes = true;
    if (consume(c, std::string_view(buf, static_cast<size_t>(r)))) return;
  }
}

// Feeds response bytes through the head/body state machine. Returns true once the response is
// finished (or failed), after which c may already carry another request.
bool HttpClient::consume(Connection* c, std::string_view data) {
  using Phase = Connection::Phase;
  if (c->phase == Phase::kHead) {
    const size_t old = c->line.size();
    c->line.append(data);
    const auto end = c->line.find("\r\n\r\n", old >= 3 ? old - 3 : 0);
    if (end == std::string::npos) {
      if (c->line.size() > (1u << 20)) return finish(c, "bad response: header over 1 MiB"), true;
      return false;
    }
    std::string head = c->line.substr(0, end);
    std::string rest = c->line.substr(end + 4);
    c->line.clear();
    if (!parse_head(c, head)) return true;
    return consume_body(c, rest);
  }
  return consume_body(c, data);
}

bool HttpClient::parse_head(Connection* c, const std::string& head) {
  // "HTTP/1.1 200 OK"
  const auto eol = head.find("\r\n");
  const std::string status_line = head.substr(0, eol);
  if (status_line.rfind("HTTP/1.", 0) != 0 || status_line.size() < 12)
    return finish(c, "bad response: status line '" + status_line.substr(0, 40) + "'"), false;
  const int status = std::atoi(status_line.c_str() + 9);
  c->keep_alive = status_line[7] == '1';
  HttpHeaders headers;
  bool chunked = false, has_length = false;
  uint64_t length = 0;
  size_t pos = eol == std::string::npos ? head.size() : eol + 2;
  while (pos < head.size()) {
    auto next = head.find("\r\n", pos);
    if (next == std::string::npos) next = head.size();
    std::string_view line(head.data() + pos, next - pos);
    pos = next + 2;
    const auto colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string name = lower(std::string(trim(line.substr(0, colon))));
    std::string value(trim(line.substr(colon + 1)));
    if (name == "transfer-encoding" && lower(value).find("chunked") != std::string::npos)
      chunked = true;
    if (name == "content-length") {
      has_length = true;
      length = std::strtoull(value.c_str(), nullptr, 10);
    }
    if (name == "connection") {
      const std::string v = lower(value);
      if (v.find("close") != std::string::npos) c->keep_alive = false;
      if (v.find("keep-alive") != std::string::npos) c->keep_alive = true;
    }
    headers.emplace_back(std::move(name), std::move(value));
  }
  using Phase = Connection::Phase;
  const bool no_body = c->request.method == "HEAD" || status == 204 || status == 304 ||
                       (status >= 100 && status < 200);
  if (no_body) {
    c->phase = Phase::kLength;
    c->remaining = 0;
  } else if (chunked) {
    c->phase = Phase::kChunkSize;
  } else if (has_length) {
    c->phase = Phase::kLength;
    c->remaining = length;
  } else {
    c->phase = Phase::kUntilClose;
    c->keep_alive = false;
  }
  c->handler->on_headers(status, headers);
  return true;
}

bool HttpClient::consume_body(Connection* c, std::string_view data) {
  using Phase = Connection::Phase;
  for (;;) {
    switch (c->phase) {
      case Phase::kLength: {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(c->remaining, data.size()));
        if (n > 0) c->handler->on_body(data.substr(0, n));
        c->remaining -= n;
        data.remove_prefix(n);
        if (c->remaining == 0) return finish(c, ""), true;
        return false;
      }
      case Phase::kUntilClose:
        if (!data.empty()) c->handler->on_body(data);
        return false;
      case Phase::kChunkData: {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(c->remaining, data.size()));
        if (n > 0) c->handler->on_body(data.substr(0, n));
        c->remaining -= n;
        data.remove_prefix(n);
        if (c->remaining > 0) return false;
        c->phase = Phase::kChunkEnd;
        break;
      }
      case Phase::kChunkSize:
      case Phase::kChunkEnd:
      case Phase::kTrailers: {
        const auto nl = data.find('\n');
        if (nl == std::string_view::npos) {
          c->line.append(data);
          if (c->line.size() > 4096) return finish(c, "bad response: chunk line too long"), true;
          return false;
        }
        c->line.append(data.substr(0, nl));
        data.remove_prefix(nl + 1);
        const std::string line(trim(c->line));
        c->line.clear();
        if (c->phase == Phase::kChunkEnd) {
          c->phase = Phase::kChunkSize;
        } else if (c->phase == Phase::kTrailers) {
          if (line.empty()) return finish(c, ""), true;
        } else {
          char* end = nullptr;
          const uint64_t size = std::strtoull(line.c_str(), &end, 16);
          if (end == line.c_str())
            return finish(c, "bad response: chunk size '" + line + "'"), true;
          c->remaining = size;
          c->phase = size == 0 ? Phase::kTrailers : Phase::kChunkData;
        }
        break;
      }
      case Phase::kHead:
        CHECK(false) << "body bytes before the head";
    }
  }
}

// Ends the current request: the connection returns to the pool (or closes) first, then the
// handler hears about it, so on_complete may start the next request on this very connection.
void HttpClient::finish(Connection* c, const std::string& error) {
  HttpHandler* handler = c->handler;
  c->handler = nullptr;
  CHECK(handler != nullptr);
  --in_flight_;
  if (error.empty() && c->keep_alive && c->phase != Connection::Phase::kUntilClose) {
    c->state = Connection::State::kIdle;
    idle_.push_back(c);
  } else {
    close_connection(c);
  }
  handler->on_complete(error);
}

void HttpClient::close_connection(Connection* c) {
  if (c->fd >= 0) {
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, c->fd, nullptr);
    ::close(c->fd);
    c->fd = -1;
  }
  if (c->state == Connection::State::kIdle) idle_.erase(std::find(idle_.begin(), idle_.end(), c));
  c->state = Connection::State::kClosed;
  // Swap-and-pop out of connections_, parking the object until poll() ends.
  const size_t slot = c->slot;
  std::swap(connections_[slot], connections_.back());
  connections_[slot]->slot = slot;
  graveyard_.push_back(std::move(connections_.back()));
  connections_.pop_back();
}

void HttpClient::expire_timeouts() {
  const double now = monotonic_s();
  if (now - last_timeout_scan_s_ < 0.05) return;  // scanning 10k connections 20x/s is cheap
  last_timeout_scan_s_ = now;
  std::vector<Connection*> expired;
  for (auto& c : connections_)
    if (c->handler != nullptr && now > c->deadline_s) expired.push_back(c.get());
  for (Connection* c : expired)
    if (c->handler != nullptr) finish(c, "timeout");
}

void HttpClient::abort_all(const std::string& reason) {
  std::vector<Connection*> active;
  for (auto& c : connections_)
    if (c->handler != nullptr) active.push_back(c.get());
  for (Connection* c : active) {
    c->keep_alive = false;
    if (c->handler != nullptr) finish(c, reason);
  }
  deferred_.clear();
  graveyard_.clear();
}

namespace {
class CollectHandler : public HttpHandler {
 public:
  explicit CollectHandler(HttpResponse* out) : out_(out) {}
  void on_headers(int status, const HttpHeaders& headers) override {
    out_->status = status;
    out_->headers = headers;
  }
  void on_body(std::string_view bytes) override { out_->body.append(bytes); }
  void on_complete(const std::string& error) override {
    error_ = error;
    done_ = true;
  }
  bool done_ = false;
  std::string error_;

 private:
  HttpResponse* out_;
};
}  // namespace

Result<HttpResponse> fetch(HttpClient& client, HttpRequest request) {
  HttpResponse response;
  CollectHandler handler(&response);
  const std::string what = request.method + " " + request.path;
  client.start(std::move(request), &handler);
  while (!handler.done_) client.poll(50);
  if (!handler.error_.empty()) return Error{what + ": " + handler.error_};
  return response;
}

}  // namespace kvw::loadgen
