// tests/server/harness.h: an in-process `kvwarden serve` for tests: a Server on an ephemeral
// port over an Engine on a generated tiny model, with an httplib::Client, plus helpers that read
// SSE bodies and check OpenAI error JSON.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "model/model_maker.h"
#include "server/http_server.h"
#include "server/observability.h"

namespace kvw::server::harness {

using nlohmann::json;

inline std::string make_test_model(const std::string& name, int32_t n_embd, int32_t n_layer,
                                   int32_t n_ctx) {
  const std::string path = ::testing::TempDir() + "/server_" + name + ".gguf";
  MakeModelSpec spec;
  spec.n_embd = n_embd;
  spec.n_layer = n_layer;
  spec.n_ff = 4 * n_embd;
  spec.n_ctx = n_ctx;
  spec.seed = 7;
  Status st = make_model(spec, path);
  EXPECT_TRUE(st.ok()) << st.message();
  return path;
}

// The small model answers in milliseconds; the long one (4k context, bigger) makes requests
// that run for seconds, so disconnect, queueing and drain act on requests still running.
inline const std::string& small_model() {
  static const std::string p = make_test_model("small", 64, 2, 512);
  return p;
}
inline const std::string& long_model() {
  static const std::string p = make_test_model("long", 128, 4, 4096);
  return p;
}

struct Harness {
  EngineConfig ecfg;
  StepRelay relay;  // the engine's step observer; tests may connect it (observability)
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Server> server;
  std::unique_ptr<httplib::Client> client;

  // `before_start` runs between Server::create and start() (add routes, set an observer);
  // `engine_setup` changes the engine config before Engine::create.
  explicit Harness(ServerConfig scfg = {}, const std::string& model = small_model(),
                   int32_t max_num_seqs = 4, OverflowPolicy overflow = OverflowPolicy::kError,
                   const std::function<void(Harness&)>& before_start = nullptr,
                   const std::function<void(EngineConfig&)>& engine_setup = nullptr) {
    ecfg.model_path = model;
    ecfg.n_threads = 1;
    ecfg.reserve_bytes = 1 << 20;
    ecfg.sched.max_num_batched_tokens = 256;
    ecfg.sched.max_num_seqs = max_num_seqs;
    ecfg.sched.max_model_len = model == small_model() ? 512 : 4096;
    ecfg.sched.overflow = overflow;
    ecfg.step_observer = relay.observer();
    if (engine_setup) engine_setup(ecfg);
    auto e = Engine::create(ecfg);
    EXPECT_TRUE(e.ok()) << e.message();
    engine = std::move(*e);
    scfg.http.port = 0;
    scfg.served_model_name = "tiny";
    scfg.http.handler_threads = 2;
    scfg.breaker_tick_ms = 20;
    auto s = Server::create(scfg, *engine);
    EXPECT_TRUE(s.ok()) << s.message();
    server = std::move(*s);
    if (before_start) before_start(*this);
    Status st = server->start();
    EXPECT_TRUE(st.ok()) << st.message();
    client = std::make_unique<httplib::Client>("127.0.0.1", server->port());
    client->set_read_timeout(60);
  }
  ~Harness() {
    server->stop();
    engine->shutdown();
  }

  httplib::Result post(const std::string& path, const json& body) {
    return client->Post(path.c_str(), body.dump(), "application/json");
  }
  json post_ok(const std::string& path, const json& body) {
    auto r = post(path, body);
    EXPECT_TRUE(r) << "no response";
    if (!r) return {};
    EXPECT_EQ(r->status, 200) << r->body;
    return json::parse(r->body, nullptr, false);
  }
};

// The `data:` payloads of an SSE body, in order.
inline std::vector<std::string> sse_events(const std::string& body) {
  std::vector<std::string> out;
  size_t at = 0;
  while ((at = body.find("data: ", at)) != std::string::npos) {
    const size_t end = body.find("\n\n", at);
    out.push_back(body.substr(at + 6, end - at - 6));
    at = end;
  }
  return out;
}

inline void expect_error(const httplib::Result& r, int status, const std::string& code,
                         const std::string& param = "") {
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, status) << r->body;
  json j = json::parse(r->body, nullptr, false);
  ASSERT_TRUE(j.is_object()) << r->body;
  ASSERT_TRUE(j.contains("error")) << r->body;
  EXPECT_TRUE(j["error"]["message"].is_string());
  EXPECT_TRUE(j["error"]["type"].is_string());
  if (!code.empty()) {
    EXPECT_EQ(j["error"]["code"], code) << r->body;
  }
  if (!param.empty()) {
    EXPECT_EQ(j["error"]["param"], param) << r->body;
  }
}

// Polls `cond` every 2 ms until it holds (true) or `timeout` passes (false).
inline bool wait_for(const std::function<bool()>& cond,
                     std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  while (!cond()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

}  // namespace kvw::server::harness
