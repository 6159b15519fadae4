// model/sampling.h: turns a row of logits into the next token.
// Order (as llama.cpp): repetition penalty -> presence/frequency penalties -> greedy if temperature
// == 0 -> top-k -> softmax at temperature -> top-p -> min-p -> draw. Deterministic for a given seed
// on every platform. Owner: one sequence, used from one thread at a time; the n_vocab-sized
// scratch is per thread (shared by every sampler that thread runs), so a sampler itself is small.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

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
  std::vector<std::pair<int32_t, float>> logit_bias = {};
  uint64_t seed = 0;

  Status validate(int32_t n_vocab = INT32_MAX) const;
};

class Sampler {
 public:
  Sampler(const SamplingParams& p, int32_t n_vocab);
  // history: tokens so far (prompt and generated), for the repetition penalty; generated: the
  // generated ones only, for the presence and frequency penalties.
  int32_t sample(const float* logits, std::span<const int32_t> history,
                 std::span<const int32_t> generated = {});

 private:
  struct Candidate {
    int32_t id;
    float logit;
    float p;
  };
  SamplingParams p_;
  int32_t n_vocab_;
  std::mt19937_64 rng_;
  std::vector<int32_t> counted_;  // generated tokens, sorted (grows to max_tokens at most)
};

}  // namespace kvw
