// http/server_impl.h: what the transport's files share (http_server.cc accepts and owns,
// connection.cc reads requests and runs handlers, connection_stream.cc writes answers): the
// server's state (HttpServer::Impl), its routes and the Asio names. Internal to src/http.
// Thread safety: Impl's counters are atomics; routes are fixed before start().
#pragma once

#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "http/api_key.h"
#include "http/http_server.h"

namespace kvw::http {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = net::ip::tcp;

inline uint64_t steady_ns() {
  return (uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

inline std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(s));
}

// The status line and headers of an answer (no blank line: the caller adds framing).
void append_head(std::string& out, int status, const std::string& content_type,
                 const Headers& headers, bool close);
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
      held_now{0}, held_total{0}, held_over_budget_total{0}, stream_buffered{0}, busy{0},
      header_bytes_copied{0};
  // Connections by kind (ConnKind), for the limits at accept.
  std::atomic<uint64_t> regular_connections{0}, probe_connections{0};

  std::mutex conns_mu;
  std::unordered_set<Connection*> conns;  // live connections, for stop()

  // Destroyed in reverse order: the pool and acceptor before the io_context; everything the
  // connections touch (above) after it.
  net::io_context ioc;
  // The acceptor, its retry timer and stop_accepting()'s close run on one strand: the accept
  // handler re-arms the acceptor on whichever I/O thread ran it, and a close posted to the bare
  // io_context could run beside it on another (a data race TSan saw in CI).
  net::strand<net::io_context::executor_type> accept_strand{net::make_strand(ioc)};
  tcp::acceptor acceptor{accept_strand};
  std::optional<net::thread_pool> handlers;
  std::vector<std::thread> io_threads;
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  net::steady_timer accept_retry{accept_strand};
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

}  // namespace kvw::http
