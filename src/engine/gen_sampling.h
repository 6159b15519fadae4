// engine/gen_sampling.h: a request's sampling knobs as the engine API takes them.
// Kept apart from queues.h so that seq_sampler.cc needs nothing else of the engine. Plain value
// type; the scheduler never sees sampling (it works with token counts only).
#pragma once

#include <cstdint>

namespace kvw {

// Sampling knobs of one request (the engine maps them onto model/sampling.h's Sampler).
struct GenSampling {
  float temperature = 0.0f;     // 0 = greedy (argmax, lowest id on ties)
  int32_t top_k = 0;            // 0 = off
  float top_p = 1.0f;           // 1 = off
  float min_p = 0.0f;           // 0 = off
  float repeat_penalty = 1.0f;  // 1 = off
  uint64_t seed = 0;
};

}  // namespace kvw
