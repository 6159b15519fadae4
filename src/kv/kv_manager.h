// kv/kv_manager.h: the facade the scheduler and engine call to manage KV memory: per-sequence
// block tables over one BlockPool, prefix caching, fork with copy-on-write, a bounded-work
// defragmenter, layout statistics and the block map.
// Owner: the engine thread only (not thread-safe, no locks). Works with block ids and token
// counts only (never includes model/ or kernels/); the bytes are reached through KvStorage,
// which is nullptr in simulation (kvsim): then no bytes are copied, everything else is the same.
//
// Life of a sequence (vLLM vocabulary):
//   n0 = add_sequence(s, prompt)          // prefix hit: n0 tokens already computed
//   allocate_slots(s, chunk)              // room for `chunk` more tokens, all-or-nothing
//   ... forward writes KV of positions [n0, n0 + chunk) through block_table(s) ...
//   commit_computed(s, tokens, n0 + chunk) // newly full blocks are hashed and cached
//   allocate_slots(s, 1) / commit_computed(...) per decoded token
//   free_sequence(s)                      // hashed blocks stay cached (LRU) until evicted
//
// Sliding window (KvManagerConfig::sliding_window = w > 0, every layer windowed): the token at
// position p attends to positions [p + 1 - w, p] only. Once n tokens are computed, no token
// still to compute reads a position below n + 1 - w, so commit_computed releases every block
// wholly below it; its table entry becomes a hole (BlockTable) and positions stay absolute:
//
//   w = 40, block_size 16, n = 90: positions < 51 are dead -> blocks 0, 1 (0..31) released,
//   block 2 (32..47) too, block 3 (48..63) holds 51..63 and stays.
//   [hole][hole][hole][ b7 ][ b2 ][ b4 (90 -> partial) ]
//
// A decoding sequence therefore never holds more than max_window_blocks() blocks, and a prompt
// longer than the pool is prefilled in chunks that fit. Released blocks keep their prefix-cache
// registration: a block's KV is a function of the tokens from position 0 to its end (the chain
// hash names exactly those), so it stays valid for any sequence with the same prefix; it just
// becomes evictable (LRU) like the blocks of a finished sequence. A prefix hit needs only the
// hit blocks inside the window of the first token to compute; earlier ones become holes (they
// need not even be cached any more, see match_prefix).
//
// Hybrid window (KvManagerConfig::hybrid_window = w > 0: gemma2/3, gpt-oss, where some layers
// attend to the last w positions and the others to all): a block keeps its full layers' KV for
// the sequence's life as above, while its window layers' KV sits in a window slot
// (kv/window_slots.h) that the sequence gives back once the block falls wholly behind the window
// (the same bound as above: blocks [0, first_window_block(n)) with n computed tokens). The pool
// holds num_window_slots slots, sized by the planner for the sequences the scheduler can run at
// once, so the window layers cost ~max_num_seqs x ceil(w / bs) blocks instead of the whole pool.
// The scheduler sees block ids only; allocation, admission and fork check both resources. A
// prefix hit of k blocks needs blocks [first_window_block(k * bs), k) to still have their window
// rows (hashed blocks keep an evictable slot until a new block needs it); the swap tier keeps
// the window rows of the blocks inside the window; evicted prefixes are not offloaded.
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/ids.h"
#include "core/status.h"
#include "core/token_span.h"
#include "kv/block_pool.h"
#include "kv/block_table.h"
#include "kv/kv_events.h"
#include "kv/kv_storage.h"
#include "kv/layout_stats.h"
#include "kv/prefix_cache.h"
#include "kv/swap_space.h"
#include "kv/window_slots.h"

