#include "http/http_server.h"

#include <sys/socket.h>

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <new>
#include <optional>
#include <set>
#include <thread>
#include <unordered_set>
#include <vector>

#include "core/log.h"
#include "core/thread_name.h"
#include "http/api_key.h"

namespace kvw::http {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;
using Strand = net::strand<net::io_context::executor_type>;

uint64_t steady_ns() {
  return (uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(s));
}

void append_head(std::string& out, int status, const std::string& content_type,
                 const Headers& headers, bool close) {
  out += "HTTP/1.1 ";
  out += std::to_string(status);
  out += ' ';
  out += status_reason(status);
  out += "\r\n";
  if (!content_type.empty()) out += "Content-Type: " + content_type + "\r\n";
  for (const auto& [k, v] : headers) out += k + ": " + v + "\r\n";
  if (close) out += "Connection: close\r\n";
}

// Stops wake-ups from reaching an io_context that is being torn down (the engine thread may
// still finish a request while the server stops).
struct WakeHub {
  std::mutex mu;
  bool alive = true;
};

struct Route {
  Handler handler;
  RouteOptions opt;
  bool takes_body = true;  // false for GET and HEAD routes
};

// What a connection may do, decided at accept from the counts then.
enum class ConnKind {
  kRegular,    // within max_connections
  kProbeOnly,  // beyond it, within max_probe_connections: one probe request, then closed
  kRejected,   // beyond both: 503 at once
};

}  // namespace

int refusal_status(Refusal r) {
  switch (r) {
    case Refusal::kBadRequest:
      return 400;
    case Refusal::kUnauthorized:
      return 401;
    case Refusal::kNotFound:
      return 404;
    case Refusal::kMethodNotAllowed:
      return 405;
    case Refusal::kHeaderTimeout:
    case Refusal::kBodyTimeout:
      return 408;
    case Refusal::kBodyTooLarge:
    case Refusal::kBodyNotAllowed:
      return 413;
    case Refusal::kHeadersTooLarge:
      return 431;
    case Refusal::kTooManyConnections:
    case Refusal::kRequestMemory:
    case Refusal::kOutOfMemory:
      return 503;
    case Refusal::kSlowConsumer:
    case Refusal::kInternal:
      return 500;
  }
  return 500;
}

Status HttpServerConfig::validate() const {
  if (io_threads < 1 || handler_threads < 1) return Error{"--io-threads and --http-threads: >= 1"};
  if (max_connections < 1) return Error{"--max-connections: >= 1"};
  if (request_memory_bytes < reservation(max_body_bytes)) {
    return Error{"--request-memory (" + std::to_string(request_memory_bytes) +
                 " bytes) cannot hold one request of --max-body-bytes (" +
                 std::to_string(max_body_bytes) + " bytes needs " +
                 std::to_string(reservation(max_body_bytes)) +
                 " bytes: " + std::to_string(reserve_per_body_byte) + " x body + " +
                 std::to_string(reserve_fixed_bytes) + ")"};
  }
  if (stream_buffer_bytes < 4096) return Error{"--stream-buffer-bytes: >= 4096"};
  return Status::ok_status();
}

class Connection;

struct HttpServer::Impl {
  Impl(HttpServerConfig c, RefusalHook r)
      : cfg(std::move(c)),
        refuse(std::move(r)),
        api_key(cfg.api_key),
        request_memory(cfg.request_memory_bytes) {}

  const HttpServerConfig cfg;
  RefusalHook refuse;
  const ApiKey api_key;
  ByteBudget request_memory;
  std::map<std::string, std::map<std::string, Route>> routes;  // path -> method -> route
  std::shared_ptr<WakeHub> hub = std::make_shared<WakeHub>();

  std::atomic<uint64_t> open_connections{0}, peak_connections{0}, active_streams{0},
      handlers_queued{0}, handlers_running{0}, accepted_total{0}, rejected_total{0}, slow_total{0},
      stream_buffered{0}, busy{0};
  // Connections by kind (ConnKind), for the limits at accept.
  std::atomic<uint64_t> regular_connections{0}, probe_connections{0};

