// kv_events/zmq_publisher.h: publishes KV cache events the way vLLM's ZmqEventPublisher does
// (vllm/distributed/kv_events.py, v0.11), so its subscribers (llm-d's precise prefix-cache
// scorer, vLLM's examples/online_serving/kv_events_subscriber.py) read kvwarden unchanged:
//   PUB     every batch as a 3-frame message [topic, seq (8-byte big-endian), msgpack payload]
//   ROUTER  (replay_endpoint) a request [identity, "", start_seq (8-byte big-endian)] is answered
//           with every buffered batch seq >= start_seq as [identity, "", seq, payload], then the
//           end marker [identity, "", -1 (8 bytes 0xff), ""]
// The engine thread calls publish(): it numbers the batch and queues it, or drops and counts it
// when the queue is full; it never waits. One publisher thread encodes, sends and serves
// replays. ZeroMQ's PUB drops messages for a subscriber past `hwm` unread (it never blocks);
// that subscriber catches up through the replay socket while the buffer still holds the batches.
// Sequence numbers count up from 0; a batch dropped at the queue leaves a gap.
// Thread safety: publish() from one thread (the engine's); stats() from any.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/status.h"
#include "kv/kv_events.h"
#include "kv_events/event_queue.h"
#include "kv_events/kv_events_config.h"

namespace kvw::kv_events {

class KvEventPublisher {
 public:
  // Opens the sockets (bind or connect, see KvEventsConfig::endpoint) and starts the thread.
  // Errors name the flag and the endpoint (e.g. a port in use).
  static Result<std::unique_ptr<KvEventPublisher>> start(const KvEventsConfig& cfg,
                                                         int32_t block_size);
  // Sends what is queued, stops the thread, closes the sockets (unsent messages are dropped).
  ~KvEventPublisher();
  KvEventPublisher(const KvEventPublisher&) = delete;
  KvEventPublisher& operator=(const KvEventPublisher&) = delete;

  // Engine thread. Never blocks.
  void publish(std::vector<KvCacheEvent>&& events);
  KvEventsStats stats() const;
  // What the sockets are bound or connected to (a "*" port resolved), for the start-up log.
  const std::string& endpoint() const { return endpoint_; }
  const std::string& replay_endpoint() const { return replay_endpoint_; }

 private:
  KvEventPublisher(const KvEventsConfig& cfg, int32_t block_size);
  Status open_sockets();
  void run();
  void send(const KvEventBatch& b);
  void serve_replay();
  void wake();

  const KvEventsConfig cfg_;
  const int32_t block_size_;
  std::string endpoint_, replay_endpoint_;
  void* ctx_ = nullptr;     // zmq context
  void* pub_ = nullptr;     // PUB socket
  void* replay_ = nullptr;  // ROUTER socket, or null
  int wake_fd_ = -1;        // eventfd: publish() and the destructor wake the thread
  KvEventQueue queue_;
  uint64_t next_seq_ = 0;  // engine thread
  // [<= buffer_steps] (seq, payload) of sent batches, oldest first; publisher thread only.
  std::deque<std::pair<uint64_t, std::string>> replay_buffer_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> num_events_published_{0}, num_batches_published_{0}, num_events_dropped_{0},
      num_batches_dropped_{0};
  std::thread thread_;
};

}  // namespace kvw::kv_events
