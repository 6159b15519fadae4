// model/sampling.h: turns a row of logits into the next token.
// Order (as llama.cpp and vLLM): logit_bias -> banned tokens (min_tokens) -> repetition
// penalties -> presence/frequency penalties -> greedy if temperature == 0 -> top-k -> softmax at
// temperature -> top-p -> min-p -> draw. Deterministic for a given seed on every x86 CPU
// (model/sampling_rows.h).
//
// Cost: O(n_vocab) with no sort of the vocabulary. Greedy and temperature alone are one or two
// vectorised passes (an inverse-CDF draw over block sums). top_k selects by a threshold below the
// maximum and sorts only the k survivors. top_p / min_p without top_k never sort at all: a token
// drawn from the whole distribution is kept when the mass ranked above it (more probable, or as
// probable with a lower id) is under top_p, else the draw is repeated among the tokens ranked
// above it (rejection sampling: the accepted token follows the truncated distribution exactly;
// ~1/top_p passes on average, each over the stored weights alone). Penalties, bans and
// logit_bias touch only their tokens.
// Owner: one sequence, used from one thread at a time; the n_vocab-sized scratch of top_k is per
// thread (shared by every sampler that thread runs), so a sampler itself is small.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"
#include "model/logit_bias.h"

namespace kvw {

struct SamplingParams {
  float temperature = 0.8f;     // 0 = greedy (argmax, lowest id on ties)
  int32_t top_k = 40;           // 0 = off
  float top_p = 0.95f;          // 1 = off
  float min_p = 0.05f;          // 0 = off; keep tokens with p >= min_p * p_max
  float repeat_penalty = 1.0f;  // 1 = off; divides positive / multiplies negative logits
  int32_t repeat_last_n = 64;   // how many recent tokens the penalty looks at
  // OpenAI's penalties over the generated tokens: logit -= presence * [count > 0] +
  // frequency * count. 0 = off; each in [-2, 2].
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // OpenAI logit_bias: added to the token's logit before the penalties; each in [-100, 100],
  // ids in [0, n_vocab) (checked by validate(n_vocab)).
  LogitBias logit_bias = {};
  uint64_t seed = 0;
  // vLLM's repetition_penalty: over every distinct token of the prompt and the output so far
  // (SampleInputs::seen), a positive logit is divided by it and a negative one multiplied.
  // 1 = off; > 0. Unlike repeat_penalty it has no window.
  float repetition_penalty = 1.0f;

  Status validate(int32_t n_vocab = INT32_MAX) const;
};

// What one draw reads besides the logits. Every id in [0, n_vocab); others are ignored.
struct SampleInputs {
  std::span<const int32_t> history;    // tokens so far, prompt and generated (repeat_penalty)
  std::span<const int32_t> generated;  // the generated ones only (presence / frequency)
  std::span<const int32_t> seen;       // distinct tokens of prompt + output (repetition_penalty)
  std::span<const int32_t> banned;     // cannot be drawn now (min_tokens: EOS, stop_token_ids)
};

class Sampler {
 public:
  Sampler(const SamplingParams& p, int32_t n_vocab);
  // logits[n_vocab]; finite, or -inf where a grammar disallows a token (not all of them): the
  // penalised, banned and biased entries are rewritten during the call and restored before it
  // returns. Banned tokens become -inf; the caller leaves at least one token drawable.
  int32_t sample(float* logits, const SampleInputs& in);

 private:
  // Rewrites the penalised / banned / biased logits in place, appending each token's value
  // before every change to `saved` (restored in reverse, so the first saved value wins).
  void apply_adjustments(float* logits, const SampleInputs& in,
                         std::vector<std::pair<int32_t, float>>& saved);
  int32_t sample_top_k(const float* logits);
  int32_t sample_full(const float* logits, float max);
  double uniform();  // [0, 1)

  SamplingParams p_;
  int32_t n_vocab_;
  std::mt19937_64 rng_;
};

// The k largest of x[0, n) (ties: lower id first), best first, into *ids. O(n) passes plus a
// sort of the survivors; *ids is scratch that grows to the candidates a threshold lets through.
void select_top_k(const float* x, int32_t n, int32_t k, std::vector<int32_t>* ids);

}  // namespace kvw
