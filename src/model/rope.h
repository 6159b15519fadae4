// model/rope.h: rotary position embedding with linear, NTK-aware and YaRN context scaling.
// A RopeTable holds the per-dimension frequencies (computed once); cos/sin for a position are
// computed per token (n_rot/2 sincos, shared by every layer and head of that token).
// Thread safety: immutable after construction.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/hparams.h"

namespace kvw {

class RopeTable {
 public:
  // freq_factors: optional per-pair divisors (Llama-3.1 "rope_freqs.weight", phi3's LongRoPE
  // rope_factors_long / _short), n_rot/2 entries.
  explicit RopeTable(const RopeParams& p, std::span<const float> freq_factors = {});

  int32_t n_rot() const { return n_rot_; }
  // cs: [n_rot/2][2] = (cos, sin) of each pair's angle at `pos`, times attn_factor (and YaRN's
  // magnitude).
  void cos_sin(int64_t pos, float* cs) const;
  // Rotates the first n_rot dims of each of n_heads heads of x [n_heads][head_dim] in place.
  void apply(float* x, int32_t n_heads, int32_t head_dim, const float* cs) const;

 private:
  RopeStyle style_;
  int32_t n_rot_;
  std::vector<double> inv_freq_;  // [n_rot/2] angle per position for pair i (scaling applied)
  std::vector<double> ramp_;      // [n_rot/2] YaRN: weight of the extrapolated angle (1 = keep)
  double interp_ = 1.0;           // position multiplier for the interpolated angle (1/s)
  double mscale_ = 1.0;           // attn_factor (x YaRN's magnitude) applied to cos and sin
  bool yarn_ = false;
};

}  // namespace kvw
