// http/http_server.cc: the server's life (listen, accept within the connection limits, I/O
// threads, stop) and its configuration; connections are connection.h.
#include "http/http_server.h"

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "core/log.h"
#include "core/thread_name.h"
#include "http/connection.h"
#include "http/server_impl.h"

namespace kvw::http {

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
  // Set once here: Linux gives accepted connections the listener's TCP_NODELAY and SO_SNDBUF,
  // which saves two setsockopt calls per connection (a refusal on a new connection is ~20
  // syscalls in all).
  if (!ec) s.acceptor.set_option(tcp::no_delay(true), ec);
  if (!ec) {
    s.acceptor.set_option(net::socket_base::send_buffer_size(s.cfg.socket_send_buffer_bytes()), ec);
  }
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

std::optional<ByteLease> HttpServer::try_reserve(uint64_t bytes) {
  return impl_->request_memory.try_acquire(bytes);
}

void HttpServer::stop_accepting() {
  Impl& s = *impl_;
  net::post(s.accept_strand, [&s] {
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
          .held_refusals = s.held_now.load(),
          .held_refusals_total = s.held_total.load(),
          .held_refusals_over_budget_total = s.held_over_budget_total.load(),
          .stream_buffered_bytes = s.stream_buffered.load(),
          .header_bytes_copied_total = s.header_bytes_copied.load(),
          .request_memory = s.request_memory.stats()};
}

}  // namespace kvw::http
