// server/http_server.h: `kvwarden serve`'s OpenAI-compatible HTTP server over one Engine, on
// the event-driven transport in http/http_server.h. Routes: POST /v1/completions,
// /v1/chat/completions, /tokenize, /detokenize; GET /v1/models, /health, /ready. Errors are
// OpenAI error JSON; admission (bounded queue, predicted wait) gives 429, the breaker and drain
// give 503, both with Retry-After and answered at the door from the headers alone, before the
// body is read (generation_door in routes.h). Other modules add routes (/metrics, /dashboard,
// /debug/*) with add_route() before start(). /health and /ready run on the I/O threads, so they
// answer whatever generation work is queued.
// Ownership: the Server borrows the Engine, which must outlive it. Thread safety: start(),
// add_route() and drain_and_stop() from one controlling thread; handlers run on the handler
// pool (or I/O threads when inline); the accessors are thread-safe.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "core/status.h"
#include "engine/engine.h"
#include "http/http_server.h"
#include "obs/serving_metrics.h"
#include "server/server_config.h"
#include "server/server_observer.h"
#include "server/server_state.h"

namespace kvw::server {

class Server {
  struct PassKey {  // lets create() use make_unique while keeping construction private
    explicit PassKey() = default;
  };

 public:
  Server(PassKey, const ServerConfig& cfg, Engine& engine);
  // Errors: a bad config, or a chat template that does not parse. Request limits
  // (max_model_len, vocabulary, max_num_seqs, overflow policy) are the engine's (limits()).
  static Result<std::unique_ptr<Server>> create(const ServerConfig& cfg, Engine& engine);
  ~Server();  // stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // The hook for other modules: registers `handler` for `method` and the exact `path`. With
  // opt.auth the --api-key check applies. opt.inline_io handlers run on the I/O threads and
  // must be quick and never block (probes, /metrics); opt.probe routes are also served on the
  // connections allowed beyond --max-connections. The handler should answer errors with
  // OpenAI error JSON (see api_error.h). Before start() only.
  void add_route(const std::string& method, const std::string& path, http::Handler handler,
                 http::RouteOptions opt = {});

  // Reports finished choices, refusals and breaker changes to `observer` (which must outlive
  // the Server). Before start() only.
  void set_observer(ServerObserver* observer) { st_->observer = observer; }
  // `handler` with its answer charged to request memory while built and written
  // (leased_answer.h charge_answer): for routes whose answers are built whole (/debug/*).
  http::Handler charged(http::Handler handler);

  // Binds host:port (port 0: any free port) and serves on background threads.
  Status start();
  int port() const { return http_->port(); }
  std::string url() const;

  // Stops taking new generation work: new requests get 503 + Retry-After, /ready says
  // "draining". Idempotent.
  void begin_drain();
  // begin_drain(), waits up to --drain-timeout for in-flight requests, cancels the rest, then
  // stops the listener. Returns the number of requests it had to cancel.
  size_t drain_and_stop();
  // Stops the transport now (open streams are cancelled). Idempotent.
  void stop();

  // For metrics and tests.
  BreakerSnapshot breaker() const { return st_->breaker.snapshot(); }
  AdmissionSnapshot admission() const { return st_->admission.snapshot(); }
  const RefusalCounters& refusals() const { return st_->refusals; }
  const ServerCounters& counters() const { return st_->counters; }
  http::HttpServerStats transport() const { return http_->stats(); }
  obs::GrammarCacheSample grammar_cache() const;
  const http::HttpServerConfig& transport_config() const { return http_->config(); }
  const std::string& model_name() const { return st_->model_name; }
  // The most text bytes one token stands for (bounds tokens per prompt byte).
  int64_t max_token_bytes() const { return st_->max_token_bytes; }
  bool draining() const { return st_->draining.load(); }

 private:
  void install_routes();
  void monitor_loop();

  std::unique_ptr<ServerState> st_;
  std::unique_ptr<http::HttpServer> http_;
  std::thread monitor_;
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
};

}  // namespace kvw::server
