// Refusals at the door (issue 34, "refuse before doing work"): while admission is full,
// draining or shedding, a generation request is answered 429/503 + Retry-After from its request
// line and headers alone, before its body is sent, with no request memory reserved; a request
// that passed the door gives its reserved admission slot back on every early exit.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>

#include "harness.h"
#include "raw_socket.h"

namespace kvw::server {
namespace {

using harness::Harness;
using harness::long_model;
using harness::wait_for;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

using raw_socket::connect_to;
using raw_socket::read_until_close;
using raw_socket::send_all;

constexpr uint64_t k8MiB = 8u << 20;

std::string headers_only(const std::string& path, uint64_t content_length) {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
         "Content-Length: " + std::to_string(content_length) + "\r\n\r\n";
}

// Sends only the headers of a request announcing an 8 MiB body and reads the answer.
std::string announce_8mib(int port, const std::string& path, bool& closed) {
  const int fd = connect_to(port);
  EXPECT_GE(fd, 0);
  if (fd < 0) return {};
  EXPECT_TRUE(send_all(fd, headers_only(path, k8MiB)));
  // A server that waited for the body would answer nothing here (--body-timeout is 60 s).
  std::string got = read_until_close(fd, 5s, closed);
  ::close(fd);
  return got;
}

void expect_refused(const std::string& got, int status, const std::string& code) {
  EXPECT_TRUE(got.starts_with("HTTP/1.1 " + std::to_string(status))) << got;
  EXPECT_NE(got.find("Retry-After: "), std::string::npos) << got;
  EXPECT_NE(got.find("Connection: close"), std::string::npos) << got;
  const size_t at = got.find("\r\n\r\n");
  ASSERT_NE(at, std::string::npos) << got;
  const json j = json::parse(got.substr(at + 4), nullptr, false);
  ASSERT_TRUE(j.is_object()) << got;
  EXPECT_EQ(j["error"]["code"], code) << got;
  EXPECT_TRUE(j["error"]["message"].is_string()) << got;
}

// The value of the sample line `series` (name + labels) in Prometheus text, or -1.
double sample(const std::string& text, const std::string& series) {
  size_t at = 0;
  while ((at = text.find(series, at)) != std::string::npos) {
    if ((at == 0 || text[at - 1] == '\n') && text[at + series.size()] == ' ') {
      return std::stod(text.substr(at + series.size() + 1));
    }
    at += series.size();
  }
  return -1;
}

// A server over the long model with one running slot (max_num_seqs 1), /metrics wired as
// `kvwarden serve` wires it, and background streams of 4000 tokens that keep it busy.
struct BusyServer {
  std::unique_ptr<obs::ObservabilityContext> ctx;  // outlives the harness (declared first)
  std::unique_ptr<ObsBridge> bridge;
  std::unique_ptr<Harness> h;
  std::vector<std::thread> streams;

