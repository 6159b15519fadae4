// The event-driven transport on its own (no engine): routes inline and pooled, the connection
// limit, request-memory back-pressure, streams pushed from another thread, many open streams on
// one I/O thread, slow consumers dropped at their buffer limit, and Expect: 100-continue.
#include "http/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <mutex>
#include <thread>

#include "http_test_util.h"

namespace kvw::http {
namespace {

using namespace test;  // NOLINT: the raw client

TEST(HttpServer, InlineAndPooledRoutesAnswerAndUnknownOnesAre404Or405) {
  HttpServer s(test_config(), refuse);
  s.add_route("GET", "/ping",
              [](HttpRequest&, HttpResponse& res) { res.set_content("pong", "text/plain"); },
              {.inline_io = true});
  s.add_route("POST", "/echo", [](HttpRequest& req, HttpResponse& res) {
    res.set_content(req.body + "|" + req.header("x-tag"), "text/plain");
  });
  ASSERT_TRUE(s.start().ok());
  const std::string a = exchange(s.port(), get("/ping"));
  EXPECT_EQ(status_of(a), 200) << a;
  EXPECT_TRUE(a.ends_with("pong")) << a;
  const std::string b = exchange(
      s.port(), "POST /echo HTTP/1.1\r\nHost: x\r\nX-Tag: t1\r\nContent-Length: 5\r\n\r\nhello");
  EXPECT_TRUE(b.ends_with("hello|t1")) << b;
  EXPECT_EQ(status_of(exchange(s.port(), get("/nope"))), 404);
  EXPECT_EQ(status_of(exchange(s.port(), get("/echo"))), 405);
  EXPECT_EQ(status_of(exchange(s.port(), "GARBAGE\r\n\r\n")), 400);
}

TEST(HttpServer, ConnectionsOverTheLimitGet503AtOnce) {
  HttpServerConfig c = test_config();
  c.max_connections = 4;
  c.max_probe_connections = 0;  // no allowance for probes beyond the limit either
  c.keep_alive_timeout_s = 30;
  HttpServer s(c, refuse);
  s.add_route("GET", "/ping",
              [](HttpRequest&, HttpResponse& res) { res.set_content("pong", "text/plain"); },
              {.inline_io = true});
  ASSERT_TRUE(s.start().ok());
  std::vector<int> idle;
  for (int i = 0; i < 4; ++i) idle.push_back(connect_to(s.port()));
  for (int k = 0; k < 200 && s.stats().open_connections < 4; ++k) std::this_thread::sleep_for(5ms);
  ASSERT_EQ(s.stats().open_connections, 4u);
  const int fd = connect_to(s.port());
  // The answer comes without a request being sent.
  bool closed = false;
  const std::string r = read_until(fd, 3s, has_response_end, &closed);
  EXPECT_EQ(status_of(r), 503) << r;
  EXPECT_NE(r.find("Retry-After: 1"), std::string::npos) << r;
  ::close(fd);
  EXPECT_EQ(s.stats().rejected_connections_total, 1u);
  ::close(idle.back());
  idle.pop_back();
  for (int k = 0; k < 200 && s.stats().open_connections >= 4; ++k) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(status_of(exchange(s.port(), get("/ping"))), 200);
  for (int f : idle) ::close(f);
}

TEST(HttpServer, BodiesWaitUnreadForRequestMemoryThenGet503) {
  HttpServerConfig c = test_config();
  c.handler_threads = 2;
  c.max_body_bytes = 1000;
  c.reserve_per_body_byte = 1;
  c.reserve_fixed_bytes = 0;
  c.request_memory_bytes = 1000;  // one full body at a time
  c.body_timeout_s = 0.5;
  HttpServer s(c, refuse);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  s.add_route("POST", "/hold", [released](HttpRequest& req, HttpResponse& res) {
    released.wait();  // keeps this request's memory
    res.set_content(std::to_string(req.body.size()), "text/plain");
  });
  ASSERT_TRUE(s.start().ok());
  const std::string body(1000, 'x');
  const int a = connect_to(s.port());
  send_all(a, post("/hold", body));
  for (int k = 0; k < 200 && s.stats().request_memory.used < 1000; ++k)
    std::this_thread::sleep_for(5ms);
  EXPECT_EQ(s.stats().request_memory.used, 1000u);
  // The second body cannot be taken in: it waits, then gets 503 with Retry-After.
  const int b = connect_to(s.port());
  send_all(b, post("/hold", body));
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(s.stats().request_memory.num_waiting, 1u);
  const std::string rb = read_until(b, 5s, has_response_end);
  EXPECT_EQ(status_of(rb), 503) << rb;
  EXPECT_NE(rb.find("Retry-After"), std::string::npos);
  EXPECT_EQ(s.stats().request_memory.num_timed_out, 1u);
  ::close(b);
  release.set_value();
  const std::string ra = read_until(a, 5s, has_response_end);
  EXPECT_EQ(status_of(ra), 200) << ra;
  EXPECT_TRUE(ra.ends_with("1000"));
  ::close(a);
  EXPECT_EQ(status_of(exchange(s.port(), post("/hold", body))), 200);
  EXPECT_LE(s.stats().request_memory.peak, 1000u);
  EXPECT_TRUE(request_memory_drains(s));
}

TEST(HttpServer, StreamsArePushedFromAnotherThreadWhileTheHandlerPoolIsBusy) {
  HttpServer s(test_config(), refuse);  // one handler thread
  auto stream = std::make_shared<PushStream>();
  std::promise<void> unblock;
  std::shared_future<void> unblocked = unblock.get_future().share();
  s.add_route("GET", "/stream", [stream](HttpRequest&, HttpResponse& res) { res.stream = stream; });
  s.add_route("GET", "/block", [unblocked](HttpRequest&, HttpResponse& res) {
    unblocked.wait();
    res.set_content("done", "text/plain");
  });
  s.add_route("GET", "/health",
              [](HttpRequest&, HttpResponse& res) { res.set_content("ok", "text/plain"); },
              {.inline_io = true});
  ASSERT_TRUE(s.start().ok());
  const int fs = connect_to(s.port());
  send_all(fs, get("/stream"));
  for (int k = 0; k < 200 && s.stats().active_streams < 1; ++k) std::this_thread::sleep_for(5ms);
  const int fb = connect_to(s.port());
  send_all(fb, get("/block"));  // occupies the only handler thread
  std::this_thread::sleep_for(50ms);
  EXPECT_EQ(status_of(exchange(s.port(), get("/health"))), 200);  // inline: not behind /block
  std::thread producer([&] {
    for (int i = 0; i < 50; ++i) stream->push("tok" + std::to_string(i) + " ");
    stream->push("end", true);
  });
  const std::string r = read_until(fs, 5s, has_response_end);
  producer.join();
  EXPECT_EQ(status_of(r), 200) << r;
  EXPECT_NE(r.find("Transfer-Encoding: chunked"), std::string::npos);
  std::string body;  // de-chunk
  for (size_t at = r.find("\r\n\r\n") + 4; at < r.size();) {
    const size_t eol = r.find("\r\n", at);
    const size_t n = std::stoul(r.substr(at, eol - at), nullptr, 16);
    if (n == 0) break;
    body += r.substr(eol + 2, n);
    at = eol + 2 + n + 2;
  }
  std::string want;
  for (int i = 0; i < 50; ++i) want += "tok" + std::to_string(i) + " ";
  EXPECT_EQ(body, want + "end");
  unblock.set_value();
  EXPECT_EQ(status_of(read_until(fb, 5s, has_response_end)), 200);
  ::close(fs);
  ::close(fb);
}

TEST(HttpServer, ThousandOpenStreamsOnOneIoThreadLeaveProbesAnswering) {
  raise_fd_limit();
  rlimit r{};
  getrlimit(RLIMIT_NOFILE, &r);
  ASSERT_GE(r.rlim_cur, 2100u) << "needs 2 x 1000 sockets; raise the hard limit (ulimit -Hn)";
  HttpServer s(test_config(), refuse);  // one I/O thread, one handler thread
  constexpr int kStreams = 1000;
  std::mutex mu;
  std::vector<std::shared_ptr<PushStream>> streams;
  s.add_route("GET", "/stream", [&](HttpRequest&, HttpResponse& res) {
    auto st = std::make_shared<PushStream>();
    std::lock_guard lock(mu);
    streams.push_back(st);
    res.stream = st;
  });
  s.add_route("GET", "/health",
              [](HttpRequest&, HttpResponse& res) { res.set_content("ok", "text/plain"); },
              {.inline_io = true});
  ASSERT_TRUE(s.start().ok());
  std::vector<int> fds;
  for (int i = 0; i < kStreams; ++i) {
    fds.push_back(connect_to(s.port()));
    ASSERT_GE(fds.back(), 0);
    send_all(fds.back(), get("/stream"));
  }
  for (int k = 0; k < 1000 && s.stats().active_streams < kStreams; ++k)
    std::this_thread::sleep_for(5ms);
  EXPECT_EQ(s.stats().active_streams, (uint64_t)kStreams);
  EXPECT_EQ(status_of(exchange(s.port(), get("/health"), 1s)), 200);
  {
    std::lock_guard lock(mu);
    for (auto& st : streams) st->push("bye", true);
  }
  int complete = 0;
  for (int fd : fds) {
    complete += read_until(fd, 5s, has_response_end).ends_with("3\r\nbye\r\n0\r\n\r\n");
    ::close(fd);
  }
  EXPECT_EQ(complete, kStreams);
}

TEST(HttpServer, SlowConsumerIsDroppedAtItsBufferLimitAndItsStreamDestroyed) {
  HttpServerConfig c = test_config();
  c.stream_buffer_bytes = 64 << 10;
  HttpServer s(c, refuse);
  std::atomic<int> destroyed{0};
  std::shared_ptr<PushStream> stream = std::make_shared<PushStream>(&destroyed);
  std::weak_ptr<PushStream> weak = stream;
  s.add_route("GET", "/firehose",
              [&stream](HttpRequest&, HttpResponse& res) { res.stream = std::move(stream); });
  ASSERT_TRUE(s.start().ok());
  const int fd = connect_to(s.port(), /*rcvbuf=*/4096);
  send_all(fd, get("/firehose"));
  for (int k = 0; k < 200 && s.stats().active_streams < 1; ++k) std::this_thread::sleep_for(5ms);
  const std::string chunk(16 << 10, 'z');
  // Never read: the kernel buffers fill, then the server's pending bytes pass the limit.
  for (int i = 0; i < 8192 && destroyed.load() == 0; ++i) {
    if (auto st = weak.lock()) st->push(chunk);
    std::this_thread::sleep_for(1ms);
  }
  EXPECT_EQ(destroyed.load(), 1);
  EXPECT_EQ(s.stats().slow_consumers_total, 1u);
  EXPECT_EQ(s.stats().active_streams, 0u);
  EXPECT_EQ(s.stats().stream_buffered_bytes, 0u);
  ::close(fd);
}

// A stream that makes its body in parts (StreamOutput::more), as a long non-streamed answer is.
class PartStream : public ResponseStream {
 public:
  explicit PartStream(int parts) : left_(parts) {}
  void start(std::function<void()>) override {}
  void poll(StreamOutput& out) override {
    if (!head_) {
      head_ = true;
      out.head = true;
      out.content_type = "text/plain";
    }
    out.data = std::string(32 << 10, 'p');
    out.end = --left_ == 0;
    out.more = !out.end;
  }