namespace kvw {

struct KvManagerConfig {
  uint32_t num_blocks = 0;            // blocks in the pool (the arena's, when there is one)
  int32_t block_size = 16;            // tokens per block, 8..32 (powers of two not required)
  bool enable_prefix_caching = true;  // hash full blocks and reuse cached prefixes
  uint32_t watermark_blocks = 0;      // can_admit() keeps this many blocks spare for running
                                      // sequences, so admissions do not cause preemptions
  // Tokens every layer attends back to (the model's attention.sliding_window), so blocks that
  // fall wholly behind it are released as sequences advance. 0: full attention, keep every
  // block (also how a windowed model runs without freeing, e.g. to compare).
  int32_t sliding_window = 0;
  // Hybrid models: the window of the windowed layers while other layers attend to every position
  // (0: none); their KV lives in num_window_slots window slots (see the header comment).
  int32_t hybrid_window = 0;
  uint32_t num_window_slots = 0;
  Status validate() const;
};

enum class AllocStatus { kOk, kNoFreeBlocks };
// kLost: a disk error lost a swapped sequence's data; it is gone and must be recomputed.
// kPending: the read-back is under way (its blocks are reserved); ask again next step.
enum class SwapInStatus { kOk, kNoFreeBlocks, kLost, kPending };

class KvManager {
 public:
  // CHECKs cfg.validate() and, with storage, that storage->num_blocks() >= cfg.num_blocks.
  KvManager(const KvManagerConfig& cfg, KvStorage* storage);
  KvManager(const KvManager&) = delete;
  KvManager& operator=(const KvManager&) = delete;

  const KvManagerConfig& config() const { return cfg_; }
  int32_t block_size() const { return cfg_.block_size; }
  uint32_t num_blocks() const { return pool_.num_blocks(); }
  // Blocks an allocation can take now (free + evictable cached).
  uint32_t num_allocatable_blocks() const { return pool_.num_allocatable_blocks(); }
  // Sliding window: blocks released because they fell behind the window (cumulative).
  uint64_t num_window_freed_blocks() const { return num_window_freed_; }

  // Sliding window: blocks [0, first_live_block(n)) of a sequence with n computed tokens lie
  // wholly below position n + 1 - w, so they are released: floor(max(0, n + 1 - w) / bs).
  // 0 without a window.
  int64_t first_live_block(int64_t num_computed) const;
  // Most blocks a sequence holds while it decodes under the window: the w positions
  // [p + 1 - w, p] touch at most ceil((w + bs - 1) / bs) blocks (w tokens starting at the last
  // slot of a block). 0 without a window. A prefill chunk of c tokens holds the blocks of
  // w - 1 + c positions instead. planner::engine_blocks_per_seq uses the same bound.
  uint32_t max_window_blocks() const;

  // Hybrid window: blocks [0, first_window_block(n)) of a sequence with n computed tokens hold no
  // window slot: floor(max(0, n + 1 - w) / bs). 0 without a hybrid window.
  int64_t first_window_block(int64_t num_computed) const;
  bool has_window_slots() const { return slots_ != nullptr; }
  uint32_t num_window_slots() const { return slots_ ? slots_->num_slots() : 0; }
  // Window slots held by sequences (refs > 0); evictable cached ones not counted.
  uint32_t num_used_window_slots() const;
  // The window layers' table of `seq`: slot of each logical block, kNoWindowSlot behind the
  // window. Written into `out` (resized to the block table's size).
  void window_block_table(SeqId seq, std::vector<uint32_t>& out) const;
  const WindowSlots* window_slots() const { return slots_.get(); }

  // ---- planning (const, no side effects, no counters) ----
  //
  // `prompt_hashes`, where a function takes it, is the chain of the prompt's full blocks
  // (hash_full_blocks from kPrefixHashSeed), computed once per request by its caller so that
  // admission checks, add_sequence and commit_computed never hash the prompt again; empty: each
  // call hashes what it needs.

  // Tokens of `prompt` a new sequence would find cached: whole blocks, at most
  // prompt.size() - 1 (the last prompt token is always computed, to produce logits).
  // Pool only: blocks the swap tier could revive are counted as blocks to compute, which is
  // also what they cost in free blocks.
  int64_t num_cached_prefix_tokens(TokenSpan prompt,
                                   std::span<const uint64_t> prompt_hashes = {}) const;
  // Would add_sequence(prompt) + allocate_slots to `num_tokens` slots in total succeed while
  // leaving watermark_blocks allocatable? Counts that reviving a cached prefix block takes it
  // out of the free queue (only hit blocks inside the window are revived).
  // num_tokens >= num_cached_prefix_tokens(prompt).
  bool can_admit(TokenSpan prompt, int64_t num_tokens,
                 std::span<const uint64_t> prompt_hashes = {}) const;
  // Would allocate_slots(seq, num_new_tokens) succeed? (no watermark: running sequences may
  // use the spare blocks).
  bool can_allocate(SeqId seq, int64_t num_new_tokens) const;
  // Blocks allocate_slots(seq, num_new_tokens) would take.
  uint32_t num_blocks_needed(SeqId seq, int64_t num_new_tokens) const {
    return table(seq).num_blocks_needed(num_new_tokens);
  }

