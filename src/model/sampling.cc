#include "model/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "model/sampling_rows.h"

namespace kvw {

Status SamplingParams::validate(int32_t n_vocab) const {
  if (!(temperature >= 0.0f)) return Error{"--temperature must be >= 0"};
  if (top_k < 0) return Error{"--top-k must be >= 0"};
  if (!(top_p > 0.0f && top_p <= 1.0f)) return Error{"--top-p must be in (0, 1]"};
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return Error{"--min-p must be in [0, 1]"};
  if (!(repeat_penalty > 0.0f)) return Error{"--repeat-penalty must be > 0"};
  if (!(repetition_penalty > 0.0f && std::isfinite(repetition_penalty))) {
    return Error{"repetition_penalty must be > 0"};
  }
  if (repeat_last_n < 0) return Error{"--repeat-last-n must be >= 0"};
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) {
    return Error{"presence_penalty must be in [-2, 2]"};
  }
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
    return Error{"frequency_penalty must be in [-2, 2]"};
  }
  for (const auto& [id, bias] : logit_bias) {
    if (id < 0 || id >= n_vocab) {
      return Error{"logit_bias: token id " + std::to_string(id) +
                   " is outside the vocabulary [0, " + std::to_string(n_vocab) + ")"};
    }
    if (!(bias >= -100.0f && bias <= 100.0f)) {
      return Error{"logit_bias: bias " + std::to_string(bias) + " for token " + std::to_string(id) +
                   " is outside [-100, 100]"};
    }
  }
  return {};
}

Sampler::Sampler(const SamplingParams& p, int32_t n_vocab)
    : p_(p), n_vocab_(n_vocab), rng_(p.seed) {}

double Sampler::uniform() {
  return (double)(rng_() >> 11) * 0x1.0p-53;
}

void Sampler::apply_adjustments(float* logits, const SampleInputs& in,
                                std::vector<std::pair<int32_t, float>>& saved) {
  saved.clear();
  // Every change saves the value before it; restoring in reverse puts the original back, so a
  // token touched by several adjustments needs no lookup (a sorted insert per token was
  // O(seen^2) once repetition_penalty touches every distinct token of a long prompt).
  auto touch = [&](int32_t id) -> float& {
    saved.emplace_back(id, logits[id]);
    return logits[id];
  };
  auto in_vocab = [&](int32_t id) { return id >= 0 && id < n_vocab_; };
  for (const auto& [id, bias] : p_.logit_bias) touch(id) += bias;
  for (int32_t id : in.banned) {
    if (in_vocab(id)) touch(id) = -std::numeric_limits<float>::infinity();
  }
  auto penalise = [&](int32_t id, float penalty) {
    float& l = touch(id);
    l = l > 0 ? l / penalty : l * penalty;
  };
  if (p_.repetition_penalty != 1.0f) {
    for (int32_t id : in.seen) {  // distinct already: each token once
      if (in_vocab(id)) penalise(id, p_.repetition_penalty);
    }
  }
  if (p_.repeat_penalty != 1.0f && p_.repeat_last_n > 0) {
    const size_t n = std::min<size_t>(in.history.size(), p_.repeat_last_n);
    thread_local std::vector<int32_t> window;
    window.assign(in.history.end() - (ptrdiff_t)n, in.history.end());
    std::sort(window.begin(), window.end());
    window.erase(std::unique(window.begin(), window.end()), window.end());
    for (int32_t id : window) {  // each distinct token once
      if (in_vocab(id)) penalise(id, p_.repeat_penalty);
    }
  }
  if ((p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f) && !in.generated.empty()) {
    thread_local std::vector<int32_t> counted;
    counted.assign(in.generated.begin(), in.generated.end());
    std::sort(counted.begin(), counted.end());
    for (size_t i = 0; i < counted.size();) {
      size_t j = i;
      while (j < counted.size() && counted[j] == counted[i]) ++j;
      const int32_t id = counted[i];
      if (in_vocab(id)) touch(id) -= p_.presence_penalty + p_.frequency_penalty * float(j - i);
      i = j;
    }
  }
}

int32_t Sampler::sample(float* logits, const SampleInputs& in) {
  // Adjusted tokens and their original logits, per thread rather than per sampler: they live
  // only for this call, and a copy per sequence grew with its logit_bias and window.
  thread_local std::vector<std::pair<int32_t, float>> saved_;
  apply_adjustments(logits, in, saved_);
  struct Restore {  // puts the original logits back on every return
    float* logits;
    const std::vector<std::pair<int32_t, float>>& saved;
    ~Restore() {
      for (auto it = saved.rbegin(); it != saved.rend(); ++it) logits[it->first] = it->second;
    }
  } restore{logits, saved_};
  // A temperature so small that 1/T overflows is greedy too.
  if (p_.temperature == 0.0f || !std::isfinite(1.0f / p_.temperature)) {
    const float max = sampling_rows::max_min(logits, n_vocab_).max;
    return (int32_t)sampling_rows::first_equal(logits, n_vocab_, max);
  }
  if (p_.top_k > 0 && p_.top_k < n_vocab_) return sample_top_k(logits);
  return sample_full(logits, sampling_rows::max_min(logits, n_vocab_).max);
}

