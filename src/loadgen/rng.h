// loadgen/rng.h: the benchmark's one seeded random source and its distributions.
// Owner: whoever builds a workload or an arrival schedule; not thread-safe. The distributions are
// written here (not std::*_distribution) so a seed gives identical numbers with every libstdc++.
#pragma once

#include <cstdint>
#include <random>

namespace kvw::loadgen {

class Rng {
 public:
  explicit Rng(uint64_t seed) : gen_(seed) {}
  // An independent stream derived from this seed and `stream` (SplitMix64 of both), so arrivals
  // and workloads do not shift each other when one of them draws more numbers.
  static Rng derived(uint64_t seed, uint64_t stream);

  uint64_t next_u64() { return gen_(); }
  double uniform01();                         // [0, 1), 53 random bits
  double uniform(double lo, double hi);       // [lo, hi)
  uint64_t uniform_int(uint64_t n);           // [0, n), n > 0, unbiased (rejection)
  double normal(double mean, double stddev);  // Marsaglia polar method
  double lognormal(double mu, double sigma);  // exp(normal(mu, sigma))
  double exponential(double rate);            // mean 1/rate
  double gamma(double shape, double scale);   // Marsaglia-Tsang; mean shape*scale

 private:
  std::mt19937_64 gen_;
};

}  // namespace kvw::loadgen