  // ---- state changes ----

  // Starts a sequence (CHECKs the id is new). Takes references on the longest cached
  // full-block prefix of `prompt` (always leaving >= 1 token to compute) and returns the
  // number of tokens already computed (a multiple of block_size). No slots beyond those.
  int64_t add_sequence(SeqId seq, TokenSpan prompt, std::span<const uint64_t> prompt_hashes = {});

  // Reserves slots for num_new_tokens more tokens, allocating blocks as needed; the free queue
  // evicts unreferenced cached blocks (LRU) when no free block is left. All-or-nothing: on
  // kNoFreeBlocks nothing changed.
  //   before: [b4 full][b1 5/16]             num_tokens = 21
  //   allocate_slots(s, 20) -> [b4][b1 16/16][b8 9/16]  num_tokens = 41 (one new block)
  AllocStatus allocate_slots(SeqId seq, int64_t num_new_tokens);

  // Tokens [0, num_computed) of the sequence now hold valid KV (num_computed <= num_tokens,
  // tokens.size() >= num_computed; tokens = the sequence's token ids from position 0). Blocks
  // that became full are chain-hashed and registered in the prefix cache (unless another
  // block already caches that prefix). Then, with a sliding window, blocks that fell wholly
  // behind it are released (a shared one just loses this sequence's reference; a hashed one
  // stays cached until evicted).
  void commit_computed(SeqId seq, TokenSpan tokens, int64_t num_computed,
                       std::span<const uint64_t> prompt_hashes = {});

  // Gives back reserved, uncomputed slots: the sequence's slot count becomes num_tokens
  // (num_computed <= num_tokens <= current count) and blocks wholly beyond it are freed, last
  // first, to the head of the free queue (they were never hashed, so nothing beyond the
  // computed tokens can reach the prefix cache). Speculative decoding rolls back the slots of
  // rejected drafts with it:
  //   slots [0, 37) for 1 + 4 drafts at 32, 1 accepted -> truncate_slots(s, 34): block 2
  //   (32..47) keeps 34..36's stale KV (overwritten before it is computed), nothing freed;
  //   slots [0, 50), truncate_slots(s, 46) -> block 3 (48..63) is freed.
  void truncate_slots(SeqId seq, int64_t num_tokens);

  // n > 1 sampling: `child` (new id) shares the parent's fully computed blocks (ref_count++)
  // and gets private copies of the rest (the partial last block): KvStorage::copy_block when
  // storage != nullptr. Counts, hashes and window holes are copied. kNoFreeBlocks: nothing
  // changed.
  AllocStatus fork(SeqId parent, SeqId child);

  // Ends a sequence (resident or swapped): its blocks are freed last block first. Hashed blocks
  // stay cached (queue tail, LRU) until evicted; unhashed ones go to the queue head for immediate
  // reuse.
  void free_sequence(SeqId seq);

  // Defragmenter: moves at most max_moves occupied (used or cached) blocks from the highest
  // ids into the lowest free ids, so free blocks gather into one run at the top. Copies bytes
  // with KvStorage::copy_block (when storage != nullptr) and rewrites block tables and prefix
  // cache entries, so the next forward reads consistent data (window holes stay holes).
  // Returns the moves done (0 when already compact).
  uint32_t defragment(uint32_t max_moves);

  // KV cache events (kv/kv_events.h): from this call on, every prefix cache registration and
  // eviction is recorded (starting with AllBlocksCleared) until take_kv_events moves it out.
  // Off by default: kvsim and tests that never take them record nothing.
  void record_kv_events();
  void take_kv_events(std::vector<KvCacheEvent>& out);

  // The engine advances this once per step; it stamps allocation and access times.
  void advance_step();
  uint64_t step() const { return step_; }

  // ---- swap tier (optional; needs storage) ----

