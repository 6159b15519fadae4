// loadgen/rng.cc: distributions over std::mt19937_64 (whose output the standard fixes).
#include "loadgen/rng.h"

#include <cmath>

#include "core/check.h"

namespace kvw::loadgen {

namespace {
uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}
}  // namespace

Rng Rng::derived(uint64_t seed, uint64_t stream) {
  return Rng(splitmix64(splitmix64(seed) ^ splitmix64(stream + 0x51ED)));
}

double Rng::uniform01() {
  return static_cast<double>(gen_() >> 11) * 0x1.0p-53;
}

double Rng::uniform(double lo, double hi) {
  return lo + (hi - lo) * uniform01();
}

uint64_t Rng::uniform_int(uint64_t n) {
  CHECK(n > 0);
  // Reject the top partial bucket so every value is equally likely.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do {
    x = gen_();
  } while (x >= limit);
  return x % n;
}

double Rng::normal(double mean, double stddev) {
  double u, v, s;
  do {
    u = 2.0 * uniform01() - 1.0;
    v = 2.0 * uniform01() - 1.0;
    s = u * u + v * v;
  } while (s >= 1.0 || s == 0.0);
  return mean + stddev * u * std::sqrt(-2.0 * std::log(s) / s);
}

double Rng::lognormal(double mu, double sigma) {
  return std::exp(normal(mu, sigma));
}

double Rng::exponential(double rate) {
  return -std::log1p(-uniform01()) / rate;
}

double Rng::gamma(double shape, double scale) {
  CHECK(shape > 0 && scale > 0) << "gamma(" << shape << ", " << scale << ")";
  if (shape < 1.0) {
    // Boost: G(a) = G(a + 1) * U^(1/a).
    double u = uniform01();
    while (u == 0.0) u = uniform01();
    return gamma(shape + 1.0, scale) * std::pow(u, 1.0 / shape);
  }
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  for (;;) {
    double x, v;
    do {
      x = normal(0.0, 1.0);
      v = 1.0 + c * x;
    } while (v <= 0.0);
    v = v * v * v;
    const double u = uniform01();
    if (u < 1.0 - 0.0331 * x * x * x * x) return d * v * scale;
    if (u > 0.0 && std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v * scale;
  }
}

}  // namespace kvw::loadgen
