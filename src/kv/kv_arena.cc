#include "kv/kv_arena.h"

#include <cstring>

#include "core/check.h"

namespace kvw {

uint64_t KvArena::layer_block_bytes(const KvArenaConfig& c) {
  const uint64_t rows = (uint64_t)c.n_kv_heads * c.block_size;
  return (c.shared_kv ? 1 : 2) * rows * kv_row_bytes(c.dtype, c.head_dim);
}

KvArena::KvArena(const KvArenaConfig& cfg) : cfg_(cfg) {
  CHECK(cfg.n_layer > 0 && cfg.n_kv_heads > 0 && cfg.head_dim > 0 && cfg.block_size > 0 &&
        cfg.num_blocks > 0);
  elems_ = (uint64_t)cfg.n_kv_heads * cfg.block_size * cfg.head_dim;
  scales_ = cfg.dtype == KvDtype::kInt8 ? (uint64_t)cfg.n_kv_heads * cfg.block_size : 0;
  elem_bytes_ = kv_elem_bytes(cfg.dtype);
  bytes_ = block_bytes(cfg) * cfg.num_blocks;
  const uint64_t rounded = (bytes_ + 63) / 64 * 64;
  data_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, rounded)));
  CHECK(data_ != nullptr) << "KV arena of " << bytes_ << " bytes";
  std::memset(data_.get(), 0, rounded);  // touch now: the budget is paid at start-up
}

uint8_t* KvArena::layer_base(int32_t l) const {
  DCHECK(l >= 0 && l < cfg_.n_layer);
  return data_.get() + (uint64_t)l * cfg_.num_blocks * layer_block_bytes(cfg_);
}

void KvArena::copy_block(BlockId src, BlockId dst) {
  CHECK(index_of(src) < cfg_.num_blocks && index_of(dst) < cfg_.num_blocks);
  const uint64_t lb = layer_block_bytes(cfg_);
  for (int32_t l = 0; l < cfg_.n_layer; ++l) {
    uint8_t* base = layer_base(l);
    std::memcpy(base + index_of(dst) * lb, base + index_of(src) * lb, lb);
  }
}

void KvArena::read_block(BlockId b, std::span<uint8_t> out) const {
  const uint64_t lb = layer_block_bytes(cfg_);
  CHECK(index_of(b) < cfg_.num_blocks && out.size() == lb * cfg_.n_layer);
  for (int32_t l = 0; l < cfg_.n_layer; ++l) {
    std::memcpy(out.data() + l * lb, layer_base(l) + index_of(b) * lb, lb);
  }
}

void KvArena::write_block(BlockId b, std::span<const uint8_t> in) {
  const uint64_t lb = layer_block_bytes(cfg_);
  CHECK(index_of(b) < cfg_.num_blocks && in.size() == lb * cfg_.n_layer);
  for (int32_t l = 0; l < cfg_.n_layer; ++l) {
    std::memcpy(layer_base(l) + index_of(b) * lb, in.data() + l * lb, lb);
  }
}

}  // namespace kvw
