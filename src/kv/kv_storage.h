// kv/kv_storage.h: raw access to the bytes of KV blocks, for the copies the manager orders
// (copy-on-write of a forked partial block, defragmentation moves, swap out/in).
// Implemented by KvArena (the real cache) and by test doubles. The KV manager never sees layer
// layout or dtype: a block is an opaque run of bytes_per_block() bytes (gathered over layers).
// Thread safety: the engine thread calls every method; read_block/write_block may also be called
// by the swap worker for blocks the engine has pinned for that copy.
#pragma once

#include <cstdint>
#include <span>

#include "core/ids.h"

namespace kvw {

class KvStorage {
 public:
  virtual ~KvStorage() = default;
  virtual uint32_t num_blocks() const = 0;
  virtual uint64_t bytes_per_block() const = 0;  // all layers, K and V (and int8 scales)
  virtual void copy_block(BlockId src, BlockId dst) = 0;
  virtual void read_block(BlockId b, std::span<uint8_t> out) const = 0;  // out: bytes_per_block
  virtual void write_block(BlockId b, std::span<const uint8_t> in) = 0;  // in: bytes_per_block
  // Hybrid window (kv/window_slots.h): the window layers of block b live in slot_map[b]
  // (kNoWindowSlot: nowhere; those bytes are neither copied nor read, and read as zeros). The
  // span stays valid and is updated by the KvManager. Storages without window layers ignore it.
  virtual void set_window_slot_map(std::span<const uint32_t> slot_map) { (void)slot_map; }
};

}  // namespace kvw
