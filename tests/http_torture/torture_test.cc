// tests/http_torture/torture_test.cc: hostile and odd HTTP input against `kvwarden serve`. Every
// case must get a definite answer (an OpenAI error JSON with the right 4xx, a 2xx, or a closed
// connection where the bytes are not HTTP at all), and after every test the process is still
// alive and GET /health answers 200.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <thread>

#include "torture_util.h"

namespace kvw::torture {
namespace {

constexpr size_t kMaxBodyBytes = 65536;  // the suite's --max-body-bytes

class HttpTorture : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    served_ = serve_generated_model({"--max-body-bytes", std::to_string(kMaxBodyBytes)});
  }
  static void TearDownTestSuite() {
    stop_and_expect_clean_exit(*served_);
    served_.reset();
  }
  void SetUp() override { ASSERT_TRUE(served_->server && served_->server->alive()) << "no server"; }
  void TearDown() override {
    expect_server_healthy(*served_,
                          ::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  static uint16_t port() { return served_->server->port(); }
  static const std::string& model() { return served_->model_id; }
  static std::string completion_with(const std::string& field, const std::string& value) {
    return R"({"model":)" + json_quote(model()) + R"(,"prompt":"hi","max_tokens":2,")" + field +
           "\":" + value + "}";
  }
  static std::string chat_with(const std::string& messages_json) {
    return R"({"model":)" + json_quote(model()) + R"(,"max_tokens":2,"messages":)" + messages_json +
           "}";
  }

  static std::unique_ptr<ServedModel> served_;
};
std::unique_ptr<ServedModel> HttpTorture::served_;

TEST_F(HttpTorture, MalformedJsonIs400WithOpenAiError) {
  const std::vector<std::string> bodies = {"",
                                           "{",
                                           R"({"model": )",
                                           "not json",
                                           R"({"prompt": "hi",})",
                                           R"({"a":1}})",
                                           std::string("{\"prompt\":\"a\0b\"}", 16),
                                           "\x01\x02\x03",
                                           "{\"prompt\":\"unterminated"};
  for (const char* route : {"/v1/completions", "/v1/chat/completions"}) {
    for (const std::string& b : bodies) {
      RawResponse r = exchange(port(), make_post_json(route, b));
      expect_openai_error(r, 400, std::string(route) + " body '" + b + "'");
    }
  }
}

TEST_F(HttpTorture, WrongTopLevelTypesAre400) {
  // Deep nesting is valid JSON of the wrong type; a recursive parser would overflow its stack.
  std::string deep = std::string(20000, '[') + std::string(20000, ']');
  for (const std::string& b : {std::string("null"), std::string("[]"), std::string("5"),
                               std::string("\"text\""), std::string("true"), deep}) {
    for (const char* route : {"/v1/completions", "/v1/chat/completions"}) {
      RawResponse r = exchange(port(), make_post_json(route, b));
      expect_openai_error(r, 400, std::string(route) + " body " + b.substr(0, 20));
    }
  }
}

TEST_F(HttpTorture, WrongTypesForEveryCompletionFieldAre400) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"model", "5"},
      {"model", "[]"},
      {"prompt", "5"},
      {"prompt", "{\"a\":1}"},
      {"prompt", "[true]"},
      {"max_tokens", "\"2\""},
      {"max_tokens", "2.5"},
      {"max_tokens", "-1"},
      {"max_tokens", "[]"},
      {"temperature", "\"hot\""},
      {"temperature", "-0.5"},
      {"top_p", "\"x\""},
      {"top_p", "1.5"},
      {"n", "\"2\""},
      {"n", "0"},
      {"stream", "\"yes\""},
      {"stream", "1"},
      {"stop", "5"},
      {"stop", "[1,2]"},
      {"seed", "\"x\""},
      {"seed", "1.5"},
      {"stream_options", "5"},
      {"stream_options", "{\"include_usage\":\"y\"}"},
      {"presence_penalty", "\"p\""},
      {"frequency_penalty", "[]"}};
  for (const auto& [field, value] : cases) {
    // Later keys win in most parsers, so the bad value replaces the good default.
    RawResponse r =
        exchange(port(), make_post_json("/v1/completions", completion_with(field, value)));
    expect_openai_error(r, 400, "completions " + field + "=" + value);
  }
}