  explicit BusyServer(ServerConfig cfg) {
    cfg.admission.max_queue_wait_s = 0;  // only the queue bound refuses (and nothing times out)
    cfg.drain_timeout_s = 0.2;
    h = std::make_unique<Harness>(
        cfg, long_model(), /*max_num_seqs=*/1, OverflowPolicy::kError, [this](Harness& hh) {
          ctx = std::make_unique<obs::ObservabilityContext>(
              make_obs_config(hh.ecfg, hh.engine->budget(), {.model_name = "tiny"}));
          hh.relay.connect(ctx->step_observer());
          bridge = std::make_unique<ObsBridge>(*ctx);
          wire_observability(*hh.server, *hh.engine, *ctx, *bridge, json{{"test", true}});
        });
  }
  ~BusyServer() {
    h->server->drain_and_stop();  // cancels the streams
    for (std::thread& t : streams) t.join();
  }
  void start_stream() {
    const int64_t before = h->server->admission().in_flight;
    streams.emplace_back([port = h->server->port()] {
      httplib::Client c("127.0.0.1", port);
      c.set_read_timeout(60);
      c.Post("/v1/completions",
             json{{"prompt", "Once upon a time"},
                  {"max_tokens", 4000},
                  {"stream", true},
                  {"ignore_eos", true}}
                 .dump(),
             "application/json");
    });
    EXPECT_TRUE(wait_for([&] { return h->server->admission().in_flight == before + 1; }));
  }
  std::string metrics() {
    auto m = h->client->Get("/metrics");
    EXPECT_TRUE(m);
    return m ? m->body : std::string();
  }
};

// Issue 34: a full server answers a request announcing an 8 MiB body with 429 + Retry-After
// before the body is sent, and request memory does not move; draining answers 503 the same way.
TEST(ServerDoor, FullServerRefusesAnAnnounced8MiBBodyFromItsHeadersAlone) {
  ServerConfig cfg;
  cfg.admission.max_queue = 1;
  BusyServer b(cfg);
  Harness& h = *b.h;
  b.start_stream();  // runs
  b.start_stream();  // queues: admission is full
  // A stream is admitted before its handler returns and resizes the body's lease to the
  // stream's state (issue 30): wait for both bodies' reservations (each at least
  // reserve_fixed_bytes) to go so the baseline is not a moment in that release.
  const uint64_t one_body = h.server->transport_config().reserve_fixed_bytes;
  ASSERT_TRUE(wait_for([&] { return h.server->transport().request_memory.used < one_body; }));
  const http::ByteBudgetStats mem_before = h.server->transport().request_memory;
  const std::string m0 = b.metrics();
  const double used_before = sample(m0, R"(kvwarden_request_memory_bytes{state="used"})");
  const double peak_before = sample(m0, R"(kvwarden_request_memory_bytes{state="peak"})");
  ASSERT_GE(used_before, 0) << m0;

  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    bool closed = false;
    const std::string got = announce_8mib(h.server->port(), path, closed);
    expect_refused(got, 429, "queue_full");
    EXPECT_GE(std::stoi(got.substr(got.find("Retry-After: ") + 13)), 1) << got;
    EXPECT_TRUE(closed) << "the unread body is not taken as the next request";
  }
  const std::string m1 = b.metrics();
  EXPECT_EQ(sample(m1, R"(kvwarden_request_memory_bytes{state="used"})"), used_before) << m1;
  // 8 MiB would have reserved 4 x 8 MiB + 256 KiB: the peak shows none was ever taken.
  EXPECT_EQ(sample(m1, R"(kvwarden_request_memory_bytes{state="peak"})"), peak_before) << m1;
  EXPECT_EQ(h.server->transport().request_memory.num_granted, mem_before.num_granted);
  // The refusals count as before (by reason, and in the shed metric).
  EXPECT_EQ(h.server->refusals().get(RefusalReason::kQueueFull), 2u);
  EXPECT_EQ(sample(m1, R"(kvwarden_requests_shed_total{reason="queue_full"})"), 2) << m1;
  EXPECT_EQ(h.server->admission().in_flight, 2);  // the refusals took no slot

