#include "kv/kv_arena.h"

#include <cstring>

#include "core/check.h"
#include "kv/window_slots.h"

namespace kvw {

uint64_t KvArena::layer_block_bytes(const KvArenaConfig& c) {
  const uint64_t rows = (uint64_t)c.n_kv_heads * c.block_size;
  return (c.shared_kv ? 1 : 2) * rows * kv_row_bytes(c.dtype, c.head_dim);
}

uint64_t KvArena::arena_bytes(const KvArenaConfig& c) {
  uint64_t rows = 0;
  for (int32_t l = 0; l < c.n_layer; ++l)
    rows += c.is_window_layer(l) ? c.num_window_slots : c.num_blocks;
  return rows * layer_block_bytes(c);
}

KvArena::KvArena(const KvArenaConfig& cfg) : cfg_(cfg) {
  CHECK(cfg.n_layer > 0 && cfg.n_kv_heads > 0 && cfg.head_dim > 0 && cfg.block_size > 0 &&
        cfg.num_blocks > 0);
  CHECK(cfg.num_window_slots == 0 || cfg.window_layers.size() == size_t(cfg.n_layer))
      << "window_layers has " << cfg.window_layers.size() << " entries for " << cfg.n_layer
      << " layers";
  elems_ = (uint64_t)cfg.n_kv_heads * cfg.block_size * cfg.head_dim;
  scales_ = cfg.dtype == KvDtype::kInt8 ? (uint64_t)cfg.n_kv_heads * cfg.block_size : 0;
  elem_bytes_ = kv_elem_bytes(cfg.dtype);
  const uint64_t lb = layer_block_bytes(cfg);
  for (int32_t l = 0; l < cfg.n_layer; ++l) {
    layer_offset_.push_back(bytes_);
    bytes_ += lb * (cfg.is_window_layer(l) ? cfg.num_window_slots : cfg.num_blocks);
  }
  const uint64_t rounded = (bytes_ + 63) / 64 * 64;
  data_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, rounded)));
  CHECK(data_ != nullptr) << "KV arena of " << bytes_ << " bytes";
  std::memset(data_.get(), 0, rounded);  // touch now: the budget is paid at start-up
}

uint8_t* KvArena::layer_base(int32_t l) const {
  DCHECK(l >= 0 && l < cfg_.n_layer);
  return data_.get() + layer_offset_[size_t(l)];
}

uint32_t KvArena::row_of(int32_t l, BlockId b) const {
  if (!cfg_.is_window_layer(l)) return index_of(b);
  if (slot_map_.empty()) return kNoWindowSlot;
  return slot_map_[index_of(b)];
}

void KvArena::copy_block(BlockId src, BlockId dst) {
  CHECK(index_of(src) < cfg_.num_blocks && index_of(dst) < cfg_.num_blocks);
  const uint64_t lb = layer_block_bytes(cfg_);
  for (int32_t l = 0; l < cfg_.n_layer; ++l) {
    const uint32_t s = row_of(l, src), d = row_of(l, dst);
    if (s == kNoWindowSlot || d == kNoWindowSlot || s == d) continue;
    uint8_t* base = layer_base(l);
    std::memcpy(base + d * lb, base + s * lb, lb);
  }
}

void KvArena::read_block(BlockId b, std::span<uint8_t> out) const {
  const uint64_t lb = layer_block_bytes(cfg_);
  CHECK(index_of(b) < cfg_.num_blocks && out.size() == lb * cfg_.n_layer);
  for (int32_t l = 0; l < cfg_.n_layer; ++l) {
    const uint32_t r = row_of(l, b);
    if (r == kNoWindowSlot) {
      std::memset(out.data() + l * lb, 0, lb);
      continue;
    }
    std::memcpy(out.data() + l * lb, layer_base(l) + r * lb, lb);
  }
}

void KvArena::write_block(BlockId b, std::span<const uint8_t> in) {
  const uint64_t lb = layer_block_bytes(cfg_);
  CHECK(index_of(b) < cfg_.num_blocks && in.size() == lb * cfg_.n_layer);
  for (int32_t l = 0; l < cfg_.n_layer; ++l) {
    const uint32_t r = row_of(l, b);
    if (r == kNoWindowSlot) continue;
    std::memcpy(layer_base(l) + r * lb, in.data() + l * lb, lb);
  }
}

}  // namespace kvw
