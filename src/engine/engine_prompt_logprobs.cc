// Prompt logprobs from the prefill's own logits (teacher forcing): a prefill chunk scheduled
// with prompt_logits has a logit row at every position; row p predicts prompt token p + 1. Each
// row becomes that token's log-probability and the k most likely tokens there, on the model's
// threads, and the chunk's rows go to the client as one kPromptLogprobs event before any token.
// Only (k + 1) entries per position are kept; the rows themselves are overwritten next step.
#include <algorithm>

#include "core/check.h"
#include "core/log.h"
#include "engine/engine.h"
#include "model/sampling_rows.h"

namespace kvw {

void Engine::plan_prompt_chunk(const ScheduledSeq& s, size_t first_row) {
  Live& live = live_.at(index_of(s.seq_id));
  const Request* r = sched_->find(s.seq_id);
  CHECK(r != nullptr && live.prompt_logprobs >= 0);
  // Tokens whose logprob this span's rows give: start_pos + 1 .. start_pos + num_tokens, within
  // the prompt, less those already sent (a recompute after preemption runs them again).
  const int64_t first = std::max(s.start_pos + 1, live.next_prompt_token);
  const int64_t end = std::min(s.start_pos + s.num_tokens + 1, r->num_prompt_tokens);
  if (first >= end) return;
  const int32_t n_vocab = model_->hparams().n_vocab;
  PromptChunk c{
      .id = index_of(s.seq_id),
      .live = &live,
      .rows = logits_.data() + (first_row + (size_t)(first - 1 - s.start_pos)) * (size_t)n_vocab,
      .targets = r->prompt().subspan((size_t)first, (size_t)(end - first)),
      .ev = {}};
  c.ev.kind = ChannelEvent::Kind::kPromptLogprobs;
  c.ev.prompt_pos = first;
  c.ev.prompt_top_k = std::min(live.prompt_logprobs, n_vocab);
  c.ev.prompt.resize((size_t)(end - first));
  c.ev.prompt_ranks.resize(c.ev.prompt.size());
  c.ev.top_logprobs.resize(c.ev.prompt.size() * (size_t)c.ev.prompt_top_k);
  live.next_prompt_token = end;
  prompt_chunks_.push_back(std::move(c));
}

void Engine::run_prompt_rows() {
  if (prompt_chunks_.empty()) return;
  prompt_rows_.clear();
  for (size_t c = 0; c < prompt_chunks_.size(); ++c) {
    for (size_t i = 0; i < prompt_chunks_[c].ev.prompt.size(); ++i) {
      prompt_rows_.emplace_back((uint32_t)c, (uint32_t)i);
    }
  }
  const int32_t n_vocab = model_->hparams().n_vocab;
  // Rows are independent, O(n_vocab) each: the model's threads take them in turn. Each writes
  // only its own slots, so no locking (`finite` is written false only, by any of them).
  model_->run_on_threads([&](int ith, int nth) {
    thread_local std::vector<TokenLogprob> top;
    for (size_t j = (size_t)ith; j < prompt_rows_.size(); j += (size_t)nth) {
      PromptChunk& c = prompt_chunks_[prompt_rows_[j].first];
      const size_t i = prompt_rows_[j].second;
      const float* row = c.rows + i * (size_t)n_vocab;
      if (!sampling_rows::all_finite(row, n_vocab)) {
        c.finite = false;
        continue;
      }
      const int32_t target = c.targets[i];
      TokenLogprob& chosen = c.ev.prompt[i];
      chosen.token_id = target;
      compute_logprobs(row, n_vocab, target, c.ev.prompt_top_k, &chosen.logprob, &top);
      int32_t above = 0;  // O(n_vocab), a small share of the log-softmax above
      for (int32_t t = 0; t < n_vocab; ++t) above += row[t] > row[target] ? 1 : 0;
      c.ev.prompt_ranks[i] = above + 1;
      CHECK(top.size() == (size_t)c.ev.prompt_top_k);
      std::copy(top.begin(), top.end(),
                c.ev.top_logprobs.begin() + (ptrdiff_t)(i * (size_t)c.ev.prompt_top_k));
    }
  });
}

void Engine::emit_prompt_chunks() {
  for (PromptChunk& c : prompt_chunks_) {
    if (!c.finite) {
      // Like the sampler's numerics guard: the request ends with kError, its blocks freed at
      // the next schedule(); nothing more of its prompt is sent.
      if (c.live->error.empty()) {
        ++stats_.num_numerics_errors;
        c.live->error_kind = ErrorKind::kNumerics;
        c.live->error = "numerics guard: non-finite logits (NaN/Inf) in the prompt near position " +
                        std::to_string(c.ev.prompt_pos);
        LOG(WARN, engine) << "request " << c.id << ": " << c.live->error;
        sched_->cancel(SeqId{c.id});
      }
      continue;
    }
    if (!c.live->error.empty()) continue;
    emit_tokens_.emplace_back(c.id, std::move(c.ev));
  }
  prompt_chunks_.clear();
}

}  // namespace kvw
