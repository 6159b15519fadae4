// server/http_server.h: `kvwarden serve`'s OpenAI-compatible HTTP server over one Engine
// (cpp-httplib). Routes: POST /v1/completions, /v1/chat/completions, /tokenize, /detokenize;
// GET /v1/models, /health, /ready. Errors are OpenAI error JSON; admission (bounded queue,
// predicted wait) gives 429, the breaker and drain give 503, both with Retry-After.
// Other modules add routes (/metrics, /dashboard, /debug/*) with add_route() before start().
// Connections are handled by GatedHttpServer (http_transport.h): a request reaches a worker only
// once its headers are complete; slow headers get 408, header floods 431, an announced body over
// --max-body-bytes 413 before it is read.
// Ownership: the Server borrows the Engine, which must outlive it. Thread safety: start(),
// add_route() and drain_and_stop() from one controlling thread; handlers run on the HTTP pool;
// the accessors are thread-safe.
#pragma once

#include <httplib.h>

#include <condition_variable>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>

#include "core/status.h"
#include "engine/engine.h"
#include "server/http_transport.h"
#include "server/server_config.h"
#include "server/server_observer.h"
#include "server/server_state.h"

namespace kvw::server {

class Server {
  struct PassKey {  // lets create() use make_unique while keeping construction private
    explicit PassKey() = default;
  };

 public:
  using Handler = std::function<void(const httplib::Request&, httplib::Response&)>;

  Server(PassKey, const ServerConfig& cfg);
  // Errors: a bad config, or a chat template that does not parse. `engine_cfg` is what the
  // engine was created with (max_model_len, overflow policy, max_num_seqs).
  static Result<std::unique_ptr<Server>> create(const ServerConfig& cfg, Engine& engine,
                                                const EngineConfig& engine_cfg);
  ~Server();  // stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // The hook for other modules: registers `handler` for `method` ("GET", "POST", ...) and
  // `path` (an httplib regex pattern). With require_auth the --api-key check applies. The
  // handler should answer errors with OpenAI error JSON (see api_error.h). Before start() only.
  void add_route(const std::string& method, const std::string& path, Handler handler,
                 bool require_auth = false);

  // Reports finished choices, refusals and breaker changes to `observer` (which must outlive
  // the Server). Before start() only.
  void set_observer(ServerObserver* observer) { st_->observer = observer; }

  // Binds host:port (port 0: any free port) and serves on a background thread.
  Status start();
  int port() const { return port_; }
  std::string url() const;

  // Stops taking new generation work: new requests get 503 + Retry-After, /ready says
  // "draining". Idempotent.
  void begin_drain();
  // begin_drain(), waits up to --drain-timeout for in-flight requests, cancels the rest, then
  // stops the listener. Returns the number of requests it had to cancel.
  size_t drain_and_stop();
  // Stops the listener now (in-flight handlers finish on their own). Idempotent.
  void stop();

  // For metrics and tests.
  BreakerSnapshot breaker() const { return st_->breaker.snapshot(); }
  AdmissionSnapshot admission() const { return st_->admission.snapshot(); }
  const RefusalCounters& refusals() const { return st_->refusals; }
  const ServerCounters& counters() const { return st_->counters; }
  const std::string& model_name() const { return st_->model_name; }
  bool draining() const { return st_->draining.load(); }

 private:
  void install_routes();
  void install_hooks();
  void monitor_loop();
  bool path_known(const std::string& path) const;

  std::unique_ptr<ServerState> st_;
  GatedHttpServer http_;
  std::set<std::string> auth_paths_;   // exact paths that require the API key
  std::set<std::string> known_paths_;  // for 405 vs 404
  int port_ = 0;
  std::thread listener_;
  std::thread monitor_;
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
};

}  // namespace kvw::server
