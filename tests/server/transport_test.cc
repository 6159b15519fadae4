// The connection layer (server/http_transport.h) against raw sockets: slow headers get 408 while
// others are served, an announced body over the limit is refused from the headers alone, header
// floods get 431, pipelined and keep-alive requests work, and the engine's error wording maps to
// the intended statuses.
#include <unistd.h>

#include <chrono>
#include <thread>

#include "harness.h"
#include "raw_socket.h"

namespace kvw::server {
namespace {

using harness::Harness;
using Clock = std::chrono::steady_clock;

using raw_socket::connect_to;
using raw_socket::read_until_close;
using raw_socket::send_all;

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t at = 0; (at = s.find(what, at)) != std::string::npos; at += what.size()) ++n;
  return n;
}

TEST(ServerTransport, SlowHeadersGet408WhileOtherClientsAreServed) {
  ServerConfig cfg;
  cfg.http.header_timeout_s = 1;
  Harness h(cfg);  // 16 HTTP workers
  // More trickling clients than workers: a server that parked a worker per connection could not
  // answer /health below.
  constexpr int kSlow = 24;
  std::vector<int> fds;
  for (int i = 0; i < kSlow; ++i) {
    fds.push_back(connect_to(h.server->port()));
    ASSERT_GE(fds.back(), 0);
    ASSERT_TRUE(send_all(fds.back(), "GET /health HTTP/1.1\r\nHost: x\r\n"));
  }
  for (int tick = 0; tick < 3; ++tick) {
    for (int fd : fds) send_all(fd, "X");  // a byte each, never the blank line
    auto r = h.client->Get("/health");
    ASSERT_TRUE(r) << "health during slowloris";
    EXPECT_EQ(r->status, 200);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  for (int fd : fds) {
    bool closed = false;
    const std::string got = read_until_close(fd, std::chrono::seconds(20), closed);
    EXPECT_TRUE(closed) << "slow connection still open";
    EXPECT_TRUE(got.starts_with("HTTP/1.1 408")) << got;
    ::close(fd);
  }
  EXPECT_EQ(h.server->refusals().get(RefusalReason::kHeaderTimeout), (uint64_t)kSlow);
}

TEST(ServerTransport, AnnouncedBodyOverTheLimitIs413WithoutWaitingForIt) {
  ServerConfig cfg;
  cfg.http.max_body_bytes = 4096;
  Harness h(cfg);
  int fd = connect_to(h.server->port());
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(send_all(fd,
                       "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                       "application/json\r\nContent-Length: 1000000000\r\n\r\n{"));
  bool closed = false;
  const std::string got = read_until_close(fd, std::chrono::seconds(20), closed);
  ::close(fd);
  EXPECT_TRUE(got.starts_with("HTTP/1.1 413")) << got;
  EXPECT_NE(got.find("payload_too_large"), std::string::npos) << got;
  EXPECT_TRUE(closed) << "the unread body must not be parsed as the next request";
  EXPECT_EQ(h.server->refusals().get(RefusalReason::kBodyTooLarge), 1u);
}

// Header floods: over the field count (under the byte cap) and over the byte cap (100k fields)
// get 431 and copy no header byte into a request: the fields are counted before any is copied,
// and a block over the cap is refused by the parser. A copy made before the count would show
// in header_bytes_copied_total (~150 x 5 bytes per flood); the well-formed probes after copy
// their few fields, so the counter is live.
TEST(ServerTransport, HeaderFloodsGet431AndTheServerGoesOn) {
  Harness h;
  std::string many_small;  // over the field limit, under the byte limit
  for (int i = 0; i < 150; ++i) many_small += "X-" + std::to_string(i) + ": v\r\n";
  std::string many_big;  // over the byte limit
  for (int i = 0; i < 100000; ++i) many_big += "X-Flood-" + std::to_string(i) + ": v\r\n";
  const uint64_t copied_before = h.server->transport().header_bytes_copied_total;
  for (const std::string& headers : {many_small, many_big}) {
    int fd = connect_to(h.server->port());
    ASSERT_GE(fd, 0);
    send_all(fd, "GET /health HTTP/1.1\r\nHost: x\r\n" + headers + "\r\n");
    bool closed = false;
    const std::string got = read_until_close(fd, std::chrono::seconds(20), closed);
    ::close(fd);
    EXPECT_TRUE(got.starts_with("HTTP/1.1 431")) << got.substr(0, 200);
    EXPECT_NE(got.find("headers_too_large"), std::string::npos) << got.substr(0, 300);
  }
  EXPECT_EQ(h.server->refusals().get(RefusalReason::kHeadersTooLarge), 2u);
  EXPECT_EQ(h.server->transport().header_bytes_copied_total, copied_before)
      << "a refused header flood was copied into the request";
  auto r = h.client->Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_GT(h.server->transport().header_bytes_copied_total, copied_before);
}

TEST(ServerTransport, PipelinedAndKeepAliveRequestsAreAllAnswered) {
  Harness h;
  int fd = connect_to(h.server->port());
  ASSERT_GE(fd, 0);
  const std::string get = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  ASSERT_TRUE(send_all(fd, get + get + get));  // one write: the 2nd and 3rd are buffered
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_TRUE(send_all(fd, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"));
  bool closed = false;
  const std::string got = read_until_close(fd, std::chrono::seconds(20), closed);
  ::close(fd);
  EXPECT_EQ(count(got, "HTTP/1.1 200"), 4) << got;
  EXPECT_TRUE(closed);
  // httplib's client keeps its connection: the second request comes back through the gate.
  h.client->set_keep_alive(true);
  for (int i = 0; i < 3; ++i) {
    auto r = h.client->Get("/health");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
  }
}

// A refusal from the headers alone (401 here) leaves the body unread: the connection must close
// (and say so) rather than parse the body as the next request (which used to answer 400).
TEST(ServerTransport, RefusalBeforeTheBodyClosesTheConnection) {
  ServerConfig cfg;
  cfg.http.api_key = "sekrit";
  Harness h(cfg);
  int fd = connect_to(h.server->port());
  ASSERT_GE(fd, 0);
  const std::string body = R"({"prompt":"hi","max_tokens":2})";
  ASSERT_TRUE(send_all(fd,
                       "POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer no\r\n"
                       "Content-Type: application/json\r\nContent-Length: " +
                           std::to_string(body.size()) + "\r\n\r\n" + body));
  bool closed = false;
  const std::string got = read_until_close(fd, std::chrono::seconds(20), closed);
  ::close(fd);
  EXPECT_TRUE(got.starts_with("HTTP/1.1 401")) << got;
  EXPECT_NE(got.find("Connection: close"), std::string::npos) << got;
  EXPECT_EQ(count(got, "HTTP/1.1 "), 1) << got;
  EXPECT_TRUE(closed);
}

// Engine faults carry their kind from where they are found; the one table maps each kind to
// one status, streamed or not.
TEST(ServerTransport, EngineFaultKindsMapToOneStatusEach) {
  EXPECT_EQ(engine_error(Error{"x", ErrorKind::kOverloaded}, 3).status, 429);
  EXPECT_EQ(engine_error(Error{"x", ErrorKind::kOverloaded}, 3).retry_after_s, 3);
  EXPECT_EQ(engine_error(Error{"x", ErrorKind::kUnavailable}, 3).status, 503);
  EXPECT_EQ(engine_error(Error{"x", ErrorKind::kNumerics}, 3).status, 500);
  EXPECT_EQ(engine_error(Error{"x", ErrorKind::kNumerics}, 3).retry_after_s, 0);
  EXPECT_EQ(engine_error(Error{"x", ErrorKind::kContextOverflow}, 3).code,
            "context_length_exceeded");
  EXPECT_EQ(engine_error(Error{"x", ErrorKind::kInvalidInput}, 3).status, 400);
  EXPECT_EQ(engine_error(Error{"x", ErrorKind::kInternal}, 3).status, 500);
  EXPECT_EQ(engine_error(Error{"x", ErrorKind::kOutOfMemory}, 3).status, 503);
  EXPECT_EQ(engine_error(Error{"x", ErrorKind::kOutOfMemory}, 3).code, "out_of_memory");
  EXPECT_EQ(engine_error(Error{"x", ErrorKind::kOutOfMemory}, 3).retry_after_s, 3);
  for (int r = 0; r < (int)RefusalReason::kCount; ++r) {
    const RefusalSpec& spec = refusal_spec(RefusalReason(r));
    EXPECT_TRUE(spec.status >= 400 && spec.status < 600) << to_string(RefusalReason(r));
    EXPECT_STRNE(to_string(RefusalReason(r)), "?");
  }
  // The real engine's faults carry their kinds.
  Harness h;
  GenerationRequest big;
  big.prompt = std::vector<int32_t>(600, 3);  // over max_model_len 512
  big.max_tokens = 1;
  auto ch = h.engine->submit(std::move(big));
  ASSERT_TRUE(ch.ok());
  const TokenChannel::Collected c = (*ch)->collect();
  EXPECT_EQ(c.reason, FinishReason::kError);
  EXPECT_EQ(c.error_kind, ErrorKind::kContextOverflow) << c.error;
  h.engine->shutdown();
  GenerationRequest req;
  req.prompt = {1, 2, 3};
  req.max_tokens = 1;
  auto late = h.engine->submit(std::move(req));
  ASSERT_FALSE(late.ok());
  EXPECT_EQ(late.kind(), ErrorKind::kUnavailable) << late.message();
}

}  // namespace
}  // namespace kvw::server
