// Tests for --kv-events-config: vLLM's keys and defaults, publisher "zmq" implied when enabled,
// and clear errors for unknown keys, wrong types and unknown publishers.
#include <gtest/gtest.h>

#include "kv_events/kv_events_config.h"

namespace kvw::kv_events {
namespace {

TEST(KvEventsConfig, ReadsVllmKeys) {
  auto c = parse_kv_events_config(
      R"({"enable_kv_cache_events": true, "publisher": "zmq", "endpoint": "tcp://*:6000",
          "replay_endpoint": "tcp://*:6001", "buffer_steps": 7, "hwm": 9,
          "max_queue_size": 11, "topic": "kv@pod@model"})");
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_TRUE(c->publishes());
  EXPECT_EQ(c->endpoint, "tcp://*:6000");
  EXPECT_EQ(c->replay_endpoint, "tcp://*:6001");
  EXPECT_EQ(c->buffer_steps, 7u);
  EXPECT_EQ(c->hwm, 9);
  EXPECT_EQ(c->max_queue_size, 11u);
  EXPECT_EQ(c->topic, "kv@pod@model");
}

TEST(KvEventsConfig, DefaultsAreVllms) {
  auto c = parse_kv_events_config(R"({"enable_kv_cache_events": true})");
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_TRUE(c->publishes());  // publisher left out: zmq
  EXPECT_EQ(c->endpoint, "tcp://*:5557");
  EXPECT_FALSE(c->replay_endpoint.has_value());
  EXPECT_EQ(c->buffer_steps, 10000u);
  EXPECT_EQ(c->hwm, 100000);
  EXPECT_EQ(c->max_queue_size, 100000u);
  EXPECT_EQ(c->topic, "");
  auto off = parse_kv_events_config(R"({"enable_kv_cache_events": true, "publisher": "null"})");
  ASSERT_TRUE(off.ok());
  EXPECT_FALSE(off->publishes());
  auto disabled = parse_kv_events_config(R"({"publisher": "zmq"})");
  ASSERT_TRUE(disabled.ok());
  EXPECT_FALSE(disabled->publishes());
}

TEST(KvEventsConfig, RefusesWhatVllmRefuses) {
  auto unknown = parse_kv_events_config(R"({"enable_kv_cache_events": true, "port": 1})");
  ASSERT_FALSE(unknown.ok());
  EXPECT_EQ(unknown.message(), "--kv-events-config: unknown key \"port\"");
  auto type = parse_kv_events_config(R"({"hwm": "big"})");
  ASSERT_FALSE(type.ok());
  EXPECT_EQ(type.message(), "--kv-events-config: \"hwm\" must be an integer in 0..2^31");
  auto pub = parse_kv_events_config(R"({"enable_kv_cache_events": true, "publisher": "kafka"})");
  ASSERT_FALSE(pub.ok());
  EXPECT_NE(pub.message().find("unknown publisher \"kafka\""), std::string::npos);
  EXPECT_FALSE(parse_kv_events_config("not json").ok());
  EXPECT_FALSE(
      parse_kv_events_config(R"({"enable_kv_cache_events": true, "max_queue_size": 0})").ok());
}

}  // namespace
}  // namespace kvw::kv_events
