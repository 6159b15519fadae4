#include "kv_events/zmq_publisher.h"

#include <sys/eventfd.h>
#include <unistd.h>
#include <zmq.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/log.h"
#include "core/thread_name.h"
#include "kv_events/kv_event_codec.h"

namespace kvw::kv_events {
namespace {

std::array<char, 8> seq_bytes(int64_t seq) {
  std::array<char, 8> b{};
  for (int i = 0; i < 8; ++i) b[size_t(i)] = char((uint64_t(seq) >> (8 * (7 - i))) & 0xff);
  return b;
}

// vLLM's rule: bind what names no single peer, connect to the rest.
bool binds(const std::string& endpoint) {
  return endpoint.find('*') != std::string::npos || endpoint.find("::") != std::string::npos ||
         endpoint.starts_with("ipc://") || endpoint.starts_with("inproc://");
}

std::string last_endpoint(void* socket) {
  std::array<char, 256> buf{};
  size_t len = buf.size();
  if (zmq_getsockopt(socket, ZMQ_LAST_ENDPOINT, buf.data(), &len) != 0 || len == 0) return {};
  return std::string(buf.data(), strnlen(buf.data(), len));
}

Status zmq_error(const std::string& what, const std::string& endpoint) {
  return Error{"--kv-events-config: cannot " + what + " " + endpoint + ": " +
               zmq_strerror(zmq_errno())};
}

}  // namespace

KvEventPublisher::KvEventPublisher(const KvEventsConfig& cfg, int32_t block_size)
    : cfg_(cfg), block_size_(block_size), queue_(cfg.max_queue_size) {}

Result<std::unique_ptr<KvEventPublisher>> KvEventPublisher::start(const KvEventsConfig& cfg,
                                                                  int32_t block_size) {
  KVW_RETURN_IF_ERROR(cfg.validate());
  std::unique_ptr<KvEventPublisher> p(new KvEventPublisher(cfg, block_size));
  KVW_RETURN_IF_ERROR(p->open_sockets());
  p->thread_ = std::thread([raw = p.get()] {
    set_thread_name("kvw-kv-events");
    raw->run();
  });
  return p;
}

Status KvEventPublisher::open_sockets() {
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (wake_fd_ < 0) return Error{"--kv-events-config: eventfd: " + std::string(strerror(errno))};
  ctx_ = zmq_ctx_new();
  pub_ = zmq_socket(ctx_, ZMQ_PUB);
  const int linger = 0;
  zmq_setsockopt(pub_, ZMQ_LINGER, &linger, sizeof(linger));
  zmq_setsockopt(pub_, ZMQ_SNDHWM, &cfg_.hwm, sizeof(cfg_.hwm));
  if (binds(cfg_.endpoint)) {
    if (zmq_bind(pub_, cfg_.endpoint.c_str()) != 0) return zmq_error("bind", cfg_.endpoint);
    endpoint_ = last_endpoint(pub_);
  } else {
    if (zmq_connect(pub_, cfg_.endpoint.c_str()) != 0) return zmq_error("connect", cfg_.endpoint);
    endpoint_ = cfg_.endpoint;
  }
  if (cfg_.replay_endpoint) {
    replay_ = zmq_socket(ctx_, ZMQ_ROUTER);
    zmq_setsockopt(replay_, ZMQ_LINGER, &linger, sizeof(linger));
    // A ROUTER drops replies past its hwm (1000 by default): room for a whole buffer plus the
    // end marker, so a subscriber asking from the oldest batch gets all of them.
    const int replay_hwm = int(std::min<size_t>(cfg_.buffer_steps + 1, INT32_MAX));
    zmq_setsockopt(replay_, ZMQ_SNDHWM, &replay_hwm, sizeof(replay_hwm));
    if (zmq_bind(replay_, cfg_.replay_endpoint->c_str()) != 0) {
      return zmq_error("bind", *cfg_.replay_endpoint);
    }
    replay_endpoint_ = last_endpoint(replay_);
  }
  return Status::ok_status();
}

KvEventPublisher::~KvEventPublisher() {
  if (thread_.joinable()) {
    stop_.store(true);
    wake();
    thread_.join();
  }
  if (replay_ != nullptr) zmq_close(replay_);
  if (pub_ != nullptr) zmq_close(pub_);
  if (ctx_ != nullptr) zmq_ctx_term(ctx_);
  if (wake_fd_ >= 0) close(wake_fd_);
}

void KvEventPublisher::wake() {
  const uint64_t one = 1;
  (void)!write(wake_fd_, &one, sizeof(one));  // EAGAIN: a wake-up is already pending
}

void KvEventPublisher::publish(std::vector<KvCacheEvent>&& events) {
  const double ts =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  const size_t n = events.size();
  if (!queue_.try_push(KvEventBatch{.seq = next_seq_++, .ts = ts, .events = std::move(events)})) {
    num_events_dropped_.fetch_add(n, std::memory_order_relaxed);
    num_batches_dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  wake();
}

KvEventsStats KvEventPublisher::stats() const {
  return KvEventsStats{.num_events_published = num_events_published_.load(),
                       .num_batches_published = num_batches_published_.load(),
                       .num_events_dropped = num_events_dropped_.load(),
                       .num_batches_dropped = num_batches_dropped_.load(),
                       .num_events_queued = queue_.num_events()};
}

void KvEventPublisher::run() {
  std::vector<KvEventBatch> batches;
  zmq_pollitem_t items[2] = {{nullptr, wake_fd_, ZMQ_POLLIN, 0}, {replay_, 0, ZMQ_POLLIN, 0}};
  const int num_items = replay_ != nullptr ? 2 : 1;
  while (true) {
    if (zmq_poll(items, num_items, -1) < 0 && zmq_errno() != EINTR) {
      LOG(ERROR, kv_events) << "zmq_poll: " << zmq_strerror(zmq_errno());
      return;
    }
    if (items[0].revents & ZMQ_POLLIN) {
      uint64_t count = 0;
      (void)!read(wake_fd_, &count, sizeof(count));
    }
    // Replays before new batches: a subscriber catching up asks from its last seq + 1.
    if (num_items == 2 && (items[1].revents & ZMQ_POLLIN)) serve_replay();
    batches.clear();
    queue_.pop_all(batches);
    for (const KvEventBatch& b : batches) send(b);
    if (stop_.load() && queue_.num_events() == 0) return;
  }
}

void KvEventPublisher::send(const KvEventBatch& b) {
  std::string payload = encode_kv_event_batch(b.ts, b.events, block_size_);
  const std::array<char, 8> seq = seq_bytes(int64_t(b.seq));
  // PUB never blocks: past hwm a subscriber's copy is dropped by ZeroMQ.
  zmq_send(pub_, cfg_.topic.data(), cfg_.topic.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT);
  zmq_send(pub_, seq.data(), seq.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT);
  zmq_send(pub_, payload.data(), payload.size(), ZMQ_DONTWAIT);
  num_events_published_.fetch_add(b.events.size(), std::memory_order_relaxed);
  num_batches_published_.fetch_add(1, std::memory_order_relaxed);
  if (replay_ == nullptr) return;
  if (replay_buffer_.size() == cfg_.buffer_steps) replay_buffer_.pop_front();
  replay_buffer_.emplace_back(b.seq, std::move(payload));
}

void KvEventPublisher::serve_replay() {
  // Every request waiting now: [identity, "", start_seq].
  while (true) {
    std::vector<std::string> frames;
    int more = 1;
    while (more) {
      zmq_msg_t m;
      zmq_msg_init(&m);
      if (zmq_msg_recv(&m, replay_, ZMQ_DONTWAIT) < 0) {
        zmq_msg_close(&m);
        return;  // nothing (more) waiting
      }
      frames.emplace_back(static_cast<const char*>(zmq_msg_data(&m)), zmq_msg_size(&m));
      more = zmq_msg_more(&m);
      zmq_msg_close(&m);
    }
    if (frames.size() != 3 || frames[2].size() != 8) {
      LOG(WARN, kv_events) << "invalid replay request of " << frames.size() << " frames";
      continue;
    }
    uint64_t start = 0;
    for (char c : frames[2]) start = (start << 8) | uint8_t(c);
    const std::string& id = frames[0];
    auto reply = [&](const char* seq, const std::string& payload) {
      // ROUTER drops (does not block) when this peer is past its hwm or gone.
      zmq_send(replay_, id.data(), id.size(), ZMQ_SNDMORE | ZMQ_DONTWAIT);
      zmq_send(replay_, "", 0, ZMQ_SNDMORE | ZMQ_DONTWAIT);
      zmq_send(replay_, seq, 8, ZMQ_SNDMORE | ZMQ_DONTWAIT);
      zmq_send(replay_, payload.data(), payload.size(), ZMQ_DONTWAIT);
    };
    for (const auto& [seq, payload] : replay_buffer_) {
      if (seq >= start) reply(seq_bytes(int64_t(seq)).data(), payload);
    }
    reply(seq_bytes(-1).data(), std::string());
  }
}

}  // namespace kvw::kv_events