 private:
  int left_;
  bool head_ = false;
};

// Issue 30: a large answer is written whole to a client that reads it, one part at a time: the
// next part is made only when the client has taken the last, so a client that pauses holds one
// part in the server, not the answer.
TEST(HttpServer, PullStreamIsPolledAgainOnlyWhenItsLastPartIsWritten) {
  HttpServer s(test_config(), refuse);
  s.add_route("GET", "/parts", [](HttpRequest&, HttpResponse& res) {
    res.stream = std::make_shared<PartStream>(128);
  });
  ASSERT_TRUE(s.start().ok());
  const int fd = connect_to(s.port(), /*rcvbuf=*/4096);
  send_all(fd, get("/parts"));
  for (int k = 0; k < 200 && s.stats().active_streams < 1; ++k) std::this_thread::sleep_for(5ms);
  std::this_thread::sleep_for(300ms);  // the client reads nothing yet: the kernel buffers fill
  EXPECT_EQ(s.stats().active_streams, 1u);
  EXPECT_LE(s.stats().stream_buffered_bytes, 2u * (32 << 10) + 64) << "more than a part queued";
  const std::string r = read_until(fd, 20s, has_response_end);
  ::close(fd);
  EXPECT_EQ(status_of(r), 200) << r.substr(0, 200);
  size_t body = 0;
  for (size_t i = r.find("\r\n\r\n"); i < r.size(); ++i) body += r[i] == 'p';
  EXPECT_EQ(body, 128u * (32 << 10)) << "the whole 4 MiB answer arrives";
  EXPECT_EQ(s.stats().slow_consumers_total, 0u);
}

TEST(HttpServer, ExpectContinueGetsAnInterimAnswerBeforeTheBody) {
  HttpServer s(test_config(), refuse);
  s.add_route("POST", "/echo",
              [](HttpRequest& req, HttpResponse& res) { res.set_content(req.body, "text/plain"); });
  ASSERT_TRUE(s.start().ok());
  const int fd = connect_to(s.port());
  send_all(fd,
           "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n");
  const std::string interim = read_until(
      fd, 3s, [](const std::string& t) { return t.find("\r\n\r\n") != std::string::npos; });
  EXPECT_TRUE(interim.starts_with("HTTP/1.1 100 Continue")) << interim;
  send_all(fd, "abc");
  const std::string r = read_until(fd, 3s, has_response_end);
  EXPECT_EQ(status_of(r), 200) << r;
  EXPECT_TRUE(r.ends_with("abc"));
  ::close(fd);
}

// The connection keeps one deadline, moved by each phase and mostly later (idle, headers,
// write): an expiry that comes before the deadline waits again, an earlier deadline re-arms.
// After an answer (written under a 30 s write deadline) an idle connection still closes at
// keep_alive_timeout_s; headers begun after a 5 s keep-alive wait are still cut at
// header_timeout_s.
TEST(HttpServer, EachPhaseMeetsItsOwnDeadlineWhateverCameBefore) {
  auto ok = [](HttpRequest&, HttpResponse& res) { res.set_content("ok", "text/plain"); };
  HttpServerConfig c = test_config();
  c.keep_alive_timeout_s = 0.3;
  c.header_timeout_s = 5;
  {
    HttpServer s(c, refuse);
    s.add_route("GET", "/ok", ok, {.inline_io = true});
    ASSERT_TRUE(s.start().ok());
    const int fd = connect_to(s.port());
    send_all(fd, get("/ok"));
    EXPECT_EQ(status_of(read_until(fd, 3s, has_response_end)), 200);
    const auto t0 = Clock::now();
    bool closed = false;
    read_until(
        fd, 4s, [](const std::string&) { return false; }, &closed);
    EXPECT_TRUE(closed);
    EXPECT_LT(Clock::now() - t0, 2500ms) << "closed at the keep-alive timeout, not a later one";
    ::close(fd);
  }
  c.keep_alive_timeout_s = 5;
  c.header_timeout_s = 0.3;
  {
    HttpServer s(c, refuse);
    s.add_route("GET", "/ok", ok, {.inline_io = true});
    ASSERT_TRUE(s.start().ok());
    const int fd = connect_to(s.port());
    send_all(fd, get("/ok"));
    EXPECT_EQ(status_of(read_until(fd, 3s, has_response_end)), 200);
    const auto t0 = Clock::now();
    send_all(fd, "GET /ok HTTP/1.1\r\nHo");  // headers that never end
    const std::string r = read_until(fd, 4s, has_response_end);
    EXPECT_EQ(status_of(r), 408) << r;
    EXPECT_LT(Clock::now() - t0, 2500ms) << "cut at the header timeout, not the keep-alive one";
    ::close(fd);
  }
}

}  // namespace
}  // namespace kvw::http

