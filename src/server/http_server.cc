#include "server/http_server.h"

#include <malloc.h>

#include <cstdlib>
#include <ctime>
#include <filesystem>

#include "core/log.h"
#include "core/thread_name.h"
#include "grammar/grammar_cache.h"
#include "planner/engine_budget.h"
#include "server/leased_answer.h"
#include "server/routes.h"
#include "server/tool_calling.h"

namespace kvw::server {

using nlohmann::json;

namespace {

// The transport's own refusals, as reasons of the one table (api_error.h).
ApiError transport_refusal(const ServerConfig& c, http::Refusal r, const http::HttpRequest& req) {
  const http::HttpServerConfig& h = c.http;
  using http::Refusal;
  switch (r) {
    case Refusal::kBadRequest:
      return ApiError(RefusalReason::kMalformedHttp, "malformed HTTP request");
    case Refusal::kUnauthorized:
      return ApiError(RefusalReason::kUnauthorized,
                      "invalid or missing API key (Authorization: Bearer ...)");
    case Refusal::kNotFound:
      return ApiError(RefusalReason::kNotFound, "no route " + req.method + " " + req.path);
    case Refusal::kMethodNotAllowed:
      return ApiError(RefusalReason::kMethodNotAllowed,
                      "method " + req.method + " not allowed on " + req.path);
    case Refusal::kHeaderTimeout:
      return ApiError(RefusalReason::kHeaderTimeout,
                      "request headers not complete within --header-timeout");
    case Refusal::kBodyTimeout:
      return ApiError(RefusalReason::kBodyTimeout,
                      "request body not complete within --body-timeout");
    case Refusal::kBodyTooLarge:
      return ApiError(
          RefusalReason::kBodyTooLarge,
          "request body over --max-body-bytes (" + std::to_string(h.max_body_bytes) + " bytes)");
    case Refusal::kBodyNotAllowed:
      return ApiError(RefusalReason::kBodyNotAllowed,
                      req.method == "GET" || req.method == "HEAD"
                          ? "a " + req.method + " request takes no body"
                          : "a request body needs the API key (Authorization: Bearer ...)");
    case Refusal::kHeadersTooLarge:
      return ApiError(RefusalReason::kHeadersTooLarge,
                      "request headers over " + std::to_string(h.max_headers) + " fields or " +
                          std::to_string(h.max_header_bytes) + " bytes");
    case Refusal::kTooManyConnections:
      return ApiError(RefusalReason::kTooManyConnections, "server at --max-connections (" +
                                                              std::to_string(h.max_connections) +
                                                              "); retry later")
          .with_retry_after(h.retry_after_s);
    case Refusal::kRequestMemory:
      return ApiError(RefusalReason::kRequestMemory,
                      "request memory (--request-memory " + std::to_string(h.request_memory_bytes) +
                          " bytes) stayed in use by other requests; retry later")
          .with_retry_after(h.retry_after_s);
    case Refusal::kSlowConsumer:
      return ApiError(RefusalReason::kSlowConsumer,
                      "client read too slowly (--stream-buffer-bytes)");
    case Refusal::kOutOfMemory:
      return ApiError(RefusalReason::kOutOfMemory, "out of memory while serving the request")
          .with_retry_after(h.retry_after_s);
    case Refusal::kInternal:
      break;
  }
  return ApiError(RefusalReason::kInternal, "internal error");
}

// The most text one token can stand for: bounds how many tokens a prompt of N bytes has.
int64_t longest_token_bytes(const Tokenizer& tok) {
  size_t most = 1;
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    most = std::max(most, tok.token_bytes(id, /*render_special=*/true).size());
  }
  return (int64_t)most;
}

}  // namespace

obs::GrammarCacheSample Server::grammar_cache() const {
  obs::GrammarCacheSample s{.capacity = st_->cfg.grammar_cache_bytes};
  const grammar::GrammarCache* cache = st_->built_grammar_cache();
  if (cache == nullptr) return s;
  const grammar::GrammarCache::Stats c = cache->stats();
  s.hits = c.num_hits;
  s.misses = c.num_misses;
  s.evicted = c.num_evicted;
  s.too_large = c.num_too_large;
  s.entries = c.num_entries;
  s.bytes = c.bytes;
  return s;
}

