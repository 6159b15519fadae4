// tests/http_torture/raw_http.h: a deliberately dumb HTTP/1.1 client on raw POSIX sockets, so the
// torture tests can send bytes no real client would (broken JSON, invalid UTF-8, header floods,
// a request trickled one byte a second) and thousands of requests at once from one thread.
// Every call is bounded by a deadline and never blocks past it. Single-threaded; no shared state.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace kvw::torture {

using Clock = std::chrono::steady_clock;
using Millis = std::chrono::milliseconds;

// One HTTP response as it arrived (or did not).
struct RawResponse {
  int status = 0;                              // 0: no status line arrived
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;                            // de-chunked when Transfer-Encoding: chunked
  bool complete = false;   // a whole response (by Content-Length, chunks or close) arrived
  bool timed_out = false;  // the deadline passed first
  std::string error;       // connect/send/recv failure text, empty when none
  double latency_ms = 0;   // from the request's start to completion (reported, never asserted)

  std::string header(const std::string& lower_name) const;
  // "answered": a definite HTTP status arrived in a complete response.
  bool answered() const { return complete && status >= 100; }
  std::string describe() const;  // one line for failure messages
};

// Builds a request with Host and Connection: close; adds Content-Type/Length when body is set.
std::string make_request(std::string_view method, std::string_view target, std::string_view body,
                         std::string_view extra_headers = "");
std::string make_post_json(std::string_view target, std::string_view json);
std::string make_get(std::string_view target);

// A request to start `start_after` after the batch begins (open-loop load), with a label to
// count results by.
struct PlannedRequest {
  std::string raw;
  Millis start_after{0};
  std::string label;
};

// Sends every planned request on its own loopback connection from one poll loop and returns
// the responses in the same order. Reads while still sending, so an early 413 is seen. Requests
// still open at `deadline` (measured from the start) come back with timed_out = true.
std::vector<RawResponse> run_batch(uint16_t port, const std::vector<PlannedRequest>& requests,
                                   Millis deadline);

// One request, one connection.
RawResponse exchange(uint16_t port, const std::string& raw, Millis deadline = Millis{15000});

// Blocking non-blocking-socket helpers for tests that script the bytes themselves.
int connect_loopback(uint16_t port);  // returns fd (non-blocking) or -1
// Sends all bytes unless the peer closes; returns false on a send error.
bool send_all(int fd, std::string_view bytes, Millis deadline);
// Reads what is available within `wait`; returns false once the peer has closed or reset.
bool read_some(int fd, std::string& into, Millis wait);

// Finds a free loopback TCP port (bind to 0, read it back, close).
uint16_t free_port();

}  // namespace kvw::torture
