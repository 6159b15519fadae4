// tests/http_torture/load_test.cc: many requests at once against `kvwarden serve`. Every request
// gets a definite answer: 200 with the full OpenAI shape, or a clean refusal (429/503 with
// Retry-After and an OpenAI error JSON). None hang (one bounded deadline for the whole batch) and
// none are lost (sent == answered). Latencies and counts are printed, never asserted.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "torture_util.h"

namespace kvw::torture {
namespace {

std::string completion_body(const std::string& model, int max_tokens, bool stream) {
  return R"({"model":)" + json_quote(model) + R"(,"prompt":"Once upon a time","max_tokens":)" +
         std::to_string(max_tokens) + R"(,"temperature":0.8,"seed":1)" +
         (stream ? R"(,"stream":true)" : "") + "}";
}

std::string chat_body(const std::string& model, int max_tokens, bool stream) {
  return R"({"model":)" + json_quote(model) +
         R"(,"messages":[{"role":"user","content":"Tell me a story"}],"max_tokens":)" +
         std::to_string(max_tokens) + (stream ? R"(,"stream":true)" : "") + "}";
}

// Checks one outcome and counts it as "label status" (or "label lost").
void check_outcome(const PlannedRequest& req, const RawResponse& r,
                   std::map<std::string, int>& counts) {
  const std::string what = req.label + " request";
  if (!r.answered()) {
    // The first few are enough to diagnose; the summary prints the full count.
    if (++counts[req.label + " lost"] <= 3) {
      ADD_FAILURE() << what << " got no definite answer: " << r.describe();
    }
    return;
  }
  ++counts[req.label + " " + std::to_string(r.status)];
  if (r.status == 429 || r.status == 503) {
    expect_openai_error(r, r.status, what);
    expect_retry_after(r, what);
    return;
  }
  if (req.label == "health") {
    EXPECT_EQ(r.status, 200) << r.describe();
  } else if (req.label.find("stream") != std::string::npos) {
    expect_stream_shape(r, what);
  } else {
    expect_completion_shape(r, req.label.find("chat") != std::string::npos, what);
  }
}

void print_summary(const char* title, const std::vector<PlannedRequest>& reqs,
                   const std::vector<RawResponse>& out, const std::map<std::string, int>& counts,
                   double wall_s) {
  std::printf("  %s: %zu requests in %.1f s\n", title, reqs.size(), wall_s);
  for (const auto& [key, n] : counts) std::printf("    %-22s %5d\n", key.c_str(), n);
  std::map<std::string, std::vector<double>> lat;
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (out[i].answered()) lat[reqs[i].label].push_back(out[i].latency_ms);
  }
  for (auto& [label, v] : lat) {
    std::sort(v.begin(), v.end());
    std::printf("    latency %-14s p50 %7.0f ms  p99 %7.0f ms  max %7.0f ms\n", label.c_str(),
                v[v.size() / 2], v[v.size() * 99 / 100], v.back());
  }
}

class HttpConcurrency : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { served_ = serve_generated_model({}); }
  static void TearDownTestSuite() {
    stop_and_expect_clean_exit(*served_);
    served_.reset();
  }
  static std::unique_ptr<ServedModel> served_;
};
std::unique_ptr<ServedModel> HttpConcurrency::served_;

TEST_F(HttpConcurrency, ThousandConnectionsAllGetDefiniteAnswers) {
  ASSERT_TRUE(served_->server && served_->server->alive());
  const uint16_t port = served_->server->port();
  std::vector<PlannedRequest> reqs;
  for (int i = 0; i < 1000; ++i) {
    if (i % 2 == 0) {
      reqs.push_back({make_get("/health"), Millis{0}, "health"});
    } else {
      reqs.push_back({make_post_json("/v1/completions",
                                     completion_body(served_->model_id, 1 + (i / 2) % 2, false)),
                      Millis{0}, "completion"});
    }
  }
  const auto t0 = Clock::now();
  std::vector<RawResponse> out = run_batch(port, reqs, Millis{120000});
  const double wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::map<std::string, int> counts;
  for (size_t i = 0; i < reqs.size(); ++i) check_outcome(reqs[i], out[i], counts);
  print_summary("1000 concurrent connections", reqs, out, counts, wall_s);
  expect_server_healthy(*served_, "1000 concurrent connections");
}

// Capacity 2 running + 4 queued; bursts of 10x that within 60 ms, five times over ~12 s, with
// /health probed every 250 ms throughout.
class HttpOverload : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    served_ =
        serve_generated_model({"--max-num-seqs", "2", "--max-queue", "4", "--max-queue-wait", "2"});
  }
  static void TearDownTestSuite() {
    stop_and_expect_clean_exit(*served_);
    served_.reset();
  }
  static std::unique_ptr<ServedModel> served_;
};
std::unique_ptr<ServedModel> HttpOverload::served_;

TEST_F(HttpOverload, TenTimesCapacityIsServedOrRefusedCleanly) {
  ASSERT_TRUE(served_->server && served_->server->alive());
  const uint16_t port = served_->server->port();
  const std::string& model = served_->model_id;
  constexpr int kCapacity = 2 + 4, kBursts = 5, kBurstGapMs = 3000;
  std::vector<PlannedRequest> reqs;
  for (int b = 0; b < kBursts; ++b) {
    for (int i = 0; i < 10 * kCapacity; ++i) {
      // A burst arrives within 60 ms: at 5 ms apart (0.3 s) a quiet machine finished the short
      // sampled answers as fast as they came and the queue never overflowed.
      Millis at{b * kBurstGapMs + i};
      switch (i % 4) {
        case 0:
          reqs.push_back({make_post_json("/v1/completions", completion_body(model, 64, false)), at,
                          "completion"});
          break;
        case 1:
          reqs.push_back(
              {make_post_json("/v1/chat/completions", chat_body(model, 64, false)), at, "chat"});
          break;
        case 2:
          reqs.push_back({make_post_json("/v1/completions", completion_body(model, 64, true)), at,
                          "completion-stream"});
          break;
        default:
          reqs.push_back({make_post_json("/v1/chat/completions", chat_body(model, 64, true)), at,
                          "chat-stream"});
          break;
      }
    }
  }
  const int num_load = static_cast<int>(reqs.size());
  for (int t = 0; t < kBursts * kBurstGapMs + 2000; t += 250) {
    reqs.push_back({make_get("/health"), Millis{t}, "health"});
  }
  const auto t0 = Clock::now();
  std::vector<RawResponse> out = run_batch(port, reqs, Millis{120000});
  const double wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  std::map<std::string, int> counts;
  int answered = 0, completed = 0, refused = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    check_outcome(reqs[i], out[i], counts);
    if (static_cast<int>(i) >= num_load) continue;
    answered += out[i].answered();
    completed += out[i].status == 200;
    refused += out[i].status == 429 || out[i].status == 503;
  }
  print_summary("overload (max-num-seqs 2, max-queue 4, max-queue-wait 2)", reqs, out, counts,
                wall_s);
  std::printf("    sent %d, answered %d (completed %d, refused %d)\n", num_load, answered,
              completed, refused);
  EXPECT_EQ(answered, num_load) << "requests lost";
  EXPECT_EQ(completed + refused, num_load) << "every answer is a completion or a clean refusal";
  EXPECT_GT(completed, 0) << "overload must not refuse everything";
  EXPECT_GT(refused, 0) << "10x capacity within 60 ms must overflow a queue of 4";
  expect_server_healthy(*served_, "overload");
}

}  // namespace
}  // namespace kvw::torture
