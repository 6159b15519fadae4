// Issue 30, the worst request mix at small scale: every running slot held by long choices
// (non-streamed, ignore_eos, logprobs) and nothing queued, strangers withholding bodies beside
// them. The door predicted a 0 s wait (no queued work) and admitted an authorised 1-token
// completion that then waited the whole --max-queue-wait for its 503 (60 s by default: the
// mix's 30 s client saw no answer). The wait for a running slot is now foreseen.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "harness.h"
#include "raw_socket.h"

namespace kvw::server {
namespace {

using harness::Harness;
using harness::wait_for;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

using raw_socket::connect_to;
using raw_socket::send_all;

constexpr const char* kKey = "sk-test-30";

std::string post_request(const std::string& path, const std::string& body, bool key) {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" +
         (key ? std::string("Authorization: Bearer ") + kKey + "\r\n" : std::string()) +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

// Wider and deeper than the harness's long model: 4000 tokens take seconds (~4 s predicted on a
// busy 2-core machine), so the slot wait is well over the 0.5 s limit on a fast machine too.
const std::string& slow_model() {
  static const std::string p = harness::make_test_model("slot_wait", 256, 8, 4096);
  return p;
}

TEST(ServerDoor, AuthorisedRequestAnsweredAtOnceWhileLongChoicesHoldEverySlot) {
  ServerConfig cfg;
  cfg.http.api_key = kKey;
  cfg.admission.max_queue_wait_s = 0.5;
  cfg.drain_timeout_s = 0.2;
  Harness h(cfg, slow_model(), /*max_num_seqs=*/2);
  const int port = h.server->port();
  // The mix's non-streamed request in small: its 2 choices of 4000 tokens hold both slots.
  const int holder = connect_to(port);
  ASSERT_GE(holder, 0);
  ASSERT_TRUE(send_all(holder, post_request("/v1/completions",
                                            json{{"prompt", "Once upon a time"},
                                                 {"n", 2},
                                                 {"max_tokens", 4000},
                                                 {"logprobs", 5},
                                                 {"ignore_eos", true}}
                                                .dump(),
                                            true)));
  // Setup, not the subject: under TSan beside other tests the two prefills have taken over 10 s.
  ASSERT_TRUE(wait_for(
      [&] {
        const EngineStats s = h.engine->stats();
        return s.num_running == 2 && s.num_generated_tokens >= 8;
      },
      std::chrono::seconds(60)));
  std::vector<int> strangers;  // announce 8 MiB bodies they never send
  for (int i = 0; i < 10; ++i) {
    strangers.push_back(connect_to(port));
    ASSERT_TRUE(send_all(strangers.back(),
                         "POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                         "Content-Length: 8388608\r\n\r\n"));
  }

  httplib::Client c("127.0.0.1", port);
  c.set_bearer_token_auth(kKey);
  c.set_read_timeout(30);
  const json one = {{"prompt", "Hi"}, {"max_tokens", 1}};
  const EngineStats before = h.engine->stats();
  std::printf("engine: %.0f tokens/s, %zu running, %llu steps, %llu tokens generated\n",
              before.token_rate, before.num_running, (unsigned long long)before.num_steps,
              (unsigned long long)before.num_generated_tokens);
  const auto t0 = Clock::now();
  auto r = c.Post("/v1/completions", one.dump(), "application/json");
  const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
  ASSERT_TRUE(r) << "no answer";
  // Before: admitted, then 503 queue_timeout after --max-queue-wait (0.5 s here).
  harness::expect_error(r, 429, "queue_wait_exceeded");
  const std::string retry = r->get_header_value("Retry-After");
  ASSERT_FALSE(retry.empty());
  EXPECT_GE(std::stoi(retry), 1);
  EXPECT_LT(secs, 0.5) << "answered from the door, not after waiting";
  std::printf(
      "1-token completion beside 2 slots held for 4000 tokens: %d in %.3f s, "
      "Retry-After %s s\n",
      r->status, secs, retry.c_str());

  // The holder hangs up: its choices end, the slots free, and the same request is served.
  ::close(holder);
  ASSERT_TRUE(wait_for([&] { return h.engine->stats().num_running == 0; }));
  auto ok = c.Post("/v1/completions", one.dump(), "application/json");
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
  EXPECT_EQ(h.server->refusals().get(RefusalReason::kQueueTimeout), 0u);
  for (int fd : strangers) ::close(fd);
}

}  // namespace
}  // namespace kvw::server
