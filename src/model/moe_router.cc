#include "model/moe_router.h"

#include <cmath>
#include <limits>

namespace kvw {
namespace {

constexpr float kMasked = -std::numeric_limits<float>::infinity();

void gate_scores(ExpertGating g, float* x, int32_t n) {
  if (g == ExpertGating::kSoftmaxWeight) return;  // the chosen logits' softmax comes after top-k
  if (g == ExpertGating::kSigmoid) {
    for (int32_t i = 0; i < n; ++i) x[i] = 1.0f / (1.0f + std::exp(-x[i]));
    return;
  }
  float max = x[0];
  for (int32_t i = 1; i < n; ++i) max = std::fmax(max, x[i]);
  float sum = 0.0f;
  for (int32_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  for (int32_t i = 0; i < n; ++i) x[i] /= sum;
}

// Index of the largest x[i] with taken[i] == 0; ties to the lower index, NaN below everything.
// Returns a distinct untaken index whenever one is left, whatever the values.
int32_t argmax_untaken(const float* x, const float* taken, int32_t n) {
  int32_t best = -1;
  for (int32_t i = 0; i < n; ++i) {
    if (taken[i] != 0.0f) continue;
    if (best < 0 || x[i] > x[best] || (std::isnan(x[best]) && !std::isnan(x[i]))) best = i;
  }
  return best;
}

// Masks every expert outside the n_group_used best groups of `sel` [n_expert].
// group_score: scratch [n_group].
void limit_to_groups(const MoeParams& m, float* sel, float* group_score) {
  const int32_t size = m.n_expert / m.n_group;
  for (int32_t g = 0; g < m.n_group; ++g) {
    const float* s = sel + g * size;
    float first = kMasked, second = kMasked;
    for (int32_t i = 0; i < size; ++i) {
      if (s[i] > first) {
        second = first;
        first = s[i];
      } else if (s[i] > second) {
        second = s[i];
      }
    }
    group_score[g] = size == 1 ? first : first + second;
  }
  // Pick the kept groups by repeated argmax (n_group is small: 8 in DeepSeek-V3), then mask the
  // rest: a kept group's score becomes +inf so the second pass can tell them apart.
  constexpr float kKept = std::numeric_limits<float>::infinity();
  for (int32_t k = 0; k < m.n_group_used; ++k) {
    int32_t best = -1;
    for (int32_t g = 0; g < m.n_group; ++g) {
      if (group_score[g] == kKept) continue;
      if (best < 0 || group_score[g] > group_score[best]) best = g;
    }
    group_score[best] = kKept;
  }
  for (int32_t g = 0; g < m.n_group; ++g) {
    if (group_score[g] == kKept) continue;
    for (int32_t i = 0; i < size; ++i) sel[g * size + i] = kMasked;
  }
}

}  // namespace

int64_t router_scratch_floats(const MoeParams& m) {
  return 2 * (int64_t)m.n_expert;
}

void route_token(const MoeParams& m, float* logits, const float* bias, int32_t* ids, float* weights,
                 float* scratch) {
  const int32_t n = m.n_expert;
  gate_scores(m.gating, logits, n);
  float* sel = scratch;
  for (int32_t i = 0; i < n; ++i) sel[i] = bias != nullptr ? logits[i] + bias[i] : logits[i];
  if (m.n_group > 1 && m.n_group_used < m.n_group) limit_to_groups(m, sel, scratch + n);
  float* taken = scratch + n;
  for (int32_t i = 0; i < n; ++i) taken[i] = 0.0f;
  float sum = 0.0f;
  for (int32_t k = 0; k < m.n_expert_used; ++k) {
    const int32_t e = argmax_untaken(sel, taken, n);
    taken[e] = 1.0f;
    ids[k] = e;
    weights[k] = logits[e];
    sum += logits[e];
  }
  if (m.gating == ExpertGating::kSoftmaxWeight) {
    // ids are best first, so weights[0] is the largest logit.
    sum = 0.0f;
    for (int32_t k = 0; k < m.n_expert_used; ++k) {
      weights[k] = std::exp(weights[k] - logits[ids[0]]);
      sum += weights[k];
    }
    for (int32_t k = 0; k < m.n_expert_used; ++k) weights[k] /= sum;
  }
  for (int32_t k = 0; k < m.n_expert_used; ++k) {
    if (m.norm_weights) weights[k] /= sum;
    weights[k] *= m.weights_scale;
  }
}

}  // namespace kvw
