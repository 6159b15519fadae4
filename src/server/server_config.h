// server/server_config.h: the HTTP server's knobs (`kvwarden serve` flags that are not engine
// flags). Plain aggregate; validate() before use. Thread safety: immutable after construction.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "server/admission.h"
#include "server/breaker.h"

namespace kvw::server {

struct ServerConfig {
  std::string host = "127.0.0.1";
  int port = 8000;                   // 0: any free port (tests)
  std::string api_key;               // --api-key / KVW_API_KEY; empty = no auth
  std::string served_model_name;     // --served-model-name; empty = the GGUF's general.name
  std::string chat_template;         // template text (--chat-template file contents or GGUF's)
  size_t max_body_bytes = 8u << 20;  // --max-body-bytes: larger bodies get 413
  // HTTP worker threads (--http-threads). One streaming response holds one thread for its
  // whole life, so this bounds concurrent streams; 128 covers max_num_seqs 64-128 plus probes.
  // Idle and slow connections hold none (they wait in the transport's gate).
  int http_threads = 128;
  int read_timeout_s = 30;   // a client that sends nothing this long is dropped
  int write_timeout_s = 30;  // a client that reads nothing this long is dropped
  int keep_alive_timeout_s = 5;
  int keep_alive_max_count = 1000;  // requests per connection
  // A request's headers must be complete this long after its first byte (slowloris), else 408;
  // its body must then arrive within body_timeout_s.
  double header_timeout_s = 10;  // --header-timeout
  double body_timeout_s = 60;
  size_t max_header_bytes = 32768;  // request line + headers; more gets 431
  int max_headers = 100;            // more header fields get 431
  int listen_backlog = 4096;        // accept queue (the kernel caps it at net.core.somaxconn)
  double drain_timeout_s = 30;      // --drain-timeout
  int breaker_tick_ms = 250;        // how often KV usage and p95 are fed to the breaker
  AdmissionConfig admission;
  BreakerConfig breaker;

  Status validate() const;
};

}  // namespace kvw::server
