// model/sampling_rows.h: the passes over a logit row that sampling needs, each O(n_vocab) and
// vectorised, so no step sorts the vocabulary.
//
// Every result is bit-identical on every x86 CPU: the loops are plain C++ compiled with
// -ffp-contract=off and cloned per ISA (AVX-512, AVX2, SSE2), sums run over kSumLanes fixed lanes
// in a fixed order, and exp is our own polynomial (sample_exp), so a seeded draw does not depend
// on the machine, the thread or the batch it ran in.
#pragma once

#include <cstdint>

namespace kvw::sampling_rows {

// Tokens per block of the block sums that inverse-CDF draws walk first.
inline constexpr int64_t kBlock = 1024;
inline int64_t num_blocks(int64_t n) {
  return (n + kBlock - 1) / kBlock;
}

// Whether every x[i] is finite (no NaN, no +-inf): the numerics guard's check of a logit row,
// one vectorised pass that stops at the first block holding a bad value.
bool all_finite(const float* x, int64_t n);

struct MaxMin {
  float max;
  float min;
};
MaxMin max_min(const float* x, int64_t n);

// Index of the first element equal to v (n when none): with v = max, greedy's argmax with the
// lowest id on ties.
int64_t first_equal(const float* x, int64_t n, float v);

// exp(x) for x <= 0 (0 below -87): range reduction to [-ln2/2, ln2/2] and a degree-6
// polynomial, relative error < 2e-7. The passes inline this same code (exposed for tests).
float sample_exp(float x);

// The weights a draw uses: w_j = sample_exp((x_j - max) * inv_t) for the tokens a mask admits,
// 0 for the others. The mask admits token j when w_j >= (j < split ? thr_before : thr_after), so
// it speaks of probabilities, not logits: thr = 0 admits all; min_p admits w_j >= min_p (the top
// token's weight is 1); (w_p, split p, nextafter(w_p)) admits exactly the tokens ranked above
// token p (more probable, or as probable with a lower id). `weights`, when set, holds every
// token's w_j as a previous pass stored it, so later passes read it instead of the logits (same
// bits, half the bytes: the logits are not read at all).
struct WeightMask {
  float max;
  float inv_t;
  float thr_before;
  int64_t split;
  float thr_after;
  const float* weights = nullptr;
  bool admits(int64_t j, float wj) const { return wj >= (j < split ? thr_before : thr_after); }
};

// Writes the admitted weight of every block of kBlock tokens to block_sums[num_blocks(n)] and
// returns their total. *unmasked_total, when given, gets every token's weight (the softmax
// normaliser); weights_out[n], when given, every token's weight (for WeightMask::weights).
double weight_block_sums(const float* x, int64_t n, const WeightMask& m, double* block_sums,
                         double* unmasked_total, float* weights_out = nullptr);

// The admitted token at which the running sum of weights in id order first exceeds r, given the
// block sums weight_block_sums wrote (r in [0, their total)). Rounding at a block's end falls
// back to the block's last admitted token of non-zero weight.
int64_t draw_from_blocks(const float* x, int64_t n, const WeightMask& m, const double* block_sums,
                         double r);

// Number of elements >= thr, and their ids (ascending) into ids[0, count) when ids is given.
int64_t count_at_least(const float* x, int64_t n, float thr);
int64_t collect_at_least(const float* x, int64_t n, float thr, int32_t* ids);

}  // namespace kvw::sampling_rows
