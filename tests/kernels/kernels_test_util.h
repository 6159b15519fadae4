// tests/kernels/kernels_test_util.h: deterministic inputs and error metrics shared by the kernel
// tests, plus a helper that runs a multi-threaded kernel for every ith sequentially.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "gguf/tensor_types.h"
#include "kernels/kernels.h"

namespace kvw::kernels::testing {

inline const GgmlType kWeightTypes[] = {
    GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16,   GgmlType::kQ4_0,
    GgmlType::kQ8_0, GgmlType::kQ4_K, GgmlType::kQ5_K,   GgmlType::kQ6_K,
    GgmlType::kQ4_1, GgmlType::kQ5_0, GgmlType::kQ5_1,   GgmlType::kIQ4_NL,
    GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kIQ4_XS, GgmlType::kMXFP4};
// The types every table routes to matmul_dequant (kernels/dequant_matmul.cc).
inline const GgmlType kDequantTypes[] = {GgmlType::kQ2_K, GgmlType::kQ3_K, GgmlType::kIQ4_XS};

// Under the sanitizers (scripts/test.sh sets KVW_SANITIZED=1) the bit-identity sweeps keep every
// table, type and shape but try fewer batch sizes and thread counts: a memory error shows on the
// first pass through a code path, and the full sweep (minutes under ASan) runs in Release.
inline bool reduced_sweep() {
  static const bool reduced = std::getenv("KVW_SANITIZED") != nullptr;
  return reduced;
}

// The tables a sweep tries: all of them, or under the sanitizers all but the portable `ref`
// table when another exists. ref's kernels are the references the other tables are checked
// against, so they still run under ASan; as a table of its own it is the slowest by far (two
// thirds of the packed-GEMM sweeps' time under ASan) and its bit-identity runs in Release.
inline std::vector<const KernelTable*> sweep_tables() {
  std::vector<const KernelTable*> out;
  for (const KernelTable* t : available_kernel_tables()) {
    if (!reduced_sweep() || std::string(t->isa) != "ref") out.push_back(t);
  }
  if (out.empty()) out.push_back(&kernels_ref());
  return out;
}

// The thread counts a sweep tries: 1..max, or 1 and max when reduced.
inline std::vector<int> sweep_threads(int max) {
  if (reduced_sweep()) return {1, max};
  std::vector<int> all;
  for (int n = 1; n <= max; ++n) all.push_back(n);
  return all;
}

// The batch sizes a sweep tries: all of them, or the first, a middle one and the last.
inline std::vector<int64_t> sweep_batches(std::vector<int64_t> all) {
  if (!reduced_sweep() || all.size() <= 3) return all;
  return {all.front(), all[all.size() / 2], all.back()};
}

inline std::string type_name(GgmlType t) {
  return std::string(type_traits(t).name);
}

// Gaussian values with a few outliers per row, the shape that makes quantisation scales matter.
inline std::vector<float> random_floats(int64_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = dist(rng);
  for (int64_t i = 0; i < n; i += 97) v[i] *= 4.0f;
  return v;
}

// n_rows x n_in weights in `type`, from random floats.
inline std::vector<uint8_t> make_weights(GgmlType type, int64_t n_rows, int64_t n_in,
                                         uint32_t seed) {
  const std::vector<float> f = random_floats(n_rows * n_in, seed, 0.05f);
  const int64_t rb = (int64_t)*row_bytes(type, n_in);
  std::vector<uint8_t> w(n_rows * rb);
  for (int64_t r = 0; r < n_rows; ++r)
    quantize_row(type, f.data() + r * n_in, w.data() + r * rb, n_in);
  return w;
}

// Normalised mean squared error sum((a-b)^2) / sum(b^2), as ggml's test-backend-ops reports.
inline double nmse(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0.0, ref = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    err += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    ref += (double)b[i] * b[i];
  }
  return ref > 0.0 ? err / ref : err;
}

inline double max_abs_diff(const float* a, const float* b, int64_t n) {
  double m = 0.0;
  for (int64_t i = 0; i < n; ++i) m = std::fmax(m, std::fabs((double)a[i] - b[i]));
  return m;
}

// Quantised activations for n_tokens rows of x.
inline std::vector<uint8_t> quantize_act(const KernelTable& t, GgmlType wtype, const float* x,
                                         int64_t n_tokens, int64_t n_in, int nth = 1) {
  std::vector<uint8_t> xq(n_tokens * act_row_bytes(wtype, n_in));
  for (int ith = 0; ith < nth; ++ith) t.quantize_act(wtype, x, n_tokens, n_in, xq.data(), ith, nth);
  return xq;
}

// y [n_tokens][n_rows], every thread's share computed in turn.
inline std::vector<float> matmul(const KernelTable& t, GgmlType wtype, const uint8_t* w,
                                 int64_t n_rows, int64_t n_in, const uint8_t* xq, int64_t n_tokens,
                                 int nth = 1) {
  std::vector<float> y(n_tokens * n_rows, std::nanf(""));
  for (int ith = 0; ith < nth; ++ith)
    t.matmul(wtype, w, n_rows, n_in, xq, n_tokens, y.data(), ith, nth);
  return y;
}

}  // namespace kvw::kernels::testing
