// loadgen/http_client.h: a single-threaded, non-blocking HTTP/1.1 client over epoll.
// One HttpClient talks to one host:port with a keep-alive connection pool; thousands of
// requests can be in flight at once and the caller drives everything with poll() from one
// thread (not thread-safe). Bodies may be content-length, chunked or until-close; body bytes
// are handed to the handler as they arrive, so SSE streams are timed per chunk.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"

namespace kvw::loadgen {

// "http://host:port/prefix" split into its parts (https is not supported).
struct Url {
  std::string host;
  int port = 80;
  std::string path_prefix;  // "" or "/something", no trailing '/'
};
Result<Url> parse_url(const std::string& url);

struct HttpRequest {
  std::string method = "GET";
  std::string path = "/";
  std::string body;
  std::string content_type = "application/json";
  double timeout_s = 600;  // from send to the last body byte
};

// Header names are lower-cased.
using HttpHeaders = std::vector<std::pair<std::string, std::string>>;

// Callbacks for one request. on_complete is called exactly once and is the last call; the
// client does not touch the handler afterwards, so on_complete may delete it.
class HttpHandler {
 public:
  virtual ~HttpHandler() = default;
  virtual void on_headers(int /*status*/, const HttpHeaders& /*headers*/) {}
  virtual void on_body(std::string_view /*bytes*/) {}
  // error is empty on success (any status); otherwise "timeout", "connect: ...", "reset", ...
  virtual void on_complete(const std::string& error) = 0;
};

class HttpClient {
 public:
  // Resolves host:port once; fails when the name does not resolve or epoll cannot be created.
  static Result<std::unique_ptr<HttpClient>> create(const std::string& host, int port);
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  // Queues the request on an idle keep-alive connection or a new one; never blocks.
  void start(HttpRequest request, HttpHandler* handler);
  // Waits up to timeout_ms for socket events and processes them (callbacks run here).
  void poll(int timeout_ms);
  // Fails every in-flight request with `reason` and closes its connection.
  void abort_all(const std::string& reason);

  size_t num_in_flight() const;
  size_t num_connections_opened() const { return num_opened_; }

  struct Connection;  // defined in http_client.cc

 private:
  HttpClient(int epoll_fd, std::vector<uint8_t> addr);
  void open_and_send(Connection* c);
  void on_event(Connection* c, uint32_t events);
  void handle_readable(Connection* c);
  void handle_writable(Connection* c);
  void fail_io(Connection* c, const std::string& error);
  bool consume(Connection* c, std::string_view data);
  bool parse_head(Connection* c, const std::string& head);
  bool consume_body(Connection* c, std::string_view data);
  void finish(Connection* c, const std::string& error);
  void close_connection(Connection* c);
  void expire_timeouts();

  int epoll_fd_ = -1;
  std::vector<uint8_t> addr_;                             // sockaddr storage of the resolved target
  std::string host_header_;                               // "host:port"
  std::vector<std::unique_ptr<Connection>> connections_;  // every open connection
  std::vector<std::unique_ptr<Connection>> graveyard_;    // closed during this poll()
  std::vector<Connection*> idle_;                         // keep-alive, no request
  std::vector<Connection*> deferred_;                     // failed inside start()
  size_t in_flight_ = 0;
  size_t num_opened_ = 0;
  double last_timeout_scan_s_ = 0;
};

// Blocking helper for set-up calls (/v1/models, /tokenize, /health): runs client.poll until done.
struct HttpResponse {
  int status = 0;
  HttpHeaders headers;
  std::string body;
};
Result<HttpResponse> fetch(HttpClient& client, HttpRequest request);

double monotonic_s();  // CLOCK_MONOTONIC seconds

}  // namespace kvw::loadgen
