// Request memory in the server: prompts whose byte length alone cannot fit are refused before
// tokenising (completions, chat and /tokenize), token-array prompts over the context are refused
// without being copied, JSON that would cost more than the reservation is refused before it is
// built, truncate-left tokenises only the tail, and the request memory is all returned.
#include <gtest/gtest.h>

#include "harness.h"

namespace kvw::server {
namespace {

using harness::expect_error;
using harness::Harness;
using harness::small_model;
using nlohmann::json;

std::string words(size_t bytes) {
  std::string s;
  while (s.size() < bytes) s += "Once upon a time ";
  return s;
}

TEST(RequestMemory, PromptTooLongByItsBytesIsRefusedBeforeTokenising) {
  Harness h;  // max_model_len 512
  const std::string text = words(1 << 20);
  auto c = h.post("/v1/completions", {{"prompt", text}});
  expect_error(c, 400, "context_length_exceeded", "prompt");
  EXPECT_NE(c->body.find("at least"), std::string::npos) << c->body;
  expect_error(
      h.post("/v1/chat/completions", {{"messages", {{{"role", "user"}, {"content", text}}}}}), 400,
      "context_length_exceeded", "messages");
  auto t = h.post("/tokenize", {{"prompt", text}});
  expect_error(t, 400, "context_length_exceeded", "prompt");
  EXPECT_NE(t->body.find("512"), std::string::npos) << "the answer names max_model_len";
  // A long token-id prompt is refused the same way.
  expect_error(h.post("/v1/completions", {{"prompt", std::vector<int>(5000, 3)}}), 400,
               "context_length_exceeded", "prompt");
  EXPECT_TRUE(harness::wait_for([&] { return h.server->transport().request_memory.used == 0; }));
  const http::HttpServerStats s = h.server->transport();
  EXPECT_GT(s.request_memory.peak, 0u);
  EXPECT_LE(s.request_memory.peak, s.request_memory.capacity);
}

TEST(RequestMemory, JsonThatWouldOutgrowItsReservationIs413) {
  ServerConfig cfg;
  cfg.http.reserve_per_body_byte = 2;  // body + 1x for the parsed document
  cfg.http.reserve_fixed_bytes = 4096;
  Harness h(cfg);
  // 200k tiny values: about 2 bytes of text each, 32+ bytes each once parsed.
  std::string body = "{\"prompt\":\"x\",\"stop\":[";
  for (int i = 0; i < 200000; ++i) body += i ? ",0" : "0";
  body += "]}";
  auto r = h.client->Post("/v1/completions", body, "application/json");
  expect_error(r, 413, "request_too_large");
  // The answer's bytes reach the client before the I/O thread releases its memory.
  EXPECT_TRUE(harness::wait_for([&] { return h.server->transport().request_memory.used == 0; }));
  // An ordinary request still fits its reservation.
  EXPECT_EQ(h.post("/v1/completions", {{"prompt", "Once"}, {"max_tokens", 1}})->status, 200);
}

TEST(RequestMemory, TruncateLeftServesAHugePromptFromItsTail) {
  Harness h({}, small_model(), 4, OverflowPolicy::kTruncateLeft);
  const std::string text = words(2 << 20) + "The end";
  json r = h.post_ok("/v1/completions", {{"prompt", text}, {"max_tokens", 2}});
  ASSERT_TRUE(r.contains("usage")) << r.dump();
  // Only the tail was tokenised: (512 + 1) x the longest token's bytes at most, a few thousand
  // tokens, where the whole 2 MiB text is about 490,000. The engine then keeps the newest 511.
  const int64_t bound = 513 * h.server->max_token_bytes();
  EXPECT_LE(r["usage"]["prompt_tokens"].get<int64_t>(), bound);
  EXPECT_GE(r["usage"]["prompt_tokens"].get<int64_t>(), 512);
  json chat = h.post_ok(
      "/v1/chat/completions",
      {{"messages",
        {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", text}}}},
       {"max_tokens", 2}});
  EXPECT_LE(chat["usage"]["prompt_tokens"].get<int64_t>(), bound + 64);
  EXPECT_GE(chat["usage"]["prompt_tokens"].get<int64_t>(), 512);
}

}  // namespace
}  // namespace kvw::server
