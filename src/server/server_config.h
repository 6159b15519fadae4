// server/server_config.h: the HTTP server's knobs (`kvwarden serve` flags that are not engine
// flags). Plain aggregate; validate() before use. Thread safety: immutable after construction.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "core/status.h"
#include "http/http_server.h"
#include "server/admission.h"
#include "server/breaker.h"
#include "server/refusal_pacer.h"

namespace kvw::server {

struct ServerConfig {
  // Transport: address, API key, threads, connection and request-memory limits, timeouts
  // (http/http_server.h). max_connections 0: sized from the admission limits at create().
  http::HttpServerConfig http = [] {
    http::HttpServerConfig h;
    h.max_connections = 0;
    return h;
  }();
  std::string served_model_name;  // --served-model-name; empty = the GGUF's file name
  std::string chat_template;      // template text (--chat-template file contents or GGUF's)
  double drain_timeout_s = 30;    // --drain-timeout
  int breaker_tick_ms = 250;      // how often KV usage and p95 are fed to the breaker
  // --tool-call-parser: a tools::format_from_name name, or empty to detect it from the chat
  // template and the vocabulary (tools/tool_parser.h).
  std::string tool_call_parser;
  // Compiled grammars and their mask caches kept across requests, by content
  // (grammar/grammar_cache.h): each entry is charged its mask cache's limit (1/16 of
  // --request-memory, 4 MiB by default), so 16 MiB keeps 4 grammars (json_object and a few schemas
  // or tool sets); it is a part of the request row of the start-up budget. 0 = each request its
  // own.
  uint64_t grammar_cache_bytes = uint64_t{16} << 20;
  AdmissionConfig admission;
  RefusalPacing pacing;  // how a 429 to a client back too early is held (refusal_pacer.h)
  BreakerConfig breaker;
  // Tests only (fault injection, issue 30): called on an I/O thread before each generated
  // token is detokenised, with the choice's prompt length and its tokens so far; what it
  // throws ends that choice as a fault in detokenising would. Empty: one branch per token.
  std::function<void(uint32_t num_prompt_tokens, int32_t num_tokens)> token_fault_hook;

  Status validate() const;
};

}  // namespace kvw::server
