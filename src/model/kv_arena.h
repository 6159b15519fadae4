// model/kv_arena.h: one allocation holding K and V for every layer, cut into blocks of
// block_size tokens; a block id addresses that token range in every layer. This is the storage
// the forward pass reads and writes through block tables; src/kv will own allocation policy.
// Owner: engine thread (or the generate command); not thread-safe.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <vector>

#include "kernels/kernels.h"

namespace kvw {

struct KvArenaConfig {
  int32_t n_layer = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 16;  // tokens per block
  uint32_t num_blocks = 0;
  kernels::KvDtype dtype = kernels::KvDtype::kF16;
};

class KvArena {
 public:
  explicit KvArena(const KvArenaConfig& cfg);

  const KvArenaConfig& config() const { return cfg_; }
  uint64_t bytes() const { return bytes_; }
  static uint64_t bytes_per_block(const KvArenaConfig& cfg);
  kernels::KvLayerView layer(int32_t l) const;

 private:
  struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
  };
  KvArenaConfig cfg_;
  uint64_t bytes_ = 0;
  int64_t block_elems_ = 0;  // elements of one block in one layer: 2 * n_kv * block_size * dim
  // [n_layer][num_blocks][2 (K,V)][n_kv_heads][block_size][head_dim] of dtype, 64-byte aligned
  std::unique_ptr<uint8_t, FreeDeleter> data_;
};

// Hands out block ids in ascending order, lowest free first. Enough for generate and tests;
// the serving engine uses src/kv's BlockPool instead.
class SimpleBlockAllocator {
 public:
  explicit SimpleBlockAllocator(uint32_t num_blocks);
  std::optional<uint32_t> allocate();  // nullopt when every block is in use
  void free(uint32_t block_id);
  uint32_t num_free() const { return (uint32_t)free_.size(); }

 private:
  std::vector<uint32_t> free_;  // stack, lowest id on top
};

}  // namespace kvw