Server::Server(PassKey, const ServerConfig& cfg, Engine& engine)
    : st_(std::make_unique<ServerState>(cfg, engine)) {
  ServerState& st = *st_;
  http_ = std::make_unique<http::HttpServer>(
      cfg.http, [&st](http::Refusal r, const http::HttpRequest& req) {
        const ApiError e = transport_refusal(st.cfg, r, req);
        st.refused(e.reason);
        http::HttpResponse res;
        res.status = e.status;
        if (e.retry_after_s > 0) res.set_header("Retry-After", std::to_string(e.retry_after_s));
        res.set_content(e.to_json(), kJsonType);
        return res;
      });
}

Result<std::unique_ptr<Server>> Server::create(const ServerConfig& cfg, Engine& engine) {
  KVW_RETURN_IF_ERROR(cfg.validate());
  ServerConfig c = cfg;
  if (c.http.max_connections == 0) {
    // Every request admission lets run or wait, each with an idle keep-alive connection
    // beside it, plus room for probes and scrapes (planner::default_max_connections).
    c.http.max_connections = (size_t)planner::default_max_connections(engine.limits().max_num_seqs,
                                                                      c.admission.max_queue);
  }
  KVW_RETURN_IF_ERROR(c.http.validate());
  auto s = std::make_unique<Server>(PassKey{}, c, engine);
  ServerState& st = *s->st_;
  st.model_name = !c.served_model_name.empty()
                      ? c.served_model_name
                      : std::filesystem::path(engine.model().file().path()).stem().string();
  st.max_token_bytes = longest_token_bytes(engine.tokenizer());
  const std::string& gguf_template = engine.tokenizer().vocab().chat_template;
  auto prompter = ChatPrompter::create(engine.tokenizer(),
                                       !c.chat_template.empty() ? c.chat_template : gguf_template);
  if (!prompter.ok() && c.chat_template.empty()) {
    LOG(WARN, server) << "the model's " << prompter.message() << "; using the ChatML fallback";
    prompter = ChatPrompter::create(engine.tokenizer(), "");
  }
  if (!prompter.ok()) return Error{"--chat-template: " + prompter.message()};
  st.prompter = std::move(*prompter);
  if (st.prompter->uses_fallback()) {
    LOG(INFO, server) << "no chat template in the model: chat uses the built-in ChatML template";
  }
  auto format = choose_tool_format(c.tool_call_parser, *st.prompter, engine.tokenizer());
  if (!format.ok()) return format.error();
  st.tool_format = *format;
  st.harmony_output = writes_harmony(st.tool_format, *st.prompter, engine.tokenizer());
  LOG(INFO, server) << "tool calls: " << tools::format_name(st.tool_format) << " format"
                    << (c.tool_call_parser.empty() ? " (detected)" : " (--tool-call-parser)")
                    << (st.prompter->supports_tools() ? "" : ", generic tool prompt");
  s->install_routes();
  return s;
}

Server::~Server() {
  stop();
}

void Server::add_route(const std::string& method, const std::string& path, http::Handler handler,
                       http::RouteOptions opt) {
  http_->add_route(method, path, std::move(handler), std::move(opt));
}

http::Handler Server::charged(http::Handler handler) {
  return charge_answer(
      *st_, [http = http_.get()](uint64_t bytes) { return http->try_reserve(bytes); },
      std::move(handler));
}

