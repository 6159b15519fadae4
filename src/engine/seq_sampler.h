// engine/seq_sampler.h: one request's sampler, behind a small interface: validates the
// request's knobs, keeps its per-sequence state (grammar matcher, repetition_penalty's seen
// tokens, min_tokens' ban list) and feeds model/sampling.h's Sampler.
// Owner: the engine thread (one per live request); not thread-safe.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/gen_sampling.h"
#include "engine/queues.h"
#include "model/seen_tokens.h"

namespace kvw {

class Sampler;
struct SampleInputs;
namespace grammar {
class GrammarConstraint;
}

// What the sequence is and may hold, for the per-sequence state sized by it.
struct SeqShape {
  std::span<const int32_t> end_of_generation_ids;  // banned with stop_token_ids under min_tokens
  int64_t max_seq_tokens = 0;  // prompt + max_tokens: caps the seen-token set (with n_vocab)
};

class SeqSampler {
 public:
  // Errors: sampling values out of range (the message names the field); a constraint whose
  // trie does not cover n_vocab.
  static Result<std::unique_ptr<SeqSampler>> create(const GenSampling& s, int32_t n_vocab,
                                                    const SeqShape& shape = {});
  explicit SeqSampler(std::unique_ptr<Sampler> s);  // use create()
  ~SeqSampler();
  // repetition_penalty's seen tokens start with the prompt the engine runs (after overflow
  // handling): call before the first sample (later calls do nothing). Every sampled token is
  // added as it is drawn: each one becomes an output or the request ends (as for the grammar).
  void observe_prompt(std::span<const int32_t> prompt);
  // logits: [n_vocab], all finite (adjusted in place during the call, restored before it
  // returns). history: tokens of which the last num_generated were generated (presence/
  // frequency penalties); num_generated < min_tokens bans end-of-generation and stop tokens,
  // unless a grammar can only end. With a constraint, the sampler draws from the masked row and
  // the grammar then accepts the token: with logprobs (num_logprobs() >= 0) a masked copy, so
  // they still see the raw row; without, the row itself, left masked (-inf where disallowed).
  int32_t sample(float* logits, std::span<const int32_t> history, size_t num_generated);
  // GenSampling::stop_token_ids holds `token`: sampling it ends the request.
  bool is_stop_token(int32_t token) const {
    return stop_token_ids_ &&
           std::binary_search(stop_token_ids_->begin(), stop_token_ids_->end(), token);
  }
  // Non-empty once the grammar refused a sampled token (only when no token could follow: the
  // vocabulary cannot spell the grammar); the engine ends the request with it.
  const std::string& constraint_error() const { return constraint_error_; }
  int32_t num_logprobs() const { return num_logprobs_; }  // GenSampling::logprobs

 private:
  std::unique_ptr<Sampler> sampler_;
  int32_t num_logprobs_ = -1;
  std::unique_ptr<SeenTokens> seen_;  // null = no repetition_penalty
  bool prompt_seen_ = false;
  std::shared_ptr<const std::vector<int32_t>> stop_token_ids_;  // GenSampling's (shared)
  int32_t min_tokens_ = 0;
  std::vector<int32_t> banned_;  // under min_tokens: end-of-generation + stop ids, sorted
  std::unique_ptr<grammar::GrammarConstraint> constraint_;  // null = unconstrained
  int32_t n_vocab_ = 0;  // set with a constraint (the masked copy is per-thread scratch)
  std::string constraint_error_;
  void note(const Status& st);                          // keeps the first grammar error
  int32_t draw(float* logits, const SampleInputs& in);  // the grammar's mask, then the sampler
};

// log-softmax of the raw row at `token` and the `k` most likely tokens (best first, ties by
// lower id): what OpenAI's logprobs report. O(n_vocab): vectorised passes, no sort.
void compute_logprobs(const float* logits, int32_t n_vocab, int32_t token, int32_t k,
                      float* logprob, std::vector<TokenLogprob>* top);

}  // namespace kvw
