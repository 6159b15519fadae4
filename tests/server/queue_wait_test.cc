// Issue 34, waits that end: an admitted request that has produced nothing within
// --max-queue-wait gets 503 + Retry-After (streamed: as its status line, nothing was sent) and is
// dropped from the engine; a non-streamed request whose client hangs up stops computing.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "harness.h"

namespace kvw::server {
namespace {

using harness::Harness;
using harness::json;
using harness::long_model;

struct Answer {
  int status = 0;
  std::string body, retry_after, content_type;
  double seconds = 0;
};

Answer post_timed(int port, const std::string& path, const json& body) {
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(60);
  const auto t0 = std::chrono::steady_clock::now();
  auto r = c.Post(path.c_str(), body.dump(), "application/json");
  Answer a;
  a.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!r) return a;
  a.status = r->status;
  a.body = r->body;
  a.retry_after = r->get_header_value("Retry-After");
  a.content_type = r->get_header_value("Content-Type");
  return a;
}

void expect_queue_timeout(const Answer& a) {
  EXPECT_EQ(a.status, 503) << a.body;
  const json j = json::parse(a.body, nullptr, false);
  ASSERT_TRUE(j.is_object() && j.contains("error")) << a.body;
  EXPECT_EQ(j["error"]["code"], "queue_timeout") << a.body;
  EXPECT_EQ(j["error"]["type"], "server_error") << a.body;
  ASSERT_FALSE(a.retry_after.empty());
  EXPECT_GE(std::stoi(a.retry_after), 1);
  // Admitted with nothing queued ahead, it waited about the limit, then got its answer.
  EXPECT_GE(a.seconds, 1.0);
  EXPECT_LT(a.seconds, 5.0);
}

template <typename Pred>
bool wait_until(Pred pred, int ms = 10000) {
  for (int i = 0; i < ms / 5 && !pred(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return pred();
}

// A streamed request that runs for many seconds on the long model, holding the only slot. Its
// end is not foreseen (slot_ends.h): no ignore_eos, its end-of-generation tokens biased away
// instead, so the door admits behind it and the engine's queue-wait limit is what answers.
std::thread occupy_the_slot(Harness& h) {
  json no_end = json::object();
  const Tokenizer& tok = h.engine->tokenizer();
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    if (tok.is_end_of_generation(id)) no_end[std::to_string(id)] = -100;
  }
  EXPECT_FALSE(no_end.empty());
  std::thread t([&h, no_end] {
    httplib::Client c("127.0.0.1", h.server->port());
    c.set_read_timeout(120);
    c.Post("/v1/completions",
           json{{"prompt", "Once upon a time"},
                {"max_tokens", 4000},
                {"stream", true},
                {"logit_bias", no_end}}
               .dump(),
           "application/json");
  });
  EXPECT_TRUE(wait_until([&] { return h.engine->stats().num_generated_tokens > 0; }))
      << "the long request never produced";
  return t;
}

TEST(QueueWait, QueuedRequestPastMaxQueueWaitGets503WithRetryAfterStreamedOrNot) {
  ServerConfig cfg;
  cfg.admission.max_queue_wait_s = 1;
  cfg.drain_timeout_s = 0;
  Harness h(cfg, long_model(), /*max_num_seqs=*/1);
  std::thread busy = occupy_the_slot(h);
  Answer whole, streamed;
  std::thread a([&] {
    whole =
        post_timed(h.server->port(), "/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 4}});
  });
  std::thread b([&] {
    streamed = post_timed(h.server->port(), "/v1/chat/completions",
                          {{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                           {"max_tokens", 4},
                           {"stream", true}});
  });
  a.join();
  b.join();
  expect_queue_timeout(whole);
  // Streamed: nothing was sent, so the 503 is the status line and the body is the JSON error.
  expect_queue_timeout(streamed);
  EXPECT_EQ(streamed.content_type.find("text/event-stream"), std::string::npos);
  EXPECT_EQ(streamed.body.find("data:"), std::string::npos) << streamed.body;
  // Dropped from the engine; the long request, which produced, runs on past the limit.
  const EngineStats s = h.engine->stats();
  EXPECT_EQ(s.num_queue_timeouts, 2u);
  EXPECT_EQ(s.num_waiting, 0u);
  EXPECT_EQ(s.num_running, 1u);
  EXPECT_EQ(s.num_kv_sequences, 1u);
  EXPECT_EQ(h.server->refusals().get(RefusalReason::kQueueTimeout), 2u);
  EXPECT_EQ(h.server->admission().in_flight, 1);
  // The refused requests' bodies are given back (each reserved at least reserve_fixed_bytes);
  // what remains is the running request's state, held until its answer ends (issue 30).
  EXPECT_LT(h.server->transport().request_memory.used,
            h.server->transport_config().reserve_fixed_bytes)
      << "the refused requests' memory";
  h.server->drain_and_stop();
  busy.join();
}

// Writes a non-streamed request on a raw socket and returns the socket (no read).
int send_raw_request(int port, const std::string& body) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons((uint16_t)port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, (sockaddr*)&addr, sizeof addr), 0);
  const std::string req =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
      "application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  EXPECT_EQ(::send(fd, req.data(), req.size(), 0), (ssize_t)req.size());
  return fd;
}

// Issue 34 saw requests computed for clients that had left: a non-streamed request whose client
// hangs up must stop at the next step, running or still queued.
TEST(QueueWait, NonStreamedClientThatHangsUpIsCancelledRunningOrQueued) {
  ServerConfig cfg;
  Harness h(cfg, long_model(), /*max_num_seqs=*/1);
  const std::string body =
      json{{"prompt", "Once upon a time"}, {"max_tokens", 4000}, {"ignore_eos", true}}.dump();
  const int running = send_raw_request(h.server->port(), body);
  ASSERT_TRUE(wait_until([&] { return h.engine->stats().num_generated_tokens > 0; }));
  const int queued = send_raw_request(h.server->port(), body);
  ASSERT_TRUE(wait_until([&] { return h.engine->stats().num_waiting == 1; }));
  ::close(queued);
  ::close(running);
  ASSERT_TRUE(wait_until([&] { return h.engine->stats().num_finished == 2; }))
      << "finished " << h.engine->stats().num_finished;
  const EngineStats s = h.engine->stats();
  EXPECT_EQ(s.num_running, 0u);
  EXPECT_EQ(s.num_waiting, 0u);
  EXPECT_EQ(s.num_kv_sequences, 0u);
  EXPECT_LT(s.num_generated_tokens, 4000u);  // the running one stopped early
  EXPECT_EQ(h.server->counters().num_cancelled_disconnect.load(), 2u);
  EXPECT_EQ(h.server->admission().in_flight, 0);
  // The engine stays idle: no step computes for the clients that left.
  const uint64_t steps = s.num_steps;
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(h.engine->stats().num_steps, steps);
}

}  // namespace
}  // namespace kvw::server