  h.server->begin_drain();
  bool closed = false;
  const std::string got = announce_8mib(h.server->port(), "/v1/completions", closed);
  expect_refused(got, 503, "draining");
  EXPECT_TRUE(closed);
  EXPECT_EQ(h.server->transport().request_memory.num_granted, mem_before.num_granted);
  EXPECT_EQ(h.server->refusals().get(RefusalReason::kDraining), 1u);
}

TEST(ServerDoor, SheddingServerRefusesFromTheHeadersWith503) {
  ServerConfig cfg;
  cfg.breaker.kv_high = 0.001;  // one running request crosses it
  cfg.breaker.kv_low = 0.0005;
  cfg.breaker.kv_shed_after_s = 0;
  BusyServer b(cfg);
  Harness& h = *b.h;
  b.start_stream();
  ASSERT_TRUE(wait_for([&] { return h.server->breaker().state == BreakerState::kShedding; }));
  const uint64_t granted = h.server->transport().request_memory.num_granted;
  bool closed = false;
  const std::string got = announce_8mib(h.server->port(), "/v1/chat/completions", closed);
  expect_refused(got, 503, "overloaded");
  EXPECT_TRUE(closed);
  EXPECT_EQ(h.server->transport().request_memory.num_granted, granted);
  EXPECT_EQ(h.server->refusals().get(RefusalReason::kShedding), 1u);
}

// A request that passed the door holds one admission slot until its exact count is known; a
// parse error, a refused extra choice, a client gone mid-body and a body timeout all give it
// back.
TEST(ServerDoor, DoorSlotGoesBackOnEveryEarlyExit) {
  ServerConfig cfg;
  cfg.admission.max_queue = 1;
  cfg.http.body_timeout_s = 0.5;
  BusyServer b(cfg);
  Harness& h = *b.h;
  b.start_stream();  // in flight: 1 (running); one more may queue
  auto in_flight = [&] { return h.server->admission().in_flight; };

  auto bad = h.client->Post("/v1/completions", "{\"prompt\": ", "application/json");
  harness::expect_error(bad, 400, "");
  EXPECT_TRUE(wait_for([&] { return in_flight() == 1; })) << in_flight();

  // n = 3: the door reserves 1 (it would queue), the exact check finds no room for the other
  // two (choices of one prompt may queue up to --max-queue places beyond it: 1 + 1 < 3).
  auto two = h.post("/v1/completions", {{"prompt", "Once"}, {"n", 3}, {"max_tokens", 1}});
  harness::expect_error(two, 429, "queue_full");
  EXPECT_TRUE(wait_for([&] { return in_flight() == 1; })) << in_flight();

  // The client leaves halfway through its body.
  int fd = connect_to(h.server->port());
  ASSERT_TRUE(send_all(fd, headers_only("/v1/completions", 1000) + std::string(500, ' ')));
  EXPECT_TRUE(wait_for([&] { return in_flight() == 2; })) << "the door reserved a slot";
  ::close(fd);
  EXPECT_TRUE(wait_for([&] { return in_flight() == 1; })) << in_flight();

  // The body never completes: 408 after --body-timeout, and the slot is back.
  fd = connect_to(h.server->port());
  ASSERT_TRUE(send_all(fd, headers_only("/v1/completions", 1000) + "{"));
  bool closed = false;
  const std::string got = read_until_close(fd, 5s, closed);
  ::close(fd);
  EXPECT_TRUE(got.starts_with("HTTP/1.1 408")) << got;
  EXPECT_TRUE(wait_for([&] { return in_flight() == 1; })) << in_flight();
  EXPECT_EQ(h.server->admission().num_completed, 0u) << "releases are not completions";
  // Only the running stream's state is held (no body's reservation, each reserve_fixed_bytes).
  EXPECT_LT(h.server->transport().request_memory.used,
            h.server->transport_config().reserve_fixed_bytes);
}

// Sends a whole small completion on `fd`.
void send_once(int fd) {
  const std::string body = R"({"prompt":"hi","max_tokens":1})";
  EXPECT_TRUE(send_all(fd, headers_only("/v1/completions", body.size()) + body));
}

// Reads one answer (headers + Content-Length body) from `fd`.
std::string read_once(int fd) {
  std::string got;
  char buf[4096];
  while (true) {
    const size_t end = got.find("\r\n\r\n");
    if (end != std::string::npos) {
      const size_t cl = got.find("Content-Length: ");
      if (cl != std::string::npos && got.size() >= end + 4 + std::stoul(got.substr(cl + 16))) break;
    }
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    got.append(buf, size_t(n));
  }
  return got;
}

std::string ask_once(int fd) {
  send_once(fd);
  return read_once(fd);
}

double retry_after_s(const std::string& answer) {
  const size_t at = answer.find("Retry-After: ");
  return at == std::string::npos ? -1 : std::stod(answer.substr(at + 13));
}

// Issue 34, retry storms: a connection that comes back before the Retry-After of its last 429
// has run out gets its next 429 only when it runs out (at most --refusal-hold), so a client
// that ignores Retry-After retries once per Retry-After, not once per round trip. The first
// refusal on a connection is answered at once, the held one still carries Retry-After, and the
// kept-alive connection survives the hold.
TEST(ServerDoor, AClientBackBeforeItsRetryAfterIsHeldUntilItRunsOut) {
  ServerConfig cfg;
  cfg.admission.max_queue = 1;
  cfg.pacing.hold_s = 1.5;  // under the Retry-After this server gives, so the hold decides
  BusyServer b(cfg);
  Harness& h = *b.h;
  b.start_stream();  // runs
  b.start_stream();  // queues: admission is full
  const int fd = connect_to(h.server->port());
  ASSERT_GE(fd, 0);
  auto t0 = Clock::now();
  std::string got = ask_once(fd);
  ASSERT_TRUE(got.starts_with("HTTP/1.1 429")) << got;
  const double retry_after = retry_after_s(got);
  ASSERT_GE(retry_after, 1) << got;
  // A new connection is a new client as far as the door knows: answered at once.
  const int other = connect_to(h.server->port());
  ASSERT_GE(other, 0);
  EXPECT_TRUE(ask_once(other).starts_with("HTTP/1.1 429"));
  ::close(other);
  EXPECT_EQ(h.server->transport().held_refusals_total, 0u) << "a first refusal is not held";
  for (int i = 0; i < 2; ++i) {  // back at once, as a client that ignores Retry-After
    got = ask_once(fd);
    const double since_last = std::chrono::duration<double>(Clock::now() - t0).count();
    t0 = Clock::now();
    ASSERT_TRUE(got.starts_with("HTTP/1.1 429")) << got;
    EXPECT_GE(retry_after_s(got), 1) << got;
    EXPECT_GE(since_last, std::min(retry_after, cfg.pacing.hold_s) - 0.05)
        << "answered before the last Retry-After ran out";
  }
  ::close(fd);
  EXPECT_EQ(h.server->transport().held_refusals_total, 2u);
  EXPECT_EQ(h.server->transport().held_refusals, 0u);
  EXPECT_EQ(sample(b.metrics(), "kvwarden_http_refusals_held_total"), 2);
  EXPECT_EQ(h.server->refusals().get(RefusalReason::kQueueFull), 4u);
}

// Holds are bounded: past --refusal-hold-max held at once, a refusal that would be held is
// written at once (and counted), so holds cannot take every connection.
TEST(ServerDoor, HeldRefusalsAreBoundedByTheHoldBudget) {
  ServerConfig cfg;
  cfg.admission.max_queue = 1;
  cfg.pacing.hold_s = 1.5;
  cfg.http.max_held_refusals = 1;
  BusyServer b(cfg);
  Harness& h = *b.h;
  b.start_stream();
  b.start_stream();
  const int fd1 = connect_to(h.server->port()), fd2 = connect_to(h.server->port());
  ASSERT_GE(fd1, 0);
  ASSERT_GE(fd2, 0);
  ASSERT_TRUE(ask_once(fd1).starts_with("HTTP/1.1 429"));
  ASSERT_TRUE(ask_once(fd2).starts_with("HTTP/1.1 429"));
  // Both back at once: one is held (the whole Retry-After), the other finds the budget spent.
  send_once(fd1);
  send_once(fd2);
  for (const int fd : {fd1, fd2}) {
    const std::string got = read_once(fd);
    EXPECT_TRUE(got.starts_with("HTTP/1.1 429")) << got;
    EXPECT_GE(retry_after_s(got), 1) << got;
  }
  ::close(fd1);
  ::close(fd2);
  EXPECT_EQ(h.server->transport().held_refusals_total, 1u);
  EXPECT_EQ(h.server->transport().held_refusals_over_budget_total, 1u);
  EXPECT_EQ(sample(b.metrics(), "kvwarden_http_refusals_hold_over_budget_total"), 1);
}

}  // namespace
}  // namespace kvw::server
