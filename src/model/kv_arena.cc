#include "model/kv_arena.h"

#include <cstring>

#include "core/check.h"

namespace kvw {

uint64_t KvArena::bytes_per_block(const KvArenaConfig& c) {
  const uint64_t elem = c.dtype == kernels::KvDtype::kF32 ? 4 : 2;
  return (uint64_t)c.n_layer * 2 * c.n_kv_heads * c.block_size * c.head_dim * elem;
}

KvArena::KvArena(const KvArenaConfig& cfg) : cfg_(cfg) {
  CHECK(cfg.n_layer > 0 && cfg.n_kv_heads > 0 && cfg.head_dim > 0 && cfg.block_size > 0 &&
        cfg.num_blocks > 0);
  block_elems_ = (int64_t)2 * cfg.n_kv_heads * cfg.block_size * cfg.head_dim;
  bytes_ = bytes_per_block(cfg) * cfg.num_blocks;
  const uint64_t rounded = (bytes_ + 63) / 64 * 64;
  data_.reset(static_cast<uint8_t*>(std::aligned_alloc(64, rounded)));
  CHECK(data_ != nullptr) << "KV arena of " << bytes_ << " bytes";
  std::memset(data_.get(), 0, rounded);  // touch now: the budget is paid at start-up
}

kernels::KvLayerView KvArena::layer(int32_t l) const {
  const uint64_t elem = cfg_.dtype == kernels::KvDtype::kF32 ? 4 : 2;
  uint8_t* base = data_.get() + (uint64_t)l * cfg_.num_blocks * block_elems_ * elem;
  const int64_t half = block_elems_ / 2;
  return kernels::KvLayerView{cfg_.dtype,       base,          base + half * elem,
                              block_elems_,     cfg_.block_size, cfg_.n_kv_heads,
                              cfg_.head_dim};
}

SimpleBlockAllocator::SimpleBlockAllocator(uint32_t num_blocks) {
  free_.reserve(num_blocks);
  for (uint32_t i = num_blocks; i > 0; --i) free_.push_back(i - 1);
}

std::optional<uint32_t> SimpleBlockAllocator::allocate() {
  if (free_.empty()) return std::nullopt;
  uint32_t id = free_.back();
  free_.pop_back();
  return id;
}

void SimpleBlockAllocator::free(uint32_t block_id) { free_.push_back(block_id); }

}  // namespace kvw
