// Issue 30: answers built whole in a handler (/tokenize, /detokenize, /debug/*) are charged to
// request memory while built and written (server/leased_answer.h): one that does not fit now is
// a 503 request_memory with Retry-After, one that never could a 400 naming the parameter, and
// what they held goes back once written.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <thread>

#include "harness.h"
#include "raw_socket.h"
#include "server/leased_answer.h"
#include "server/observability.h"

namespace kvw::server {
namespace {

using harness::Harness;
using harness::wait_for;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

constexpr uint64_t kCapacity = 256u << 10;
constexpr uint64_t kFixed = 4u << 10;

ServerConfig small_request_memory() {
  ServerConfig cfg;
  cfg.http.request_memory_bytes = kCapacity;
  cfg.http.reserve_fixed_bytes = kFixed;
  cfg.http.max_body_bytes = (kCapacity - kFixed) / 4;  // one largest body fits exactly
  cfg.http.body_timeout_s = 30;
  return cfg;
}

uint64_t used(const Harness& h) {
  return h.server->transport().request_memory.used;
}

// A client that announces a body of `body_bytes` to /tokenize and never sends it: its
// reservation stays held until the socket closes.
int hold_request_memory(Harness& h, uint64_t body_bytes) {
  const uint64_t before = used(h);
  const int fd = raw_socket::connect_to(h.server->port());
  EXPECT_GE(fd, 0);
  EXPECT_TRUE(raw_socket::send_all(
      fd,
      "POST /tokenize HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
      "Content-Length: " +
          std::to_string(body_bytes) + "\r\n\r\n"));
  EXPECT_TRUE(wait_for([&] { return used(h) > before; })) << "the body was never reserved";
  return fd;
}

void expect_refused_now(const httplib::Result& r) {
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503) << r->body;
  EXPECT_NE(r->body.find("request_memory_exhausted"), std::string::npos) << r->body;
  EXPECT_TRUE(r->has_header("Retry-After"));
}

TEST(AnswerMemory, TokenizeAnswerIsChargedAndRefusedWith503WhenItDoesNotFitNow) {
  Harness h(small_request_memory());
  std::string text;
  for (int i = 0; i < 300; ++i) text += "hello world ";
  const json req = {{"prompt", text}};
  const uint64_t baseline = used(h);
  auto alone = h.post("/tokenize", req);
  ASSERT_TRUE(alone);
  ASSERT_EQ(alone->status, 200) << alone->body;
  const auto count = json::parse(alone->body)["count"].get<uint64_t>();
  EXPECT_GE(count, 600u);
  EXPECT_TRUE(wait_for([&] { return used(h) == baseline; })) << "the answer's charge stayed held";
  // Leave room for this body's own reservation and 8 KiB: less than its ~28 B a token answer.
  const uint64_t own = h.server->transport_config().reservation(req.dump().size());
  const uint64_t hold =
      (kCapacity - own - (8u << 10) - kFixed) / h.server->transport_config().reserve_per_body_byte;
  const int fd = hold_request_memory(h, hold);
  expect_refused_now(h.post("/tokenize", req));
  EXPECT_GE(h.server->refusals().get(RefusalReason::kRequestMemory), 1u);
  ::close(fd);
  ASSERT_TRUE(wait_for([&] { return used(h) == baseline; }));
  auto again = h.post("/tokenize", req);
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200) << again->body;
}

TEST(AnswerMemory, DetokenizeAnswerThatCouldNeverFitIs400NamingTokens) {
  Harness h(small_request_memory());
  auto small = h.post("/detokenize", {{"tokens", {1, 2, 3}}});
  ASSERT_TRUE(small);
  EXPECT_EQ(small->status, 200) << small->body;
  // Enough ids that their text's bound (10 x the longest piece a token) passes the capacity,
  // each padded to 12 body bytes so the body's reservation (4 x) covers its parsed array
  // (kJsonNodeBytes an id) while the reservation itself fits.
  const Tokenizer& tok = h.engine->tokenizer();
  uint64_t longest = 1;
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    longest = std::max<uint64_t>(longest, tok.token_bytes(id, true).size());
  }
  const uint64_t n = kCapacity / (10 * longest) + 1;
  std::string body = "{\"tokens\":[";
  for (uint64_t i = 0; i < n; ++i) body += i == 0 ? "1         " : ",1         ";
  body += "]}";
  ASSERT_LT(h.server->transport_config().reservation(body.size()), kCapacity)
      << "the model's pieces are too short for this test (" << longest << " B)";
  auto huge = h.client->Post("/detokenize", body, "application/json");
  ASSERT_TRUE(huge);
  EXPECT_EQ(huge->status, 400) << huge->body;
  const json e = json::parse(huge->body, nullptr, false);
  EXPECT_EQ(e["error"]["param"], "tokens") << huge->body;
  EXPECT_NE(huge->body.find("--request-memory"), std::string::npos) << huge->body;
}

// /debug/* answers are built from the engine's state with no size known up front: each reserves
// what the route's last answer took before building, then holds its answer while written.
TEST(AnswerMemory, DebugAnswersAreChargedAndRefusedWith503WhenMemoryIsHeld) {
  std::unique_ptr<obs::ObservabilityContext> ctx;
  std::unique_ptr<ObsBridge> bridge;
  Harness h(small_request_memory(), harness::small_model(), 4, OverflowPolicy::kError,
            [&](Harness& hh) {
              ctx = std::make_unique<obs::ObservabilityContext>(
                  make_obs_config(hh.ecfg, hh.engine->budget(), ObsOptions{.model_name = "t"}));
              hh.relay.connect(ctx->step_observer());
              bridge = std::make_unique<ObsBridge>(*ctx);
              wire_observability(*hh.server, *hh.engine, *ctx, *bridge, json{{"test", true}});
            });
  const uint64_t baseline = used(h);
  auto first = h.client->Get("/debug/stats");
  ASSERT_TRUE(first);
  ASSERT_EQ(first->status, 200) << first->body;
  EXPECT_TRUE(json::parse(first->body, nullptr, false).is_object());
  EXPECT_TRUE(wait_for([&] { return used(h) == baseline; })) << "the answer's charge stayed held";
  // Hold all but what this answer needs, less 1 KiB.
  const uint64_t need = answer_hold_bytes(first->body.size());
  const uint64_t hold = (kCapacity - baseline - need + 1024 - kFixed) /
                        h.server->transport_config().reserve_per_body_byte;
  const int fd = hold_request_memory(h, hold);
  expect_refused_now(h.client->Get("/debug/stats"));
  ::close(fd);
  ASSERT_TRUE(wait_for([&] { return used(h) == baseline; }));
  auto again = h.client->Get("/debug/stats");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200) << again->body;
  h.server->stop();  // before the context the routes use
}

}  // namespace
}  // namespace kvw::server
