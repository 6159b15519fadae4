#include "kv/kv_manager.h"

#include <algorithm>
#include <string>

#include "core/check.h"

namespace kvw {

Status KvManagerConfig::validate() const {
  if (num_blocks == 0) return Error{"kv: num_blocks must be > 0"};
  if (block_size < 8 || block_size > 32) {
    return Error{"kv: block_size " + std::to_string(block_size) + " outside 8..32 tokens"};
  }
  if (sliding_window < 0) {
    return Error{"kv: sliding_window " + std::to_string(sliding_window) + " must be >= 0"};
  }
  if (hybrid_window < 0 || (hybrid_window > 0) != (num_window_slots > 0)) {
    return Error{"kv: hybrid_window " + std::to_string(hybrid_window) + " needs window slots (" +
                 std::to_string(num_window_slots) + ")"};
  }
  if (hybrid_window > 0 && sliding_window > 0) {
    return Error{"kv: hybrid_window and sliding_window are exclusive"};
  }
  if (watermark_blocks >= num_blocks) {
    return Error{"kv: watermark_blocks " + std::to_string(watermark_blocks) +
                 " must be below num_blocks " + std::to_string(num_blocks)};
  }
  return Status::ok_status();
}

static KvManagerConfig checked(const KvManagerConfig& cfg) {
  const Status st = cfg.validate();
  CHECK(st.ok()) << st.message();
  return cfg;
}

KvManager::KvManager(const KvManagerConfig& cfg, KvStorage* storage)
    : cfg_(checked(cfg)), storage_(storage), pool_(cfg.num_blocks, &cache_) {
  if (storage_ != nullptr) {
    CHECK(storage_->num_blocks() >= cfg_.num_blocks)
        << "storage has " << storage_->num_blocks() << " blocks, pool " << cfg_.num_blocks;
  }
  pool_.set_evict_callback([this](BlockId b, uint64_t hash) { on_evict(b, hash); });
  if (cfg_.hybrid_window > 0) {
    slots_ = std::make_unique<WindowSlots>(cfg_.num_blocks, cfg_.num_window_slots);
    if (storage_ != nullptr) storage_->set_window_slot_map(slots_->slot_map());
  }
}

const BlockTable& KvManager::table(SeqId seq) const {
  auto it = tables_.find(seq);
  CHECK(it != tables_.end()) << "unknown sequence " << index_of(seq);
  return it->second;
}

BlockTable& KvManager::table(SeqId seq) {
  auto it = tables_.find(seq);
  CHECK(it != tables_.end()) << "unknown sequence " << index_of(seq);
  return it->second;
}

int64_t KvManager::first_live_block(int64_t num_computed) const {
  if (cfg_.sliding_window <= 0) return 0;
  return std::max<int64_t>(0, num_computed + 1 - cfg_.sliding_window) / cfg_.block_size;
}

uint32_t KvManager::max_window_blocks() const {
  if (cfg_.sliding_window <= 0) return 0;
  const int64_t bs = cfg_.block_size;
  return static_cast<uint32_t>((cfg_.sliding_window + bs - 1 + bs - 1) / bs);
}

std::vector<BlockId> KvManager::match_prefix(TokenSpan prompt,
                                             std::span<const uint64_t> prompt_hashes,
                                             std::vector<uint64_t>& hashes) const {
  std::vector<BlockId> hits;
  if (!cfg_.enable_prefix_caching || prompt.empty()) return hits;
  const size_t bs = static_cast<size_t>(cfg_.block_size);
  // At most (len - 1) tokens: the last prompt token must run through the model for logits.
  const size_t max_blocks = (prompt.size() - 1) / bs;
  if (slots_) return match_prefix_hybrid(prompt, prompt_hashes, hashes);
  uint64_t h = kPrefixHashSeed;
  if (cfg_.sliding_window <= 0) {
    for (size_t i = 0; i < max_blocks; ++i) {
      h = i < prompt_hashes.size() ? prompt_hashes[i]
                                   : hash_split_block(h, prompt.subspan(i * bs, bs));
      const std::optional<BlockId> b = cache_.lookup(h);
      if (!b) break;
      hits.push_back(*b);
      hashes.push_back(h);
    }
    return hits;
  }
  // Window: a hit of k blocks is usable when blocks [first_live_block(k * bs), k) are all cached
  // (a run of cached blocks ending at block k - 1 reaches back that far). The longest usable k
  // wins; the blocks before its window may have been evicted long ago. O(prompt) hashing.
  std::vector<BlockId> found;
  std::vector<uint64_t> chain;
  size_t run_start = 0;  // first block of the run of cached blocks ending at block i
  size_t best = 0;
  for (size_t i = 0; i < max_blocks; ++i) {
    h = i < prompt_hashes.size() ? prompt_hashes[i]
                                 : hash_split_block(h, prompt.subspan(i * bs, bs));
    const std::optional<BlockId> b = cache_.lookup(h);
    found.push_back(b.value_or(kNullBlock));
    chain.push_back(h);
    if (!b) {
      run_start = i + 1;
      continue;
    }
    if (int64_t(run_start) <= first_live_block(int64_t((i + 1) * bs))) best = i + 1;
  }
  const size_t first_live = size_t(first_live_block(int64_t(best * bs)));
  for (size_t i = 0; i < best; ++i) hits.push_back(i < first_live ? kNullBlock : found[i]);
  hashes.insert(hashes.end(), chain.begin(), chain.begin() + ptrdiff_t(best));
  return hits;
}

void KvManager::release_behind_window(BlockTable& t) {
  if (cfg_.sliding_window <= 0) return;
  num_window_freed_ += t.release_leading(size_t(first_live_block(t.num_computed_tokens())));
}

int64_t KvManager::num_cached_prefix_tokens(TokenSpan prompt,
                                            std::span<const uint64_t> prompt_hashes) const {
  std::vector<uint64_t> hashes;
  return static_cast<int64_t>(match_prefix(prompt, prompt_hashes, hashes).size()) * cfg_.block_size;
}

bool KvManager::can_admit(TokenSpan prompt, int64_t num_tokens,
                          std::span<const uint64_t> prompt_hashes) const {
  std::vector<uint64_t> hashes;
  const std::vector<BlockId> hits = match_prefix(prompt, prompt_hashes, hashes);
  const int64_t bs = cfg_.block_size;
  const int64_t total_blocks = (num_tokens + bs - 1) / bs;
  const int64_t num_new = std::max<int64_t>(0, total_blocks - static_cast<int64_t>(hits.size()));
  // Reviving an evictable cached block takes it out of the free queue too.
  int64_t num_revived = 0;
  for (BlockId b : hits) num_revived += b != kNullBlock && pool_.meta(b).ref_count == 0 ? 1 : 0;
  if (slots_ && window_slots_needed(hits, total_blocks) > slots_->num_allocatable_slots()) {
    return false;
  }
  return num_new + num_revived + cfg_.watermark_blocks <= pool_.num_allocatable_blocks();
}

bool KvManager::can_allocate(SeqId seq, int64_t num_new_tokens) const {
  const uint32_t need = table(seq).num_blocks_needed(num_new_tokens);
  if (slots_ && need > slots_->num_allocatable_slots()) return false;
  return need <= pool_.num_allocatable_blocks();
}

int64_t KvManager::add_sequence(SeqId seq, TokenSpan prompt,
                                std::span<const uint64_t> prompt_hashes) {
  CHECK(!tables_.contains(seq)) << "sequence " << index_of(seq) << " already exists";
  BlockTable& t = tables_.emplace(seq, BlockTable(cfg_.block_size)).first->second;
  if (!cfg_.enable_prefix_caching) return 0;
  std::vector<uint64_t> hashes;
  std::vector<BlockId> hits = match_prefix(prompt, prompt_hashes, hashes);
  // Hit blocks behind the window are holes: nothing to reference.
  const auto live =
      std::find_if(hits.begin(), hits.end(), [](BlockId b) { return b != kNullBlock; });
  pool_.touch(std::span<const BlockId>(live, hits.end()));
  if (slots_) {  // hit blocks inside the window of the first token to compute use their slots
    const size_t first = size_t(first_window_block(int64_t(hits.size()) * cfg_.block_size));
    for (size_t i = first; i < hits.size(); ++i) slots_->ref(hits[i]);
  }
  BlockLease lease(&pool_, std::move(hits));
  // Where the pool's chain ends, the swap tier may hold the next blocks.
  append_from_tier(prompt, prompt_hashes, lease.size(),
                   hashes.empty() ? kPrefixHashSeed : hashes.back(), lease, hashes);
  PrefixCacheCounters& c = cache_.counters();
  ++c.num_queries;
  c.num_query_tokens += prompt.size();
  c.num_query_blocks += prompt.empty() ? 0 : (prompt.size() - 1) / cfg_.block_size;
  c.num_hit_blocks += lease.size();
  c.num_hit_tokens += lease.size() * static_cast<uint64_t>(cfg_.block_size);
  t.append_cached(std::move(lease), hashes);
  // Blocks revived from the tier may have pushed earlier hits behind the window.
  release_behind_window(t);
  return t.num_computed_tokens();
}

AllocStatus KvManager::allocate_slots(SeqId seq, int64_t num_new_tokens) {
  BlockTable& t = table(seq);
  const uint32_t need = t.num_blocks_needed(num_new_tokens);
  if (slots_ && need > slots_->num_allocatable_slots()) return AllocStatus::kNoFreeBlocks;
  std::optional<BlockLease> lease = pool_.allocate(need);
  if (!lease) return AllocStatus::kNoFreeBlocks;
  if (slots_) acquire_window(lease->blocks());
  t.append(std::move(*lease), num_new_tokens);
  return AllocStatus::kOk;
}

void KvManager::truncate_slots(SeqId seq, int64_t num_tokens) {
  BlockTable& t = table(seq);
  if (slots_) {  // blocks past the computed tokens are inside the window
    const size_t keep = size_t((num_tokens + cfg_.block_size - 1) / cfg_.block_size);
    unref_window(t.blocks(), std::min(keep, t.num_blocks()), t.num_blocks());
  }
  t.truncate(num_tokens);
}

void KvManager::commit_computed(SeqId seq, TokenSpan tokens, int64_t num_computed,
                                std::span<const uint64_t> prompt_hashes) {
  BlockTable& t = table(seq);
  CHECK(num_computed >= t.num_computed_tokens())
      << "num_computed went back from " << t.num_computed_tokens() << " to " << num_computed;
  CHECK(static_cast<int64_t>(tokens.size()) >= num_computed)
      << tokens.size() << " tokens given for " << num_computed << " computed";
  const size_t window_from = size_t(first_window_block(t.num_computed_tokens()));
  t.set_num_computed(num_computed, step_);
  if (cfg_.enable_prefix_caching) {
    register_full_blocks(t, tokens.first(num_computed), prompt_hashes);
  }
  // After hashing: a hashed block behind the window keeps an evictable window slot.
  if (slots_) unref_window(t.blocks(), window_from, size_t(first_window_block(num_computed)));
  // After hashing: a block released behind the window stays cached for prefix hits.
  release_behind_window(t);
}

void KvManager::register_full_blocks(BlockTable& t, TokenSpan computed,
                                     std::span<const uint64_t> prompt_hashes) {
  const size_t first = t.num_hashed_blocks();
  std::vector<uint64_t> fresh;
  // Prompt blocks come from the caller's chain; only blocks past it (outputs) are hashed here.
  const size_t num_full = computed.size() / static_cast<size_t>(cfg_.block_size);
  size_t k0 = first;
  for (; k0 < num_full && k0 < prompt_hashes.size(); ++k0) fresh.push_back(prompt_hashes[k0]);
  hash_full_blocks(computed, cfg_.block_size, k0, k0 == first ? t.last_hash() : fresh.back(),
                   fresh);
  size_t run_start = 0, run_len = 0;  // blocks [first + run_start, +run_len) newly cached
  auto flush_run = [&] {
    if (run_len == 0) return;
    const size_t i = first + run_start;
    const size_t bs = static_cast<size_t>(cfg_.block_size);
    events_.stored(i == 0 ? std::nullopt : std::optional<uint64_t>(t.block_hashes()[i - 1]),
                   t.block_hashes().subspan(i, run_len), computed.subspan(i * bs, run_len * bs));
    run_len = 0;
  };
  for (size_t k = 0; k < fresh.size(); ++k) {
    const uint64_t h = fresh[k];
    const BlockId b = t.blocks()[first + k];
    t.push_hash(h);
    bool cached_now = false;
    // Holes are hashed before they become holes (here, or with their prefix hit); defensive.
    if (b != kNullBlock) {
      const BlockMeta& m = pool_.meta(b);
      if (m.has_hash) {
        CHECK(m.hash == h) << "block " << index_of(b) << " holds another prefix";
      } else if (cache_.insert(h, b)) {
        pool_.set_hash(b, h);
        cached_now = true;
      }  // else another block already caches this prefix; this one stays private
    }
    if (!cached_now) {
      flush_run();
    } else if (run_len++ == 0) {
      run_start = k;
    }
  }
  flush_run();
}

AllocStatus KvManager::fork(SeqId parent, SeqId child) {
  CHECK(!tables_.contains(child)) << "sequence " << index_of(child) << " already exists";
  const BlockTable& p = table(parent);
  // Fully computed blocks are never written again, so they can be shared; the rest (the
  // partial last block, or blocks reserved but not yet computed) would be, so they are copied.
  const size_t num_shared =
      std::min<size_t>(p.num_blocks(), static_cast<size_t>(p.num_computed_tokens() / block_size()));
  const uint32_t num_copies = static_cast<uint32_t>(p.num_blocks() - num_shared);
  if (slots_ && num_copies > slots_->num_allocatable_slots()) return AllocStatus::kNoFreeBlocks;
  std::optional<BlockLease> copies = pool_.allocate(num_copies);
  if (!copies) return AllocStatus::kNoFreeBlocks;
  if (slots_) {  // the child holds the same window as the parent: shared ones too
    acquire_window(copies->blocks());
    const size_t first = size_t(first_window_block(p.num_computed_tokens()));
    for (size_t i = first; i < num_shared; ++i) slots_->ref(p.blocks()[i]);
  }
  const std::span<const BlockId> pb = p.blocks();
  std::vector<BlockId> shared(pb.begin(), pb.begin() + static_cast<ptrdiff_t>(num_shared));
  // Window holes (all leading, all within the shared full blocks) stay holes in the child.
  CHECK(p.num_holes() <= num_shared) << "hole past the computed blocks";
  pool_.touch(std::span<const BlockId>(shared).subspan(p.num_holes()));
  if (storage_ != nullptr) {
    for (uint32_t k = 0; k < num_copies; ++k)
      storage_->copy_block(pb[num_shared + k], (*copies)[k]);
  }
  BlockTable c(cfg_.block_size);
  c.copy_counts_from(p);
  BlockLease lease(&pool_, std::move(shared));
  lease.append(std::move(*copies));
  c.append(std::move(lease), 0);
  tables_.emplace(child, std::move(c));
  return AllocStatus::kOk;
}

void KvManager::free_sequence(SeqId seq) {
  if (swapped_.contains(seq)) {
    forget_swapped(seq);
    return;
  }
  auto it = tables_.find(seq);
  CHECK(it != tables_.end()) << "free of unknown sequence " << index_of(seq);
  if (slots_) {
    const BlockTable& t = it->second;
    unref_window(t.blocks(), size_t(first_window_block(t.num_computed_tokens())), t.num_blocks());
  }
  it->second.clear();
  tables_.erase(it);
}

uint32_t KvManager::defragment(uint32_t max_moves) {
  // Plan with two cursors over the current states: lowest free id <- highest occupied id.
  // Every destination is below every later source, so the planned pairs never interfere.
  // Blocks reserved for an in-flight swap-in are written by the swap tier: they must not move.
  if (any_swap_in_in_flight()) return 0;
  std::vector<std::pair<uint32_t, uint32_t>> moves;  // (src, dst)
  const uint32_t n = pool_.num_blocks();
  uint32_t lo = 0, hi = n;
  while (moves.size() < max_moves) {
    while (lo < n && pool_.state(BlockId{lo}) != BlockState::kFree) ++lo;
    while (hi > lo + 1 && pool_.state(BlockId{hi - 1}) == BlockState::kFree) --hi;
    if (hi <= lo + 1) break;
    moves.emplace_back(hi - 1, lo);
    ++lo;
    --hi;
  }
  if (moves.empty()) return 0;
  std::unordered_map<uint32_t, uint32_t> remap;
  for (auto [src, dst] : moves) {
    const BlockMeta& m = pool_.meta(BlockId{src});
    if (storage_ != nullptr) storage_->copy_block(BlockId{src}, BlockId{dst});
    if (m.has_hash) cache_.rename(m.hash, BlockId{dst});
    if (m.ref_count > 0) remap.emplace(src, dst);
    pool_.move_block(BlockId{src}, BlockId{dst});
    if (slots_) slots_->move(BlockId{src}, BlockId{dst});  // the window rows stay in their slot
  }
  // One pass over all tables: O(table entries) per call, not per move.
  if (!remap.empty()) {
    for (auto& [seq, t] : tables_) {
      const std::span<const BlockId> blocks = t.blocks();
      for (size_t i = t.num_holes(); i < blocks.size(); ++i) {
        auto it = remap.find(index_of(blocks[i]));
        if (it != remap.end()) t.replace_block(i, BlockId{it->second});
      }
    }
  }
  return static_cast<uint32_t>(moves.size());
}

void KvManager::record_kv_events() {
  if (!events_.enabled()) events_.enable();
}

void KvManager::take_kv_events(std::vector<KvCacheEvent>& out) {
  events_.take(out);
}

void KvManager::advance_step() {
  ++step_;
  pool_.set_step(step_);
}

void KvManager::on_evict(BlockId b, uint64_t hash) {
  ++cache_.counters().num_evictions;
  events_.removed(hash);
  // Hybrid: a block's window rows may be gone while its full layers' stay; the tier would need
  // to know which, so evicted prefixes are simply not offloaded.
  if (slots_) {
    slots_->drop(b);
    return;
  }
  if (swap_ != nullptr) offload(b, hash);
}

// ---- inspection ----

std::vector<int32_t> KvManager::filled_slots() const {
  // A shared block is full for every holder, so the max over holders is its fill.
  std::vector<int32_t> filled(pool_.num_blocks(), 0);
  const int64_t bs = cfg_.block_size;
  for (const auto& [seq, t] : tables_) {
    const std::span<const BlockId> blocks = t.blocks();
    for (size_t i = t.num_holes(); i < blocks.size(); ++i) {
      const int64_t in_block = std::min<int64_t>(bs, t.num_tokens() - int64_t(i) * bs);
      int32_t& f = filled[index_of(blocks[i])];
      f = std::max(f, static_cast<int32_t>(in_block));
    }
  }
  return filled;
}

KvLayoutStats KvManager::stats() const {
  KvLayoutStats s;
  s.num_blocks = pool_.num_blocks();
  s.num_used_blocks = pool_.num_used_blocks();
  s.num_cached_blocks = pool_.num_cached_blocks();
  s.num_free_blocks = pool_.num_free_blocks();
  s.block_size = cfg_.block_size;
  s.num_token_slots = uint64_t(s.num_blocks) * uint64_t(s.block_size);
  const std::vector<int32_t> filled = filled_slots();
  std::vector<uint8_t> is_free(s.num_blocks, 0);
  for (uint32_t i = 0; i < s.num_blocks; ++i) {
    const BlockState st = pool_.state(BlockId{i});
    is_free[i] = st == BlockState::kFree ? 1 : 0;
    if (st == BlockState::kUsed) s.num_used_token_slots += static_cast<uint64_t>(filled[i]);
  }
  s.num_waste_slots = uint64_t(s.num_used_blocks) * uint64_t(s.block_size) - s.num_used_token_slots;
  const RunSummary runs = summarize_runs(is_free);
  s.largest_free_run = runs.largest_run;
  s.num_free_runs = runs.num_runs;
  s.num_seqs = static_cast<uint32_t>(tables_.size());
  for (const auto& [seq, t] : tables_) {
    const uint32_t r = t.num_runs();
    s.total_runs += r;
    s.max_runs_per_seq = std::max(s.max_runs_per_seq, r);
  }
  return s;
}

std::vector<BlockRecord> KvManager::block_map() const {
  const uint32_t n = pool_.num_blocks();
  const std::vector<int32_t> filled = filled_slots();
  std::vector<BlockRecord> map(n);
  for (uint32_t i = 0; i < n; ++i) {
    const BlockMeta& m = pool_.meta(BlockId{i});
    BlockRecord& r = map[i];
    r.block_id = BlockId{i};
    r.state = pool_.state(BlockId{i});
    r.ref_count = m.ref_count;
    r.num_tokens = r.state == BlockState::kCached ? cfg_.block_size : filled[i];
    r.alloc_step = m.alloc_step;
    r.last_access_step = m.last_access_step;
    if (m.has_hash) r.block_hash = m.hash;
  }
  // Holders: the owner is the lowest SeqId (deterministic); access is the last commit.
  for (const auto& [seq, t] : tables_) {
    for (BlockId b : t.blocks().subspan(t.num_holes())) {
      BlockRecord& r = map[index_of(b)];
      if (!r.owner || index_of(seq) < index_of(*r.owner)) r.owner = seq;
      r.last_access_step = std::max(r.last_access_step, t.last_commit_step());
    }
  }
  return map;
}

void KvManager::check_invariants() const {
  pool_.check_invariants();
  const uint32_t n = pool_.num_blocks();
  const int64_t bs = cfg_.block_size;
  std::vector<int32_t> refs(n, 0);
  std::vector<uint64_t> last_table(n, 0);  // 1-based table ordinal that last named the block
  uint64_t ordinal = 0;
  for (const auto& [seq, t] : tables_) {
    ++ordinal;
    CHECK(int64_t(t.num_blocks()) == (t.num_tokens() + bs - 1) / bs)
        << "seq " << index_of(seq) << ": " << t.num_blocks() << " blocks for " << t.num_tokens()
        << " tokens";
    CHECK(t.num_computed_tokens() <= t.num_tokens()) << "seq " << index_of(seq);
    CHECK(int64_t(t.num_hashed_blocks()) <= t.num_computed_tokens() / bs)
        << "seq " << index_of(seq) << " hashed past computed";
    CHECK(int64_t(t.num_holes()) == first_live_block(t.num_computed_tokens()))
        << "seq " << index_of(seq) << ": " << t.num_holes() << " holes, "
        << first_live_block(t.num_computed_tokens()) << " blocks behind the window";
    const std::span<const BlockId> blocks = t.blocks();
    for (size_t i = 0; i < blocks.size(); ++i) {
      CHECK((blocks[i] == kNullBlock) == (i < t.num_holes()))
          << "seq " << index_of(seq) << " block " << i << " hole out of place";
      if (i < t.num_holes()) continue;
      const uint32_t b = index_of(blocks[i]);
      CHECK(b < n) << "seq " << index_of(seq) << " names invalid block " << b;
      CHECK(last_table[b] != ordinal)
          << "seq " << index_of(seq) << " names block " << b << " twice";
      last_table[b] = ordinal;
      ++refs[b];
      const BlockMeta& m = pool_.meta(blocks[i]);
      if (m.has_hash && i < t.num_hashed_blocks()) {
        CHECK(m.hash == t.block_hashes()[i])
            << "seq " << index_of(seq) << " block " << b << " hash differs from the table's chain";
      }
    }
  }
  for (const auto& [seq, s] : swapped_) {  // blocks reserved by in-flight swap-ins
    if (!s.lease) continue;
    for (BlockId b : s.lease->blocks()) ++refs[index_of(b)];
    if (s.next_block) ++refs[index_of((*s.next_block)[0])];
  }
  size_t num_hashed = 0;
  for (uint32_t b = 0; b < n; ++b) {
    const BlockMeta& m = pool_.meta(BlockId{b});
    CHECK(refs[b] == m.ref_count) << "block " << b << " ref_count " << m.ref_count << " but "
                                  << refs[b] << " table entries";
    if (m.has_hash) {
      ++num_hashed;
      const std::optional<BlockId> c = cache_.lookup(m.hash);
      CHECK(c && *c == BlockId{b}) << "hashed block " << b << " missing from the prefix cache";
    }
  }
  if (slots_) check_window_invariants();
  CHECK(num_hashed == cache_.size())
      << cache_.size() << " cache entries, " << num_hashed << " hashed blocks";
  if (swap_ != nullptr) {
    swap_->check_invariants();
    CHECK(swap_->counters().num_slots_used == num_held_slots())
        << "swap tier uses " << swap_->counters().num_slots_used << " slots, manager holds "
        << num_held_slots();
    CHECK(offload_lru_.size() == offloaded_.size()) << "offload LRU out of step";
    CHECK(in_results_.empty()) << "unclaimed swap_in results";
  }
  // Shared blocks are never written again: each holder has them fully computed.
  for (const auto& [seq, t] : tables_) {
    const std::span<const BlockId> blocks = t.blocks();
    for (size_t i = t.num_holes(); i < blocks.size(); ++i) {
      if (pool_.meta(blocks[i]).ref_count < 2) continue;
      CHECK(int64_t(i + 1) * bs <= t.num_computed_tokens())
          << "shared block " << index_of(blocks[i]) << " not fully computed in seq "
          << index_of(seq);
    }
  }
}

}  // namespace kvw
