// model/sampling.h: turns a row of logits into the next token.
// Order (as llama.cpp): logit_bias -> repetition penalty -> presence/frequency penalties -> greedy
// if temperature == 0 -> top-k -> softmax at temperature -> top-p -> min-p -> draw. Deterministic
// for a given seed on every x86 CPU (model/sampling_rows.h).
//
// Cost: O(n_vocab) with no sort of the vocabulary. Greedy and temperature alone are one or two
// vectorised passes (an inverse-CDF draw over block sums). top_k selects by a threshold below the
// maximum and sorts only the k survivors. top_p / min_p without top_k never sort at all: a token
// drawn from the whole distribution is kept when the mass ranked above it is under top_p, else the
// draw is repeated among the tokens ranked above it (rejection sampling: the accepted token follows
// the truncated distribution exactly; ~1/top_p passes on average). Penalties and logit_bias touch
// only their tokens.
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

  Status validate(int32_t n_vocab = INT32_MAX) const;
};

class Sampler {
 public:
  Sampler(const SamplingParams& p, int32_t n_vocab);
  // history: tokens so far (prompt and generated), for the repetition penalty; generated: the
  // generated ones only, for the presence and frequency penalties. logits[n_vocab], finite: the
  // penalised and biased entries are rewritten during the call and restored before it returns.
  int32_t sample(float* logits, std::span<const int32_t> history,
                 std::span<const int32_t> generated = {});

 private:
  // Rewrites the penalised / biased logits in place (saving the originals in saved_).
  void apply_adjustments(float* logits, std::span<const int32_t> history,
                         std::span<const int32_t> generated,
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
