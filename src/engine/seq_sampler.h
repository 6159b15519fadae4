// engine/seq_sampler.h: one request's sampler, behind a small interface.
// Why a wrapper: engine headers stay free of model/sampling.h; seq_sampler.cc alone includes it
// and validates the request's knobs there.
// Owner: the engine thread (one per live request); not thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "core/status.h"
#include "engine/gen_sampling.h"

namespace kvw {

class Sampler;

class SeqSampler {
 public:
  // Errors: sampling values out of range (the message names the field).
  static Result<std::unique_ptr<SeqSampler>> create(const GenSampling& s, int32_t n_vocab);
  explicit SeqSampler(std::unique_ptr<Sampler> s);  // use create()
  ~SeqSampler();
  // logits: [n_vocab], all finite. history: prompt + generated tokens (repetition penalty).
  int32_t sample(const float* logits, std::span<const int32_t> history);

 private:
  std::unique_ptr<Sampler> sampler_;
};

// True when every one of logits[0, n) is finite (the numerics guard).
bool all_finite(const float* logits, int64_t n);

}  // namespace kvw