  std::mutex conns_mu;
  std::unordered_set<Connection*> conns;  // live connections, for stop()

  // Destroyed in reverse order: the pool and acceptor before the io_context; everything the
  // connections touch (above) after it.
  net::io_context ioc;
  tcp::acceptor acceptor{ioc};
  std::optional<net::thread_pool> handlers;
  std::vector<std::thread> io_threads;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  net::steady_timer accept_retry{ioc};
  int port = -1;
  bool stopped = false;

  void accept();
  const Route* find(const std::string& method, const std::string& path, bool& path_known) const {
    auto p = routes.find(path);
    path_known = p != routes.end();
    if (!path_known) return nullptr;
    auto m = p->second.find(method);
    return m == p->second.end() ? nullptr : &m->second;
  }
};

// One client connection: a state machine on its strand. Every async operation holds a
// shared_ptr to it; the last one to finish destroys it.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(HttpServer::Impl& s, tcp::socket sock, ConnKind kind)
      : s_(s),
        sock_(std::move(sock)),
        timer_(sock_.get_executor()),
        kind_(kind),
        reject_(kind == ConnKind::kRejected) {
    if (kind_ == ConnKind::kRegular) ++s_.regular_connections;
    if (kind_ == ConnKind::kProbeOnly) ++s_.probe_connections;
    const uint64_t n = ++s_.open_connections;
    uint64_t peak = s_.peak_connections.load();
    while (n > peak && !s_.peak_connections.compare_exchange_weak(peak, n)) {
    }
    std::lock_guard lock(s_.conns_mu);
    s_.conns.insert(this);
  }
  ~Connection() {
    close();
    std::lock_guard lock(s_.conns_mu);
    s_.conns.erase(this);
  }

  void start() {
    beast::error_code ec;
    sock_.set_option(tcp::no_delay(true), ec);
    if (reject_) {
      HttpRequest req;
      HttpResponse res = s_.refuse(Refusal::kTooManyConnections, req);
      res.close = true;
      return write_response(std::move(res));
    }
    wait_idle();
  }

  // Stop-time teardown with no I/O thread running.
  void abandon() { close(); }

  // Runs fn(connection) on the connection's strand, from any thread. What other threads hold
  // (the engine's wake, a memory grant) is only a weak pointer and the hub: no executor that
  // could outlive the io_context, and nothing is posted once the server stops.
  template <typename Fn>
  static void post_to(const std::weak_ptr<Connection>& weak, WakeHub& hub, Fn fn) {
    std::lock_guard lock(hub.mu);
    if (!hub.alive) return;
    std::shared_ptr<Connection> self = weak.lock();
    if (!self) return;
    auto exec = self->sock_.get_executor();
    net::post(exec, [self = std::move(self), fn = std::move(fn)]() mutable { fn(*self); });
  }

 private:
  enum class Phase {
    kIdle,
    kHeaders,
    kMemoryWait,
    kBody,
    kHandling,
    kWriting,
    kStreaming,
    kLinger,
    kClosed
  };

  // --- timers: a generation number makes stale expiries harmless.
  template <typename Fn>
  void arm(double secs, Fn on_expiry) {
    const uint64_t gen = ++timer_gen_;
    timer_.expires_after(seconds(secs));
    timer_.async_wait([self = shared_from_this(), gen, on_expiry](beast::error_code ec) {
      if (ec || gen != self->timer_gen_ || self->phase_ == Phase::kClosed) return;
      on_expiry(*self);
    });
  }
  void disarm() {
    ++timer_gen_;
    timer_.cancel();
  }

  // --- reading a request.
  void wait_idle() {
    phase_ = Phase::kIdle;
    if (buf_.size() > 0) return read_headers();  // a pipelined request is already here
    buf_.shrink_to_fit();                        // idle connections hold no buffer
    arm(s_.cfg.keep_alive_timeout_s, [](Connection& c) { c.close(); });
    const uint64_t gen = ++io_gen_;
    sock_.async_wait(tcp::socket::wait_read,
                     [self = shared_from_this(), gen](beast::error_code ec) {
                       if (gen != self->io_gen_ || self->phase_ != Phase::kIdle) return;
                       if (ec) return self->close();
                       self->read_headers();
                     });
  }

  void read_headers() {
    phase_ = Phase::kHeaders;
    timed_out_ = false;
    req_ = HttpRequest{};
    parser_.emplace();
    parser_->header_limit((std::uint32_t)s_.cfg.max_header_bytes);
    parser_->body_limit(s_.cfg.max_body_bytes);
    arm(s_.cfg.header_timeout_s, [](Connection& c) {
      c.timed_out_ = true;
      beast::error_code ec;
      c.sock_.cancel(ec);
    });
    bhttp::async_read_header(
        sock_, buf_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
  }

  void on_header(beast::error_code ec) {
    if (phase_ != Phase::kHeaders) return;
    disarm();
    if (timed_out_) return refuse(Refusal::kHeaderTimeout);
    if (ec == bhttp::error::header_limit || ec == bhttp::error::buffer_overflow) {
      return refuse(Refusal::kHeadersTooLarge);
    }
    if (ec == bhttp::error::body_limit) return refuse(Refusal::kBodyTooLarge);
    if (ec == bhttp::error::end_of_stream || ec == net::error::eof ||
        ec == net::error::connection_reset || ec == net::error::operation_aborted) {
      return close();
    }
    if (ec) return refuse(Refusal::kBadRequest);
    const auto& msg = parser_->get();
    req_.method = std::string(msg.method_string());
    const std::string target(msg.target());
    const size_t q = target.find('?');
    req_.path = target.substr(0, q);
    if (q != std::string::npos) req_.query = target.substr(q + 1);
    // Counted before anything is copied: a flood of fields costs no allocation.
    const size_t n_fields = (size_t)std::distance(msg.begin(), msg.end());
    body_pending_ = !parser_->is_done();
    if (n_fields > s_.cfg.max_headers) return refuse(Refusal::kHeadersTooLarge);
    for (const auto& f : msg) {
      req_.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    }
    req_.arrival_ns = steady_ns();
    // A probe-only connection serves one request (a flood cannot keep its allowance).
    keep_alive_ = msg.keep_alive() && ++num_requests_ < s_.cfg.keep_alive_max_count &&
                  kind_ == ConnKind::kRegular;

    bool known = false;
    route_ = s_.find(req_.method, req_.path, known);
    if (kind_ == ConnKind::kProbeOnly && (route_ == nullptr || !route_->opt.probe)) {
      return refuse(Refusal::kTooManyConnections);
    }
    // The key is checked from the headers, before anything is reserved for the request.
    const bool authorised = s_.api_key.matches(req_.header("Authorization"));
    const bool needs_key =
        (route_ != nullptr && route_->opt.auth) ||
        (!s_.cfg.auth_prefix.empty() && req_.path.starts_with(s_.cfg.auth_prefix));
    if (needs_key && !authorised) return refuse(Refusal::kUnauthorized);
    if (route_ == nullptr) return refuse(known ? Refusal::kMethodNotAllowed : Refusal::kNotFound);
    uint64_t body_bytes = 0;
    if (body_pending_) {
      // Only authorised requests to routes that read a body may reserve request memory for
      // one: a stranger announcing 8 MiB on /health would otherwise hold it (issue 30).
      if (!authorised || !route_->takes_body) return refuse(Refusal::kBodyNotAllowed);
      const auto announced = parser_->content_length();
      body_bytes = announced ? *announced : s_.cfg.max_body_bytes;  // chunked
      if (body_bytes > s_.cfg.max_body_bytes) return refuse(Refusal::kBodyTooLarge);
    }
    if (route_->opt.door && check_door()) return;
    if (!body_pending_) return dispatch();

    phase_ = Phase::kMemoryWait;
    arm(s_.cfg.body_timeout_s, [](Connection& c) {
      if (c.s_.request_memory.cancel(c.memory_ticket_)) c.refuse(Refusal::kRequestMemory);
    });
    std::weak_ptr<Connection> weak = shared_from_this();
    memory_ticket_ = s_.request_memory.acquire(
        s_.cfg.reservation(body_bytes), [weak, hub = s_.hub](ByteLease lease) {
          post_to(weak, *hub,
                  [lease = std::make_shared<ByteLease>(std::move(lease))](Connection& c) {
                    c.on_memory(std::move(*lease));
                  });
        });
  }

  // Runs the route's door check; true when it answered (the request ends here, its body, if
  // any, unread and never given request memory).
  bool check_door() {
    std::optional<HttpResponse> early;
    try {
      early = route_->opt.door(req_);
    } catch (const std::exception& e) {
      LOG(ERROR, http) << req_.method << " " << req_.path << ": door check threw: " << e.what();
      refuse(Refusal::kInternal);
      return true;
    }
    if (!early) return false;
    req_.door_pass.reset();
    // A body left unread would be parsed as the next request: close after answering.
    early->close = early->close || body_pending_;
    send(std::move(*early));
    return true;
  }

  void on_memory(ByteLease lease) {
    if (phase_ != Phase::kMemoryWait) return;  // closed meanwhile: the lease goes back
    disarm();
    req_.lease = std::move(lease);
    phase_ = Phase::kBody;
    arm(s_.cfg.body_timeout_s, [](Connection& c) {
      c.timed_out_ = true;
      beast::error_code ec;
      c.sock_.cancel(ec);
    });
    if (iequals(req_.header("Expect"), "100-continue")) {
      static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
      net::async_write(sock_, net::buffer(kContinue),
                       [self = shared_from_this()](beast::error_code ec, size_t) {
                         if (self->phase_ != Phase::kBody) return;
                         if (ec) return self->close();
                         self->read_body();
                       });
      return;
    }
    read_body();
  }

  void read_body() {
    bhttp::async_read(
        sock_, buf_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->on_body(ec); });
  }

  void on_body(beast::error_code ec) {
    if (phase_ != Phase::kBody) return;
    disarm();
    if (timed_out_) return refuse(Refusal::kBodyTimeout);
    if (ec == bhttp::error::body_limit) return refuse(Refusal::kBodyTooLarge);
    if (ec) return close();
    body_pending_ = false;
    req_.body = std::move(parser_->get().body());
    dispatch();
  }

  // --- running the handler.
  void dispatch() {
    phase_ = Phase::kHandling;
    set_busy(true);
    parser_.reset();
    const Route* route = route_;
    if (route->opt.inline_io) {
      HttpResponse res = run_handler(s_, *route, req_);
      req_ = HttpRequest{};
      return send(std::move(res));
    }
    ++s_.handlers_queued;
    net::post(*s_.handlers, [self = shared_from_this(), route, req = std::move(req_)]() mutable {
      // asio's pool threads have no start hook: each names itself on its first job.
      thread_local const bool named = (set_thread_name("kvw-http"), true);
      (void)named;
      --self->s_.handlers_queued;
      ++self->s_.handlers_running;
      HttpResponse res = run_handler(self->s_, *route, req);
      req = HttpRequest{};  // body, parse and lease go back before the answer is written
      --self->s_.handlers_running;
      auto exec = self->sock_.get_executor();
      net::post(exec, [self = std::move(self), res = std::move(res)]() mutable {
        if (self->phase_ == Phase::kHandling) self->send(std::move(res));
      });
    });
  }

  static HttpResponse run_handler(HttpServer::Impl& s, const Route& route, HttpRequest& req) {
    HttpResponse res;
    try {
      route.handler(req, res);
    } catch (const std::bad_alloc&) {
      LOG(ERROR, http) << req.method << " " << req.path << ": handler ran out of memory";
      res = s.refuse(Refusal::kOutOfMemory, req);
    } catch (const std::exception& e) {
      LOG(ERROR, http) << req.method << " " << req.path << ": handler threw: " << e.what();
      res = s.refuse(Refusal::kInternal, req);
    }
    return res;
  }

  void send(HttpResponse res) {
    if (res.stream) return start_stream(std::move(res.stream), res.close);
    write_response(std::move(res));
  }

  void refuse(Refusal r) {
    HttpResponse res = s_.refuse(r, req_);
    // A body left unread would be parsed as the next request: close after answering.
    res.close = res.close || body_pending_ || r == Refusal::kBadRequest ||
                r == Refusal::kHeaderTimeout || r == Refusal::kBodyTimeout ||
                r == Refusal::kHeadersTooLarge;
    write_response(std::move(res));
  }

  // --- writing a whole response.
  void write_response(HttpResponse res) {
    phase_ = Phase::kWriting;
    const bool close_after = res.close || !keep_alive_ || reject_;
    out_.clear();
    append_head(out_, res.status, res.content_type, res.headers, close_after);
    out_ += "Content-Length: " + std::to_string(res.body.size()) + "\r\n\r\n";
    out_ += res.body;
    arm(s_.cfg.write_timeout_s, [](Connection& c) { c.close(); });
    net::async_write(sock_, net::buffer(out_),
                     [self = shared_from_this(), close_after](beast::error_code ec, size_t) {
                       if (self->phase_ != Phase::kWriting) return;
                       self->disarm();
                       self->out_.clear();
                       self->out_.shrink_to_fit();
                       self->set_busy(false);
                       if (ec) return self->close();
                       if (close_after) return self->linger_close();
                       self->wait_idle();
                     });
  }

  // --- streaming.
  void start_stream(std::shared_ptr<ResponseStream> stream, bool close_after) {
    phase_ = Phase::kStreaming;
    stream_ = std::move(stream);
    stream_close_ = close_after || !keep_alive_;
    head_sent_ = false;
    stream_ended_ = false;
    stream_pull_ = false;
    ++s_.active_streams;
    std::weak_ptr<Connection> weak = shared_from_this();
    stream_->start([weak, hub = s_.hub, pending = wake_pending_] {
      if (pending->exchange(true)) return;  // a wake is already on its way
      post_to(weak, *hub, [pending](Connection& c) {
        pending->store(false);
        c.pump();
      });
    });
    watch_disconnect();
    pump();
  }

  // Notices a client that hangs up while its answer is being prepared or streamed.
  void watch_disconnect() {
    const uint64_t gen = ++io_gen_;
    sock_.async_wait(
        tcp::socket::wait_read, [self = shared_from_this(), gen](beast::error_code ec) {
          if (gen != self->io_gen_ || self->phase_ != Phase::kStreaming || ec) return;
          char c;
          const ssize_t n = ::recv(self->sock_.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
          if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return self->close();
          if (n < 0) self->watch_disconnect();
          // n > 0: a pipelined request; it is read after this answer.
        });
  }

  void pump() {
    if (phase_ != Phase::kStreaming || !stream_) return;
    StreamOutput out;
    try {
      stream_->poll(out);
    } catch (const std::exception& e) {
      // One answer failed (e.g. bad_alloc building its JSON): it ends, the server goes on.
      LOG(ERROR, http) << req_.method << " " << req_.path << ": stream threw: " << e.what();
      if (head_sent_) return close();  // mid-body: no status can be sent any more
      end_stream();
      const bool oom = dynamic_cast<const std::bad_alloc*>(&e) != nullptr;
      return refuse(oom ? Refusal::kOutOfMemory : Refusal::kInternal);
    }
    const size_t before = pending_.size();
    if (out.head && !head_sent_) {
      head_sent_ = true;
      stream_chunked_ = out.chunked;
      if (!out.chunked) stream_close_ = stream_close_ || !out.end;
      append_head(pending_, out.status, out.content_type, out.headers, stream_close_);
      if (out.chunked) {
        pending_ += "Transfer-Encoding: chunked\r\n";
        if (out.content_type == "text/event-stream") pending_ += "Cache-Control: no-cache\r\n";
        pending_ += "\r\n";
      } else {
        pending_ += "Content-Length: " + std::to_string(out.data.size()) + "\r\n\r\n";
      }
    }
    if (!out.data.empty() && head_sent_) {
      if (stream_chunked_) {
        char size[24];
        std::snprintf(size, sizeof size, "%zx\r\n", out.data.size());
        pending_ += size;
        pending_ += out.data;
        pending_ += "\r\n";
      } else {
        pending_ += out.data;
      }
    }
    if (out.end && head_sent_) {
      if (stream_chunked_) pending_ += "0\r\n\r\n";
      stream_ended_ = true;
    }
    if (out.more && !stream_ended_) stream_pull_ = true;
    s_.stream_buffered += pending_.size() - before;
    // A slow consumer is a client that falls behind: bytes pile up behind a write it has not
    // finished taking. What one poll hands over while the client is keeping up is accepted
    // whatever its size (a whole non-streamed answer: 2,000 tokens with logprobs are ~0.5 MiB
    // and were once dropped here, issue 30); a client that stops reading meets the write
    // timeout, which counts time without progress.
    if (write_in_flight_ && pending_.size() > s_.cfg.stream_buffer_bytes) {
      ++s_.slow_total;
      s_.refuse(Refusal::kSlowConsumer, req_);
      return close();
    }
    flush();
  }

  // Writes what is unsent, piece by piece as the socket takes it: the write timeout restarts
  // on every piece, so it measures a client that stops reading, not the answer's size.
  void flush() {
    if (write_in_flight_) return;
    if (writing_off_ == writing_.size()) {
      writing_.clear();
      writing_off_ = 0;
      if (writing_.capacity() > (64u << 10)) writing_.shrink_to_fit();
      if (pending_.empty()) {
        if (stream_ended_) return finish_stream();
        if (stream_pull_) {  // the client took the last part: ask for the next
          stream_pull_ = false;
          net::post(sock_.get_executor(), [self = shared_from_this()] { self->pump(); });
        }
        return;
      }
      writing_.swap(pending_);
    }
    write_in_flight_ = true;
    arm(s_.cfg.write_timeout_s, [](Connection& c) {
      ++c.s_.slow_total;
      c.s_.refuse(Refusal::kSlowConsumer, c.req_);
      c.close();
    });
    sock_.async_write_some(
        net::buffer(writing_.data() + writing_off_, writing_.size() - writing_off_),
        [self = shared_from_this()](beast::error_code ec, size_t n) {
          self->on_stream_written(ec, n);
        });
  }

  void on_stream_written(beast::error_code ec, size_t n) {
    write_in_flight_ = false;
    if (phase_ != Phase::kStreaming) {  // closed meanwhile: end_stream left these bytes to us
      s_.stream_buffered -= writing_.size() - writing_off_;
      writing_.clear();
      writing_off_ = 0;
      return;
    }
    s_.stream_buffered -= n;
    writing_off_ += n;
    disarm();
    if (ec) return close();
    flush();
  }

  void finish_stream() {
    end_stream();
    set_busy(false);
    ++io_gen_;  // the disconnect watch is now stale
    beast::error_code ec;
    sock_.cancel(ec);
    if (stream_close_) return linger_close();
    wait_idle();
  }

  void end_stream() {
    if (!stream_) return;
    stream_.reset();  // cancels what is unfinished (client gone)
    --s_.active_streams;
    s_.stream_buffered -= pending_.size() + (write_in_flight_ ? 0 : writing_.size() - writing_off_);
    pending_.clear();
    pending_.shrink_to_fit();
    if (!write_in_flight_) {
      writing_.clear();
      writing_.shrink_to_fit();
      writing_off_ = 0;
    }
  }

  // A request between its handler and the last byte of its answer: stop() lets these finish.
  void set_busy(bool busy) {
    if (busy == busy_) return;
    busy_ = busy;
    if (busy) {
      ++s_.busy;
    } else {
      --s_.busy;
    }
  }

  // --- closing. After an answer with unread input, half-close and drain for a moment so the
  // client reads the answer instead of a reset.
  void linger_close() {
    phase_ = Phase::kLinger;
    beast::error_code ec;
    sock_.shutdown(tcp::socket::shutdown_send, ec);
    buf_.clear();
    buf_.shrink_to_fit();
    arm(2.0, [](Connection& c) { c.close(); });
    drain_input();
  }

  // Discards input in the kernel: recv with MSG_TRUNC on TCP drops the bytes without copying
  // them, so an unread 8 MiB body refused at the door costs a few syscalls per 1 MiB instead
  // of 16,384 reads of 512 bytes. At most 16 MiB per wake-up, so a flood cannot hold the I/O
  // thread.
  void drain_input() {
    const uint64_t gen = ++io_gen_;
    sock_.async_wait(
        tcp::socket::wait_read, [self = shared_from_this(), gen](beast::error_code ec) {
          if (gen != self->io_gen_ || self->phase_ != Phase::kLinger) return;
          if (ec) return self->close();
          for (int i = 0; i < 16; ++i) {
            const ssize_t n =
                ::recv(self->sock_.native_handle(), nullptr, 1u << 20, MSG_TRUNC | MSG_DONTWAIT);
            if (n > 0) continue;
            if (n < 0 && errno == EINTR) continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
            return self->close();  // the client closed (0) or failed
          }
          self->drain_input();
        });
  }

  void close() {
    if (phase_ == Phase::kClosed) return;
    if (phase_ == Phase::kMemoryWait) s_.request_memory.cancel(memory_ticket_);
    phase_ = Phase::kClosed;
    if (kind_ == ConnKind::kRegular) --s_.regular_connections;
    if (kind_ == ConnKind::kProbeOnly) --s_.probe_connections;
    ++timer_gen_;
    beast::error_code ec;
    timer_.cancel();
    end_stream();
    set_busy(false);
    sock_.shutdown(tcp::socket::shutdown_both, ec);
    sock_.close(ec);
    req_ = HttpRequest{};
    parser_.reset();
    --s_.open_connections;
  }

  HttpServer::Impl& s_;
  tcp::socket sock_;
  net::steady_timer timer_;
  const ConnKind kind_;
  const bool reject_;
  Phase phase_ = Phase::kIdle;
  uint64_t timer_gen_ = 0;
  uint64_t io_gen_ = 0;
  bool timed_out_ = false;
  bool keep_alive_ = true;
  bool body_pending_ = false;
  bool busy_ = false;
  size_t num_requests_ = 0;
  beast::flat_buffer buf_{(std::size_t)64 << 10};
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  HttpRequest req_;
  const Route* route_ = nullptr;
  uint64_t memory_ticket_ = 0;
  std::string out_;
  // Streaming.
  std::shared_ptr<ResponseStream> stream_;
  std::shared_ptr<std::atomic<bool>> wake_pending_ = std::make_shared<std::atomic<bool>>(false);
  std::string pending_, writing_;
  size_t writing_off_ = 0;  // bytes of writing_ already sent
  bool write_in_flight_ = false;
  bool head_sent_ = false;
  bool stream_chunked_ = true;
  bool stream_ended_ = false;
  bool stream_close_ = false;
  bool stream_pull_ = false;  // the stream said `more`: poll again once everything is written
};

