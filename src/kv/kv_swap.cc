// KvManager's use of the swap tier (SwapSpace): prefix offload on eviction, prefix revival on a
// later hit, and swap out / in of preempted sequences. Every copy's ticket is recorded in
// pending_ until its completion is handled, whichever call (poll_swap, a wait here) returns it.
#include <algorithm>

#include "core/check.h"
#include "kv/kv_manager.h"

namespace kvw {

namespace {
constexpr SwapSlot kReleasedSlot{0xffffffffu};

// A failed copy's slot was already released by SwapSpace: forget it.
void mark_released(std::vector<SwapSlot>& slots, SwapSlot failed) {
  for (SwapSlot& slot : slots) {
    if (slot == failed) slot = kReleasedSlot;
  }
}
}  // namespace

void KvManager::attach_swap(std::unique_ptr<SwapSpace> swap) {
  CHECK(storage_ != nullptr) << "a swap tier needs KV storage";
  CHECK(swap_ == nullptr) << "swap tier attached twice";
  swap_ = std::move(swap);
}

void KvManager::handle(const SwapCompletion& c) {
  auto it = pending_.find(index_of(c.ticket));
  CHECK(it != pending_.end()) << "unknown swap ticket " << index_of(c.ticket);
  const Pending p = it->second;
  pending_.erase(it);
  switch (p.kind) {
    case PendingKind::kSeqOut: {
      SwappedSeq& s = swapped_.at(p.seq);
      --s.writes_left;
      if (c.status.ok()) break;
      s.lost = true;
      mark_released(s.slots, c.slot);
      break;
    }
    case PendingKind::kPrefixOut: {
      auto o = offloaded_.find(p.hash);
      CHECK(o != offloaded_.end()) << "offloaded prefix missing";
      o->second.write = SwapTicket{0};
      if (!c.status.ok()) {
        offload_lru_.erase(o->second.lru);
        offloaded_.erase(o);
      }
      break;
    }
    case PendingKind::kIn:
      in_results_.emplace(index_of(c.ticket), c.status);
      break;
    case PendingKind::kSeqIn: {
      SwappedSeq& s = swapped_.at(p.seq);
      ++s.reads_done;
      if (c.status.ok()) break;
      s.read_failed = true;
      mark_released(s.slots, c.slot);
      break;
    }
  }
}

bool KvManager::wait_oldest() {
  if (pending_.empty()) return false;
  handle(swap_->wait(SwapTicket{pending_.begin()->first}));
  return true;
}

Status KvManager::wait_ticket(SwapTicket t) {
  if (pending_.contains(index_of(t))) handle(swap_->wait(t));
  auto r = in_results_.find(index_of(t));
  if (r == in_results_.end()) return Status::ok_status();  // an out copy, handled above
  const Status st = r->second;
  in_results_.erase(r);
  return st;
}

void KvManager::poll_swap() {
  if (swap_ == nullptr) return;
  for (const SwapCompletion& c : swap_->poll()) handle(c);
}

bool KvManager::drop_oldest_offload() {
  if (offload_lru_.empty()) return false;
  auto o = offloaded_.find(offload_lru_.front());
  if (index_of(o->second.write) != 0) {
    (void)wait_ticket(o->second.write);  // may drop the entry itself on a write error
    o = offloaded_.find(offload_lru_.front());
    if (o == offloaded_.end()) return true;
  }
  swap_->free_slot(o->second.slot);
  offload_lru_.pop_front();
  offloaded_.erase(o);
  return true;
}

void KvManager::offload(BlockId b, uint64_t hash) {
  auto existing = offloaded_.find(hash);
  if (existing != offloaded_.end()) {  // the tier already holds this prefix: refresh its age
    offload_lru_.splice(offload_lru_.end(), offload_lru_, existing->second.lru);
    return;
  }
  if (swap_->num_free_slots() == 0 && !drop_oldest_offload()) return;
  SwapSubmission sub = swap_->swap_out(b);
  // In-flight bound reached: finishing the oldest copy (one block write) beats recomputing a
  // whole prefix later.
  if (sub.outcome == SwapSubmit::kBusy && wait_oldest()) sub = swap_->swap_out(b);
  if (sub.outcome != SwapSubmit::kOk) return;  // still no room: the prefix is simply lost
  offload_lru_.push_back(hash);
  offloaded_.emplace(hash, Offloaded{sub.slot, sub.ticket, std::prev(offload_lru_.end())});
  pending_.emplace(index_of(sub.ticket), Pending{PendingKind::kPrefixOut, SeqId{0}, hash});
  ++cache_.counters().num_offloaded;
}

void KvManager::append_from_tier(TokenSpan prompt, std::span<const uint64_t> prompt_hashes,
                                 size_t first_block, uint64_t parent, BlockLease& lease,
                                 std::vector<uint64_t>& hashes) {
  if (swap_ == nullptr || prompt.empty()) return;
  const size_t bs = static_cast<size_t>(cfg_.block_size);
  const size_t max_blocks = (prompt.size() - 1) / bs;
  uint64_t h = parent;
  uint64_t parent_of_h = parent;  // chain hash of block i - 1
  for (size_t i = first_block; i < max_blocks; ++i) {
    h = i < prompt_hashes.size() ? prompt_hashes[i]
                                 : hash_split_block(h, prompt.subspan(i * bs, bs));
    auto o = offloaded_.find(h);
    if (o == offloaded_.end()) return;
    if (index_of(o->second.write) != 0) {
      (void)wait_ticket(o->second.write);
      o = offloaded_.find(h);
      if (o == offloaded_.end()) return;  // the write failed
    }
    // Take the entry out first: the allocation below may evict and offload, dropping old ones.
    const SwapSlot slot = o->second.slot;
    offload_lru_.erase(o->second.lru);
    offloaded_.erase(o);
    std::vector<BlockId> dst;
    if (!pool_.allocate(1, dst)) {
      swap_->free_slot(slot);
      return;
    }
    SwapSubmission sub = swap_->swap_in(slot, dst[0]);
    while (sub.outcome == SwapSubmit::kBusy && wait_oldest()) sub = swap_->swap_in(slot, dst[0]);
    CHECK(sub.outcome == SwapSubmit::kOk) << "swap_in refused with nothing in flight";
    pending_.emplace(index_of(sub.ticket), Pending{PendingKind::kIn, SeqId{0}, h});
    const Status st = wait_ticket(sub.ticket);
    if (!st.ok()) {  // the slot is released; recompute from here
      pool_.free(dst);
      return;
    }
    swap_->free_slot(slot);
    if (cache_.insert(h, dst[0])) {
      pool_.set_hash(dst[0], h);
      events_.stored(i == 0 ? std::nullopt : std::optional<uint64_t>(parent_of_h),
                     std::span<const uint64_t>(&h, 1), prompt.subspan(i * bs, bs));
    }
    parent_of_h = h;
    lease.push_back(dst[0]);
    hashes.push_back(h);
    ++cache_.counters().num_swap_hits;
  }
}

bool KvManager::swap_out(SeqId seq, TokenSpan tokens) {
  CHECK(swap_ != nullptr) << "swap_out without a swap tier";
  BlockTable& t = table(seq);
  // Only the live computed blocks travel; window holes are restored as holes by swap_in.
  const size_t end =
      static_cast<size_t>((t.num_computed_tokens() + block_size() - 1) / block_size());
  const size_t first = std::min(t.num_holes(), end);
  const size_t n = end - first;
  // A preempted sequence outranks cached prefixes for the tier's slots.
  while (swap_->num_free_slots() < n && drop_oldest_offload()) {
  }
  if (swap_->num_free_slots() < n) return false;
  // Registered before the first submission: a wait below may already complete (or fail) some.
  SwappedSeq& s = swapped_[seq];
  s.num_computed = t.num_computed_tokens();
  s.hashes.assign(t.block_hashes().begin(), t.block_hashes().end());
  if (events_.enabled()) {
    const size_t num_hashed_tokens = s.hashes.size() * size_t(block_size());
    CHECK(tokens.size() >= num_hashed_tokens)
        << "swap_out of " << index_of(seq) << " with " << tokens.size() << " tokens for "
        << s.hashes.size() << " hashed blocks";
    s.hashed_tokens.clear();
    tokens.first(num_hashed_tokens).append_to(s.hashed_tokens);
  }
  s.num_holes = first;
  for (size_t i = first; i < end; ++i) {
    SwapSubmission sub = swap_->swap_out(t.blocks()[i]);
    while (sub.outcome == SwapSubmit::kBusy && wait_oldest()) sub = swap_->swap_out(t.blocks()[i]);
    CHECK(sub.outcome == SwapSubmit::kOk) << "swap_out refused after the slot check";
    s.slots.push_back(sub.slot);
    ++s.writes_left;
    pending_.emplace(index_of(sub.ticket), Pending{PendingKind::kSeqOut, seq, 0});
  }
  // The bytes are staged: the blocks can go now (hashed ones stay cached in the pool).
  if (slots_) {
    unref_window(t.blocks(), size_t(first_window_block(t.num_computed_tokens())), t.num_blocks());
  }
  t.clear();
  tables_.erase(seq);
  return true;
}

void KvManager::wait_seq_copies(SeqId seq, bool include_writes) {
  std::vector<uint64_t> mine;
  for (const auto& [ticket, p] : pending_) {
    const bool kind =
        p.kind == PendingKind::kSeqIn || (include_writes && p.kind == PendingKind::kSeqOut);
    if (kind && p.seq == seq) mine.push_back(ticket);
  }
  for (uint64_t ticket : mine) (void)wait_ticket(SwapTicket{ticket});
}

void KvManager::forget_swapped(SeqId seq) {
  // Outstanding copies of this sequence (writes, reads) must finish before their slots and
  // destination blocks can be freed.
  wait_seq_copies(seq, /*include_writes=*/true);
  SwappedSeq& s = swapped_.at(seq);
  release_swap_in_window(s);
  if (s.lease) s.lease->reset();
  if (s.next_block) s.next_block->reset();
  for (SwapSlot slot : s.slots) {
    if (slot != kReleasedSlot) swap_->free_slot(slot);
  }
  swapped_.erase(seq);
}

SwapInStatus KvManager::poll_swap_in(SeqId seq, bool reserve_next_token) {
  auto it = swapped_.find(seq);
  CHECK(it != swapped_.end()) << "swap_in of sequence " << index_of(seq) << " not swapped";
  CHECK(!tables_.contains(seq)) << "sequence " << index_of(seq) << " is resident";
  SwappedSeq& s = it->second;
  if (s.lost || s.read_failed) {
    forget_swapped(seq);
    return SwapInStatus::kLost;
  }
  if (!s.lease) {
    // Reserved at once (with the next token's block), so the scheduler's admission check still
    // holds when the reads land.
    const bool needs_next = reserve_next_token && s.num_computed % cfg_.block_size == 0;
    if (pool_.num_allocatable_blocks() < s.slots.size() + (needs_next ? 1 : 0)) {
      return SwapInStatus::kNoFreeBlocks;
    }
    // Hybrid: the blocks inside the window need their window slots (no holes then).
    const size_t window_from = std::min(s.slots.size(), size_t(first_window_block(s.num_computed)));
    if (slots_ && slots_->num_allocatable_slots() < s.slots.size() - window_from) {
      return SwapInStatus::kNoFreeBlocks;
    }
    s.lease = pool_.allocate(static_cast<uint32_t>(s.slots.size()));
    if (needs_next) s.next_block = pool_.allocate(1);
    CHECK(s.lease && (!needs_next || s.next_block)) << "allocation below the allocatable count";
    if (slots_) acquire_window(s.lease->blocks().subspan(window_from));
  }
  // A slot can be read only once its write has landed (a failed write releases the slot).
  if (s.writes_left > 0) return SwapInStatus::kPending;
  while (s.reads_submitted < s.slots.size()) {
    const size_t i = s.reads_submitted;
    const SwapSubmission sub = swap_->swap_in(s.slots[i], (*s.lease)[i]);
    if (sub.outcome == SwapSubmit::kBusy) break;  // the rest go once earlier copies finish
    CHECK(sub.outcome == SwapSubmit::kOk) << "swap_in refused: " << int(sub.outcome);
    pending_.emplace(index_of(sub.ticket), Pending{PendingKind::kSeqIn, seq, 0});
    ++s.reads_submitted;
  }
  if (s.reads_done < s.slots.size()) return SwapInStatus::kPending;
  return install_swapped(it);
}

SwapInStatus KvManager::swap_in(SeqId seq) {
  while (true) {
    const SwapInStatus st = poll_swap_in(seq, false);
    if (st != SwapInStatus::kPending) return st;
    CHECK(wait_oldest()) << "swap_in of " << index_of(seq) << " pending with nothing in flight";
  }
}

SwapInStatus KvManager::install_swapped(std::unordered_map<SeqId, SwappedSeq>::iterator it) {
  const SeqId seq = it->first;
  SwappedSeq& s = it->second;
  BlockTable t(cfg_.block_size);
  BlockLease blocks(&pool_, std::vector<BlockId>(s.num_holes, kNullBlock));
  blocks.append(std::move(*s.lease));
  t.append(std::move(blocks), s.num_computed);
  t.set_num_computed(s.num_computed, step_);
  const size_t bs = static_cast<size_t>(cfg_.block_size);
  for (size_t i = 0; i < s.hashes.size(); ++i) {
    const BlockId b = t.blocks()[i];
    t.push_hash(s.hashes[i]);
    if (b != kNullBlock && cache_.insert(s.hashes[i], b)) {
      pool_.set_hash(b, s.hashes[i]);
      if (events_.enabled()) {
        events_.stored(i == 0 ? std::nullopt : std::optional<uint64_t>(s.hashes[i - 1]),
                       std::span<const uint64_t>(&s.hashes[i], 1),
                       std::span<const int32_t>(s.hashed_tokens).subspan(i * bs, bs));
      }
    }
  }
  for (SwapSlot slot : s.slots) swap_->free_slot(slot);
  if (s.next_block) s.next_block->reset();  // unhashed: the next allocation takes it back
  swapped_.erase(it);
  tables_.emplace(seq, std::move(t));
  return SwapInStatus::kOk;
}

void KvManager::cancel_swap_in(SeqId seq) {
  wait_seq_copies(seq, /*include_writes=*/false);  // reads land in the blocks freed below
  SwappedSeq& s = swapped_.at(seq);
  release_swap_in_window(s);
  s.lease.reset();
  s.next_block.reset();
  s.reads_submitted = 0;
  s.reads_done = 0;
}

void KvManager::release_swap_in_window(SwappedSeq& s) {
  if (!slots_ || !s.lease) return;
  const std::span<const BlockId> blocks = s.lease->blocks();
  unref_window(blocks, std::min(blocks.size(), size_t(first_window_block(s.num_computed))),
               blocks.size());
}

bool KvManager::is_swapping_in(SeqId seq) const {
  auto it = swapped_.find(seq);
  return it != swapped_.end() && it->second.lease.has_value();
}

bool KvManager::any_swap_in_in_flight() const {
  for (const auto& [seq, s] : swapped_) {
    if (s.lease) return true;
  }
  return false;
}

size_t KvManager::num_held_slots() const {
  size_t n = offloaded_.size();
  for (const auto& [seq, s] : swapped_) {
    for (SwapSlot slot : s.slots) n += slot != kReleasedSlot ? 1 : 0;
  }
  return n;
}

}  // namespace kvw
