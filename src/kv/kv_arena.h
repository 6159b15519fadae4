// kv/kv_arena.h: the KV cache storage: one allocation, made once at start-up, holding K and V
// of every layer, cut into blocks of block_size tokens. A block id addresses that token range in
// every layer. The forward pass reads and writes it through per-sequence block tables; the KV
// manager copies whole blocks through the KvStorage interface.
// Owner: engine thread; not thread-safe (the swap worker only touches pinned blocks' bytes).
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>
#include <vector>

#include "core/kv_dtype.h"
#include "kv/kv_storage.h"

namespace kvw {

struct KvArenaConfig {
  int32_t n_layer = 0;
  int32_t n_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 16;  // tokens per block
  uint32_t num_blocks = 0;
  KvDtype dtype = KvDtype::kF16;
  // MLA: one latent row per token serves as K and as V, so V is not stored (V reads K's bytes).
  bool shared_kv = false;
  // Hybrid window (kv/window_slots.h): > 0 puts the layers flagged in window_layers in this many
  // window slots instead of num_blocks blocks; 0: every layer has num_blocks blocks.
  uint32_t num_window_slots = 0;
  std::vector<uint8_t> window_layers;  // [n_layer] 1: a windowed layer (used with window slots)
  bool is_window_layer(int32_t l) const {
    return num_window_slots > 0 && window_layers[size_t(l)] != 0;
  }
};

class KvArena final : public KvStorage {
 public:
  explicit KvArena(const KvArenaConfig& cfg);

  const KvArenaConfig& config() const { return cfg_; }
  uint64_t bytes() const { return bytes_; }
  // Bytes of one block in one layer (K, V and, for int8, their scales).
  static uint64_t layer_block_bytes(const KvArenaConfig& cfg);
  static uint64_t block_bytes(const KvArenaConfig& cfg) {
    return layer_block_bytes(cfg) * cfg.n_layer;
  }
  // Bytes of the whole arena: num_blocks rows per full layer, num_window_slots per window layer.
  static uint64_t arena_bytes(const KvArenaConfig& cfg);

  // Layer `l`, block 0 (window layers: slot 0; their rows are addressed by window slot, see
  // set_window_slot_map). Block b starts layer_block_bytes() * b further on. Within a block:
  //   K  [n_kv_heads][block_size][head_dim] dtype
  //   V  [n_kv_heads][block_size][head_dim] dtype
  //   int8 only: K scales [n_kv_heads][block_size] f32, then V scales, same shape
  // With shared_kv, V and V scales are absent and their offsets are K's.
  uint8_t* layer_base(int32_t l) const;
  uint64_t v_offset() const { return cfg_.shared_kv ? 0 : elems_ * elem_bytes_; }
  uint64_t k_scale_offset() const { return planes() * elems_ * elem_bytes_; }
  uint64_t v_scale_offset() const { return k_scale_offset() + (cfg_.shared_kv ? 0 : scales_ * 4); }

  // KvStorage
  uint32_t num_blocks() const override { return cfg_.num_blocks; }
  uint64_t bytes_per_block() const override { return block_bytes(cfg_); }
  void copy_block(BlockId src, BlockId dst) override;
  void read_block(BlockId b, std::span<uint8_t> out) const override;
  void write_block(BlockId b, std::span<const uint8_t> in) override;
  void set_window_slot_map(std::span<const uint32_t> slot_map) override { slot_map_ = slot_map; }

 private:
  struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
  };
  uint64_t planes() const { return cfg_.shared_kv ? 1 : 2; }
  // Row of block b in layer l: the block id, or its window slot (kNoWindowSlot: none).
  uint32_t row_of(int32_t l, BlockId b) const;

  KvArenaConfig cfg_;
  uint64_t elems_ = 0;   // K (or V) elements of one block in one layer
  uint64_t scales_ = 0;  // int8: K (or V) scales of one block in one layer
  uint64_t elem_bytes_ = 0;
  uint64_t bytes_ = 0;
  std::vector<uint64_t> layer_offset_;  // [n_layer] byte offset of each layer's row 0
  std::span<const uint32_t> slot_map_;  // [num_blocks] window slot of each block (KvManager's)
  // per layer [num_blocks or num_window_slots][layer_block_bytes], 64-byte aligned
  std::unique_ptr<uint8_t, FreeDeleter> data_;
};

}  // namespace kvw
