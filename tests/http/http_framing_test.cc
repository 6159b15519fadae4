// Issue 30, the transport's framing and hang-up watch: an HTTP/1.0 client gets a stream
// unchunked and ended by closing the connection; bytes pipelined behind a request (one, or more
// than a header's worth) do not stop the server noticing that the client hung up, and a
// pipelined request is still answered after the stream; SO_SNDBUF comes from the stream budget.
#include <gtest/gtest.h>
#include <netinet/tcp.h>

#include <cstdio>
#include <memory>
#include <thread>

#include "http/http_server.h"
#include "http_test_util.h"

namespace kvw::http {
namespace {

using namespace test;  // NOLINT: the raw client

// A server with one stream route (/stream, fed by the test) and an inline /health.
struct StreamServer {
  explicit StreamServer(HttpServerConfig c = test_config()) : s(c, refuse) {
    s.add_route("GET", "/stream", [this](HttpRequest&, HttpResponse& res) {
      auto st = std::make_shared<PushStream>(&destroyed);
      stream = st;
      res.stream = std::move(st);
    });
    s.add_route("GET", "/health",
                [](HttpRequest&, HttpResponse& res) { res.set_content("ok", "text/plain"); },
                {.inline_io = true});
    EXPECT_TRUE(s.start().ok());
  }
  bool wait_streams(uint64_t n) {
    for (int k = 0; k < 400 && s.stats().active_streams != n; ++k) {
      std::this_thread::sleep_for(5ms);
    }
    return s.stats().active_streams == n;
  }
  std::atomic<int> destroyed{0};
  std::weak_ptr<PushStream> stream;
  HttpServer s;
};

TEST(HttpFraming, Http10ClientGetsAnUnchunkedStreamEndedByClose) {
  StreamServer srv;
  const int fd = connect_to(srv.s.port());
  send_all(fd, "GET /stream HTTP/1.0\r\nHost: x\r\n\r\n");
  ASSERT_TRUE(srv.wait_streams(1));
  srv.stream.lock()->push("hello ");
  srv.stream.lock()->push("world", true);
  bool closed = false;
  const std::string r = read_until(
      fd, 5s, [](const std::string&) { return false; }, &closed);
  ::close(fd);
  EXPECT_TRUE(closed) << "the body ends when the server closes";
  EXPECT_EQ(status_of(r), 200) << r;
  EXPECT_EQ(r.find("Transfer-Encoding"), std::string::npos) << r;
  EXPECT_NE(r.find("Connection: close\r\n"), std::string::npos) << r;
  EXPECT_EQ(r.substr(r.find("\r\n\r\n") + 4), "hello world") << "no chunk framing in the body";
}

TEST(HttpFraming, Http11ClientStillGetsChunks) {
  StreamServer srv;
  const int fd = connect_to(srv.s.port());
  send_all(fd, get("/stream"));
  ASSERT_TRUE(srv.wait_streams(1));
  srv.stream.lock()->push("abc", true);
  const std::string r = read_until(fd, 5s, has_response_end);
  ::close(fd);
  EXPECT_NE(r.find("Transfer-Encoding: chunked"), std::string::npos) << r;
  EXPECT_TRUE(r.ends_with("3\r\nabc\r\n0\r\n\r\n")) << r;
}

// One byte after the request once made the watch stop (it only peeked): with no operation left
// holding the connection it went away, taking the answer with it (or, with a write in flight,
// a client that then hung up kept its stream and engine requests until the answer ended).
TEST(HttpFraming, OnePipelinedByteDoesNotDisableDisconnectDetection) {
  StreamServer srv;
  const int fd = connect_to(srv.s.port());
  send_all(fd, get("/stream"));
  ASSERT_TRUE(srv.wait_streams(1));
  send_all(fd, "G");                   // after the headers were read, so it waits in the socket
  std::this_thread::sleep_for(100ms);  // the byte has reached the server and been looked at
  EXPECT_EQ(srv.s.stats().active_streams, 1u) << "the byte ended the answer";
  ::close(fd);
  EXPECT_TRUE(srv.wait_streams(0)) << "the hang-up was not noticed";
  EXPECT_EQ(srv.destroyed.load(), 1);
}

// Past max_header_bytes of pipelined input the server stops reading it (memory) and asks the
// kernel once a second whether the client hung up instead.
TEST(HttpFraming, PipelinedInputPastTheHeaderLimitStillLetsAHangUpBeNoticed) {
  HttpServerConfig c = test_config();
  c.max_header_bytes = 4096;
  StreamServer srv(c);
  const int fd = connect_to(srv.s.port());
  send_all(fd, get("/stream"));
  ASSERT_TRUE(srv.wait_streams(1));
  send_all(fd, std::string(16 << 10, 'x'));
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(srv.s.stats().active_streams, 1u) << "the input ended the answer";
  ::shutdown(fd, SHUT_WR);  // FIN behind 12 KiB the server has not read
  bool gone = false;
  for (int k = 0; k < 300 && !gone; ++k) {
    gone = srv.s.stats().active_streams == 0;
    std::this_thread::sleep_for(10ms);
  }
  ::close(fd);
  EXPECT_TRUE(gone) << "the hang-up was not noticed within 3 s";
}

TEST(HttpFraming, PipelinedRequestIsAnsweredAfterTheStream) {
  StreamServer srv;
  const int fd = connect_to(srv.s.port());
  send_all(fd, get("/stream"));
  ASSERT_TRUE(srv.wait_streams(1));
  send_all(fd, get("/health"));  // pipelined while the stream is open: taken into the buffer
  std::this_thread::sleep_for(50ms);
  const std::shared_ptr<PushStream> st = srv.stream.lock();
  ASSERT_TRUE(st) << "the pipelined request ended the answer";
  st->push("done", true);
  const std::string r = read_until(
      fd, 5s, [](const std::string& t) { return t.find("\r\n\r\nok") != std::string::npos; });
  ::close(fd);
  EXPECT_NE(r.find("4\r\ndone\r\n0\r\n\r\n"), std::string::npos) << r;
  EXPECT_NE(r.find("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok"),
            std::string::npos)
      << r;
}

// The kernel's copy of an answer is bounded by the stream budget (it was 1-4 MiB per slow
// reader under the default autotuning): `ss` reports the server socket's send buffer (tb).
TEST(HttpFraming, SendBufferComesFromTheStreamBudget) {
  HttpServerConfig c = test_config();
  c.stream_buffer_bytes = 64 << 10;
  StreamServer srv(c);
  const int fd = connect_to(srv.s.port());
  send_all(fd, get("/stream"));
  ASSERT_TRUE(srv.wait_streams(1));
  const std::string cmd =
      "ss -tmnH state established '( sport = :" + std::to_string(srv.s.port()) + " )' 2>/dev/null";
  std::string out;
  if (FILE* p = ::popen(cmd.c_str(), "r")) {
    char buf[512];
    while (std::fgets(buf, sizeof buf, p)) out += buf;
    ::pclose(p);
  }
  srv.stream.lock()->push("x", true);
  read_until(fd, 5s, has_response_end);
  ::close(fd);
  const size_t at = out.find(",tb");
  if (at == std::string::npos) GTEST_SKIP() << "no `ss -tm` here: " << out;
  EXPECT_EQ(std::stoull(out.substr(at + 3)), c.kernel_send_buffer_bytes()) << out;
}

}  // namespace
}  // namespace kvw::http
