// The request side of a connection: reading headers and body within their limits and the
// request-memory budget, the key and door checks, running the handler, and closing.
#include "http/connection.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <new>
#include <utility>

#include "core/log.h"
#include "core/thread_name.h"

namespace kvw::http {

Connection::~Connection() {
  close();
  std::lock_guard lock(s_.conns_mu);
  s_.conns.erase(this);
}

void Connection::start() {
  // TCP_NODELAY (each SSE event leaves at once) and SO_SNDBUF come from the listener.
  beast::error_code ec;
  // Synchronous reads return would_block instead of waiting (read_headers reads at once).
  sock_.non_blocking(true, ec);
  if (reject_) {
    HttpRequest req;
    HttpResponse res = s_.refuse(Refusal::kTooManyConnections, req);
    res.close = true;
    return write_response(std::move(res));
  }
  read_headers(/*at_once=*/true);  // a client usually sends its request right after connecting
}

void Connection::arm(double secs, Expiry on_expiry) {
  deadline_ = std::chrono::steady_clock::now() + seconds(secs);
  on_expiry_ = on_expiry;
  if (timer_waiting_ && timer_.expiry() <= deadline_) return;  // it wakes first, then re-waits
  wait_for_deadline();
}

void Connection::wait_for_deadline() {
  const uint64_t gen = ++timer_gen_;
  timer_waiting_ = true;
  timer_.expires_at(deadline_);  // a later pending wait completes aborted (stale by gen)
  timer_.async_wait([self = shared_from_this(), gen](beast::error_code ec) {
    if (gen != self->timer_gen_) return;
    self->timer_waiting_ = false;
    if (ec || self->phase_ == Phase::kClosed || self->on_expiry_ == nullptr) return;
    if (std::chrono::steady_clock::now() < self->deadline_) return self->wait_for_deadline();
    std::exchange(self->on_expiry_, nullptr)(*self);
  });
}

void Connection::wait_idle() {
  phase_ = Phase::kIdle;
  // A pipelined request is already here. Read asynchronously: answering it at once could
  // recurse (answer -> wait_idle -> read) as deep as the client pipelines.
  if (buf_.size() > 0) return read_headers(/*at_once=*/false);
  buf_.shrink_to_fit();  // idle connections hold no buffer
  arm(s_.cfg.keep_alive_timeout_s, [](Connection& c) { c.close(); });
  const uint64_t gen = ++io_gen_;
  sock_.async_wait(tcp::socket::wait_read, [self = shared_from_this(), gen](beast::error_code ec) {
    if (gen != self->io_gen_ || self->phase_ != Phase::kIdle) return;
    if (ec) return self->close();
    self->read_headers(/*at_once=*/true);
  });
}

void Connection::read_headers(bool at_once) {
  phase_ = Phase::kHeaders;
  timed_out_ = false;
  req_ = HttpRequest{};
  parser_.emplace();
  parser_->header_limit((std::uint32_t)s_.cfg.max_header_bytes);
  parser_->body_limit(s_.cfg.max_body_bytes);
  if (at_once) {
    // Headers that have arrived whole (nearly always) are parsed here, and a refusal at the
    // door is answered in this same turn of the I/O thread: an async read completes through
    // the scheduler, often on the other I/O thread.
    beast::error_code ec;
    bhttp::read_header(sock_, buf_, *parser_, ec);  // the socket is non-blocking
    if (ec != net::error::would_block) return on_header(ec);
    if (buf_.size() == 0 && !parser_->got_some()) return wait_idle();  // nothing came yet
  }
  arm(s_.cfg.header_timeout_s, [](Connection& c) {
    c.timed_out_ = true;
    beast::error_code ec;
    c.sock_.cancel(ec);
  });
  bhttp::async_read_header(
      sock_, buf_, *parser_,
      [self = shared_from_this()](beast::error_code ec, size_t) { self->on_header(ec); });
}

void Connection::on_header(beast::error_code ec) {
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
  uint64_t copied = 0;
  for (const auto& f : msg) {
    req_.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
    copied += f.name_string().size() + f.value().size();
  }
  s_.header_bytes_copied += copied;
  req_.arrival_ns = steady_ns();
  http10_ = msg.version() < 11;
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
  const bool needs_key = (route_ != nullptr && route_->opt.auth) ||
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
        post_to(weak, *hub, [lease = std::make_shared<ByteLease>(std::move(lease))](Connection& c) {
          c.on_memory(std::move(*lease));
        });
      });
}

bool Connection::check_door() {
  const double now_s = double(req_.arrival_ns) * 1e-9;
  req_.early_s = std::max(0.0, retry_at_s_ - now_s);
  std::optional<HttpResponse> early;
  try {
    early = route_->opt.door(req_);
  } catch (const std::exception& e) {
    LOG(ERROR, http) << req_.method << " " << req_.path << ": door check threw: " << e.what();
    refuse(Refusal::kInternal);
    return true;
  }
  retry_at_s_ = 0;  // set again below by a refusal that carries a Retry-After
  if (!early) return false;
  req_.door_pass.reset();
  // A body left unread would be parsed as the next request: skip it, or close after answering.
  if (body_pending_ && !early->close && keep_alive_ && skip_refused_body()) body_pending_ = false;
  early->close = early->close || body_pending_;
  // Taken before it is checked, so I/O threads racing for the last place cannot both get it.
  if (early->hold_s > 0 && s_.held_now.fetch_add(1) >= s_.cfg.max_held_refusals) {
    --s_.held_now;
    early->hold_s = 0;
    ++s_.held_over_budget_total;
  }
  for (const auto& [name, value] : early->headers) {
    if (iequals(name, "Retry-After"))
      retry_at_s_ = now_s + early->hold_s + std::atof(value.c_str());
  }
  if (early->hold_s > 0) {
    phase_ = Phase::kHolding;
    held_ = std::move(*early);
    ++s_.held_total;
    arm(held_->hold_s, [](Connection& c) {
      --c.s_.held_now;
      c.send(*std::exchange(c.held_, std::nullopt));
    });
    return true;
  }
  send(std::move(*early));
  return true;
}

