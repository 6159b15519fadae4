#include "kv/window_slots.h"

#include "core/check.h"

namespace kvw {

WindowSlots::WindowSlots(uint32_t num_blocks, uint32_t num_slots)
    : num_slots_(num_slots),
      slot_of_(num_blocks, kNoWindowSlot),
      refs_(num_blocks, 0),
      lru_pos_(num_blocks),
      is_evictable_(num_blocks, 0) {
  free_.reserve(num_slots);
  // Popped from the back: slot 0 first, so the first allocations are contiguous.
  for (uint32_t s = num_slots; s > 0; --s) free_.push_back(s - 1);
}

bool WindowSlots::acquire(BlockId b) {
  const uint32_t i = index_of(b);
  CHECK(slot_of_[i] == kNoWindowSlot)
      << "block " << i << " already has window slot " << slot_of_[i];
  uint32_t slot = kNoWindowSlot;
  if (!free_.empty()) {
    slot = free_.back();
    free_.pop_back();
  } else if (!evictable_.empty()) {
    const uint32_t victim = evictable_.front();
    evictable_.pop_front();
    is_evictable_[victim] = 0;
    slot = slot_of_[victim];
    slot_of_[victim] = kNoWindowSlot;
  } else {
    return false;
  }
  slot_of_[i] = slot;
  refs_[i] = 1;
  return true;
}

void WindowSlots::ref(BlockId b) {
  const uint32_t i = index_of(b);
  CHECK(slot_of_[i] != kNoWindowSlot) << "block " << i << " has no window slot";
  if (is_evictable_[i]) {
    evictable_.erase(lru_pos_[i]);
    is_evictable_[i] = 0;
  }
  ++refs_[i];
}

void WindowSlots::unref(BlockId b, bool keep) {
  const uint32_t i = index_of(b);
  CHECK(slot_of_[i] != kNoWindowSlot && refs_[i] > 0)
      << "block " << i << " window refs underflow (" << refs_[i] << ")";
  if (--refs_[i] > 0) return;
  if (keep) {
    lru_pos_[i] = evictable_.insert(evictable_.end(), i);
    is_evictable_[i] = 1;
  } else {
    free_.push_back(slot_of_[i]);
    slot_of_[i] = kNoWindowSlot;
  }
}

void WindowSlots::drop(BlockId b) {
  const uint32_t i = index_of(b);
  if (slot_of_[i] == kNoWindowSlot) return;
  CHECK(refs_[i] == 0) << "dropping block " << i << " with " << refs_[i] << " window refs";
  if (is_evictable_[i]) {
    evictable_.erase(lru_pos_[i]);
    is_evictable_[i] = 0;
  }
  free_.push_back(slot_of_[i]);
  slot_of_[i] = kNoWindowSlot;
}

void WindowSlots::move(BlockId src, BlockId dst) {
  const uint32_t s = index_of(src), d = index_of(dst);
  CHECK(slot_of_[d] == kNoWindowSlot) << "defragment into block " << d << " with a window slot";
  if (slot_of_[s] == kNoWindowSlot) return;
  slot_of_[d] = slot_of_[s];
  refs_[d] = refs_[s];
  slot_of_[s] = kNoWindowSlot;
  refs_[s] = 0;
  if (is_evictable_[s]) {
    *lru_pos_[s] = d;
    lru_pos_[d] = lru_pos_[s];
    is_evictable_[d] = 1;
    is_evictable_[s] = 0;
  }
}

void WindowSlots::check_invariants() const {
  std::vector<uint8_t> seen(num_slots_, 0);
  for (uint32_t s : free_) {
    CHECK(s < num_slots_ && !seen[s]) << "window slot " << s << " free twice or out of range";
    seen[s] = 1;
  }
  size_t num_evictable = 0;
  for (uint32_t i = 0; i < slot_of_.size(); ++i) {
    CHECK(refs_[i] >= 0) << "block " << i << " window refs " << refs_[i];
    if (slot_of_[i] == kNoWindowSlot) {
      CHECK(refs_[i] == 0 && !is_evictable_[i]) << "block " << i << " refs without a slot";
      continue;
    }
    const uint32_t s = slot_of_[i];
    CHECK(s < num_slots_ && !seen[s]) << "window slot " << s << " held twice";
    seen[s] = 1;
    CHECK(bool(is_evictable_[i]) == (refs_[i] == 0))
        << "block " << i << " refs " << refs_[i] << " evictable " << int(is_evictable_[i]);
    num_evictable += is_evictable_[i];
  }
  CHECK(num_evictable == evictable_.size()) << "evictable list out of step";
  for (uint8_t v : seen) CHECK(v) << "window slot leaked";
}

}  // namespace kvw
