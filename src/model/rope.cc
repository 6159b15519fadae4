#include "model/rope.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace kvw {
namespace {

// Dimension (in rotated dims) at which a frequency completes `n_rot_beta` turns over the
// original context (YaRN paper, eq. for r(d)); used for the ramp bounds.
double yarn_corr_dim(int32_t n_rot, int32_t orig_ctx, double beta, double base) {
  return n_rot * std::log(orig_ctx / (beta * 2.0 * M_PI)) / (2.0 * std::log(base));
}

}  // namespace

RopeTable::RopeTable(const RopeParams& p, std::span<const float> freq_factors)
    : style_(p.style), n_rot_(p.n_rot) {
  CHECK(n_rot_ > 0 && n_rot_ % 2 == 0) << "n_rot " << n_rot_;
  const int32_t half = n_rot_ / 2;
  double base = p.freq_base;
  const double s = p.scale_factor;
  if (p.scaling == RopeScaling::kNtk && s > 1.0) {
    // NTK-aware: stretch the base so the lowest frequency is interpolated by s, the highest kept.
    base *= std::pow(s, (double)n_rot_ / (n_rot_ - 2));
  }
  // rope.scaling.attn_factor scales cos and sin whatever the scaling (llama.cpp passes it to
  // every ggml_rope_ext); YaRN multiplies its own magnitude in below. LongRoPE (phi3) sets it.
  mscale_ = p.attn_factor;
  inv_freq_.resize(half);
  ramp_.assign(half, 1.0);
  for (int32_t i = 0; i < half; ++i) {
    double f = std::pow(base, -2.0 * i / n_rot_);
    if (!freq_factors.empty()) f /= freq_factors[i];
    inv_freq_[i] = f;
  }
  if (p.scaling == RopeScaling::kLinear) {
    for (auto& f : inv_freq_) f /= s;
  } else if (p.scaling == RopeScaling::kYarn) {
    yarn_ = true;
    interp_ = 1.0 / s;
    const int32_t orig = p.orig_ctx > 0 ? p.orig_ctx : 4096;
    const double low =
        std::max(0.0, std::floor(yarn_corr_dim(n_rot_, orig, p.yarn_beta_fast, base)));
    const double high = std::min((double)n_rot_ - 1,
                                 std::ceil(yarn_corr_dim(n_rot_, orig, p.yarn_beta_slow, base)));
    for (int32_t i = 0; i < half; ++i) {
      const double y = (i - low) / std::max(0.001, high - low);
      ramp_[i] = 1.0 - std::clamp(y, 0.0, 1.0);
    }
    mscale_ *= 1.0 + 0.1 * std::log(s);
  }
}

void RopeTable::cos_sin(int64_t pos, float* cs) const {
  const int32_t half = n_rot_ / 2;
  for (int32_t i = 0; i < half; ++i) {
    const double extrap = (double)pos * inv_freq_[i];
    double theta = extrap;
    if (yarn_) theta = extrap * interp_ * (1.0 - ramp_[i]) + extrap * ramp_[i];
    cs[2 * i] = (float)(std::cos(theta) * mscale_);
    cs[2 * i + 1] = (float)(std::sin(theta) * mscale_);
  }
}

void RopeTable::apply(float* x, int32_t n_heads, int32_t head_dim, const float* cs) const {
  const int32_t half = n_rot_ / 2;
  for (int32_t h = 0; h < n_heads; ++h) {
    float* v = x + (int64_t)h * head_dim;
    for (int32_t i = 0; i < half; ++i) {
      // normal: pair (2i, 2i+1); neox: pair (i, i + n_rot/2)
      const int32_t a = style_ == RopeStyle::kNormal ? 2 * i : i;
      const int32_t b = style_ == RopeStyle::kNormal ? 2 * i + 1 : i + half;
      const float c = cs[2 * i], s = cs[2 * i + 1];
      const float x0 = v[a], x1 = v[b];
      v[a] = x0 * c - x1 * s;
      v[b] = x0 * s + x1 * c;
    }
  }
}

}  // namespace kvw
