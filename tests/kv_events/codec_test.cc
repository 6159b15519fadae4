// Tests for the msgpack encoding of KV event batches: each MessagePack form in its smallest
// encoding at the boundaries, and one whole batch against bytes worked out by hand from vLLM
// v0.11's msgspec structs (array_like, tag first, omitted trailing defaults).
#include <gtest/gtest.h>

#include <string>

#include "kv_events/kv_event_codec.h"
#include "kv_events/msgpack_writer.h"

namespace kvw::kv_events {
namespace {

std::string hex(const std::string& bytes) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (unsigned char c : bytes) {
    s += d[c >> 4];
    s += d[c & 15];
  }
  return s;
}

std::string hex_of_str(std::string_view s) {
  return hex(std::string(s));
}

TEST(MsgpackWriter, IntegersTakeTheSmallestForm) {
  MsgpackWriter w;
  for (uint64_t v : {0ull, 127ull, 128ull, 255ull, 256ull, 65535ull, 65536ull, 4294967295ull,
                     4294967296ull, 18446744073709551615ull}) {
    w.uint(v);
  }
  EXPECT_EQ(hex(w.bytes()),
            "00"
            "7f"
            "cc80"
            "ccff"
            "cd0100"
            "cdffff"
            "ce00010000"
            "ceffffffff"
            "cf0000000100000000"
            "cfffffffffffffffff");
}

TEST(MsgpackWriter, NegativeIntegersTakeTheSmallestForm) {
  MsgpackWriter w;
  for (int64_t v : {int64_t{-1}, int64_t{-32}, int64_t{-33}, int64_t{-128}, int64_t{-129},
                    int64_t{-32768}, int64_t{-32769}, int64_t{INT32_MIN} - 1, int64_t{5}}) {
    w.sint(v);
  }
  EXPECT_EQ(hex(w.bytes()),
            "ff"
            "e0"
            "d0df"
            "d080"
            "d1ff7f"
            "d18000"
            "d2ffff7fff"
            "d3ffffffff7fffffff"
            "05");
}

TEST(MsgpackWriter, StringsArraysFloatsAndNil) {
  MsgpackWriter w;
  w.str("");
  w.str(std::string(31, 'a'));
  w.str(std::string(32, 'b'));
  w.array(15);
  w.array(16);
  w.array(70000);
  w.f64(1.5);
  w.nil();
  EXPECT_EQ(hex(w.bytes()),
            "a0"
            "bf" +
                hex(std::string(31, 'a')) + "d920" + hex(std::string(32, 'b')) +
                "9f"
                "dc0010"
                "dd00011170" +
                "cb3ff8000000000000"
                "c0");
}

TEST(KvEventCodec, BatchMatchesVllmBytesWorkedOutByHand) {
  std::vector<KvCacheEvent> events;
  events.push_back(KvCacheEvent{.kind = KvCacheEvent::Kind::kBlockStored,
                                .block_hashes = {0x0102030405060708ull},
                                .parent_block_hash = std::nullopt,
                                .token_ids = {1, 200}});
  events.push_back(KvCacheEvent{.kind = KvCacheEvent::Kind::kBlockStored,
                                .block_hashes = {9},
                                .parent_block_hash = 0x0102030405060708ull,
                                .token_ids = {3, 4}});
  events.push_back(
      KvCacheEvent{.kind = KvCacheEvent::Kind::kBlockRemoved, .block_hashes = {5, 256}});
  events.push_back(KvCacheEvent{.kind = KvCacheEvent::Kind::kAllBlocksCleared});
  const std::string expect =
      "93"                  // KVEventBatch: [ts, events, data_parallel_rank]
      "cb3ff8000000000000"  // ts 1.5
      "94"                  // 4 events
      "97"
      "ab" +
      hex_of_str("BlockStored") +
      "91"
      "cf0102030405060708"  // block_hashes
      "c0"                  // parent_block_hash None
      "92"
      "01"
      "ccc8"  // token_ids [1, 200]
      "02"    // block_size
      "c0"    // lora_id None
      "a3" +
      hex_of_str("CPU") +  // medium
      "97"
      "ab" +
      hex_of_str("BlockStored") +
      "91"
      "09"
      "cf0102030405060708"
      "92"
      "03"
      "04"
      "02"
      "c0"
      "a3" +
      hex_of_str("CPU") +
      "93"
      "ac" +
      hex_of_str("BlockRemoved") +
      "92"
      "05"
      "cd0100"
      "a3" +
      hex_of_str("CPU") +
      "91"
      "b0" +
      hex_of_str("AllBlocksCleared") + "00";  // data_parallel_rank 0
  EXPECT_EQ(hex(encode_kv_event_batch(1.5, events, 2)), expect);
}

TEST(KvEventCodec, EmptyBatchIsThreeElements) {
  EXPECT_EQ(hex(encode_kv_event_batch(0.0, {}, 16)), "93cb00000000000000009000");
}

}  // namespace
}  // namespace kvw::kv_events
