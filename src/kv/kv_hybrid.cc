// KvManager's hybrid window (kv_manager.h): the window slots of the windowed layers.
#include <algorithm>

#include "core/check.h"
#include "kv/kv_manager.h"

namespace kvw {

int64_t KvManager::first_window_block(int64_t num_computed) const {
  if (cfg_.hybrid_window <= 0) return 0;
  return std::max<int64_t>(0, num_computed + 1 - cfg_.hybrid_window) / cfg_.block_size;
}

uint32_t KvManager::num_used_window_slots() const {
  if (!slots_) return 0;
  uint32_t n = 0;
  for (uint32_t b = 0; b < pool_.num_blocks(); ++b) n += slots_->refs(BlockId{b}) > 0 ? 1 : 0;
  return n;
}

void KvManager::window_block_table(SeqId seq, std::vector<uint32_t>& out) const {
  const BlockTable& t = table(seq);
  const std::span<const BlockId> blocks = t.blocks();
  out.assign(blocks.size(), kNoWindowSlot);
  if (!slots_) return;
  for (size_t i = size_t(first_window_block(t.num_computed_tokens())); i < blocks.size(); ++i) {
    out[i] = slots_->slot_of(blocks[i]);
  }
}

std::vector<BlockId> KvManager::match_prefix_hybrid(TokenSpan prompt,
                                                    std::span<const uint64_t> prompt_hashes,
                                                    std::vector<uint64_t>& hashes) const {
  // Every hit block must be cached (full layers); a hit of k blocks is usable when blocks
  // [first_window_block(k * bs), k) also still have their window rows (a run of slotted blocks
  // ending at block k - 1 reaches back that far). The longest usable k wins.
  const size_t bs = static_cast<size_t>(cfg_.block_size);
  const size_t max_blocks = (prompt.size() - 1) / bs;
  std::vector<BlockId> found;
  std::vector<uint64_t> chain;
  uint64_t h = kPrefixHashSeed;
  size_t run_start = 0;  // first block of the run of slotted blocks ending at block i
  size_t best = 0;
  for (size_t i = 0; i < max_blocks; ++i) {
    h = i < prompt_hashes.size() ? prompt_hashes[i]
                                 : hash_split_block(h, prompt.subspan(i * bs, bs));
    const std::optional<BlockId> b = cache_.lookup(h);
    if (!b) break;
    found.push_back(*b);
    chain.push_back(h);
    if (!slots_->has_slot(*b)) {
      run_start = i + 1;
      continue;
    }
    if (int64_t(run_start) <= first_window_block(int64_t((i + 1) * bs))) best = i + 1;
  }
  hashes.insert(hashes.end(), chain.begin(), chain.begin() + ptrdiff_t(best));
  return std::vector<BlockId>(found.begin(), found.begin() + ptrdiff_t(best));
}

int64_t KvManager::window_slots_needed(std::span<const BlockId> hits, int64_t total_blocks) const {
  const int64_t num_hits = int64_t(hits.size());
  int64_t n = std::max<int64_t>(0, total_blocks - num_hits);
  for (int64_t i = first_window_block(num_hits * cfg_.block_size); i < num_hits; ++i) {
    n += slots_->refs(hits[size_t(i)]) == 0 ? 1 : 0;  // evictable: reviving takes it
  }
  return n;
}

void KvManager::unref_window(std::span<const BlockId> blocks, size_t from, size_t to) {
  // Last first, as tables free their blocks: the tail's slots are evicted first.
  for (size_t i = to; i > from; --i) {
    const BlockId b = blocks[i - 1];
    slots_->unref(b, pool_.meta(b).has_hash);
  }
}

void KvManager::acquire_window(std::span<const BlockId> blocks) {
  for (BlockId b : blocks) {
    CHECK(slots_->acquire(b)) << "no window slot for block " << index_of(b)
                              << " after the allocatable check";
  }
}

void KvManager::check_window_invariants() const {
  slots_->check_invariants();
  std::vector<int32_t> refs(pool_.num_blocks(), 0);
  for (const auto& [seq, t] : tables_) {
    const std::span<const BlockId> blocks = t.blocks();
    for (size_t i = size_t(first_window_block(t.num_computed_tokens())); i < blocks.size(); ++i) {
      ++refs[index_of(blocks[i])];
    }
  }
  for (const auto& [seq, s] : swapped_) {  // in-flight swap-ins hold their window's slots
    if (!s.lease) continue;
    const std::span<const BlockId> blocks = s.lease->blocks();
    for (size_t i = size_t(first_window_block(s.num_computed)); i < blocks.size(); ++i) {
      ++refs[index_of(blocks[i])];
    }
  }
  for (uint32_t b = 0; b < pool_.num_blocks(); ++b) {
    CHECK(refs[b] == slots_->refs(BlockId{b}))
        << "block " << b << " window refs " << slots_->refs(BlockId{b}) << " but " << refs[b]
        << " tables hold it in their window";
    // A slot outlives its block's use only as an evictable cached prefix.
    if (slots_->has_slot(BlockId{b}) && refs[b] == 0) {
      CHECK(pool_.meta(BlockId{b}).has_hash) << "unhashed block " << b << " keeps a window slot";
    }
  }
}

}  // namespace kvw