void Server::install_routes() {
  ServerState& st = *st_;
  // Generation refusals (draining, shedding, admission full) are answered at the door, from
  // the headers, before request memory or the body is touched.
  const http::RouteOptions generation{
      .auth = true, .door = [&st](HttpRequest& req) { return generation_door(st, req); }};
  http_->add_route(
      "POST", "/v1/completions", [&st](auto& req, auto& res) { handle_completions(st, req, res); },
      generation);
  http_->add_route(
      "POST", "/v1/chat/completions",
      [&st](auto& req, auto& res) { handle_chat_completions(st, req, res); }, generation);
  add_route("POST", "/tokenize", [&st](auto& req, auto& res) { handle_tokenize(st, req, res); },
            {.auth = true});
  add_route("POST", "/detokenize", [&st](auto& req, auto& res) { handle_detokenize(st, req, res); },
            {.auth = true});
  add_route("GET", "/v1/models",
            [&st](HttpRequest&, HttpResponse& res) {
              json m = {{"id", st.model_name},
                        {"object", "model"},
                        {"created", (int64_t)std::time(nullptr)},
                        {"owned_by", "kvwarden"},
                        {"root", st.model_name},
                        {"max_model_len", st.limits().max_model_len}};
              send_json(res, {{"object", "list"}, {"data", json::array({m})}});
            },
            {.auth = true});
  add_route("GET", "/health",
            [](HttpRequest&, HttpResponse& res) {
              send_json(res, {{"status", "ok"}});
            },
            {.inline_io = true, .probe = true});
  add_route("GET", "/ready",
            [&st](HttpRequest&, HttpResponse& res) {
              const BreakerSnapshot b = st.breaker.snapshot();
              const char* status = !st.ready.load()                     ? "loading"
                                   : st.draining.load()                 ? "draining"
                                   : b.state == BreakerState::kShedding ? "shedding"
                                                                        : "ready";
              const bool ok = std::string(status) == "ready";
              if (!ok) res.set_header("Retry-After", std::to_string(st.admission.retry_after_s()));
              send_json(res,
                        {{"status", status},
                         {"breaker", to_string(b.state)},
                         {"kv_usage", b.kv_usage},
                         {"p95_latency_s", b.p95_latency_s}},
                        ok ? 200 : 503);
            },
            {.inline_io = true, .probe = true});
}

Status Server::start() {
  KVW_RETURN_IF_ERROR(http_->start());
  monitor_ = std::thread([this] {
    set_thread_name("kvw-monitor");
    monitor_loop();
  });
  st_->ready.store(true);
  return Status::ok_status();
}

std::string Server::url() const {
  return "http://" + st_->cfg.http.host + ":" + std::to_string(port());
}

void Server::monitor_loop() {
  ServerState& st = *st_;
  std::unique_lock lock(stop_mu_);
  uint64_t granted_at_trim = 0;
  while (!stopping_) {
    // After a burst of requests, give the freed heap back to the OS (RSS returns to where it
    // was): once per burst, when no request memory is in use.
    const http::ByteBudgetStats mem = http_->stats().request_memory;
    if (mem.used == 0 && mem.num_granted != granted_at_trim) {
      granted_at_trim = mem.num_granted;
      malloc_trim(0);
    }
    const EngineStats s = st.engine->stats();
    const double kv = s.num_blocks ? 1.0 - (double)s.num_allocatable_blocks / s.num_blocks : 0.0;
    const double now = now_s();
    const BreakerState before = st.breaker.state();
    const BreakerState after = st.breaker.observe(now, kv, st.latency.p95(now));
    if (after != before) {
      if (st.observer != nullptr) st.observer->on_breaker_change(after);
      LOG(WARN, server) << "breaker " << to_string(before) << " -> " << to_string(after)
                        << " (kv usage " << kv << ")";
    }
    stop_cv_.wait_for(lock, std::chrono::milliseconds(st.cfg.breaker_tick_ms));
  }
}

void Server::begin_drain() {
  if (!st_->draining.exchange(true)) {
    LOG(INFO, server) << "draining: refusing new requests";
  }
}

size_t Server::drain_and_stop() {
  begin_drain();
  ServerState& st = *st_;
  const double deadline = now_s() + st.cfg.drain_timeout_s;
  while (st.num_registered() > 0 && now_s() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const size_t left = st.num_registered();
  if (left > 0) {
    LOG(WARN, server) << "drain timeout: cancelling " << left << " requests";
    st.drain_cancelled.store(true);
    st.cancel_registered();
    // Their handlers see the cancellation within a step and answer; give them a moment.
    const double grace = now_s() + 5;
    while (st.num_registered() > 0 && now_s() < grace) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  stop();
  return left;
}

void Server::stop() {
  {
    std::lock_guard lock(stop_mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  stop_cv_.notify_all();
  http_->stop();
  if (monitor_.joinable()) monitor_.join();
}

}  // namespace kvw::server