// top_k: the k survivors sorted (ties by lower id), then softmax, top_p and min_p over them.
int32_t Sampler::sample_top_k(const float* logits) {
  thread_local std::vector<int32_t> ids;
  select_top_k(logits, n_vocab_, p_.top_k, &ids);
  const float max = logits[ids[0]];
  thread_local std::vector<double> p;
  p.resize(ids.size());
  double sum = 0.0;
  for (size_t i = 0; i < ids.size(); ++i) {
    p[i] = std::exp(double(logits[ids[i]] - max) / p_.temperature);
    sum += p[i];
  }
  size_t n = ids.size();
  if (p_.top_p < 1.0f) {
    double cum = 0.0;
    for (size_t i = 0; i < n; ++i) {
      cum += p[i] / sum;
      if (cum >= p_.top_p) {
        n = i + 1;
        break;
      }
    }
  }
  if (p_.min_p > 0.0f) {  // p[0] is the largest weight
    size_t keep = 1;
    while (keep < n && p[keep] >= p_.min_p * p[0]) ++keep;
    n = keep;
  }
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) total += p[i];
  const double r = uniform() * total;
  double cum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    cum += p[i];
    if (r < cum) return ids[i];
  }
  return ids[n - 1];
}

// No top_k: an inverse-CDF draw over the admitted tokens (min_p: weight >= min_p, the top
// token's being 1), then for top_p the rejection loop described in sampling.h.
int32_t Sampler::sample_full(const float* logits, float max) {
  namespace sr = sampling_rows;
  thread_local std::vector<double> blocks;
  blocks.resize((size_t)sr::num_blocks(n_vocab_));
  const float inv_t = 1.0f / p_.temperature;
  const sr::WeightMask admitted{max, inv_t, p_.min_p, 0, p_.min_p};
  const bool top_p = p_.top_p < 1.0f;
  // top_p passes again over the weights alone: keep them, so those passes read 4 bytes a token
  // instead of 8 and compute no exp.
  thread_local std::vector<float> weights;
  if (top_p) weights.resize((size_t)n_vocab_);
  double z_all = 0.0;
  const double z =
      sr::weight_block_sums(logits, n_vocab_, admitted, blocks.data(), top_p ? &z_all : nullptr,
                            top_p ? weights.data() : nullptr);
  int64_t i = sr::draw_from_blocks(logits, n_vocab_, admitted, blocks.data(), uniform() * z);
  if (!top_p) return (int32_t)i;
  // The top_p set is the shortest prefix in rank order (probability, then id) whose mass
  // reaches top_p: token i is in it exactly when the mass ranked above i is below that. Every
  // token ranked above i is admitted by min_p too (its weight is >= w_i >= min_p).
  const double target = (double)p_.top_p * z_all;
  for (;;) {
    const float wi = weights[(size_t)i];
    const sr::WeightMask above{
        max,           inv_t, wi, i, std::nextafter(wi, std::numeric_limits<float>::infinity()),
        weights.data()};
    const double mass_above =
        sr::weight_block_sums(logits, n_vocab_, above, blocks.data(), nullptr);
    if (mass_above < target) return (int32_t)i;
    // Outside the set: so is everything ranked below i. Draw again among the tokens above it
    // (never empty: the top token has nothing above it and target > 0).
    i = sr::draw_from_blocks(logits, n_vocab_, above, blocks.data(), uniform() * mass_above);
  }
}

void select_top_k(const float* x, int32_t n, int32_t k, std::vector<int32_t>* ids) {
  k = std::clamp(k, 0, n);
  ids->clear();
  if (k == 0) return;
  // A first threshold from a strided sample of the row: its value ranked ~2k/n of the way down
  // (plus a margin), so one collecting pass usually lets through a few times k tokens. While
  // fewer than k pass, the threshold moves down by a doubling step.
  thread_local std::vector<float> sample;
  const int32_t m = std::min(n, 2048);
  sample.resize((size_t)m);
  for (int32_t i = 0; i < m; ++i) sample[i] = x[(int64_t)i * n / m];
  const int32_t rank = std::min<int64_t>(m - 1, (int64_t)2 * k * m / n + 2);
  std::nth_element(sample.begin(), sample.begin() + rank, sample.end(), std::greater<float>());
  const float top = *std::max_element(sample.begin(), sample.end());
  float thr = sample[rank];
  float step = std::max(top - thr, 1e-6f * std::max(1.0f, std::fabs(top)));
  ids->resize((size_t)n);
  for (;;) {
    const int64_t c = sampling_rows::collect_at_least(x, n, thr, ids->data());
    if (c >= k) {
      ids->resize((size_t)c);
      break;
    }
    thr -= step;  // reaches -inf (every token passes) after enough doublings
    step *= 2.0f;
  }
  auto better = [x](int32_t a, int32_t b) { return x[a] != x[b] ? x[a] > x[b] : a < b; };
  std::partial_sort(ids->begin(), ids->begin() + k, ids->end(), better);
  ids->resize((size_t)k);
}

}  // namespace kvw