bool Connection::skip_refused_body() {
  const auto announced = parser_->content_length();
  if (!announced || *announced > s_.cfg.max_discard_bytes) return false;  // chunked or large
  // A client awaiting 100 Continue may or may not send the body now: only a close is safe.
  if (!req_.header("Expect").empty()) return false;
  const uint64_t in_buffer = std::min<uint64_t>(buf_.size(), *announced);
  buf_.consume(in_buffer);  // whatever follows it is the next (pipelined) request
  discard_left_ = *announced - in_buffer;
  // Dropped now, before the answer: the rest of a body sent with its headers is here already,
  // so no wait for it is needed after the answer. A client gone is noticed after the answer.
  if (discard_left_ > 0 && !drop_arrived_body()) keep_alive_ = false;
  return true;
}

bool Connection::drop_arrived_body() {
  while (discard_left_ > 0) {
    const ssize_t n = ::recv(sock_.native_handle(), nullptr,
                             std::min<uint64_t>(discard_left_, 1u << 20), MSG_TRUNC | MSG_DONTWAIT);
    if (n > 0) {
      discard_left_ -= uint64_t(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);  // else closed (0) or failed
  }
  return true;
}

void Connection::discard_body() {
  phase_ = Phase::kDiscarding;
  if (discard_left_ == 0) return wait_idle();
  arm(s_.cfg.body_timeout_s, [](Connection& c) { c.close(); });
  const uint64_t gen = ++io_gen_;
  sock_.async_wait(tcp::socket::wait_read, [self = shared_from_this(), gen](beast::error_code ec) {
    if (gen != self->io_gen_ || self->phase_ != Phase::kDiscarding) return;
    if (ec || !self->drop_arrived_body()) return self->close();
    self->disarm();
    self->discard_body();
  });
}

void Connection::on_memory(ByteLease lease) {
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

void Connection::read_body() {
  bhttp::async_read(
      sock_, buf_, *parser_,
      [self = shared_from_this()](beast::error_code ec, size_t) { self->on_body(ec); });
}

void Connection::on_body(beast::error_code ec) {
  if (phase_ != Phase::kBody) return;
  disarm();
  if (timed_out_) return refuse(Refusal::kBodyTimeout);
  if (ec == bhttp::error::body_limit) return refuse(Refusal::kBodyTooLarge);
  if (ec) return close();
  body_pending_ = false;
  req_.body = std::move(parser_->get().body());
  dispatch();
}

void Connection::dispatch() {
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

HttpResponse Connection::run_handler(HttpServer::Impl& s, const Route& route, HttpRequest& req) {
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

void Connection::send(HttpResponse res) {
  if (res.stream) return start_stream(std::move(res.stream), res.close);
  write_response(std::move(res));
}

void Connection::refuse(Refusal r) {
  HttpResponse res = s_.refuse(r, req_);
  // A body left unread would be parsed as the next request: close after answering.
  res.close = res.close || body_pending_ || r == Refusal::kBadRequest ||
              r == Refusal::kHeaderTimeout || r == Refusal::kBodyTimeout ||
              r == Refusal::kHeadersTooLarge;
  write_response(std::move(res));
}

void Connection::release_probe_slot() {
  if (kind_ != ConnKind::kProbeOnly || probe_slot_released_) return;
  probe_slot_released_ = true;
  --s_.probe_connections;
}

void Connection::set_busy(bool busy) {
  if (busy == busy_) return;
  busy_ = busy;
  if (busy) {
    ++s_.busy;
  } else {
    --s_.busy;
  }
}

void Connection::linger_close() {
  phase_ = Phase::kLinger;
  beast::error_code ec;
  sock_.shutdown(tcp::socket::shutdown_send, ec);
  buf_.clear();
  buf_.shrink_to_fit();
  arm(2.0, [](Connection& c) { c.close(); });
  drain_input();
}

void Connection::drain_input() {
  const uint64_t gen = ++io_gen_;
  sock_.async_wait(tcp::socket::wait_read, [self = shared_from_this(), gen](beast::error_code ec) {
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

void Connection::close() {
  if (phase_ == Phase::kClosed) return;
  if (phase_ == Phase::kMemoryWait) s_.request_memory.cancel(memory_ticket_);
  phase_ = Phase::kClosed;
  if (kind_ == ConnKind::kRegular) --s_.regular_connections;
  release_probe_slot();
  ++timer_gen_;  // the pending wait (it holds the connection) completes aborted and stale
  on_expiry_ = nullptr;
  timer_waiting_ = false;
  beast::error_code ec;
  timer_.cancel();
  hangup_timer_.cancel();
  end_stream();
  set_busy(false);
  sock_.shutdown(tcp::socket::shutdown_both, ec);
  sock_.close(ec);
  req_ = HttpRequest{};
  if (held_) --s_.held_now;
  held_.reset();
  parser_.reset();
  --s_.open_connections;
}

}  // namespace kvw::http