void HttpServer::Impl::accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket sock) {
    if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
    if (ec) {
      // Out of file descriptors (or similar): pause rather than spin.
      LOG(WARN, http) << "accept: " << ec.message();
      accept_retry.expires_after(std::chrono::milliseconds(100));
      accept_retry.async_wait([this](beast::error_code e) {
        if (!e) accept();
      });
      return;
    }
    ++accepted_total;
    // Probes get their own allowance beyond max_connections, so a connection flood cannot
    // fail the liveness probe and get the process restarted.
    const ConnKind kind = regular_connections.load() < cfg.max_connections ? ConnKind::kRegular
                          : probe_connections.load() < cfg.max_probe_connections
                              ? ConnKind::kProbeOnly
                              : ConnKind::kRejected;
    if (kind == ConnKind::kRejected) ++rejected_total;
    std::make_shared<Connection>(*this, std::move(sock), kind)->start();
    accept();
  });
}

HttpServer::HttpServer(HttpServerConfig cfg, RefusalHook refuse)
    : impl_(std::make_unique<Impl>(std::move(cfg), std::move(refuse))) {}

HttpServer::~HttpServer() {
  stop();
}

void HttpServer::add_route(const std::string& method, const std::string& path, Handler handler,
                           RouteOptions opt) {
  const bool takes_body = method != "GET" && method != "HEAD";
  impl_->routes[path][method] = Route{std::move(handler), std::move(opt), takes_body};
}

