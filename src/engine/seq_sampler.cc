#include "engine/seq_sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "grammar/grammar_constraint.h"
#include "model/sampling.h"
#include "model/sampling_rows.h"

namespace kvw {

Result<std::unique_ptr<SeqSampler>> SeqSampler::create(const GenSampling& s, int32_t n_vocab) {
  SamplingParams p;
  p.temperature = s.temperature;
  p.top_k = s.top_k;
  p.top_p = s.top_p;
  p.min_p = s.min_p;
  p.repeat_penalty = s.repeat_penalty;
  p.presence_penalty = s.presence_penalty;
  p.frequency_penalty = s.frequency_penalty;
  p.seed = s.seed;
  p.logit_bias = s.logit_bias;
  KVW_RETURN_IF_ERROR(p.validate(n_vocab));
  if (s.logprobs < -1 || s.logprobs > kMaxLogprobs) {
    return Error{"logprobs must be in [0, " + std::to_string(kMaxLogprobs) + "]"};
  }
  auto out = std::make_unique<SeqSampler>(std::make_unique<Sampler>(p, n_vocab));
  out->num_logprobs_ = s.logprobs;
  if (s.constraint.grammar) {
    if (!s.constraint.trie || s.constraint.trie->n_vocab() != n_vocab) {
      return Error{"grammar constraint: the token trie does not match the vocabulary",
                   ErrorKind::kInternal};
    }
    out->constraint_ = std::make_unique<grammar::GrammarConstraint>(
        s.constraint.grammar, s.constraint.trie, s.constraint.strip_leading_space,
        s.constraint.max_cached_masks, s.constraint.context_masks, s.constraint.dfa_masks);
    out->constraint_->set_triggers(s.constraint.triggers);
    out->n_vocab_ = n_vocab;
  }
  return out;
}

SeqSampler::SeqSampler(std::unique_ptr<Sampler> s) : sampler_(std::move(s)) {}
SeqSampler::~SeqSampler() = default;

int32_t SeqSampler::sample(float* logits, std::span<const int32_t> history, size_t num_generated) {
  const auto generated = history.last(std::min(num_generated, history.size()));
  if (!constraint_ || constraint_->waiting_for_trigger()) {
    const int32_t token = sampler_->sample(logits, history, generated);
    if (constraint_) note(constraint_->accept(token));  // may switch the grammar on
    return token;
  }
  // Only logprobs read the row after sampling: without them it is masked in place (copying
  // 600 KB at 152k tokens cost ~60 us a token, more than the mask itself on a cache hit).
  float* row = logits;
  if (num_logprobs_ >= 0) {
    // Per engine thread, not per sequence: n_vocab floats for every live constrained request
    // would be a large share of its memory.
    thread_local std::vector<float> masked;
    masked.assign(logits, logits + n_vocab_);
    row = masked.data();
  }
  constraint_->mask(row);
  const int32_t token = sampler_->sample(row, history, generated);
  note(constraint_->accept(token));
  return token;
}

void SeqSampler::note(const Status& st) {
  if (!st.ok() && constraint_error_.empty()) constraint_error_ = "grammar: " + st.message();
}

void compute_logprobs(const float* logits, int32_t n_vocab, int32_t token, int32_t k,
                      float* logprob, std::vector<TokenLogprob>* top) {
  namespace sr = sampling_rows;
  const float max_logit = sr::max_min(logits, n_vocab).max;
  thread_local std::vector<double> blocks;
  blocks.resize((size_t)sr::num_blocks(n_vocab));
  const float all = -std::numeric_limits<float>::infinity();
  const double sum = sr::weight_block_sums(logits, n_vocab, {max_logit, 1.0f, all, 0, all},
                                           blocks.data(), nullptr);
  const float lse = max_logit + float(std::log(sum));
  *logprob = logits[token] - lse;
  top->clear();
  if (k <= 0) return;
  thread_local std::vector<int32_t> ids;
  select_top_k(logits, n_vocab, k, &ids);
  for (int32_t id : ids) top->push_back(TokenLogprob{id, logits[id] - lse});
}

bool all_finite(const float* logits, int64_t n) {
  // Per value, not via a sum: exact, and ~10 us at n_vocab = 32k, small next to a step.
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(logits[i])) return false;
  }
  return true;
}

}  // namespace kvw
