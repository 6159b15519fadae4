// http/http_server.h: kvwarden's event-driven HTTP/1.1 server (Boost.Asio + Boost.Beast's
// parser). A few I/O threads run every connection as a small state machine on a strand; no
// connection, idle or streaming, holds a thread:
//  - idle keep-alive connections wait in epoll with no buffer (closed after keep_alive_timeout_s);
//  - headers must be complete header_timeout_s after the first byte (slowloris: 408), within
//    max_header_bytes / max_headers (431); an announced body over max_body_bytes is refused from
//    the headers alone (413); the body must arrive within body_timeout_s (408);
//  - before its body is read, a request reserves request memory (ByteBudget): body_bytes x
//    reserve_per_body_byte + reserve_fixed_bytes. When the budget is spent the body is not read
//    (back-pressure) until memory comes back; past body_timeout_s the answer is 503;
//  - a route's door check (RouteOptions::door) may answer from the request line and headers
//    alone, before request memory is reserved or the body read (admission refusals); a small
//    refused body is skipped and the connection kept, so retries need no reconnect;
//  - the API key (when set) is checked from the headers, in constant time, before anything is
//    reserved; a request without it may not send a body at all (no route open without the key
//    takes one), and routes registered for GET/HEAD take no body, so neither reserves request
//    memory (413 from the headers);
//  - past max_connections, up to max_probe_connections more are accepted for probe routes
//    (RouteOptions::probe: /health, /ready, /metrics) only, one request each; past both, a new
//    connection gets 503 + Retry-After at once and is closed;
//  - handlers marked inline (probes, /metrics) run on the I/O thread; the rest run on a small
//    handler pool (parsing, tokenising). A handler answers at once or returns a ResponseStream,
//    which is polled on the connection's strand when it wakes the connection;
//  - a stream whose client falls behind (more than stream_buffer_bytes queued behind a write it
//    has not finished taking) or accepts no bytes for write_timeout_s is dropped, so the engine
//    never waits for a client and a slow client costs at most stream_buffer_bytes beyond what
//    one poll handed over (a whole non-streamed answer is written in full to a client that
//    reads it, however large);
//  - TCP_NODELAY on every connection (each SSE event leaves at once), and SO_SNDBUF from the
//    stream budget (socket_send_buffer_bytes), so the kernel's copy of an answer is bounded too
//    (both set on the listener, which Linux copies to every accepted connection);
//  - a door refusal is answered in the turn of the I/O thread that finds its headers: parsed
//    from a non-blocking read, the answer sent with one send, a small body dropped as it
//    arrives; no async round trip, no timer re-armed (one deadline per connection);
//  - HTTP/1.0 clients get streams unchunked, ended by closing the connection.
// Thread safety: add_route and start from one controlling thread before serving; stop() from
// that thread; stats() from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/status.h"
#include "http/byte_budget.h"
#include "http/http_message.h"

namespace kvw::http {

struct HttpServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port
  int io_threads = 2;
  int handler_threads = 4;
  size_t max_connections = 2048;
  size_t max_probe_connections = 16;  // beyond max_connections, for probe routes only
  int listen_backlog = 4096;          // capped by net.core.somaxconn
  double header_timeout_s = 10;
  double body_timeout_s = 60;  // headers complete -> body read (includes waiting for memory)
  double keep_alive_timeout_s = 5;
  double write_timeout_s = 30;
  size_t keep_alive_max_count = 1000;  // requests per connection
  size_t max_header_bytes = 32768;     // request line + headers
  size_t max_headers = 100;
  size_t max_body_bytes = 8u << 20;
  // A body refused at the door (from its headers) of at most this many bytes is discarded
  // unread (recv MSG_TRUNC) and the connection kept open, so a client that retries does not pay
  // a new connection per refusal; a larger or chunked one closes the connection after the answer.
  size_t max_discard_bytes = 1u << 20;
  // Door refusals held at once (HttpResponse::hold_s): each is a connection and a timer, and
  // past this many a refusal is written at once, so holds never take every connection.
  size_t max_held_refusals = 1024;
  size_t stream_buffer_bytes = 64u << 10;  // unsent bytes one stream may queue behind a write
  uint64_t request_memory_bytes = 64ull << 20;
  uint64_t reserve_per_body_byte = 4;  // body + parsed JSON + rendered prompt
  uint64_t reserve_fixed_bytes = 256u << 10;
  int retry_after_s = 1;             // Retry-After on the transport's own 503s
  std::string api_key;               // empty: no auth
  std::string auth_prefix = "/v1/";  // every path under it needs the key (known or not)

