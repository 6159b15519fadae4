#include "kv_events/kv_event_codec.h"

#include "kv_events/msgpack_writer.h"

namespace kvw::kv_events {
namespace {

void write_hashes(MsgpackWriter& w, std::span<const uint64_t> hashes) {
  w.array(uint32_t(hashes.size()));
  for (uint64_t h : hashes) w.uint(h);
}

void write_event(MsgpackWriter& w, const KvCacheEvent& e, int32_t block_size) {
  switch (e.kind) {
    case KvCacheEvent::Kind::kBlockStored:
      w.array(7);
      w.str("BlockStored");
      write_hashes(w, e.block_hashes);
      if (e.parent_block_hash) {
        w.uint(*e.parent_block_hash);
      } else {
        w.nil();
      }
      w.array(uint32_t(e.token_ids.size()));
      for (int32_t t : e.token_ids) w.sint(t);
      w.sint(block_size);
      w.nil();  // lora_id: no adapters
      w.str(kMedium);
      return;
    case KvCacheEvent::Kind::kBlockRemoved:
      w.array(3);
      w.str("BlockRemoved");
      write_hashes(w, e.block_hashes);
      w.str(kMedium);
      return;
    case KvCacheEvent::Kind::kAllBlocksCleared:
      w.array(1);
      w.str("AllBlocksCleared");
      return;
  }
}

}  // namespace

std::string encode_kv_event_batch(double ts, std::span<const KvCacheEvent> events,
                                  int32_t block_size) {
  MsgpackWriter w;
  w.array(3);
  w.f64(ts);
  w.array(uint32_t(events.size()));
  for (const KvCacheEvent& e : events) write_event(w, e, block_size);
  w.uint(0);  // data_parallel_rank
  return w.take();
}

}  // namespace kvw::kv_events