namespace kvw::http {
namespace {

// Counts the passes a door check hands out and how many are gone.
struct PassCounter {
  std::atomic<int> created{0};
  std::atomic<int> destroyed{0};
};

class CountedPass : public DoorPass {
 public:
  explicit CountedPass(PassCounter& c) : c_(c) { ++c_.created; }
  ~CountedPass() override { ++c_.destroyed; }

 private:
  PassCounter& c_;
};

std::string announce(const std::string& path, uint64_t content_length) {
  return "POST " + path +
         " HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(content_length) + "\r\n\r\n";
}

// A door that refuses while `full`, else hands the handler a pass.
DoorCheck test_door(std::atomic<bool>& full, PassCounter& passes) {
  return [&full, &passes](HttpRequest& req) -> std::optional<HttpResponse> {
    if (!full.load()) {
      req.door_pass = std::make_unique<CountedPass>(passes);
      return std::nullopt;
    }
    HttpResponse res;
    res.status = 429;
    res.set_header("Retry-After", "2");
    res.set_content(R"({"error":{"code":"queue_full"}})", "application/json");
    return res;
  };
}

// Issue 34: the door answers from the request line and headers; an announced 8 MiB body is
// neither waited for nor given request memory.
TEST(HttpServer, DoorCheckAnswersFromTheHeadersWithoutReservingMemoryForTheBody) {
  HttpServer s(test_config(), refuse);
  std::atomic<bool> full{true};
  PassCounter passes;
  std::atomic<int> handled{0};
  s.add_route("POST", "/gen",
              [&handled](HttpRequest& req, HttpResponse& res) {
                ++handled;
                res.set_content(req.door_pass ? "pass" : "none", "text/plain");
              },
              {.door = test_door(full, passes)});
  ASSERT_TRUE(s.start().ok());
  const int fd = connect_to(s.port());
  ASSERT_TRUE(send_all(fd, announce("/gen", 8u << 20)));  // headers only
  bool closed = false;
  const std::string r = read_until(fd, 3s, has_response_end, &closed);
  EXPECT_EQ(status_of(r), 429) << r;
  EXPECT_NE(r.find("Retry-After: 2"), std::string::npos) << r;
  EXPECT_NE(r.find("Connection: close"), std::string::npos) << r;
  read_until(
      fd, 3s, [](const std::string&) { return false; }, &closed);
  EXPECT_TRUE(closed) << "an unread body is not parsed as the next request";
  ::close(fd);
  EXPECT_EQ(handled.load(), 0);
  EXPECT_EQ(passes.created.load(), 0);
  EXPECT_EQ(s.stats().request_memory.num_granted, 0u);
  EXPECT_EQ(s.stats().request_memory.peak, 0u);
  EXPECT_EQ(s.stats().request_memory.num_waiting, 0u);

  // With room, the same request goes on and its handler gets the pass.
  full = false;
  const std::string ok = exchange(s.port(), announce("/gen", 2) + "{}");
  EXPECT_EQ(status_of(ok), 200) << ok;
  EXPECT_TRUE(ok.ends_with("pass")) << ok;
  EXPECT_EQ(passes.destroyed.load(), 1);
}

// A client that sends its whole body anyway still reads the refusal: the server discards the
// body after answering instead of resetting the connection.
TEST(HttpServer, RefusedBodySentAnywayIsDiscardedAndTheClientReadsTheAnswer) {
  HttpServer s(test_config(), refuse);
  std::atomic<bool> full{true};
  PassCounter passes;
  s.add_route("POST", "/gen",
              [](HttpRequest&, HttpResponse& res) { res.set_content("x", "text/plain"); },
              {.door = test_door(full, passes)});
  ASSERT_TRUE(s.start().ok());
  const int fd = connect_to(s.port());
  const std::string body(8u << 20, 'x');
  bool sent = false;
  std::thread sender([&] { sent = send_all(fd, announce("/gen", body.size()) + body); });
  bool closed = false;
  const std::string r = read_until(fd, 10s, has_response_end, &closed);
  sender.join();
  EXPECT_TRUE(sent) << "the server took the whole body (discarded) without a reset";
  EXPECT_EQ(status_of(r), 429) << r;
  ::close(fd);
  EXPECT_EQ(s.stats().request_memory.num_granted, 0u);
}

// Issue 34: a retrying client should not pay a new connection per refusal. A small body refused
// at the door is skipped (whether it came with the headers or after the answer) and the same
// connection serves the next request, which may already be pipelined behind it.
TEST(HttpServer, DoorRefusalOfASmallBodyKeepsTheConnectionForTheNextRequest) {
  HttpServer s(test_config(), refuse);
  std::atomic<bool> full{true};
  PassCounter passes;
  s.add_route("POST", "/gen",
              [](HttpRequest& req, HttpResponse& res) {
                res.set_content(req.door_pass ? "pass:" + req.body : "none", "text/plain");
              },
              {.door = test_door(full, passes)});
  ASSERT_TRUE(s.start().ok());
  const int fd = connect_to(s.port());
  const std::string body(30u << 10, 'x');
  auto answer = [&] {
    const std::string r = read_until(fd, 5s, has_response_end);
    EXPECT_EQ(r.find("Connection: close"), std::string::npos) << r.substr(0, 200);
    return r;
  };
  // 1. Headers and body in one write, a second refused request pipelined behind it.
  ASSERT_TRUE(send_all(fd, announce("/gen", body.size()) + body + announce("/gen", 3) + "abc"));
  auto count = [](const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  const std::string refusal = R"({"error":{"code":"queue_full"}})";
  std::string r = read_until(fd, 5s, [&](const std::string& t) { return count(t, refusal) == 2; });
  EXPECT_EQ(count(r, "HTTP/1.1 429 "), 2u) << r;
  EXPECT_EQ(r.find("Connection: close"), std::string::npos) << r;
  // 2. Headers first; the body comes after the refusal was read.
  ASSERT_TRUE(send_all(fd, announce("/gen", body.size())));
  EXPECT_EQ(status_of(answer()), 429);
  ASSERT_TRUE(send_all(fd, body));
  // 3. With room, the next request on the same connection is handled, its body intact.
  full = false;
  ASSERT_TRUE(send_all(fd, announce("/gen", 2) + "ok"));
  r = answer();
  EXPECT_EQ(status_of(r), 200) << r;
  EXPECT_TRUE(r.ends_with("pass:ok")) << r;
  ::close(fd);
  EXPECT_EQ(s.stats().accepted_total, 1u);
  EXPECT_EQ(s.stats().request_memory.num_granted, 1u);  // the admitted request's body only
}

// The pass a door hands out lives with the request: destroyed after the handler, when the
// client leaves mid-body, and when the body times out. A door that throws is a 500.
TEST(HttpServer, DoorPassIsDestroyedOnEveryExit) {
  HttpServerConfig c = test_config();
  c.body_timeout_s = 0.3;
  HttpServer s(c, refuse);
  std::atomic<bool> full{false};
  PassCounter passes;
  s.add_route("POST", "/gen",
              [](HttpRequest&, HttpResponse& res) { res.set_content("x", "text/plain"); },
              {.door = test_door(full, passes)});
  s.add_route("POST", "/throws", [](HttpRequest&, HttpResponse&) {},
              {.door = [](HttpRequest&) -> std::optional<HttpResponse> {
                throw std::runtime_error("door bug");
              }});
  ASSERT_TRUE(s.start().ok());
  auto destroyed_reaches = [&](int n) {
    for (int k = 0; k < 500 && passes.destroyed.load() < n; ++k) std::this_thread::sleep_for(5ms);
    return passes.destroyed.load() == n;
  };
  EXPECT_EQ(status_of(exchange(s.port(), announce("/gen", 2) + "{}")), 200);
  EXPECT_TRUE(destroyed_reaches(1));

  int fd = connect_to(s.port());  // leaves mid-body
  send_all(fd, announce("/gen", 100) + "{");
  for (int k = 0; k < 500 && passes.created.load() < 2; ++k) std::this_thread::sleep_for(5ms);
  EXPECT_EQ(passes.destroyed.load(), 1);  // held while the body is read
  ::close(fd);
  EXPECT_TRUE(destroyed_reaches(2));

  fd = connect_to(s.port());  // body never completes
  send_all(fd, announce("/gen", 100) + "{");
  const std::string r = read_until(fd, 3s, has_response_end);
  EXPECT_EQ(status_of(r), 408) << r;
  ::close(fd);
  EXPECT_TRUE(destroyed_reaches(3));
  EXPECT_EQ(passes.created.load(), 3);

  EXPECT_EQ(status_of(exchange(s.port(), announce("/throws", 2) + "{}")), 500);
  EXPECT_EQ(status_of(exchange(s.port(), announce("/gen", 2) + "{}")), 200);  // still serving
  EXPECT_TRUE(request_memory_drains(s));
}

}  // namespace
}  // namespace kvw::http
