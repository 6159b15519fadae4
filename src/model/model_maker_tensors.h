// model/model_maker_tensors.h (internal to model_maker*.cc): seeded random tensors written into
// a GgufWriter in a chosen storage type. Not thread-safe; one per file being written.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gguf/gguf_writer.h"
#include "gguf/tensor_types.h"

namespace kvw::maker {

// Fast seeded generator (splitmix64): ~1 ns per value, so a 1.1B-parameter file takes seconds.
class Rng {
 public:
  explicit Rng(uint64_t seed) : s_(seed) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  // Uniform with standard deviation `std` (uniform on [-sqrt(3) std, sqrt(3) std]).
  float uniform_std(float std) {
    const double u = (double)(next() >> 11) * 0x1.0p-53;
    return (float)((2.0 * u - 1.0) * 1.7320508075688772 * std);
  }

 private:
  uint64_t s_;
};

inline std::vector<uint8_t> encode_tensor(GgmlType type, const std::vector<float>& v, int64_t row) {
  const uint64_t rb = *row_bytes(type, row);
  const int64_t n_rows = (int64_t)v.size() / row;
  std::vector<uint8_t> out(rb * n_rows);
  for (int64_t r = 0; r < n_rows; ++r)
    quantize_row(type, v.data() + r * row, out.data() + r * rb, row);
  return out;
}

class TensorMaker {
 public:
  TensorMaker(GgufWriter& w, uint64_t seed) : w_(w), rng_(seed) {}

  // n values uniform with standard deviation std around `center`.
  std::vector<float> draw(int64_t n, float std, float center = 0.0f) {
    std::vector<float> v(n);
    for (auto& x : v) x = center + rng_.uniform_std(std);
    return v;
  }
  // Writes v (row-major, shape in ggml order: shape[0] is the row length) as `type`.
  void put(const std::string& name, GgmlType type, std::vector<int64_t> shape,
           const std::vector<float>& v) {
    const int64_t row = shape[0];
    w_.add_tensor(name, type, std::move(shape), encode_tensor(type, v, row));
  }
  // Matrix of n_rows x n_in; std 1/sqrt(n_in) keeps activations of order one through the layers.
  void matrix(const std::string& name, int64_t n_in, int64_t n_rows, GgmlType type, float std = 0) {
    if (std == 0) std = 1.0f / std::sqrt((float)n_in);
    put(name, type, {n_in, n_rows}, draw(n_in * n_rows, std));
  }
  // n_expert stacked matrices of n_rows x n_in (ggml shape [n_in, n_rows, n_expert]).
  void experts(const std::string& name, int64_t n_in, int64_t n_rows, int64_t n_expert,
               GgmlType type) {
    put(name, type, {n_in, n_rows, n_expert},
        draw(n_in * n_rows * n_expert, 1.0f / std::sqrt((float)n_in)));
  }
  // Vector around `center`: norms near 1, biases near 0.
  void vector(const std::string& name, int64_t n, float center, float std) {
    put(name, GgmlType::kF32, {n}, draw(n, std, center));
  }

 private:
  GgufWriter& w_;
  Rng rng_;
};

}  // namespace kvw::maker
