// kv_events/kv_events_config.h: `kvwarden serve --kv-events-config '<json>'`, with vLLM's
// KVEventsConfig keys and defaults (vllm/config/kv_events.py), so the same JSON configures both:
//   {"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:5557",
//    "replay_endpoint": "tcp://*:5558", "buffer_steps": 10000, "hwm": 100000,
//    "max_queue_size": 100000, "topic": ""}
// Plain aggregate; thread-safe to read.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace kvw::kv_events {

struct KvEventsConfig {
  bool enable_kv_cache_events = false;
  // "zmq" publishes; "null" records nothing. Left out of the JSON: "zmq" when enabled (vLLM's
  // KVEventsConfig.__post_init__ does the same).
  std::string publisher = "null";
  // PUB socket: bound when it has a wildcard ("tcp://*:5557", "tcp://127.0.0.1:*" picks a free
  // port), "::", or is ipc:// or inproc://; connected otherwise (vLLM's rule).
  std::string endpoint = "tcp://*:5557";
  std::optional<std::string> replay_endpoint;  // ROUTER answering replay requests; none: off
  size_t buffer_steps = 10000;                 // past batches kept for replay
  int hwm = 100000;                // ZeroMQ send high-water mark (messages per subscriber)
  size_t max_queue_size = 100000;  // events waiting for the publisher thread at most
  std::string topic;               // first frame of every message

  // Whether events are recorded and published at all.
  bool publishes() const { return enable_kv_cache_events && publisher == "zmq"; }
  Status validate() const;
};

// Parses the JSON object; unknown keys and wrong types are errors naming the key (as vLLM's
// pydantic config refuses them). Messages start with "--kv-events-config".
Result<KvEventsConfig> parse_kv_events_config(std::string_view json);

}  // namespace kvw::kv_events
