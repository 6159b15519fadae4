#include "engine/seq_sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "grammar/grammar_constraint.h"
#include "model/sampling.h"
#include "model/sampling_rows.h"

namespace kvw {

Result<std::unique_ptr<SeqSampler>> SeqSampler::create(const GenSampling& s, int32_t n_vocab,
                                                       const SeqShape& shape) {
  SamplingParams p;
  p.temperature = s.temperature;
  p.top_k = s.top_k;
  p.top_p = s.top_p;
  p.min_p = s.min_p;
  p.repetition_penalty = s.repetition_penalty;
  p.presence_penalty = s.presence_penalty;
  p.frequency_penalty = s.frequency_penalty;
  p.seed = s.seed;
  p.logit_bias = s.logit_bias;
  KVW_RETURN_IF_ERROR(p.validate(n_vocab));
  if (s.logprobs < -1 || s.logprobs > kMaxLogprobs) {
    return Error{"logprobs must be in [0, " + std::to_string(kMaxLogprobs) + "]"};
  }
  if (s.min_tokens < 0) return Error{"min_tokens must be >= 0"};
  if (s.stop_token_ids) {
    const std::vector<int32_t>& ids = *s.stop_token_ids;
    if (!std::is_sorted(ids.begin(), ids.end()) ||
        std::adjacent_find(ids.begin(), ids.end()) != ids.end()) {
      return Error{"stop_token_ids must be sorted and distinct", ErrorKind::kInternal};
    }
    if (!ids.empty() && (ids.front() < 0 || ids.back() >= n_vocab)) {
      return Error{"stop_token_ids: token ids must be in [0, " + std::to_string(n_vocab) + ")"};
    }
  }
  auto out = std::make_unique<SeqSampler>(std::make_unique<Sampler>(p, n_vocab));
  out->num_logprobs_ = s.logprobs;
  if (s.repetition_penalty != 1.0f) {
    const auto cap = std::min<int64_t>(n_vocab, std::max<int64_t>(0, shape.max_seq_tokens));
    out->seen_ = std::make_unique<SeenTokens>((size_t)cap);
  }
  out->stop_token_ids_ = s.stop_token_ids;
  out->min_tokens_ = s.min_tokens;
  if (s.min_tokens > 0) {
    std::vector<int32_t>& b = out->banned_;
    if (s.stop_token_ids) b = *s.stop_token_ids;
    b.insert(b.end(), shape.end_of_generation_ids.begin(), shape.end_of_generation_ids.end());
    std::sort(b.begin(), b.end());
    b.erase(std::unique(b.begin(), b.end()), b.end());
  }
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

void SeqSampler::observe_prompt(std::span<const int32_t> prompt) {
  if (!seen_ || prompt_seen_) return;
  seen_->add(prompt);
  prompt_seen_ = true;
}

int32_t SeqSampler::sample(float* logits, std::span<const int32_t> history, size_t num_generated) {
  SampleInputs in{.history = history,
                  .generated = history.last(std::min(num_generated, history.size()))};
  if (seen_) in.seen = seen_->ids();
  // A grammar that can only end keeps its end: banning it would leave no token to draw.
  const bool grammar_ends =
      constraint_ && !constraint_->waiting_for_trigger() && constraint_->done();
  if (num_generated < (size_t)min_tokens_ && !grammar_ends) in.banned = banned_;
  const int32_t token = draw(logits, in);
  if (seen_) seen_->add(token);
  return token;
}

int32_t SeqSampler::draw(float* logits, const SampleInputs& in) {
  if (!constraint_ || constraint_->waiting_for_trigger()) {
    const int32_t token = sampler_->sample(logits, in);
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
  const int32_t token = sampler_->sample(row, in);
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
  const double sum = sr::weight_block_sums(logits, n_vocab, {max_logit, 1.0f, 0.0f, 0, 0.0f},
                                           blocks.data(), nullptr);
  const float lse = max_logit + float(std::log(sum));
  *logprob = logits[token] - lse;
  top->clear();
  if (k <= 0) return;
  thread_local std::vector<int32_t> ids;
  select_top_k(logits, n_vocab, k, &ids);
  for (int32_t id : ids) top->push_back(TokenLogprob{id, logits[id] - lse});
}

}  // namespace kvw
