// Compiled with -O3 -ffp-contract=off (src/model/CMakeLists.txt): the vectoriser may widen these
// loops but never fuse a multiply and an add, so every clone computes the same bits.
#include "model/sampling_rows.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

// One clone per ISA, chosen at load time by GCC's ifunc resolver. Clang (the fuzz build) and the
// sanitizer builds get the baseline loop: the same bits, only slower (ThreadSanitizer instruments
// the resolver, which runs at relocation time before its runtime is up, and crashes).
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && \
    !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#define KVW_ROW_PASS __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define KVW_ROW_PASS
#endif

namespace kvw::sampling_rows {
namespace {

// GCC/Clang vector extension: 16 floats, lowered to one zmm, two ymm or four xmm registers. The
// lanes are the fixed lanes of every sum, so the result is independent of the ISA.
constexpr int kLanes = 16;
using F16 = float __attribute__((vector_size(64)));
using I16 = int32_t __attribute__((vector_size(64)));
using U16 = uint32_t __attribute__((vector_size(64)));

inline __attribute__((always_inline)) F16 load(const float* p) {
  F16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The same operations on a float or on 16 lanes, so scalar scans and vector passes agree.
// I: the unsigned integer type of F's bits.
template <class F, class I>
inline __attribute__((always_inline)) F exp_neg(F x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;  // ln 2 split so that n * kLn2Hi is exact
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const F lo = F{} - 87.0f, zero = F{};
  const F xc = x < lo ? lo : x;
  const F k = xc * kLog2e + kRound;
  const F nf = k - kRound;
  // n = round(x / ln 2) as unsigned bits (two's complement), so the shift below is defined.
  const I n = std::bit_cast<I>(k) - std::bit_cast<uint32_t>(kRound);
  const F r = (xc - nf * kLn2Hi) - nf * kLn2Lo;
  F p = zero + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const F e = std::bit_cast<F>(std::bit_cast<I>(p) + (n << 23));
  return x < lo ? zero : e;
}

inline float exp_neg1(float x) {
  return exp_neg<float, int32_t>(x);
}

inline float weight(const float* x, int64_t j, const WeightMask& m, float thr) {
  const float w = m.weights != nullptr ? m.weights[j] : exp_neg1((x[j] - m.max) * m.inv_t);
  return w >= thr ? w : 0.0f;
}

// Sums of weights over [begin, end) at one threshold, masked into *masked and all into *all;
// every weight into w_out[begin, end) when given. With stored weights the logits are not read.
KVW_ROW_PASS void range_sums(const float* x, int64_t begin, int64_t end, const WeightMask& m,
                             float thr, bool want_all, double* masked, double* all, float* w_out) {
  F16 acc = {}, acc_all = {};
  const F16 zero = {};
  auto add = [&](int64_t at, const F16 w) __attribute__((always_inline)) {
    if (w_out != nullptr) std::memcpy(w_out + at, &w, sizeof w);
    acc += w >= thr ? w : zero;
    acc_all += w;
  };
  auto weight = [&](int64_t at) __attribute__((always_inline)) {
    return exp_neg<F16, U16>((load(x + at) - m.max) * m.inv_t);
  };
  int64_t j = begin;
  if (m.weights != nullptr) {
    for (; j + kLanes <= end; j += kLanes) add(j, load(m.weights + j));
  } else {
    // Four exps at once: each is a chain of dependent multiply-adds, and one at a time leaves
    // the FP units waiting. The sums still take the vectors in order (same bits).
    for (; j + 4 * kLanes <= end; j += 4 * kLanes) {
      const F16 w0 = weight(j), w1 = weight(j + kLanes), w2 = weight(j + 2 * kLanes),
                w3 = weight(j + 3 * kLanes);
      add(j, w0);
      add(j + kLanes, w1);
      add(j + 2 * kLanes, w2);
      add(j + 3 * kLanes, w3);
    }
    for (; j + kLanes <= end; j += kLanes) add(j, weight(j));
  }
  for (int l = 0; j < end; ++j, ++l) {
    const float w = m.weights != nullptr ? m.weights[j] : exp_neg1((x[j] - m.max) * m.inv_t);
    if (w_out != nullptr) w_out[j] = w;
    acc[l] += w >= thr ? w : 0.0f;
    acc_all[l] += w;
  }
  double s = 0.0, s_all = 0.0;
  for (int l = 0; l < kLanes; ++l) {
    s += acc[l];
    s_all += acc_all[l];
  }
  *masked += s;
  if (want_all) *all += s_all;
}

}  // namespace

float sample_exp(float x) {
  return exp_neg1(x);
}

KVW_ROW_PASS bool all_finite(const float* x, int64_t n) {
  constexpr uint32_t kExponent = 0x7f800000u;  // all ones: inf or NaN
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const int64_t end = std::min(n, begin + kBlock);
    I16 bad = {};
    int64_t i = begin;
    for (; i + kLanes <= end; i += kLanes) {
      U16 bits;
      std::memcpy(&bits, x + i, sizeof bits);
      bad |= (bits & kExponent) == kExponent;
    }
    int32_t any = 0;
    for (int l = 0; l < kLanes; ++l) any |= bad[l];
    for (; i < end; ++i) any |= !std::isfinite(x[i]);
    if (any != 0) return false;
  }
  return true;
}

KVW_ROW_PASS MaxMin max_min(const float* x, int64_t n) {
  F16 mx = F16{} + x[0], mn = mx;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const F16 v = load(x + i);
    mx = v > mx ? v : mx;
    mn = v < mn ? v : mn;
  }
  MaxMin r{x[0], x[0]};
  for (; i < n; ++i) {
    r.max = std::max(r.max, x[i]);
    r.min = std::min(r.min, x[i]);
  }
  for (int l = 0; l < kLanes; ++l) {
    r.max = std::max(r.max, mx[l]);
    r.min = std::min(r.min, mn[l]);
  }
  return r;
}

