// The engine's batch inputs and sampling: one SeqInput per scheduled sequence, and the logit
// rows turned into tokens, with speculative drafts verified (greedy acceptance).
#include <algorithm>
#include <exception>
#include <new>
#include <span>

#include "core/check.h"
#include "core/log.h"
#include "engine/engine.h"
#include "model/sampling_rows.h"

namespace kvw {

bool Engine::can_speculate(const GenerationRequest& r) const {
  // Greedy and sampled requests alike (sample_job): with a point-mass draft, Leviathan et al.'s
  // rule "accept d with probability p(d), else draw from p without d" is the same as "draw
  // x ~ p, keep d iff x == d, else emit x", which is what decoding one token at a time draws.
  return r.speculate && cfg_.sched.spec.enabled;
}

namespace {

// A prefill chunk (a recompute after preemption) that runs from the shared prompt into the
// sequence's own outputs: its tokens are not contiguous anywhere.
bool straddles_prompt_end(const Request& r, const ScheduledSeq& s) {
  return s.start_pos < r.num_prompt_tokens && s.start_pos + s.num_tokens > r.num_prompt_tokens;
}

}  // namespace

void Engine::build_inputs(const SchedulerOutput& out) {
  inputs_.clear();
  // Speculative decodes feed [last token, d1..dk], and chunks across the prompt's end are
  // copied: lay them out in one buffer (at most the step's tokens), sized before any span into
  // it is taken.
  size_t num_copied_tokens = 0;
  for (const ScheduledSeq& s : out.scheduled) {
    const Request* r = sched_->find(s.seq_id);
    if (s.num_draft_tokens > 0 || (r != nullptr && straddles_prompt_end(*r, s))) {
      num_copied_tokens += (size_t)s.num_tokens;
    }
  }
  step_tokens_.resize(num_copied_tokens);
  size_t at = 0;
  for (const ScheduledSeq& s : out.scheduled) {
    const Request* r = sched_->find(s.seq_id);
    CHECK(r != nullptr) << "scheduled request " << index_of(s.seq_id) << " unknown";
    std::span<const int32_t> tokens;
    if (s.num_draft_tokens > 0) {
      CHECK(r->draft_ids.size() == (size_t)s.num_draft_tokens &&
            s.start_pos + 1 == r->num_tokens());
      int32_t* dst = step_tokens_.data() + at;
      dst[0] = r->tokens().back();
      std::copy(r->draft_ids.begin(), r->draft_ids.end(), dst + 1);
      tokens = std::span<const int32_t>(dst, (size_t)s.num_tokens);
      at += (size_t)s.num_tokens;
    } else if (straddles_prompt_end(*r, s)) {
      int32_t* dst = step_tokens_.data() + at;
      r->tokens().subspan((size_t)s.start_pos, (size_t)s.num_tokens).copy_to(dst);
      tokens = std::span<const int32_t>(dst, (size_t)s.num_tokens);
      at += (size_t)s.num_tokens;
    } else if (s.start_pos >= r->num_prompt_tokens) {
      tokens = r->output_token_ids().subspan((size_t)(s.start_pos - r->num_prompt_tokens),
                                             (size_t)s.num_tokens);
    } else {
      tokens = r->prompt().subspan((size_t)s.start_pos, (size_t)s.num_tokens);
    }
    inputs_.push_back(SeqInput{.tokens = tokens,
                               .start_pos = s.start_pos,
                               .block_table = as_indices(kv_->block_table(s.seq_id)),
                               .window_block_table = {},
                               .all_logits = s.num_draft_tokens > 0 || s.prompt_logits});
  }
  if (!kv_->has_window_slots()) return;
  // Hybrid window models: the windowed layers read their own table of window slots.
  if (window_tables_.size() < inputs_.size()) window_tables_.resize(inputs_.size());
  for (size_t i = 0; i < inputs_.size(); ++i) {
    kv_->window_block_table(out.scheduled[i].seq_id, window_tables_[i]);
    inputs_[i].window_block_table = window_tables_[i];
  }
}

void Engine::sample_job(SampleJob& job, int32_t n_vocab) const {
  const Request* r = job.request;
  if (cfg_.sample_fault_hook) cfg_.sample_fault_hook(index_of(job.seq_id), r->max_tokens);
  SeqSampler& sampler = *job.live->sampler;
  // Row i predicts the token after position pos + i, whose input was draft i - 1: it is valid
  // only while every draft before it was accepted. Each row is sampled exactly as decoding one
  // token at a time would sample it (same history, same draws from the request's generator, in
  // the same order), and the draft is kept iff the sample equals it. For a point-mass draft q
  // that is Leviathan et al.'s rule exactly: P(keep d) = p(d), and on rejection the sample is
  // distributed as p without d, renormalised. So greedy and seeded outputs are identical to
  // plain decoding, token for token.
  // The history the sampler reads: every generated token (presence and frequency penalties),
  // then the drafts accepted so far this step, copied only when speculating. The prompt reaches
  // repetition_penalty's seen set once; the sampler adds each token it draws.
  thread_local std::vector<int32_t> history;
  std::span<const int32_t> hist = r->output_token_ids();
  if (job.num_rows > 1) {
    history.assign(hist.begin(), hist.end());
    hist = history;
  }
  sampler.observe_prompt(r->prompt());
  for (int32_t i = 0; i < job.num_rows; ++i) {
    float* row = job.row + (size_t)i * (size_t)n_vocab;
    if (!sampling_rows::all_finite(row, n_vocab)) {
      job.finite = false;
      job.pos += i;
      return;
    }
    const int32_t id = sampler.sample(row, hist, (size_t)r->num_output_tokens() + (size_t)i);
    job.ids[(size_t)job.num_ids++] = id;
    if (sampler.num_logprobs() >= 0) {
      ChannelEvent& ev = job.live->next_events.emplace_back();
      compute_logprobs(row, n_vocab, id, sampler.num_logprobs(), &ev.logprob, &ev.top_logprobs);
    }
    // The sampler bans both until min_tokens (unless a grammar can only end), as vLLM.
    if ((!job.live->ignore_eos && tokenizer_->is_end_of_generation(id)) ||
        sampler.is_stop_token(id)) {
      job.stop = true;
      return;
    }
    if (i + 1 < job.num_rows && id != r->draft_ids[(size_t)i]) return;  // draft i rejected
    if (i + 1 < job.num_rows) {
      history.push_back(id);
      hist = history;
    }
  }
}

void Engine::sample_rows(const SchedulerOutput& out) {
  const int32_t n_vocab = model_->hparams().n_vocab;
  sampled_.clear();
  sample_jobs_.clear();
  // Logit rows in batch order: one per scheduled sequence, 1 + k for a speculative decode.
  prompt_chunks_.clear();
  size_t row = 0;
  for (const ScheduledSeq& s : out.scheduled) {
    const int32_t num_rows = s.num_draft_tokens > 0 ? (int32_t)s.num_tokens : 1;
    if (const ForwardFault* f = forward_fault(s.seq_id); f != nullptr) {
      // Its forward pass failed (run_forward): no row of it is sampled, logits or not.
      SampleJob& job = sample_jobs_.emplace_back(SampleJob{.row = nullptr,
                                                           .num_rows = 0,
                                                           .live = &live_.at(index_of(s.seq_id)),
                                                           .request = sched_->find(s.seq_id),
                                                           .pos = s.start_pos,
                                                           .seq_id = s.seq_id,
                                                           .ids = {},
                                                           .num_ids = 0,
                                                           .stop = false,
                                                           .finite = true});
      job.fault = f->error.c_str();
      job.fault_kind = f->kind;
      job.discard_kv = true;
      row += s.prompt_logits ? (size_t)s.num_tokens : (size_t)num_rows;
      continue;
    }
    // A prompt-logits span has a row per token; the last one is sampled (when it ends the
    // prompt), the others belong to the prompt logprobs.
    if (s.prompt_logits) plan_prompt_chunk(s, row);
    const size_t sample_row = s.prompt_logits ? row + (size_t)s.num_tokens - 1 : row;
    if (s.needs_logits) {
      sample_jobs_.push_back(
          SampleJob{.row = logits_.data() + sample_row * (size_t)n_vocab,
                    .num_rows = num_rows,
                    .live = &live_.at(index_of(s.seq_id)),
                    .request = sched_->find(s.seq_id),
                    .pos = s.start_pos + (s.num_draft_tokens > 0 ? 0 : s.num_tokens - 1),
                    .seq_id = s.seq_id,
                    .ids = {},
                    .num_ids = 0,
                    .stop = false,
                    .finite = true});
    }
    row += s.prompt_logits ? (size_t)s.num_tokens : (size_t)num_rows;
  }
  // Jobs are independent (each its own sampler, rows and events), so the model's threads take
  // them in turn; a job's result does not depend on which thread ran it.
  model_->run_on_threads([&](int ith, int nth) {
    for (size_t j = (size_t)ith; j < sample_jobs_.size(); j += (size_t)nth) {
      SampleJob& job = sample_jobs_[j];
      if (job.fault != nullptr) continue;  // its forward pass failed
      // A fault while sampling one request (an allocation failure in its logprobs, say) ends
      // that request; the step, the other requests and the process go on.
      try {
        sample_job(job, n_vocab);
      } catch (const std::bad_alloc&) {
        job.fault = "out of memory while sampling";
        job.fault_kind = ErrorKind::kOutOfMemory;
      } catch (const std::exception& e) {
        job.fault_text = e.what();
        job.fault = job.fault_text.c_str();
        job.fault_kind = ErrorKind::kInternal;
      } catch (...) {
        job.fault = "unknown exception while sampling";
        job.fault_kind = ErrorKind::kInternal;
      }
    }
  });
  for (SampleJob& job : sample_jobs_) {
    if (job.fault != nullptr) {
      fail_sample(job);
      continue;
    }
    if (job.finite && !job.live->sampler->constraint_error().empty()) {
      // The grammar left no token the vocabulary can spell: the request ends with that.
      job.live->error_kind = ErrorKind::kInternal;
      job.live->error = job.live->sampler->constraint_error();
      job.live->next_events.clear();
      sampled_.push_back(
          SampledToken{.seq_id = job.seq_id, .token_id = 0, .stop = false, .error = true});
      continue;
    }
    for (int32_t i = 0; i < job.num_ids; ++i) {
      sampled_.push_back(SampledToken{.seq_id = job.seq_id,
                                      .token_id = job.ids[(size_t)i],
                                      .stop = job.stop && i + 1 == job.num_ids,
                                      .error = false});
    }
    if (job.finite) continue;
    ++stats_.num_numerics_errors;
    job.live->error_kind = ErrorKind::kNumerics;
    job.live->error =
        "numerics guard: non-finite logits (NaN/Inf) at position " + std::to_string(job.pos);
    LOG(WARN, engine) << "request " << index_of(job.seq_id) << ": " << job.live->error;
    sampled_.push_back(
        SampledToken{.seq_id = job.seq_id, .token_id = 0, .stop = false, .error = true});
  }
}

// The request ends with an error, none of this step's tokens kept (update_from_output frees
// its blocks); its channel says why.
void Engine::fail_sample(SampleJob& job) {
  ++stats_.num_request_faults;
  job.live->error_kind = job.fault_kind;
  job.live->error = std::string("internal error: ") + job.fault;
  job.live->next_events.clear();
  LOG(ERROR, engine) << "request " << index_of(job.seq_id) << ": " << job.live->error;
  sampled_.push_back(SampledToken{.seq_id = job.seq_id,
                                  .token_id = 0,
                                  .stop = false,
                                  .error = true,
                                  .discard_kv = job.discard_kv});
}

const Engine::ForwardFault* Engine::forward_fault(SeqId id) const {
  // A handful at most, and only on a failed step: a scan is enough.
  for (const ForwardFault& f : forward_faults_) {
    if (f.seq_id == id) return &f;
  }
  return nullptr;
}

}  // namespace kvw