TEST_F(HttpTorture, WrongTypesForEveryChatFieldAre400) {
  const std::vector<std::string> messages = {"\"hi\"",
                                             "5",
                                             "{}",
                                             "[5]",
                                             "[\"hi\"]",
                                             R"([{"role":5,"content":"hi"}])",
                                             R"([{"role":"user","content":5}])",
                                             R"([{"content":"hi"}])",
                                             R"([{"role":"wizard","content":"hi"}])",
                                             R"([{"role":"user"}])",
                                             "[]",
                                             "null"};
  for (const std::string& m : messages) {
    RawResponse r = exchange(port(), make_post_json("/v1/chat/completions", chat_with(m)));
    expect_openai_error(r, 400, "chat messages=" + m);
  }
  const std::string good = R"([{"role":"user","content":"hi"}])";
  for (const auto& [field, value] : std::vector<std::pair<std::string, std::string>>{
           {"max_tokens", "\"x\""}, {"temperature", "{}"}, {"n", "-3"}, {"stream", "\"no\""}}) {
    std::string body = R"({"model":)" + json_quote(model()) + R"(,"messages":)" + good + ",\"" +
                       field + "\":" + value + "}";
    expect_openai_error(exchange(port(), make_post_json("/v1/chat/completions", body)), 400,
                        "chat " + field + "=" + value);
  }
}

TEST_F(HttpTorture, UnknownFieldsAreIgnored) {
  const std::string extra = R"("x_unknown":{"a":[1,2,{"b":null}]},"user":"qa","logit_bias":{})";
  std::string comp =
      R"({"model":)" + json_quote(model()) + R"(,"prompt":"hi","max_tokens":2,)" + extra + "}";
  expect_completion_shape(exchange(port(), make_post_json("/v1/completions", comp)), false,
                          "completion with unknown fields");
  std::string chat = R"({"model":)" + json_quote(model()) +
                     R"(,"messages":[{"role":"user","content":"hi","x_note":1}],"max_tokens":2,)" +
                     extra + "}";
  expect_completion_shape(exchange(port(), make_post_json("/v1/chat/completions", chat)), true,
                          "chat with unknown fields");
}

TEST_F(HttpTorture, BodyOverMaxBodyBytesIs413) {
  std::string prompt(kMaxBodyBytes * 16, 'a');
  std::string body =
      R"({"model":)" + json_quote(model()) + R"(,"max_tokens":1,"prompt":")" + prompt + "\"}";
  RawResponse r = exchange(port(), make_post_json("/v1/completions", body), Millis{30000});
  expect_openai_error(r, 413, "1 MiB body");
  // A Content-Length far over the limit is refused from the headers alone, without waiting
  // for a gigabyte that never comes.
  std::string lying =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
      "Content-Type: application/json\r\nContent-Length: 1000000000\r\n\r\n{";
  // 20 s: shorter than the server's 30 s read timeout, far longer than an answer takes.
  RawResponse big = exchange(port(), lying, Millis{20000});
  EXPECT_FALSE(big.timed_out) << "server waited for the announced body: " << big.describe();
  if (big.status != 0) expect_openai_error(big, 413, "Content-Length 1e9");
  // Just under the limit is served.
  std::string small = R"({"model":)" + json_quote(model()) + R"(,"max_tokens":1,"prompt":")" +
                      std::string(200, 'b') + "\"}";
  expect_completion_shape(exchange(port(), make_post_json("/v1/completions", small)), false,
                          "small body");
}

TEST_F(HttpTorture, InvalidUtf8InPromptIs400) {
  const std::vector<std::string> prompts = {"\xff\xfe", "ab\xc3", "\xed\xa0\x80",  // surrogate
                                            "\xc0\xaf", "ok\x80ok"};
  for (const std::string& p : prompts) {
    std::string body =
        R"({"model":)" + json_quote(model()) + R"(,"max_tokens":2,"prompt":")" + p + "\"}";
    expect_openai_error(exchange(port(), make_post_json("/v1/completions", body)), 400,
                        "invalid UTF-8 prompt");
    std::string chat = R"({"model":)" + json_quote(model()) +
                       R"(,"max_tokens":2,"messages":[{"role":"user","content":")" + p + "\"}]}";
    expect_openai_error(exchange(port(), make_post_json("/v1/chat/completions", chat)), 400,
                        "invalid UTF-8 chat content");
  }
  // A lone surrogate written as a JSON escape is not a character either.
  std::string esc = R"({"model":)" + json_quote(model()) + R"(,"max_tokens":2,"prompt":"\ud800"})";
  expect_openai_error(exchange(port(), make_post_json("/v1/completions", esc)), 400,
                      "lone surrogate escape");
}

// 4xx, or the connection closed without a response; never a hang, a 2xx or a 5xx.
void expect_refused_or_closed(const RawResponse& r, const std::string& what) {
  EXPECT_FALSE(r.timed_out) << what << ": " << r.describe();
  if (r.status != 0) {
    EXPECT_TRUE(r.status >= 400 && r.status < 500) << what << ": " << r.describe();
  }
  std::printf("  %s -> %s\n", what.c_str(),
              r.status ? ("status " + std::to_string(r.status)).c_str() : "closed");
}

