#include "server/http_server.h"

#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <regex>

#include "core/log.h"
#include "server/routes.h"

namespace kvw::server {

using nlohmann::json;

namespace {

TransportConfig transport_config(ServerState& st) {
  const ServerConfig& c = st.cfg;
  TransportConfig t;
  t.worker_threads = c.http_threads;
  t.read_timeout_s = c.read_timeout_s;
  t.write_timeout_s = c.write_timeout_s;
  t.keep_alive_timeout_s = c.keep_alive_timeout_s;
  t.keep_alive_max_count = (size_t)c.keep_alive_max_count;
  t.header_timeout_s = c.header_timeout_s;
  t.body_timeout_s = c.body_timeout_s;
  t.max_header_bytes = c.max_header_bytes;
  t.max_headers = (size_t)c.max_headers;
  t.listen_backlog = c.listen_backlog;
  t.on_gate_refusal = [&st](int status) {
    st.refused(status == 408 ? RefusalReason::kHeaderTimeout : RefusalReason::kHeadersTooLarge);
  };
  return t;
}

}  // namespace

Server::Server(PassKey, const ServerConfig& cfg)
    : st_(std::make_unique<ServerState>(cfg)), http_(transport_config(*st_)) {}

Result<std::unique_ptr<Server>> Server::create(const ServerConfig& cfg, Engine& engine,
                                               const EngineConfig& engine_cfg) {
  KVW_RETURN_IF_ERROR(cfg.validate());
  ServerConfig c = cfg;
  c.admission.concurrency = engine_cfg.sched.max_num_seqs;
  auto s = std::make_unique<Server>(PassKey{}, c);
  ServerState& st = *s->st_;
  st.engine = &engine;
  st.model_name = !c.served_model_name.empty()
                      ? c.served_model_name
                      : std::filesystem::path(engine_cfg.model_path).stem().string();
  st.max_model_len = std::min<int64_t>(engine_cfg.sched.max_model_len,
                                       (int64_t)engine.budget().num_blocks * engine_cfg.block_size);
  st.overflow = engine_cfg.sched.overflow;
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
  s->install_hooks();
  s->install_routes();
  return s;
}

Server::~Server() {
  stop();
}

bool Server::path_known(const std::string& path) const {
  for (const std::string& p : known_paths_) {
    if (std::regex_match(path, std::regex(p))) return true;
  }
  return false;
}

void Server::add_route(const std::string& method, const std::string& path, Handler handler,
                       bool require_auth) {
  known_paths_.insert(path);
  if (require_auth) auth_paths_.insert(path);
  if (method == "GET") {
    http_.Get(path, std::move(handler));
  } else if (method == "POST") {
    http_.Post(path, std::move(handler));
  } else if (method == "PUT") {
    http_.Put(path, std::move(handler));
  } else if (method == "DELETE") {
    http_.Delete(path, std::move(handler));
  } else {
    LOG(ERROR, server) << "add_route: method " << method << " not supported (" << path << ")";
  }
}

void Server::install_routes() {
  ServerState& st = *st_;
  add_route(
      "POST", "/v1/completions",
      [&st](const auto& req, auto& res) { handle_completions(st, req, res); }, true);
  add_route(
      "POST", "/v1/chat/completions",
      [&st](const auto& req, auto& res) { handle_chat_completions(st, req, res); }, true);
  add_route(
      "POST", "/tokenize", [&st](const auto& req, auto& res) { handle_tokenize(st, req, res); },
      true);
  add_route(
      "POST", "/detokenize", [&st](const auto& req, auto& res) { handle_detokenize(st, req, res); },
      true);
  add_route(
      "GET", "/v1/models",
      [&st](const httplib::Request&, httplib::Response& res) {
        json m = {{"id", st.model_name},
                  {"object", "model"},
                  {"created", (int64_t)std::time(nullptr)},
                  {"owned_by", "kvwarden"},
                  {"root", st.model_name},
                  {"max_model_len", st.max_model_len}};
        send_json(res, {{"object", "list"}, {"data", json::array({m})}});
      },
      true);
  add_route("GET", "/health", [](const httplib::Request&, httplib::Response& res) {
    send_json(res, {{"status", "ok"}});
  });
  add_route("GET", "/ready", [&st](const httplib::Request&, httplib::Response& res) {
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
  });
}

namespace {

ApiError body_too_large(const ServerConfig& c) {
  return ApiError(
      413, RefusalReason::kBodyTooLarge, "payload_too_large",
      "request body over --max-body-bytes (" + std::to_string(c.max_body_bytes) + " bytes)");
}

ApiError headers_too_large(const ServerConfig& c) {
  return ApiError(431, RefusalReason::kHeadersTooLarge, "headers_too_large",
                  "request headers over " + std::to_string(c.max_headers) + " fields or " +
                      std::to_string(c.max_header_bytes) + " bytes");
}

}  // namespace

void Server::install_hooks() {
  ServerState& st = *st_;
  const ServerConfig& c = st.cfg;
  // Timeouts, keep-alive and the worker pool are the transport's (http_transport.h).
  http_.set_payload_max_length(c.max_body_bytes);
  // Runs after the headers and before the body is read: refusals that the headers alone decide.
  // The body stays unread, so the transport closes such a connection after the answer (a body
  // left in the stream would be parsed as the next request); the client is told so.
  http_.set_pre_routing_handler([this, &st](const httplib::Request& req, httplib::Response& res) {
    auto refuse = [&](const ApiError& e) {
      if (req.has_header("Content-Length") || req.has_header("Transfer-Encoding")) {
        res.set_header("Connection", "close");
      }
      send_error(st, res, e);
      return httplib::Server::HandlerResponse::Handled;
    };
    if (GatedHttpServer::current_header_refusal() == 431) {
      GatedHttpServer::current_close_after_response();
      res.set_header("Connection", "close");
      send_error(st, res, headers_too_large(st.cfg));
      return httplib::Server::HandlerResponse::Handled;
    }
    if (req.has_header("Content-Length")) {
      const std::string v = req.get_header_value("Content-Length");
      char* end = nullptr;
      const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
      if (end != v.c_str() && *end == '\0' && n > st.cfg.max_body_bytes) {
        return refuse(body_too_large(st.cfg));
      }
    }
    if (st.cfg.api_key.empty()) return httplib::Server::HandlerResponse::Unhandled;
    const bool needs_key = req.path.starts_with("/v1/") || auth_paths_.contains(req.path);
    if (!needs_key) return httplib::Server::HandlerResponse::Unhandled;
    if (req.get_header_value("Authorization") == "Bearer " + st.cfg.api_key) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    return refuse(ApiError(401, RefusalReason::kUnauthorized, "invalid_api_key",
                           "invalid or missing API key (Authorization: Bearer ...)"));
  });
  // httplib calls this for every status >= 400; only its own bodiless answers get a body here.
  using HandlerResponse = httplib::Server::HandlerResponse;
  http_.set_error_handler(httplib::Server::HandlerWithResponse(
      [this, &st](const httplib::Request& req, httplib::Response& res) -> HandlerResponse {
        if (!res.body.empty() || res.content_length_ > 0) {
          return httplib::Server::HandlerResponse::Unhandled;
        }
        ApiError e(res.status, RefusalReason::kInvalidRequest, "bad_request", "bad request");
        if (GatedHttpServer::current_header_refusal() == 431) {
          e = headers_too_large(st.cfg);  // httplib saw a read error (our byte cap) and said 400
        } else if (res.status == 404 && path_known(req.path)) {
          e = ApiError(405, RefusalReason::kMethodNotAllowed, "method_not_allowed",
                       "method " + req.method + " not allowed on " + req.path);
        } else if (res.status == 404) {
          e = ApiError(404, RefusalReason::kNotFound, "not_found",
                       "no route " + req.method + " " + req.path);
        } else if (res.status == 413) {
          e = body_too_large(st.cfg);
        }
        send_error(st, res, e);
        return httplib::Server::HandlerResponse::Handled;
      }));
  http_.set_exception_handler(
      [&st](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
        send_error(
            st, res,
            ApiError(500, RefusalReason::kEngine, "", "internal error").with_type("server_error"));
      });
}

Status Server::start() {
  const ServerConfig& c = st_->cfg;
  port_ = http_.bind(c.host, c.port);
  if (port_ <= 0) {
    return Error{"cannot listen on " + c.host + ":" + std::to_string(c.port) +
                 " (address in use or not available; see --host/--port)"};
  }
  listener_ = std::thread([this] { http_.serve(); });
  monitor_ = std::thread([this] { monitor_loop(); });
  st_->ready.store(true);
  return Status::ok_status();
}

std::string Server::url() const {
  return "http://" + st_->cfg.host + ":" + std::to_string(port_);
}

void Server::monitor_loop() {
  ServerState& st = *st_;
  std::unique_lock lock(stop_mu_);
  while (!stopping_) {
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
  http_.stop();
  if (listener_.joinable()) listener_.join();
  http_.shutdown();
  if (monitor_.joinable()) monitor_.join();
}

}  // namespace kvw::server