KVW_ROW_PASS int64_t first_equal(const float* x, int64_t n, float v) {
  int64_t i = 0;
  for (; i + 4 * kLanes <= n; i += 4 * kLanes) {  // 64 at a time, one lane reduction each
    const I16 hit = (load(x + i) == v) | (load(x + i + 16) == v) | (load(x + i + 32) == v) |
                    (load(x + i + 48) == v);
    int32_t any = 0;
    for (int l = 0; l < kLanes; ++l) any |= hit[l];
    if (any != 0) break;
  }
  for (; i < n; ++i) {
    if (x[i] == v) return i;
  }
  return n;
}

double weight_block_sums(const float* x, int64_t n, const WeightMask& m, double* block_sums,
                         double* unmasked_total, float* weights_out) {
  double total = 0.0, all = 0.0;
  for (int64_t b = 0; b < num_blocks(n); ++b) {
    const int64_t begin = b * kBlock, end = std::min(n, begin + kBlock);
    double s = 0.0;
    if (end <= m.split || begin >= m.split) {
      range_sums(x, begin, end, m, end <= m.split ? m.thr_before : m.thr_after,
                 unmasked_total != nullptr, &s, &all, weights_out);
    } else {  // the block holding the split: two ranges
      range_sums(x, begin, m.split, m, m.thr_before, unmasked_total != nullptr, &s, &all,
                 weights_out);
      range_sums(x, m.split, end, m, m.thr_after, unmasked_total != nullptr, &s, &all, weights_out);
    }
    block_sums[b] = s;
    total += s;
  }
  if (unmasked_total != nullptr) *unmasked_total = all;
  return total;
}

int64_t draw_from_blocks(const float* x, int64_t n, const WeightMask& m, const double* block_sums,
                         double r) {
  const int64_t nb = num_blocks(n);
  int64_t b = 0;
  for (; b < nb; ++b) {
    if (r < block_sums[b]) break;
    r -= block_sums[b];
  }
  if (b == nb) {  // r reached the total by rounding: the last block with weight
    for (b = nb - 1; b > 0 && !(block_sums[b] > 0.0); --b) {
    }
    r = block_sums[b];
  }
  const int64_t begin = b * kBlock, end = std::min(n, begin + kBlock);
  double cum = 0.0;
  int64_t last = begin;
  for (int64_t j = begin; j < end; ++j) {
    const float w = weight(x, j, m, j < m.split ? m.thr_before : m.thr_after);
    if (!(w > 0.0f)) continue;
    cum += w;
    last = j;
    if (r < cum) return j;
  }
  return last;
}

KVW_ROW_PASS int64_t count_at_least(const float* x, int64_t n, float thr) {
  I16 c = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) c -= load(x + i) >= thr;  // true is -1
  int64_t total = 0;
  for (; i < n; ++i) total += x[i] >= thr;
  for (int l = 0; l < kLanes; ++l) total += c[l];
  return total;
}

int64_t collect_at_least(const float* x, int64_t n, float thr, int32_t* ids) {
  // Chunks with no hit (nearly all of them when the threshold is near the maximum) cost one
  // vectorised count.
  constexpr int64_t kChunk = 256;
  int64_t out = 0;
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t end = std::min(n, begin + kChunk);
    if (count_at_least(x + begin, end - begin, thr) == 0) continue;
    for (int64_t j = begin; j < end; ++j) {
      if (x[j] >= thr) ids[out++] = (int32_t)j;
    }
  }
  return out;
}

}  // namespace kvw::sampling_rows
