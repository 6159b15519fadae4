// Tests for the ZeroMQ publisher in-process, with libzmq sockets as the subscriber: the three
// frames of every message, sequence numbers from 0, replay from a start seq ending with -1, and
// a batch the full queue refuses counted and leaving a gap. Loopback TCP on free ports.
#include <gtest/gtest.h>
#include <zmq.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "kv_events/kv_event_codec.h"
#include "kv_events/zmq_publisher.h"

namespace kvw::kv_events {
namespace {

std::vector<std::string> recv_frames(void* socket, int timeout_ms) {
  zmq_pollitem_t item{socket, 0, ZMQ_POLLIN, 0};
  if (zmq_poll(&item, 1, timeout_ms) <= 0) return {};
  std::vector<std::string> frames;
  int more = 1;
  while (more) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    EXPECT_GE(zmq_msg_recv(&m, socket, 0), 0);
    frames.emplace_back(static_cast<const char*>(zmq_msg_data(&m)), zmq_msg_size(&m));
    more = zmq_msg_more(&m);
    zmq_msg_close(&m);
  }
  return frames;
}

int64_t seq_of(const std::string& b) {
  EXPECT_EQ(b.size(), 8u);
  uint64_t v = 0;
  for (char c : b) v = (v << 8) | uint8_t(c);
  return int64_t(v);
}

std::vector<KvCacheEvent> stored(uint64_t hash) {
  return {KvCacheEvent{
      .kind = KvCacheEvent::Kind::kBlockStored, .block_hashes = {hash}, .token_ids = {1, 2}}};
}

class PublisherTest : public ::testing::Test {
 protected:
  void SetUp() override { ctx_ = zmq_ctx_new(); }
  void TearDown() override {
    for (void* s : sockets_) zmq_close(s);
    zmq_ctx_term(ctx_);
  }
  void* socket(int type, const std::string& endpoint) {
    void* s = zmq_socket(ctx_, type);
    const int linger = 0;
    zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger));
    if (type == ZMQ_SUB) zmq_setsockopt(s, ZMQ_SUBSCRIBE, "", 0);
    EXPECT_EQ(zmq_connect(s, endpoint.c_str()), 0);
    sockets_.push_back(s);
    return s;
  }
  std::unique_ptr<KvEventPublisher> start(size_t max_queue_size) {
    KvEventsConfig cfg{.enable_kv_cache_events = true,
                       .publisher = "zmq",
                       .endpoint = "tcp://127.0.0.1:*",
                       .replay_endpoint = "tcp://127.0.0.1:*",
                       .buffer_steps = 8,
                       .hwm = 1000,
                       .max_queue_size = max_queue_size,
                       .topic = "kv@t@m"};
    auto p = KvEventPublisher::start(cfg, 2);
    EXPECT_TRUE(p.ok()) << p.message();
    return p.ok() ? std::move(*p) : nullptr;
  }
  // PUB drops what it sends before a subscription arrives: publish until one is seen.
  void wait_connected(KvEventPublisher& p, void* sub) {
    for (int i = 0; i < 100; ++i) {
      p.publish(stored(1000 + uint64_t(i)));
      if (!recv_frames(sub, 50).empty()) break;
    }
    while (!recv_frames(sub, 200).empty()) {
    }
  }

  void* ctx_ = nullptr;
  std::vector<void*> sockets_;
};

TEST_F(PublisherTest, SendsTopicSequenceAndVllmPayloadAndReplaysFromAStartSeq) {
  auto p = start(100);
  ASSERT_NE(p, nullptr);
  void* sub = socket(ZMQ_SUB, p->endpoint());
  wait_connected(*p, sub);
  const int64_t first = int64_t(p->stats().num_batches_published);  // warm-up batches were 0..
  for (uint64_t h : {7u, 8u, 9u}) p->publish(stored(h));
  for (int64_t k = 0; k < 3; ++k) {
    const std::vector<std::string> f = recv_frames(sub, 2000);
    ASSERT_EQ(f.size(), 3u);
    EXPECT_EQ(f[0], "kv@t@m");
    EXPECT_EQ(seq_of(f[1]), first + k);
    double ts = 0;
    uint64_t bits = 0;
    for (int i = 0; i < 8; ++i) bits = (bits << 8) | uint8_t(f[2][size_t(2 + i)]);
    std::memcpy(&ts, &bits, 8);
    EXPECT_EQ(f[2], encode_kv_event_batch(ts, stored(7 + uint64_t(k)), 2));
  }
  EXPECT_EQ(p->stats().num_events_dropped, 0u);

  void* dealer = socket(ZMQ_DEALER, p->replay_endpoint());
  const std::string start_seq = {0, 0, 0, 0, 0, 0, 0, char(first + 1)};
  zmq_send(dealer, "", 0, ZMQ_SNDMORE);
  zmq_send(dealer, start_seq.data(), 8, 0);
  for (int64_t k = 1; k < 3; ++k) {  // buffer_steps 8 holds them; replies start at first + 1
    const std::vector<std::string> f = recv_frames(dealer, 2000);
    ASSERT_EQ(f.size(), 3u);
    EXPECT_EQ(f[0], "");
    EXPECT_EQ(seq_of(f[1]), first + k);
  }
  const std::vector<std::string> end = recv_frames(dealer, 2000);
  ASSERT_EQ(end.size(), 3u);
  EXPECT_EQ(seq_of(end[1]), -1);
  EXPECT_EQ(end[2], "");
}

TEST_F(PublisherTest, FullQueueDropsTheBatchCountsItAndLeavesAGap) {
  auto p = start(1);
  ASSERT_NE(p, nullptr);
  void* sub = socket(ZMQ_SUB, p->endpoint());
  wait_connected(*p, sub);
  const uint64_t next = p->stats().num_batches_published + p->stats().num_batches_dropped;
  std::vector<KvCacheEvent> two = stored(1);
  two.push_back(two[0]);
  p->publish(std::move(two));  // 2 events never fit a 1-event queue
  p->publish(stored(2));
  const std::vector<std::string> f = recv_frames(sub, 2000);
  ASSERT_EQ(f.size(), 3u);
  EXPECT_EQ(uint64_t(seq_of(f[1])), next + 1);  // seq `next` was the dropped batch
  const KvEventsStats s = p->stats();
  EXPECT_GE(s.num_events_dropped, 2u);
  EXPECT_GE(s.num_batches_dropped, 1u);
}

TEST(KvEventPublisher, EndpointInUseIsAnErrorNamingIt) {
  KvEventsConfig cfg;
  cfg.enable_kv_cache_events = true;
  cfg.publisher = "zmq";
  cfg.endpoint = "tcp://*:*";
  auto a = KvEventPublisher::start(cfg, 16);
  ASSERT_TRUE(a.ok()) << a.message();
  const std::string port = (*a)->endpoint().substr((*a)->endpoint().rfind(':') + 1);
  cfg.endpoint = "tcp://*:" + port;
  auto b = KvEventPublisher::start(cfg, 16);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.message().find("--kv-events-config: cannot bind tcp://*:" + port), std::string::npos)
      << b.message();
}

}  // namespace
}  // namespace kvw::kv_events