Status HttpServer::start() {
  Impl& s = *impl_;
  KVW_RETURN_IF_ERROR(s.cfg.validate());
  const std::string where = s.cfg.host + ":" + std::to_string(s.cfg.port);
  beast::error_code ec;
  tcp::resolver resolver(s.ioc);
  auto results = resolver.resolve(s.cfg.host, std::to_string(s.cfg.port),
                                  tcp::resolver::passive | tcp::resolver::numeric_service, ec);
  if (ec || results.empty()) return Error{"cannot resolve " + where + ": " + ec.message()};
  const tcp::endpoint ep = results.begin()->endpoint();
  s.acceptor.open(ep.protocol(), ec);
  if (!ec) s.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(ep, ec);
  if (!ec) s.acceptor.listen(s.cfg.listen_backlog, ec);
  if (ec) {
    return Error{"cannot listen on " + where + " (" + ec.message() +
                 "; address in use or not available? see --host/--port)"};
  }
  s.port = s.acceptor.local_endpoint().port();
  s.handlers.emplace(s.cfg.handler_threads);
  s.work.emplace(s.ioc.get_executor());
  s.accept();
  for (int i = 0; i < s.cfg.io_threads; ++i) {
    s.io_threads.emplace_back([&s, i] {
      set_thread_name("kvw-io-" + std::to_string(i));
      // An exception escaping a connection's handler ends that handler, not the thread (and
      // the process): run() may be entered again after it throws.
      while (true) {
        try {
          s.ioc.run();
          return;
        } catch (const std::exception& e) {
          LOG(ERROR, http) << "I/O thread: a connection handler threw: " << e.what();
        }
      }
    });
  }
  return Status::ok_status();
}

