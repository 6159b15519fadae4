// server/http_transport.h: the connection layer under cpp-httplib for `kvwarden serve`.
// Debian's precompiled httplib 0.11 listens with backlog 5, parks one pool thread per connection
// from accept on, and restarts its read timeout on every byte, so 1000 simultaneous connects
// overflow the accept queue and a few hundred slow or idle clients starve real ones.
// GatedHttpServer keeps httplib's parser, routing and response writing (process_request) and
// replaces the per-connection loop around it:
//  - the listen backlog is raised after bind (TransportConfig::listen_backlog);
//  - a gate thread (epoll, edge-triggered, MSG_PEEK) holds each connection until a request's
//    headers are complete; a client that misses header_timeout_s gets 408 and is closed, one
//    idle past keep_alive_timeout_s is closed; idle keep-alive connections wait there as well,
//    so the worker threads only ever run requests whose headers have arrived;
//  - workers run process_request over TransportStream, which caps header bytes (431), puts a
//    deadline on the body (body_timeout_s) and writes with MSG_NOSIGNAL.
// Thread safety: configure and bind from one thread; serve() blocks on the listener thread;
// shutdown() from the controlling thread after stop(). The static current_*() helpers act on
// the connection of the calling worker thread (for handlers).
#pragma once

#include <httplib.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace kvw::server {

struct TransportConfig {
  int worker_threads = 128;
  int read_timeout_s = 30;
  int write_timeout_s = 30;
  int keep_alive_timeout_s = 5;
  size_t keep_alive_max_count = 1000;
  double header_timeout_s = 10;     // first byte of a request -> end of its headers
  double body_timeout_s = 60;       // end of headers -> end of body
  size_t max_header_bytes = 32768;  // request line + headers
  size_t max_headers = 100;
  int listen_backlog = 4096;  // capped by net.core.somaxconn
  // Called (gate thread) for each connection the gate answers itself: 408 or 431.
  std::function<void(int status)> on_gate_refusal = nullptr;
};

class GatedHttpServer : public httplib::Server {
 public:
  explicit GatedHttpServer(TransportConfig cfg);
  ~GatedHttpServer() override;
  GatedHttpServer(const GatedHttpServer&) = delete;
  GatedHttpServer& operator=(const GatedHttpServer&) = delete;

  // Binds (port 0: any free port) and raises the backlog. Returns the port, or -1.
  int bind(const std::string& host, int port);
  // Accepts until stop(); blocks (run it on its own thread).
  void serve();
  // After stop() and serve() returned: stops the gate and joins the workers (they finish the
  // request they are on; streams see httplib's shutdown flag).
  void shutdown();

  // For handlers, about the request on the calling worker thread. 431 when its headers were
  // over the limits (0 otherwise).
  static int current_header_refusal();
  // The connection closes after this response (unread body bytes are not skipped).
  static void current_close_after_response();

 private:
  struct Waiting {
    double since = 0;       // entered the gate
    double first_byte = 0;  // first byte of the request seen (0: idle)
    size_t requests_left = 0;
  };

  bool process_and_close_socket(socket_t sock) override;
  void enter_gate(int fd, size_t requests_left);
  void gate_loop();
  void on_readable(int fd, double now);
  void sweep(double now);
  void refuse(int fd, int status);  // the gate's own 408 / 431, then close
  void serve_connection(int fd, size_t requests_left);

  const TransportConfig cfg_;
  int listen_fd_ = -1;  // recorded by the socket-options hook, for the backlog
  int epoll_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::mutex mu_;  // guards waiting_ and the epoll set membership
  std::unordered_map<int, Waiting> waiting_;
  std::vector<char> peek_;  // gate thread only
  std::thread gate_;
  std::unique_ptr<httplib::ThreadPool> workers_;
};

}  // namespace kvw::server