  // SO_SNDBUF for every connection: Linux doubles the value for its bookkeeping, so the kernel
  // may hold kernel_send_buffer_bytes() of a slow reader's answer (1-4 MiB by default, issue 30).
  int socket_send_buffer_bytes() const { return (int)(stream_buffer_bytes / 2); }
  uint64_t kernel_send_buffer_bytes() const { return 2 * (uint64_t)socket_send_buffer_bytes(); }
  // The request memory one body of `body_bytes` reserves.
  uint64_t reservation(uint64_t body_bytes) const {
    return body_bytes * reserve_per_body_byte + reserve_fixed_bytes;
  }
  Status validate() const;
};

// Answers the transport gives on its own; the server's hook writes their bodies.
enum class Refusal {
  kBadRequest,          // 400: malformed HTTP
  kUnauthorized,        // 401
  kNotFound,            // 404
  kMethodNotAllowed,    // 405
  kHeaderTimeout,       // 408: headers not complete in time
  kBodyTimeout,         // 408: body not complete in time
  kBodyTooLarge,        // 413
  kBodyNotAllowed,      // 413: a body on a route that takes none, or without the API key
  kHeadersTooLarge,     // 431
  kTooManyConnections,  // 503 at accept
  kRequestMemory,       // 503: request memory stayed spent for body_timeout_s
  kSlowConsumer,        // stream dropped: over stream_buffer_bytes or write timeout (no answer)
  kInternal,            // 500: a handler threw
  kOutOfMemory,         // 503: a handler ran out of memory (std::bad_alloc)
};
int refusal_status(Refusal r);

struct HttpServerStats {
  uint64_t open_connections = 0;
  uint64_t peak_connections = 0;
  uint64_t active_streams = 0;
  uint64_t handlers_queued = 0;  // requests waiting for a handler thread
  uint64_t handlers_running = 0;
  uint64_t accepted_total = 0;
  uint64_t probe_connections = 0;           // now: accepted beyond max_connections
  uint64_t rejected_connections_total = 0;  // over max_connections (+ probe allowance)
  uint64_t slow_consumers_total = 0;
  uint64_t held_refusals = 0;  // now: door refusals waiting out their hold (hold_s)
  uint64_t held_refusals_total = 0;
  uint64_t held_refusals_over_budget_total = 0;  // written at once: max_held_refusals were held
  uint64_t stream_buffered_bytes = 0;            // now: unsent bytes over all streams
  // Header names and values copied out of the parser into requests, in all: a request refused
  // for its headers (431) copies none, so a flood of fields costs no allocation per field.
  uint64_t header_bytes_copied_total = 0;
  ByteBudgetStats request_memory;
};

// A route's door check: runs on the I/O thread once the request line and headers are parsed
// (and the API key checked), before any request memory is reserved or a body byte is read.
// Returning a response answers the request with it at once: an unread body is then not read
// into request memory but discarded in the kernel (up to max_discard_bytes with a
// Content-Length the connection stays open for the next request; otherwise it closes after the
// answer), so a refusal costs the same whatever the body's size. Returning nullopt lets the
// request go on; the check may leave a DoorPass in req.door_pass for the handler. Must be
// quick, never block and never throw.
using DoorCheck = std::function<std::optional<HttpResponse>(HttpRequest& req)>;

struct RouteOptions {
  bool auth = false;         // needs the API key (paths under auth_prefix always do)
  bool inline_io = false;    // run on the I/O thread: must be quick and never block
  bool probe = false;        // also served on connections beyond max_connections
  DoorCheck door = nullptr;  // none
};

class HttpServer {
 public:
  // `refuse` builds the answer for a refusal (called on I/O threads; `req` has method, path and
  // headers, maybe no body). Must not throw.
  using RefusalHook = std::function<HttpResponse(Refusal, const HttpRequest& req)>;
  HttpServer(HttpServerConfig cfg, RefusalHook refuse);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Exact path match. Before start() only.
  void add_route(const std::string& method, const std::string& path, Handler handler,
                 RouteOptions opt = {});
  // Binds, listens and starts the threads. Errors name the address.
  Status start();
  int port() const;
  // Closes the listener (new connections are refused by the kernel); open ones go on.
  void stop_accepting();
  // Stops everything: handler pool, I/O threads; open streams are dropped (their destructors
  // cancel what they started). Idempotent.
  void stop();

  HttpServerStats stats() const;
  const HttpServerConfig& config() const;
  // Request memory for an answer built in a handler, now or not at all (ByteBudget::try_acquire).
  std::optional<ByteLease> try_reserve(uint64_t bytes);

  struct Impl;  // defined in server_impl.h (keeps Boost out of this header)

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvw::http
