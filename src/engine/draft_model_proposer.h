// engine/draft_model_proposer.h: speculative drafts from a second, smaller model with the
// target's vocabulary (--draft-model). The Scheduler calls propose() for the step's speculating
// decodes; the draft model runs once per drafted position for all of them (batched), drafting
// greedily (its argmax), so the target's acceptance test in sample_job stays exact: a
// deterministic draft is a point mass q, for which Leviathan et al.'s rule is "keep d iff the
// target's own sample equals d".
// Owner: the engine (engine thread only). Memory: the draft's weights, workspace, logit rows and
// KV pool are planned at start-up (planner::BudgetTable's draft rows) and allocated once; the
// per-sequence state is a fixed-size record per live sequence (<= max_num_seqs).
//
// Draft KV of one sequence, positions:  [0 ........ num_computed)  [fed drafts]
//   Before proposing, the fed drafts the target did not accept are rolled back (their slots
//   truncated), then the draft catches up on the tokens it has not seen (the target's prefill
//   chunks are offered as they are computed; after a prefix hit, preemption or a short draft pool
//   the rest; at most the workspace's tokens per step) and drafts.
#pragma once

#include <array>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "gguf/gguf_file.h"
#include "kv/kv_arena.h"
#include "kv/kv_manager.h"
#include "model/model.h"
#include "sched/draft_proposer.h"
#include "sched/spec_config.h"

namespace kvw {

struct DraftModelOptions {
  ModelOptions model;       // threads, workspace tokens (max_batch_tokens), rope
  uint32_t num_blocks = 0;  // the draft's KV pool: as many blocks as the target's
  int32_t block_size = 16;  // the target's
  KvDtype kv_dtype = KvDtype::kF16;
  int32_t max_seqs = 16;  // SpecConfig::max_seqs: sequences drafted per step (logit rows)
  // Tests only (fault injection): called before each draft pass once per sequence in it; what
  // it throws is a fault in the draft's forward pass.
  std::function<void(SeqId)> fault_hook;
};

// Errors unless `draft` spells every token id as `target` does ("vocabularies differ", naming
// both files and the first differing id).
Status check_same_vocabulary(const GgufFile& target, const GgufFile& draft);

class DraftModelProposer : public DraftProposer {
 public:
  static Result<std::unique_ptr<DraftModelProposer>> create(std::unique_ptr<GgufFile> file,
                                                            const DraftModelOptions& opt);
  // The same with the file's hyper-parameters already read (the engine planned with them).
  static Result<std::unique_ptr<DraftModelProposer>> create(std::unique_ptr<GgufFile> file,
                                                            ModelHParams hp,
                                                            const DraftModelOptions& opt);
  // Never throws: an exception in the draft's pass (its kernel threads included) or its
  // bookkeeping costs this call's drafts only. Every slot gets none (the step decodes plainly)
  // and their draft state is dropped (the draft catches up from their tokens next time).
  void propose(std::span<DraftSlot> slots) override;
  void release(SeqId seq) override;

  const Model& model() const { return *model_; }
  uint64_t kv_pool_bytes() const { return arena_->bytes(); }
  uint64_t logits_bytes() const { return logits_.size() * sizeof(float); }
  // The catch-up buffer, sized at creation (planner::BudgetTable::draft_catch_up_bytes).
  uint64_t catch_up_bytes() const { return catch_up_tokens_.capacity() * sizeof(int32_t); }
  size_t num_sequences() const { return seqs_.size(); }
  uint64_t num_faults() const { return num_faults_; }  // propose() calls that caught a fault
  const KvManager& kv_manager() const { return *kv_; }

 private:
  struct SeqState {
    int64_t num_computed = 0;  // draft KV valid for positions [0, num_computed)
    int64_t fed_from = 0;      // position of fed[0]: drafts fed to the draft, unverified
    int32_t num_fed = 0;
    std::array<int32_t, kMaxSpecDraftTokens> fed{};
  };
  struct Job {  // one slot in this call
    DraftSlot* slot;
    SeqState* state;
    bool drafting;  // false: only catching up this step
  };
  DraftModelProposer() = default;
  void propose_or_throw(std::span<DraftSlot> slots);
  // After a fault: no drafts for any slot, and their draft KV (maybe half written) is dropped.
  void drop_after_fault(std::span<DraftSlot> slots, const std::exception& e) noexcept;
  // Keeps the fed drafts that `tokens` confirms; truncates the rest of the draft's KV.
  void roll_back(SeqId seq, TokenSpan tokens, SeqState& st);
  // Plans one slot's catch-up within `budget` tokens and allocates its slots; false: skip it.
  bool plan_catch_up(DraftSlot& slot, SeqState& st, int64_t& budget);
  bool forward_and_pick(std::span<Job> jobs);  // one batched pass; false on a model error
  int32_t argmax(int64_t row) const;

  std::unique_ptr<Model> model_;
  std::unique_ptr<KvArena> arena_;  // [num_blocks] blocks of the draft's KV, allocated once
  std::unique_ptr<KvManager> kv_;   // no prefix caching: block tables only
  std::unordered_map<SeqId, SeqState> seqs_;
  std::vector<float> logits_;          // [max_seqs][n_vocab] f32
  std::vector<SeqInput> inputs_;       // per pass, reused
  std::vector<Job> jobs_;              // per call, reused
  std::vector<int32_t> round_tokens_;  // [max_seqs] the token each drafting slot feeds
  // [max_batch_tokens] catch-up chunks that run across a shared prompt's end, copied; per call
  std::vector<int32_t> catch_up_tokens_;
  size_t num_catch_up_copied_ = 0;
  std::function<void(SeqId)> fault_hook_;  // DraftModelOptions::fault_hook
  uint64_t num_faults_ = 0;
};

}  // namespace kvw