  // Attaches the second tier (CHECKs storage != nullptr). From then on: cached prefix blocks
  // evicted from the pool are offloaded to it (when a slot and in-flight room are free; the
  // oldest offloaded prefix makes room), a prefix miss that the tier holds is brought back by
  // add_sequence (allocate + read, counted as num_swap_hits) instead of recomputed, and
  // preempted sequences can be swapped out and in.
  void attach_swap(std::unique_ptr<SwapSpace> swap);
  bool has_swap() const { return swap_ != nullptr; }
  // Preemption by swapping: copies the computed blocks of `seq` to the tier and frees them (the
  // bytes are staged before this returns; the disk writes finish asynchronously). Only live
  // blocks are copied (window holes stay holes after swap_in). Reserved but
  // uncomputed slots are dropped: after swap_in, num_tokens == num_computed_tokens. Returns
  // false, with nothing changed, when the tier lacks room; the caller then frees the sequence
  // and recomputes it later.
  // `tokens`: the sequence's token ids from position 0 (at least its hashed blocks' tokens);
  // needed only while KV events are recorded, for the BlockStored events of swap_in.
  bool swap_out(SeqId seq, TokenSpan tokens = {});
  // Brings a swapped sequence back without blocking: the first call allocates its blocks
  // (all-or-nothing; kNoFreeBlocks: nothing changed) and submits the reads (after the
  // sequence's own swap-out writes have finished); later calls submit what the in-flight bound
  // held back and return kPending until every read is applied. kOk: resident again with the same
  // counts and hashes. kLost: a disk error lost data; the sequence is forgotten (add_sequence
  // again). The engine calls this once per step, so a long read-back never stalls the decode
  // steps of other sequences. reserve_next_token: also hold the block the next token needs (when
  // the computed tokens fill their last block), released at kOk for allocate_slots(seq, 1).
  SwapInStatus poll_swap_in(SeqId seq, bool reserve_next_token);
  // The same, waiting for the reads (tests and tools; the scheduler uses poll_swap_in).
  SwapInStatus swap_in(SeqId seq);
  bool is_swapping_in(SeqId seq) const;
  // Drops a read-back in flight (waits for the reads already submitted, frees the reserved
  // blocks); the data stays in the tier and a later poll_swap_in starts over.
  void cancel_swap_in(SeqId seq);
  bool is_swapped(SeqId seq) const { return swapped_.contains(seq); }
  // Applies finished swap copies (a failed write marks its swapped sequence lost, or drops the
  // offloaded prefix). Call once per step; never blocks.
  void poll_swap();
  const SwapSpace* swap_space() const { return swap_.get(); }

  // ---- queries ----

  bool has_sequence(SeqId seq) const { return tables_.contains(seq); }
  size_t num_sequences() const { return tables_.size(); }
  // Logical block i holds positions [i * block_size, (i + 1) * block_size). Under a sliding
  // window the first first_live_block(num_computed) entries are kNullBlock (released): they lie
  // wholly below position num_computed + 1 - w, which no token still to compute attends to.
  std::span<const BlockId> block_table(SeqId seq) const { return table(seq).blocks(); }
  // Blocks the sequence holds a reference on (window holes not counted).
  size_t num_live_blocks(SeqId seq) const { return table(seq).num_live_blocks(); }
  int64_t num_tokens(SeqId seq) const { return table(seq).num_tokens(); }
  int64_t num_computed_tokens(SeqId seq) const { return table(seq).num_computed_tokens(); }

  KvLayoutStats stats() const;                 // section 4 figures, O(blocks + table entries)
  std::vector<BlockRecord> block_map() const;  // [num_blocks], index == block id
  PrefixCacheCounters prefix_counters() const { return cache_.counters(); }
  const BlockPool& pool() const { return pool_; }

  // CHECKs (O(blocks + table entries)): pool invariants; every block's ref_count equals the
  // number of table entries naming it; no table names a block twice; shared blocks are full
  // and computed; table sizes match token counts; cache entries and block hashes agree; a
  // table's holes are exactly its blocks behind the window (first_live_block).
  void check_invariants() const;

