// kv_events/kv_event_codec.h: one engine step's KV cache events as the msgpack payload of
// vLLM's KVEventBatch, byte for byte as vLLM v0.11.0 (vllm/distributed/kv_events.py) encodes it
// with msgspec: array_like structs, events tagged by class name in the first element, trailing
// fields with None defaults omitted (omit_defaults), fields without defaults always written.
//
//   KVEventBatch      [ts: float64, events: [...], data_parallel_rank: 0]
//   BlockStored       ["BlockStored", block_hashes: [uint64...], parent_block_hash: uint64|nil,
//                      token_ids: [int...], block_size: int, lora_id: nil, medium: "CPU"]
//   BlockRemoved      ["BlockRemoved", block_hashes: [uint64...], medium: "CPU"]
//   AllBlocksCleared  ["AllBlocksCleared"]
//
// Block hashes are the prefix cache's 64-bit chain hashes (kv/prefix_cache.h) sent as integers,
// as vLLM does with its default VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1. data_parallel_rank is 0:
// vLLM's publisher fills in its rank (0 with one engine) before encoding. medium names where the
// blocks live: our KV pool is in host memory, so "CPU" (vLLM names its GPU pool "GPU"). Later
// vLLM versions append lora_name (and optional fields) to BlockStored; llm-d's decoder reads
// them as optional, so this 7-element form decodes there too.
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "kv/kv_events.h"

namespace kvw::kv_events {

inline constexpr std::string_view kMedium = "CPU";

// `ts`: seconds since the Unix epoch (vLLM's time.time() when the batch was made).
std::string encode_kv_event_batch(double ts, std::span<const KvCacheEvent> events,
                                  int32_t block_size);

}  // namespace kvw::kv_events