TEST_F(HttpTorture, HeaderFloodsAreRefused) {
  std::string many;
  for (int i = 0; i < 5000; ++i) many += "X-Flood-" + std::to_string(i) + ": v\r\n";
  expect_refused_or_closed(exchange(port(), make_request("GET", "/health", "", many)),
                           "5000 headers");
  std::string huge = "X-Huge: " + std::string(1 << 20, 'h') + "\r\n";
  expect_refused_or_closed(exchange(port(), make_request("GET", "/health", "", huge)),
                           "one 1 MiB header");
  expect_refused_or_closed(
      exchange(port(), make_request("GET", "/health?" + std::string(200000, 'q'), "")),
      "200 kB request line");
}

TEST_F(HttpTorture, UnknownRouteIs404WrongMethodIs405) {
  expect_openai_error(exchange(port(), make_get("/v1/nope")), 404, "GET /v1/nope");
  expect_openai_error(exchange(port(), make_get("/v1/completions")), 405, "GET /v1/completions");
  expect_openai_error(exchange(port(), make_request("DELETE", "/v1/chat/completions", "")), 405,
                      "DELETE /v1/chat/completions");
  const char kTlsHello[] = "\x16\x03\x01\x02\x00 not http at all\r\n\r\n";
  RawResponse garbage = exchange(port(), std::string(kTlsHello, sizeof(kTlsHello) - 1));
  expect_refused_or_closed(garbage, "TLS hello bytes");
}

// Slowloris: connections that trickle one byte a second (and some that send nothing) must be
// closed by the server, while other clients are still served.
TEST_F(HttpTorture, SlowClientsAreTimedOutAndOthersServed) {
  // More trickling connections than the server has HTTP worker threads (128 by default), so a
  // server that parks one thread per connection cannot answer /health.
  constexpr int kTrickle = 160, kIdle = 8;
  constexpr auto kBudget = std::chrono::seconds{40};
  struct Slow {
    int fd;
    bool open = true;
    double closed_after_s = 0;
    std::string got;
  };
  std::vector<Slow> slow;
  for (int i = 0; i < kTrickle + kIdle; ++i) {
    int fd = connect_loopback(port());
    ASSERT_GE(fd, 0);
    slow.push_back(Slow{fd, true, 0, {}});
  }
  const std::string trickle =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nX-Slow: " + std::string(200, 'z');
  const auto t0 = Clock::now();
  size_t next_byte = 0;
  int health_ok = 0, health_bad = 0;
  double health_max_ms = 0;
  for (int tick = 0; Clock::now() - t0 < kBudget; ++tick) {
    int num_open = 0;
    for (size_t i = 0; i < slow.size(); ++i) {
      Slow& s = slow[i];
      if (!s.open) continue;
      bool trickles = i < kTrickle;
      bool ok = !trickles || next_byte >= trickle.size() ||
                send_all(s.fd, std::string_view(trickle).substr(next_byte, 1), Millis{100});
      if (ok) ok = read_some(s.fd, s.got, Millis{0});
      if (!ok || !s.got.empty()) {  // closed, reset, or answered (e.g. 408)
        s.open = false;
        s.closed_after_s = std::chrono::duration<double>(Clock::now() - t0).count();
        ::close(s.fd);
      } else {
        ++num_open;
      }
    }
    ++next_byte;
    if (tick % 2 == 0) {
      RawResponse h = exchange(port(), make_get("/health"), Millis{5000});
      (h.status == 200 ? health_ok : health_bad)++;
      health_max_ms = std::max(health_max_ms, h.latency_ms);
    }
    if (num_open == 0) break;
    std::this_thread::sleep_for(Millis{1000});
  }
  double last_close = 0;
  int still_open = 0;
  for (Slow& s : slow) {
    if (s.open) {
      ++still_open;
      ::close(s.fd);
    }
    last_close = std::max(last_close, s.closed_after_s);
  }
  std::printf(
      "  slowloris: %d trickling + %d idle connections; %d still open after %llds; "
      "last closed at %.1fs; /health %d ok %d failed, max %.0f ms\n",
      kTrickle, kIdle, still_open, static_cast<long long>(kBudget.count()), last_close, health_ok,
      health_bad, health_max_ms);
  EXPECT_EQ(still_open, 0) << "the server must time out slow connections";
  EXPECT_EQ(health_bad, 0) << "other clients must be served while slow ones hang on";
}

}  // namespace
}  // namespace kvw::torture
