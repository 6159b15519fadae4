#include "model/sampling.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace kvw {

Status SamplingParams::validate(int32_t n_vocab) const {
  if (!(temperature >= 0.0f)) return Error{"--temperature must be >= 0"};
  if (top_k < 0) return Error{"--top-k must be >= 0"};
  if (!(top_p > 0.0f && top_p <= 1.0f)) return Error{"--top-p must be in (0, 1]"};
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return Error{"--min-p must be in [0, 1]"};
  if (!(repeat_penalty > 0.0f)) return Error{"--repeat-penalty must be > 0"};
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

int32_t Sampler::sample(const float* logits, std::span<const int32_t> history,
                        std::span<const int32_t> generated) {
  // Scratch is per thread, not per sampler: a server holds one sampler per request (hundreds
  // waiting), and n_vocab-sized buffers each (1.5 MiB at a 128k vocabulary) would grow memory
  // with load outside the budget. Every entry is rewritten below before it is read.
  thread_local std::vector<Candidate> cand;
  thread_local std::vector<float> adjusted;
  cand.resize((size_t)n_vocab_);
  adjusted.resize((size_t)n_vocab_);
  std::copy(logits, logits + n_vocab_, adjusted.begin());
  for (const auto& [id, bias] : p_.logit_bias) adjusted[id] += bias;
  if (p_.repeat_penalty != 1.0f && p_.repeat_last_n > 0) {
    const size_t n = std::min<size_t>(history.size(), p_.repeat_last_n);
    for (int32_t id : history.last(n)) {
      if (id < 0 || id >= n_vocab_) continue;
      float& l = adjusted[id];
      // Penalise each distinct token once: mark by moving it, then skip if already moved.
      if (l == logits[id]) l = l > 0 ? l / p_.repeat_penalty : l * p_.repeat_penalty;
    }
  }
  if ((p_.presence_penalty != 0.0f || p_.frequency_penalty != 0.0f) && !generated.empty()) {
    counted_.assign(generated.begin(), generated.end());
    std::sort(counted_.begin(), counted_.end());
    for (size_t i = 0; i < counted_.size();) {
      size_t j = i;
      while (j < counted_.size() && counted_[j] == counted_[i]) ++j;
      const int32_t id = counted_[i];
      if (id >= 0 && id < n_vocab_) {
        adjusted[id] -= p_.presence_penalty + p_.frequency_penalty * float(j - i);
      }
      i = j;
    }
  }
  if (p_.temperature == 0.0f) {
    return (int32_t)(std::max_element(adjusted.begin(), adjusted.end()) - adjusted.begin());
  }
  for (int32_t i = 0; i < n_vocab_; ++i) cand[i] = {i, adjusted[i], 0.0f};
  // Sort by logit (ties: lower id first) so every later step is order-deterministic.
  auto by_logit = [](const Candidate& a, const Candidate& b) {
    return a.logit != b.logit ? a.logit > b.logit : a.id < b.id;
  };
  size_t n = cand.size();
  if (p_.top_k > 0 && (size_t)p_.top_k < n) {
    std::partial_sort(cand.begin(), cand.begin() + p_.top_k, cand.end(), by_logit);
    n = p_.top_k;
  } else {
    std::sort(cand.begin(), cand.end(), by_logit);
  }
  const float max_logit = cand[0].logit;
  double sum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    cand[i].p = std::exp((cand[i].logit - max_logit) / p_.temperature);
    sum += cand[i].p;
  }
  for (size_t i = 0; i < n; ++i) cand[i].p = (float)(cand[i].p / sum);
  if (p_.top_p < 1.0f) {
    double cum = 0.0;
    size_t keep = n;
    for (size_t i = 0; i < n; ++i) {
      cum += cand[i].p;
      if (cum >= p_.top_p) {
        keep = i + 1;
        break;
      }
    }
    n = keep;
  }
  if (p_.min_p > 0.0f) {
    const float floor = p_.min_p * cand[0].p;
    size_t keep = 1;
    while (keep < n && cand[keep].p >= floor) ++keep;
    n = keep;
  }
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) total += cand[i].p;
  const double r = (double)(rng_() >> 11) * 0x1.0p-53 * total;
  double cum = 0.0;
  for (size_t i = 0; i < n; ++i) {
    cum += cand[i].p;
    if (r < cum) return cand[i].id;
  }
  return cand[n - 1].id;
}

}  // namespace kvw
