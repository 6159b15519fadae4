// engine/seq_sampler.h: one request's sampler, behind a small interface.
// Why a wrapper: engine headers stay free of model/sampling.h; seq_sampler.cc alone includes it
// and validates the request's knobs there.
// Owner: the engine thread (one per live request); not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/gen_sampling.h"
#include "engine/queues.h"

namespace kvw {

class Sampler;
namespace grammar {
class GrammarConstraint;
}

class SeqSampler {
 public:
  // Errors: sampling values out of range (the message names the field); a constraint whose
  // trie does not cover n_vocab.
  static Result<std::unique_ptr<SeqSampler>> create(const GenSampling& s, int32_t n_vocab);
  explicit SeqSampler(std::unique_ptr<Sampler> s);  // use create()
  ~SeqSampler();
  // logits: [n_vocab], all finite (adjusted in place during the call, restored before it
  // returns). history: prompt + generated tokens, of which the last num_generated were generated
  // (presence/frequency penalties). With a constraint, the sampler draws from the masked row and
  // the grammar then accepts the token: with logprobs (num_logprobs() >= 0) a masked copy, so
  // they still see the raw row; without, the row itself, left masked (-inf where disallowed).
  int32_t sample(float* logits, std::span<const int32_t> history, size_t num_generated);
  // Non-empty once the grammar refused a sampled token (only when no token could follow: the
  // vocabulary cannot spell the grammar); the engine ends the request with it.
  const std::string& constraint_error() const { return constraint_error_; }
  int32_t num_logprobs() const { return num_logprobs_; }  // GenSampling::logprobs

 private:
  std::unique_ptr<Sampler> sampler_;
  int32_t num_logprobs_ = -1;
  std::unique_ptr<grammar::GrammarConstraint> constraint_;  // null = unconstrained
  int32_t n_vocab_ = 0;  // set with a constraint (the masked copy is per-thread scratch)
  std::string constraint_error_;
  void note(const Status& st);  // keeps the first grammar error
};

// log-softmax of the raw row at `token` and the `k` most likely tokens (best first, ties by
// lower id): what OpenAI's logprobs report. O(n_vocab): vectorised passes, no sort.
void compute_logprobs(const float* logits, int32_t n_vocab, int32_t token, int32_t k,
                      float* logprob, std::vector<TokenLogprob>* top);

// True when every one of logits[0, n) is finite (the numerics guard).
bool all_finite(const float* logits, int64_t n);

}  // namespace kvw
