// Draft-model speculation: roll back, catch up, then one batched greedy pass per drafted
// position (see draft_model_proposer.h).
#include "engine/draft_model_proposer.h"

#include <algorithm>

#include "core/check.h"
#include "core/log.h"

namespace kvw {

Status check_same_vocabulary(const GgufFile& target, const GgufFile& draft) {
  auto t = target.get_string_array("tokenizer.ggml.tokens");
  auto d = draft.get_string_array("tokenizer.ggml.tokens");
  const std::string both = " (--model " + target.path() + ", --draft-model " + draft.path() + ")";
  if (!t.ok() || !d.ok()) {
    return Error{"--draft-model: cannot compare vocabularies" + both + ": " +
                 (t.ok() ? d.message() : t.message())};
  }
  if (t->size() != d->size()) {
    return Error{"--draft-model: vocabularies differ" + both + ": " + std::to_string(t->size()) +
                 " vs " + std::to_string(d->size()) + " tokens"};
  }
  for (size_t i = 0; i < t->size(); ++i) {
    if ((*t)[i] != (*d)[i]) {
      return Error{"--draft-model: vocabularies differ" + both + ": token " + std::to_string(i) +
                   " is '" + (*t)[i] + "' vs '" + (*d)[i] + "'"};
    }
  }
  return Status::ok_status();
}

Result<std::unique_ptr<DraftModelProposer>> DraftModelProposer::create(
    std::unique_ptr<GgufFile> file, const DraftModelOptions& opt) {
  auto hp = hparams_from_gguf(*file);
  if (!hp.ok()) return Error{"--draft-model: " + hp.message()};
  return create(std::move(file), std::move(*hp), opt);
}

Result<std::unique_ptr<DraftModelProposer>> DraftModelProposer::create(
    std::unique_ptr<GgufFile> file, ModelHParams hp, const DraftModelOptions& opt) {
  auto model = Model::load(std::move(file), std::move(hp), opt.model);
  if (!model.ok()) return Error{"--draft-model: " + model.message()};
  std::unique_ptr<DraftModelProposer> p(new DraftModelProposer());
  p->model_ = std::move(*model);
  if (p->model_->hparams().kv_window() > 0) {
    return Error{"--draft-model: sliding-window models cannot draft yet"};
  }
  p->arena_ =
      std::make_unique<KvArena>(p->model_->kv_config(opt.num_blocks, opt.block_size, opt.kv_dtype));
  KvManagerConfig kc{.num_blocks = opt.num_blocks,
                     .block_size = opt.block_size,
                     .enable_prefix_caching = false,
                     .watermark_blocks = 0,
                     .sliding_window = 0};
  KVW_RETURN_IF_ERROR(kc.validate());
  p->kv_ = std::make_unique<KvManager>(kc, p->arena_.get());
  const auto rows = static_cast<size_t>(opt.max_seqs);
  p->logits_.resize(rows * static_cast<size_t>(p->model_->hparams().n_vocab));
  p->inputs_.reserve(rows);
  p->jobs_.reserve(rows);
  p->round_tokens_.resize(rows);
  // Catch-up chunks of one call total at most the workspace's tokens (propose's budget).
  p->catch_up_tokens_.resize(static_cast<size_t>(p->model_->max_batch_tokens()));
  p->seqs_.reserve(rows);
  p->fault_hook_ = opt.fault_hook;
  return p;
}

void DraftModelProposer::release(SeqId seq) {
  if (seqs_.erase(seq) > 0) kv_->free_sequence(seq);
}

void DraftModelProposer::roll_back(SeqId seq, TokenSpan tokens, SeqState& st) {
  int64_t valid = st.fed_from;
  for (int32_t i = 0; i < st.num_fed; ++i, ++valid) {
    const auto p = static_cast<size_t>(st.fed_from + i);
    if (p >= tokens.size() || tokens[p] != st.fed[static_cast<size_t>(i)]) break;
  }
  if (st.num_fed == 0) valid = st.num_computed;
  // The last token is always fed again: its logits propose the first draft.
  valid = std::min<int64_t>(valid, static_cast<int64_t>(tokens.size()) - 1);
  st.num_computed = std::min(st.num_computed, valid);
  st.num_fed = 0;
  kv_->truncate_slots(seq, st.num_computed);
}

bool DraftModelProposer::plan_catch_up(DraftSlot& slot, SeqState& st, int64_t& budget) {
  const int64_t need = static_cast<int64_t>(slot.tokens.size()) - st.num_computed;
  const int64_t chunk = std::min(need, budget);
  if (chunk <= 0) return false;
  const bool drafting = chunk == need && slot.max_draft > 0;
  // Slots for the catch-up and the drafts fed after it (all but the last draft).
  const int64_t num_slots = chunk + (drafting ? slot.max_draft - 1 : 0);
  if (kv_->allocate_slots(slot.seq_id, num_slots) != AllocStatus::kOk) return false;
  budget -= chunk;
  const TokenSpan part =
      slot.tokens.subspan(static_cast<size_t>(st.num_computed), static_cast<size_t>(chunk));
  std::span<const int32_t> tokens = part.tail().empty() ? part.head() : part.tail();
  if (!part.head().empty() && !part.tail().empty()) {  // across the prompt's end: copied
    int32_t* dst = catch_up_tokens_.data() + num_catch_up_copied_;
    part.copy_to(dst);
    num_catch_up_copied_ += part.size();
    tokens = std::span<const int32_t>(dst, part.size());
  }
  inputs_.push_back(SeqInput{.tokens = tokens,
                             .start_pos = st.num_computed,
                             .block_table = as_indices(kv_->block_table(slot.seq_id)),
                             .window_block_table = {},
                             .all_logits = false});
  jobs_.push_back(Job{.slot = &slot, .state = &st, .drafting = drafting});
  return true;
}

int32_t DraftModelProposer::argmax(int64_t row) const {
  const int32_t n_vocab = model_->hparams().n_vocab;
  const float* x = logits_.data() + row * n_vocab;
  return static_cast<int32_t>(std::max_element(x, x + n_vocab) - x);
}

bool DraftModelProposer::forward_and_pick(std::span<Job> jobs) {
  if (fault_hook_) {
    for (const Job& j : jobs) fault_hook_(j.slot->seq_id);
  }
  Status st = model_->forward(inputs_, *arena_, logits_.data());
  if (!st.ok()) {
    LOG(WARN, engine) << "draft model forward failed, no drafts this step: " << st.message();
    return false;
  }
  for (size_t i = 0; i < jobs.size(); ++i) {
    Job& j = jobs[i];
    j.state->num_computed += static_cast<int64_t>(inputs_[i].tokens.size());
    if (!j.drafting) continue;
    DraftSlot& s = *j.slot;
    if (s.num_draft > 0) {  // the pass fed the previous draft
      j.state->fed[static_cast<size_t>(j.state->num_fed++)] = s.draft[s.num_draft - 1];
    }
    s.draft[s.num_draft++] = argmax(static_cast<int64_t>(i));
  }
  return true;
}

void DraftModelProposer::propose(std::span<DraftSlot> slots) {
  try {
    propose_or_throw(slots);
  } catch (const std::exception& e) {
    drop_after_fault(slots, e);
  }
}

void DraftModelProposer::drop_after_fault(std::span<DraftSlot> slots,
                                          const std::exception& e) noexcept {
  // Nothing here allocates but the log line, which may fail quietly.
  ++num_faults_;
  for (DraftSlot& slot : slots) {
    slot.num_draft = 0;
    seqs_.erase(slot.seq_id);
    if (kv_->has_sequence(slot.seq_id)) kv_->free_sequence(slot.seq_id);
  }
  try {
    LOG(WARN, engine) << "draft model pass failed (" << e.what() << "): no drafts for "
                      << slots.size() << " sequences this step";
  } catch (...) {
  }
}

void DraftModelProposer::propose_or_throw(std::span<DraftSlot> slots) {
  inputs_.clear();
  num_catch_up_copied_ = 0;
  jobs_.clear();
  // Catch-up tokens per step: the draft's workspace (sized like the target's batch).
  int64_t budget = model_->max_batch_tokens();
  const auto max_rows = logits_.size() / static_cast<size_t>(model_->hparams().n_vocab);
  for (DraftSlot& slot : slots) {
    slot.num_draft = 0;
    if (jobs_.size() >= max_rows) break;
    auto [it, fresh] = seqs_.try_emplace(slot.seq_id);
    if (fresh) kv_->add_sequence(slot.seq_id, {});
    roll_back(slot.seq_id, slot.tokens, it->second);
    plan_catch_up(slot, it->second, budget);
  }
  if (jobs_.empty() || !forward_and_pick(jobs_)) return;
  // Then one pass per further position, over the slots still drafting.
  for (int32_t round = 1;; ++round) {
    inputs_.clear();
    size_t n = 0;
    for (Job& j : jobs_) {
      if (!j.drafting || j.slot->num_draft <= round - 1 || round >= j.slot->max_draft) continue;
      jobs_[n] = j;
      round_tokens_[n] = j.slot->draft[round - 1];
      if (j.state->num_fed == 0) j.state->fed_from = j.state->num_computed;
      inputs_.push_back(SeqInput{.tokens = std::span<const int32_t>(&round_tokens_[n], 1),
                                 .start_pos = j.state->num_computed,
                                 .block_table = as_indices(kv_->block_table(j.slot->seq_id)),
                                 .window_block_table = {},
                                 .all_logits = false});
      ++n;
    }
    if (n == 0) break;
    jobs_.resize(n);
    if (!forward_and_pick(std::span<Job>(jobs_.data(), n))) break;
  }
  // Slots reserved for drafts a failed pass did not feed go back.
  for (DraftSlot& slot : slots) {
    auto it = seqs_.find(slot.seq_id);
    if (it != seqs_.end()) kv_->truncate_slots(slot.seq_id, it->second.num_computed);
  }
}

}  // namespace kvw