 private:
  const BlockTable& table(SeqId seq) const;
  BlockTable& table(SeqId seq);
  // Longest cached prefix of `prompt` (block ids; hashes appended to `hashes`). With a window,
  // a hit of k blocks needs only blocks [first_live_block(k * bs), k) cached; the entries
  // before are kNullBlock (holes), whether or not the pool still caches them.
  std::vector<BlockId> match_prefix(TokenSpan prompt, std::span<const uint64_t> prompt_hashes,
                                    std::vector<uint64_t>& hashes) const;
  // Releases the blocks of `t` behind the window (commit, prefix hit, swap tier revival).
  void release_behind_window(BlockTable& t);
  // Hybrid window (kv_hybrid.cc). match_prefix's rule for window slots.
  std::vector<BlockId> match_prefix_hybrid(TokenSpan prompt,
                                           std::span<const uint64_t> prompt_hashes,
                                           std::vector<uint64_t>& hashes) const;
  // Releases the window refs of blocks [from, to) of `blocks` (hashed ones keep an evictable slot).
  void unref_window(std::span<const BlockId> blocks, size_t from, size_t to);
  // Slots for `blocks` (new, slotless): CHECKs they are allocatable (callers checked).
  void acquire_window(std::span<const BlockId> blocks);
  // Window slots an admission takes: new blocks plus evictable slots the hit revives.
  int64_t window_slots_needed(std::span<const BlockId> hits, int64_t total_blocks) const;
  void check_window_invariants() const;
  // Chain-hashes the newly full blocks of `computed` and registers them in the prefix cache.
  void register_full_blocks(BlockTable& t, TokenSpan computed,
                            std::span<const uint64_t> prompt_hashes);
  void on_evict(BlockId b, uint64_t hash);
  std::vector<int32_t> filled_slots() const;  // [num_blocks] token slots filled per block

  // Swap tier bookkeeping (kv_swap.cc).
  struct SwappedSeq {
    std::vector<SwapSlot> slots;  // [live blocks]; kReleasedSlot once a failed write released it
    std::vector<uint64_t> hashes;
    // [hashes.size() * block_size] the hashed blocks' tokens, only while events are recorded.
    std::vector<int32_t> hashed_tokens;
    size_t num_holes = 0;  // leading window holes: slots[k] is logical block num_holes + k
    int64_t num_computed = 0;
    bool lost = false;         // a write failed: the data cannot come back
    uint32_t writes_left = 0;  // swap_out copies still in flight
    // Read-back (poll_swap_in): the destination blocks, reads submitted and applied so far.
    std::optional<BlockLease> lease;
    // poll_swap_in(reserve_next_token): the next token's block, held from admission so that
    // sequences decoding meanwhile cannot take it, released at install.
    std::optional<BlockLease> next_block;
    uint32_t reads_submitted = 0;
    uint32_t reads_done = 0;
    bool read_failed = false;
  };
  struct Offloaded {
    SwapSlot slot{0};
    SwapTicket write{0};  // the swap_out copy; 0 once it finished
    std::list<uint64_t>::iterator lru;
  };
  enum class PendingKind { kSeqOut, kPrefixOut, kIn, kSeqIn };
  struct Pending {
    PendingKind kind;
    SeqId seq{0};
    uint64_t hash = 0;
  };
  void offload(BlockId b, uint64_t hash);
  bool drop_oldest_offload();
  void append_from_tier(TokenSpan prompt, std::span<const uint64_t> prompt_hashes,
                        size_t first_block, uint64_t parent, BlockLease& lease,
                        std::vector<uint64_t>& hashes);
  bool wait_oldest();
  Status wait_ticket(SwapTicket t);
  void handle(const SwapCompletion& c);
  void forget_swapped(SeqId seq);
  void wait_seq_copies(SeqId seq, bool include_writes);  // blocks until they are handled
  SwapInStatus install_swapped(std::unordered_map<SeqId, SwappedSeq>::iterator it);
  bool any_swap_in_in_flight() const;
  // Hybrid: gives back the window slots of an in-flight swap-in's blocks (cancel, forget).
  void release_swap_in_window(SwappedSeq& s);
  size_t num_held_slots() const;

  std::unique_ptr<SwapSpace> swap_;
  std::map<uint64_t, Pending> pending_;              // ticket -> what it was for (oldest first)
  std::unordered_map<uint64_t, Status> in_results_;  // finished swap_in tickets not yet taken
  std::unordered_map<SeqId, SwappedSeq> swapped_;
  std::unordered_map<uint64_t, Offloaded> offloaded_;  // prefix hash -> slot
  std::list<uint64_t> offload_lru_;                    // offloaded hashes, oldest first

  KvManagerConfig cfg_;
  KvStorage* storage_;  // not owned; nullptr in simulation
  PrefixCache cache_;
  KvEventLog events_;
  BlockPool pool_;
  std::unordered_map<SeqId, BlockTable> tables_;
  uint64_t step_ = 0;
  uint64_t num_window_freed_ = 0;
  std::unique_ptr<WindowSlots> slots_;  // hybrid window only
};

}  // namespace kvw