int HttpServer::port() const {
  return impl_->port;
}

const HttpServerConfig& HttpServer::config() const {
  return impl_->cfg;
}

void HttpServer::stop_accepting() {
  Impl& s = *impl_;
  net::post(s.ioc, [&s] {
    beast::error_code ec;
    s.acceptor.close(ec);
    s.accept_retry.cancel();
  });
}

void HttpServer::stop() {
  Impl& s = *impl_;
  if (s.stopped) return;
  s.stopped = true;
  if (s.io_threads.empty()) return;  // never started
  stop_accepting();
  s.handlers->join();  // handlers in flight finish and post their answers
  // Answers already accepted get their last bytes out (bounded: a client that does not read
  // is dropped by the write timeout, and stop() waits at most 5 s).
  for (int i = 0; i < 500 && s.busy.load() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  {
    std::lock_guard lock(s.hub->mu);
    s.hub->alive = false;
  }
  s.work.reset();
  s.ioc.stop();
  for (std::thread& t : s.io_threads) t.join();
  s.io_threads.clear();
  // No thread runs now: drop every connection's stream (cancelling its engine requests) while
  // the engine is still up. The connections themselves go with the io_context's handlers.
  std::vector<Connection*> live;
  {
    std::lock_guard lock(s.conns_mu);
    live.assign(s.conns.begin(), s.conns.end());
  }
  for (Connection* c : live) c->abandon();
}

HttpServerStats HttpServer::stats() const {
  const Impl& s = *impl_;
  return {.open_connections = s.open_connections.load(),
          .peak_connections = s.peak_connections.load(),
          .active_streams = s.active_streams.load(),
          .handlers_queued = s.handlers_queued.load(),
          .handlers_running = s.handlers_running.load(),
          .accepted_total = s.accepted_total.load(),
          .probe_connections = s.probe_connections.load(),
          .rejected_connections_total = s.rejected_total.load(),
          .slow_consumers_total = s.slow_total.load(),
          .stream_buffered_bytes = s.stream_buffered.load(),
          .request_memory = s.request_memory.stats()};
}

}  // namespace kvw::http
