// Issue 30, "charge what a request holds for as long as it holds it": a generation request's
// request-memory lease is resized, once parsed, to what it will hold until its last answer byte
// (request_holdings.h) and given back only then; state that does not fit now is a 503
// request_memory with Retry-After, state that could never fit a 400 naming the field. Fields
// with no other bound (stop bytes, logit_bias entries, logprob records) are refused up front.
// A fault mid-stream ends that stream with a typed, counted event; the others complete.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <stdexcept>
#include <thread>

#include "harness.h"
#include "raw_socket.h"
#include "server/request_holdings.h"

namespace kvw::server {
namespace {

using harness::expect_error;
using harness::Harness;
using harness::sse_events;
using harness::wait_for;
using nlohmann::json;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

// 4 token-id prompts x n 4, 16 maximal stop strings that never match, logprobs 5.
json big_request(int max_tokens) {
  json stops = json::array();
  for (int i = 0; i < 16; ++i) stops.push_back(std::string(kMaxStopBytes / 16, (char)('#' + i)));
  return {{"prompt", {{1, 2, 3}, {4, 5, 6}, {7, 8, 9}, {10, 11, 12}}},
          {"n", 4},
          {"max_tokens", max_tokens},
          {"logprobs", 5},
          {"ignore_eos", true},
          {"stop", stops}};
}

// What the server charges for big_request, from the request as the client wrote it.
uint64_t big_request_holdings(const Harness& h, int max_tokens) {
  GenParams p;
  p.n = 4;
  p.logprobs = 5;
  for (int i = 0; i < 16; ++i) p.stop.push_back(std::string(kMaxStopBytes / 16, 'x'));
  std::vector<PromptShape> shapes(4, PromptShape{.num_tokens = 3, .max_tokens = max_tokens});
  return request_holdings(p, shapes, {.max_token_bytes = h.server->max_token_bytes()}).total();
}

TEST(RequestHold, GenerationHoldsItsStateInRequestMemoryUntilTheAnswerIsWritten) {
  Harness h;
  const uint64_t expected = big_request_holdings(h, 120);
  std::atomic<int> status{0};
  std::string body;
  std::thread client([&] {
    auto r = h.post("/v1/completions", big_request(120));
    if (r) body = r->body;
    status = r ? r->status : -1;
  });
  // While it generates, request memory holds exactly its state (the body's reservation was
  // resized to it), not 0 as when the lease went back with the handler.
  const bool held = wait_for(
      [&] { return h.server->transport().request_memory.used == expected || status.load() != 0; },
      30s);
  const uint64_t seen = h.server->transport().request_memory.used;
  client.join();
  EXPECT_TRUE(held);
  EXPECT_EQ(seen, expected) << "request memory while generating";
  ASSERT_EQ(status.load(), 200) << body.substr(0, 300);
  const json j = json::parse(body);
  EXPECT_EQ(j["choices"].size(), 16u);
  EXPECT_EQ(j["usage"]["completion_tokens"], 16 * 120);
  // Given back once the last byte is written (just after the client has it).
  EXPECT_TRUE(wait_for([&] { return h.server->transport().request_memory.used == 0; }, 30s));
}

// A client with a tiny receive window: the answer cannot all be written while it does not read.
int connect_slow_reader(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  const int rcv = 4096;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcv, sizeof rcv);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons((uint16_t)port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  return fd;
}

TEST(RequestHold, StateThatDoesNotFitNowIs503AndStateThatNeverFitsIs400) {
  ServerConfig cfg;
  cfg.http.max_body_bytes = 16 << 10;
  Harness probe;  // the same model: its token bytes give the holdings
  const uint64_t one = big_request_holdings(probe, 400);
  cfg.http.request_memory_bytes = one + one / 2;  // one fits, two do not
  // The second body's reservation fits beside the first request's state; its state does not.
  ASSERT_GT(one / 2, cfg.http.reservation(cfg.http.max_body_bytes)) << "needs a bigger state";
  Harness h(cfg, harness::small_model(), /*max_num_seqs=*/16);
  // The first request's answer is held (the client does not read yet), and so is its state.
  const std::string body = big_request(400).dump();
  const int fd = connect_slow_reader(h.server->port());
  ASSERT_TRUE(
      raw_socket::send_all(fd,
                           "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                           "Content-Type: application/json\r\nContent-Length: " +
                               std::to_string(body.size()) + "\r\n\r\n" + body));
  ASSERT_TRUE(wait_for([&] { return h.server->transport().request_memory.used == one; }, 30s))
      << h.server->transport().request_memory.used << " used, " << one << " expected";
  auto second = h.post("/v1/completions", big_request(400));
  expect_error(second, 503, "request_memory_exhausted");
  EXPECT_TRUE(second->has_header("Retry-After"));
  // Four times the choices: more than all of --request-memory, so never admissible.
  json huge = big_request(480);
  huge["n"] = 16;
  auto never = h.post("/v1/completions", huge);
  expect_error(never, 400, "", "n");
  bool closed = false;
  const std::string first = raw_socket::read_until_close(fd, 60s, closed);
  ::close(fd);
  EXPECT_TRUE(first.starts_with("HTTP/1.1 200")) << first.substr(0, 300);
  EXPECT_NE(first.find("\"total_tokens\""), std::string::npos) << "the whole answer arrived";
  EXPECT_EQ(h.server->refusals().get(RefusalReason::kRequestMemory), 1u);
  EXPECT_TRUE(wait_for([&] { return h.server->transport().request_memory.used == 0; }, 30s));
  EXPECT_LE(h.server->transport().request_memory.peak, cfg.http.request_memory_bytes);
}

TEST(RequestBounds, StopBytesAndLogprobRecordsAre400NamingTheField) {
  Harness h;
  json stops = json::array({std::string(kMaxStopBytes - 1, '#'), "##"});
  auto r = h.post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 1}, {"stop", stops}});
  expect_error(r, 400, "", "stop");
  stops = json::array({std::string(kMaxStopBytes - 1, '#'), "#"});
  r = h.post("/v1/completions", {{"prompt", "x"}, {"max_tokens", 1}, {"stop", stops}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;

  // logit_bias entries are bounded too (request_holdings_test: the test models' vocabularies,
  // 677 tokens, are under the bound).

  // 16 x 4000 x 21 records: refused from the fields, before the context check or tokenising.
  r = h.post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", "x"}}}},
                                      {"n", 16},
                                      {"max_tokens", 4000},
                                      {"logprobs", true},
                                      {"top_logprobs", 20}});
  expect_error(r, 400, "", "n");
  EXPECT_NE(r->body.find("logprob records"), std::string::npos) << r->body;
  // The answer's bytes reach the client before the I/O thread releases its memory.
  EXPECT_TRUE(wait_for([&] { return h.server->transport().request_memory.used == 0; }, 30s));
}

