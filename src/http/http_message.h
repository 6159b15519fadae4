// http/http_message.h: what route handlers see of HTTP/1.1 (plain values, no I/O): the request,
// the response, and ResponseStream for answers produced later (SSE, or a body that waits on the
// engine) without holding a thread.
// Thread safety: HttpRequest/HttpResponse are values owned by one handler at a time. A
// ResponseStream's poll() runs on its connection's strand; wake() may be called from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "http/byte_budget.h"

namespace kvw::http {

using Headers = std::vector<std::pair<std::string, std::string>>;

// What a route's door check (RouteOptions::door) hands on to its handler, e.g. an admission
// slot reserved before the body was read. The request owns it: it is destroyed with the
// request on every path (answered, refused, body timed out, connection dropped), so a
// reservation made at the door cannot leak.
class DoorPass {
 public:
  virtual ~DoorPass() = default;
};

// ASCII case-insensitive equality, for header names.
bool iequals(std::string_view a, std::string_view b);

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // without the query
  std::string query;   // after '?', undecoded; empty when none
  Headers headers;
  std::string body;
  uint64_t arrival_ns = 0;  // steady clock: when the request's headers were complete
  ByteLease lease;          // request memory reserved for this request (body, parse, prompt)
  std::unique_ptr<DoorPass> door_pass;  // set by the route's door check, if any
  // Seconds still to run of the Retry-After of the last door refusal on this connection: > 0
  // when the client came back before it was told to (the door may hold its next refusal).
  double early_s = 0;

  // Empty when absent; the first field of that name otherwise.
  std::string header(std::string_view name) const;
  bool has_header(std::string_view name) const;
};

// What a ResponseStream hands the transport on one poll.
struct StreamOutput {
  // The status line and headers, exactly once, before any data. A chunked head streams data
  // as it comes; an unchunked one must come with all of the body and `end`.
  bool head = false;
  int status = 200;
  std::string content_type;
  Headers headers;
  bool chunked = true;
  std::string data;  // body bytes (unframed)
  bool end = false;  // the body is complete
  // Pull: the stream has more to give without waiting for anything. The transport polls again
  // once everything handed over so far is written, so a large answer produced in parts holds
  // one part at a time, paced by the client's reading (no wake() needed for these polls).
  bool more = false;
};

// A response body produced over time. The transport calls start() once with a wake function;
// the stream calls wake() (any thread, cheap, coalesced by the transport) whenever poll() would
// return something new. Destroying the stream must stop its work (e.g. cancel engine requests):
// the transport drops it when the client goes away or reads too slowly.
class ResponseStream {
 public:
  virtual ~ResponseStream() = default;
  virtual void start(std::function<void()> wake) = 0;
  virtual void poll(StreamOutput& out) = 0;
};

struct HttpResponse {
  int status = 200;
  Headers headers;
  std::string content_type;
  std::string body;
  std::shared_ptr<ResponseStream> stream;  // when set: status, headers and body come from it
  bool close = false;                      // close the connection after this response
  // A door refusal is written only after this many seconds (refusal_hold_s), unless
  // HttpServerConfig::max_held_refusals are held already: a client that retries as soon as it
  // is answered then retries at most once per hold.
  double hold_s = 0;

  void set_header(std::string name, std::string value);
  void set_content(std::string b, std::string type) {
    body = std::move(b);
    content_type = std::move(type);
  }
};

using Handler = std::function<void(HttpRequest&, HttpResponse&)>;

// The reason phrase for a status ("Too Many Requests").
const char* status_reason(int status);

}  // namespace kvw::http
