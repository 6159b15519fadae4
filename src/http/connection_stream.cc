// The answer side of a connection: a whole response, or a ResponseStream written as the
// client takes it (chunked, or unframed for HTTP/1.0), with the slow-consumer and write-timeout
// limits, and the watch for a client that hangs up meanwhile.
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdio>

#include "core/log.h"
#include "http/connection.h"

namespace kvw::http {

void Connection::write_response(HttpResponse res) {
  phase_ = Phase::kWriting;
  // Its one answer is being handed to the socket (a probe-only connection closes after it): a
  // probe that reads it and reconnects at once must find the slot free, even before this
  // write's completion has run.
  release_probe_slot();
  const bool close_after = res.close || !keep_alive_ || reject_;
  out_.clear();
  append_head(out_, res.status, res.content_type, res.headers, close_after);
  out_ += "Content-Length: " + std::to_string(res.body.size()) + "\r\n\r\n";
  out_ += res.body;
  // One non-blocking send first: an answer that fits the socket's buffer (every refusal) is
  // done here, without an async write whose completion passes through the scheduler (often
  // waking the other I/O thread) and the strand.
  size_t sent = 0;
  while (sent < out_.size()) {
    const ssize_t n = ::send(sock_.native_handle(), out_.data() + sent, out_.size() - sent,
                             MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) {
      sent += size_t(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    return close();  // the client is gone
  }
  if (sent == out_.size()) return after_write(close_after);
  arm(s_.cfg.write_timeout_s, [](Connection& c) { c.close(); });
  net::async_write(sock_, net::buffer(out_.data() + sent, out_.size() - sent),
                   [self = shared_from_this(), close_after](beast::error_code ec, size_t) {
                     if (self->phase_ != Phase::kWriting) return;
                     self->disarm();
                     if (ec) return self->close();
                     self->after_write(close_after);
                   });
}

void Connection::after_write(bool close_after) {
  out_.clear();
  out_.shrink_to_fit();
  set_busy(false);
  if (close_after) return linger_close();
  if (discard_left_ > 0) return discard_body();
  wait_idle();
}

void Connection::start_stream(std::shared_ptr<ResponseStream> stream, bool close_after) {
  phase_ = Phase::kStreaming;
  release_probe_slot();
  stream_ = std::move(stream);
  stream_close_ = close_after || !keep_alive_;
  head_sent_ = false;
  stream_ended_ = false;
  stream_pull_ = false;
  stream_pulled_ = false;
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

void Connection::watch_disconnect() {
  const uint64_t gen = ++io_gen_;
  sock_.async_wait(tcp::socket::wait_read, [self = shared_from_this(), gen](beast::error_code ec) {
    if (gen != self->io_gen_ || self->phase_ != Phase::kStreaming || ec) return;
    char c;
    const ssize_t n = ::recv(self->sock_.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) return self->close();
    if (n < 0) return self->watch_disconnect();
    self->take_pipelined();
  });
}

void Connection::take_pipelined() {
  const size_t room =
      s_.cfg.max_header_bytes > buf_.size()
          ? std::min(s_.cfg.max_header_bytes - buf_.size(), buf_.max_size() - buf_.size())
          : 0;
  if (room > 0) {
    auto space = buf_.prepare(room);
    const ssize_t n = ::recv(sock_.native_handle(), space.data(), room, MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
      return close();
    }
    buf_.commit(n > 0 ? (size_t)n : 0);
    return watch_disconnect();
  }
  const uint64_t gen = io_gen_;
  hangup_timer_.expires_after(std::chrono::seconds(1));
  hangup_timer_.async_wait([self = shared_from_this(), gen](beast::error_code ec) {
    if (ec || gen != self->io_gen_ || self->phase_ != Phase::kStreaming) return;
    pollfd p{.fd = self->sock_.native_handle(), .events = POLLRDHUP, .revents = 0};
    if (::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0) {
      return self->close();
    }
    self->take_pipelined();
  });
}

void Connection::pump() {
  if (phase_ != Phase::kStreaming || !stream_) return;
  // A pulled answer gets its next part only once the last is written: a wake (the engine's,
  // coalesced) must not add a part behind a write in flight, which would read as a slow
  // consumer and drop a whole answer the client was reading.
  if (stream_pulled_ &&
      (stream_pull_ || write_in_flight_ || !pending_.empty() || writing_off_ != writing_.size())) {
    return;
  }
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
    // HTTP/1.0 has no chunked encoding: the body ends when the connection closes.
    const bool unframed = out.chunked && http10_;
    stream_chunked_ = out.chunked && !http10_;
    if (!out.chunked || unframed) stream_close_ = stream_close_ || !out.end || unframed;
    append_head(pending_, out.status, out.content_type, out.headers, stream_close_);
    if (unframed) {
      if (out.content_type == "text/event-stream") pending_ += "Cache-Control: no-cache\r\n";
      pending_ += "\r\n";
    } else if (out.chunked) {
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
  if (out.more && !stream_ended_) stream_pull_ = stream_pulled_ = true;
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

void Connection::flush() {
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

void Connection::on_stream_written(beast::error_code ec, size_t n) {
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

void Connection::finish_stream() {
  end_stream();
  set_busy(false);
  ++io_gen_;  // the disconnect watch is now stale
  beast::error_code ec;
  sock_.cancel(ec);
  if (stream_close_) return linger_close();
  wait_idle();
}

void Connection::end_stream() {
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

}  // namespace kvw::http