// Issue 30, faults are per request: an exception in one streamed request's sampling, after it
// has sent tokens, ends that stream with a typed error event (counted by reason); the others
// finish.
TEST(ServerFaults, MidStreamFaultEndsOnlyThatStreamWithATypedCountedEvent) {
  std::atomic<int> calls{0};
  Harness h({}, harness::small_model(), /*max_num_seqs=*/4, OverflowPolicy::kError, nullptr,
            [&calls](EngineConfig& e) {
              e.sample_fault_hook = [&calls](uint64_t, int32_t max_tokens) {
                if (max_tokens == 17 && ++calls == 6) throw std::runtime_error("injected");
              };
            });
  std::vector<std::thread> clients;
  std::vector<std::string> bodies(3);
  std::vector<int> status(3, 0);
  for (int i = 0; i < 3; ++i) {
    clients.emplace_back([&, i] {
      httplib::Client c("127.0.0.1", h.server->port());
      c.set_read_timeout(60);
      const json req = {{"prompt", "Once upon a time"},
                        {"max_tokens", i == 1 ? 17 : 20},
                        {"ignore_eos", true},
                        {"stream", true}};
      auto r = c.Post("/v1/completions", req.dump(), "application/json");
      if (!r) return;
      status[i] = r->status;
      bodies[i] = r->body;
    });
  }
  for (std::thread& t : clients) t.join();
  for (int i : {0, 2}) {
    EXPECT_EQ(status[i], 200);
    EXPECT_EQ(sse_events(bodies[i]).back(), "[DONE]") << bodies[i];
  }
  EXPECT_EQ(status[1], 200) << "tokens were sent before the fault";
  const std::vector<std::string> ev = sse_events(bodies[1]);
  ASSERT_GE(ev.size(), 2u) << bodies[1];
  const json first = json::parse(ev.front(), nullptr, false);
  ASSERT_TRUE(first.is_object()) << ev.front();
  EXPECT_FALSE(first["choices"][0]["text"].get<std::string>().empty())
      << "the tokens before the fault arrived: " << bodies[1];
  bool typed = false;
  for (const std::string& e : ev) {
    const json j = json::parse(e, nullptr, false);
    if (j.is_object() && j.contains("error")) {
      typed = true;
      EXPECT_EQ(j["error"]["type"], "server_error") << e;
      EXPECT_NE(j["error"]["message"].get<std::string>().find("injected"), std::string::npos);
    }
  }
  EXPECT_TRUE(typed) << bodies[1];
  EXPECT_EQ(h.server->refusals().get(RefusalReason::kInternal), 1u);
  EXPECT_EQ(h.engine->stats().num_request_faults, 1u);
  auto after = h.post("/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 2}});
  ASSERT_TRUE(after);
  EXPECT_EQ(after->status, 200) << after->body;
}

}  // namespace
}  // namespace kvw::server
