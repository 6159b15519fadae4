// http/connection.h: one client connection of the HTTP server, a state machine on its strand:
// idle -> headers -> (memory wait -> body) -> handling -> writing or streaming -> idle or
// closed. Every async operation holds a shared_ptr to it; the last one to finish destroys it.
// connection.cc reads requests and runs handlers; connection_stream.cc writes answers.
// Thread safety: all methods on the connection's strand, except post_to (any thread).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "http/server_impl.h"

namespace kvw::http {

// One client connection: a state machine on its strand. Every async operation holds a
// shared_ptr to it; the last one to finish destroys it.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(HttpServer::Impl& s, tcp::socket sock, ConnKind kind)
      : s_(s),
        sock_(std::move(sock)),
        timer_(sock_.get_executor()),
        hangup_timer_(sock_.get_executor()),
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
  ~Connection();
  void start();

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
    kDiscarding,  // dropping the rest of a body refused at the door (keep-alive)
    kHolding,     // a door refusal waits out its hold (HttpResponse::hold_s) before it is sent
    kStreaming,
    kLinger,
    kClosed
  };

  // --- the connection's one deadline. A request moves it several times (idle, headers, write)
  // and a stream once per write, nearly always later: re-arming the Asio timer each time cost
  // a timer-queue update, an aborted handler through the scheduler and often a
  // timerfd_settime. So the timer is only re-armed when the deadline comes earlier than its
  // pending expiry; one that expires early waits again for the deadline. `on_expiry` runs
  // once, on the strand, unless disarm() or another arm() comes first.
  using Expiry = void (*)(Connection&);
  void arm(double secs, Expiry on_expiry);
  void disarm() { on_expiry_ = nullptr; }
  void wait_for_deadline();

  // --- reading a request.
  void wait_idle();
  // at_once: try a non-blocking read and parse first (only from a fresh stack: on_header may
  // answer and come back here); else, and for what has not arrived, an async read.
  void read_headers(bool at_once);
  void on_header(beast::error_code ec);

  // Runs the route's door check; true when it answered (the request ends here, its body, if
  // any, unread and never given request memory).
  bool check_door();
  // After a door refusal: whether the unread body can be skipped instead of closing (it has a
  // Content-Length within max_discard_bytes and no 100-continue is awaited). Takes the part
  // already in the read buffer, drops what has arrived behind it and leaves the rest (usually
  // nothing: a client sends a small body with its headers) in discard_left_.
  bool skip_refused_body();
  // Drops up to discard_left_ bytes that have arrived (recv MSG_TRUNC: no copy, no buffer);
  // exactly the body's, what follows is the next request. False when the client closed or the
  // socket failed.
  bool drop_arrived_body();
  // Drops the rest of discard_left_ as it arrives, then waits for the next request.
  void discard_body();
  void on_memory(ByteLease lease);
  void read_body();
  void on_body(beast::error_code ec);

  // --- running the handler.
  void dispatch();
  static HttpResponse run_handler(HttpServer::Impl& s, const Route& route, HttpRequest& req);
  void send(HttpResponse res);
  void refuse(Refusal r);

  // --- writing a whole response: sent at once when the socket takes it all (a refusal, most
  // small answers), else written asynchronously under the write timeout.
  void write_response(HttpResponse res);
  // The answer is out: close, skip the rest of a refused body, or wait for the next request.
  void after_write(bool close_after);

  // --- streaming.
  void start_stream(std::shared_ptr<ResponseStream> stream, bool close_after);

  // Notices a client that hangs up while its answer is being prepared or streamed.
  void watch_disconnect();

  // Bytes of a pipelined request arrived during an answer: they move into the read buffer
  // (where the next read_headers finds them), so the watch can go on noticing a hang-up. At
  // most max_header_bytes are taken; past that the client is asked, once a second, whether it
  // hung up (POLLRDHUP sees a FIN behind unread data).
  void take_pipelined();
  void pump();

  // Writes what is unsent, piece by piece as the socket takes it: the write timeout restarts
  // on every piece, so it measures a client that stops reading, not the answer's size.
  void flush();
  void on_stream_written(beast::error_code ec, size_t n);
  void finish_stream();
  void end_stream();

  // A request between its handler and the last byte of its answer: stop() lets these finish.
  void set_busy(bool busy);

  // A probe-only connection's allowance slot goes back when its one answer is handed to the
  // socket (write_response, start_stream), not when the client closes: a probe that reads the
  // answer and reconnects at once (microseconds later) finds it free. The connection may
  // linger after that (2 s at most), counted in open_connections. Idempotent; close() calls
  // it too.
  void release_probe_slot();

  // --- closing. After an answer with unread input, half-close and drain for a moment so the
  // client reads the answer instead of a reset.
  void linger_close();

  // Discards input in the kernel: recv with MSG_TRUNC on TCP drops the bytes without copying
  // them, so an unread 8 MiB body refused at the door costs a few syscalls per 1 MiB instead
  // of 16,384 reads of 512 bytes. At most 16 MiB per wake-up, so a flood cannot hold the I/O
  // thread.
  void drain_input();
  void close();

  HttpServer::Impl& s_;
  tcp::socket sock_;
  net::steady_timer timer_;
  net::steady_timer hangup_timer_;  // only while a client pipelines past max_header_bytes
  const ConnKind kind_;
  const bool reject_;
  Phase phase_ = Phase::kIdle;
  std::chrono::steady_clock::time_point deadline_;
  Expiry on_expiry_ = nullptr;  // null: no deadline
  bool timer_waiting_ = false;  // timer_ has a wait pending (its expiry() is when)
  uint64_t timer_gen_ = 0;      // of the pending wait: a replaced or cancelled one is stale
  uint64_t io_gen_ = 0;
  bool timed_out_ = false;
  bool keep_alive_ = true;
  bool http10_ = false;  // the request is HTTP/1.0: no chunked encoding
  bool body_pending_ = false;
  uint64_t discard_left_ = 0;  // bytes of a refused body still to drop before the next request
  bool busy_ = false;
  bool probe_slot_released_ = false;
  size_t num_requests_ = 0;
  beast::flat_buffer buf_{(std::size_t)64 << 10};
  std::optional<bhttp::request_parser<bhttp::string_body>> parser_;
  HttpRequest req_;
  const Route* route_ = nullptr;
  uint64_t memory_ticket_ = 0;
  std::string out_;
  std::optional<HttpResponse> held_;  // the door refusal being held
  // Steady-clock seconds when the Retry-After of this connection's last door refusal runs out
  // (0: none): a request before it came back early (HttpRequest::early_s).
  double retry_at_s_ = 0;
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
  bool stream_pull_ = false;    // the stream said `more`: poll again once everything is written
  bool stream_pulled_ = false;  // it ever did: its parts are paced by writes, not by wakes
};

}  // namespace kvw::http
