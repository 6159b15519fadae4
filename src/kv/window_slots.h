// kv/window_slots.h: the KV of a hybrid model's sliding-window layers (gemma2/3, gpt-oss: some
// layers attend to the last w positions, the others to all). A block id addresses its token range
// in every full-attention layer (KvArena, BlockPool); in the window layers the same block lives in
// a *window slot*, a second, smaller set of rows that a block holds only while some sequence still
// attends to it through a window layer (or, once hashed, until the slot is needed again).
// Owner: the KvManager, engine thread only. The slot map is also read by the arena's block copies
// (the swap worker reads entries of blocks the engine pinned; those entries do not change then).
//
//   block ids (full layers)   [ b0 ][ b1 ][ b2 ][ b3 ][ b4 ]   one sequence, w = 40, 16-token
//   slot_of (window layers)   [  - ][  - ][ s5 ][ s0 ][ s2 ]   blocks: b0, b1 lie behind the window
//
// Each slot counts the sequences that hold its block inside their window (refs). At 0 a hashed
// block keeps its slot as *evictable* (LRU), so a prefix hit can still use its window rows; an
// unhashed one gives it back at once. A new block takes a free slot, else the oldest evictable one.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <vector>

#include "core/ids.h"

namespace kvw {

inline constexpr uint32_t kNoWindowSlot = 0xffffffffu;

class WindowSlots {
 public:
  WindowSlots(uint32_t num_blocks, uint32_t num_slots);

  uint32_t num_slots() const { return num_slots_; }
  // Slots a new block could take now: free + evictable.
  uint32_t num_allocatable_slots() const { return uint32_t(free_.size() + evictable_.size()); }
  uint32_t num_used_slots() const { return num_slots_ - num_allocatable_slots(); }
  bool has_slot(BlockId b) const { return slot_of_[index_of(b)] != kNoWindowSlot; }
  uint32_t slot_of(BlockId b) const { return slot_of_[index_of(b)]; }
  int32_t refs(BlockId b) const { return refs_[index_of(b)]; }
  // [num_blocks] block id -> slot (kNoWindowSlot: none). Stable storage: the arena keeps a view.
  std::span<const uint32_t> slot_map() const { return slot_of_; }

  // Gives block b (which has no slot) a slot with refs 1: a free one, else the least recently
  // released evictable one (its block loses its window rows). Returns false, changing nothing,
  // when no slot is allocatable.
  bool acquire(BlockId b);
  // refs++ on b's slot (CHECKs it has one); an evictable slot stops being evictable.
  void ref(BlockId b);
  // refs--; at 0 the slot stays evictable when `keep` (the block is hashed), else is freed.
  void unref(BlockId b, bool keep);
  // The pool evicts or frees block b: its slot (refs 0, if any) is freed.
  void drop(BlockId b);
  // Defragmenter: block src's slot and refs now belong to dst (which has none).
  void move(BlockId src, BlockId dst);

  // CHECKs: every slot is free, evictable or held by exactly one block; refs >= 0; evictable
  // slots have refs 0. O(num_blocks + num_slots).
  void check_invariants() const;

 private:
  uint32_t num_slots_;
  std::vector<uint32_t> slot_of_;  // [num_blocks] slot or kNoWindowSlot
  std::vector<int32_t> refs_;      // [num_blocks] sequences holding the block in their window
  std::vector<uint32_t> free_;     // free slots (stack)
  std::list<uint32_t> evictable_;  // block ids whose slot has refs 0, least recent first
  std::vector<std::list<uint32_t>::iterator> lru_pos_;  // [num_blocks] valid while evictable
  std::vector<uint8_t> is_evictable_;                   // [num_blocks]
};

}  // namespace kvw
