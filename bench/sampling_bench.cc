// bench/sampling_bench.cc: one draw's cost at a 152k vocabulary (Qwen2's), plain and with vLLM's
// repetition_penalty over a seen set of a given size, so the penalty's share is visible next to
// the O(n_vocab) passes every draw makes anyway; and SeenTokens' cost of adding a prompt.
//
//   BM_Sample/<greedy|t1_top_p>/seen:<n>   time per draw; seen:0 = no penalty
//   BM_SeenTokensAddPrompt/tokens:<n>      one prompt of n tokens (ids < 152k) into an empty set
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "model/sampling.h"
#include "model/seen_tokens.h"

namespace kvw {
namespace {

constexpr int32_t kVocab = 152064;

std::vector<float> random_row(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> row(kVocab);
  for (float& x : row) x = normal(rng);
  return row;
}

std::vector<int32_t> random_ids(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(0, kVocab - 1);
  std::vector<int32_t> ids(n);
  for (int32_t& t : ids) t = id(rng);
  return ids;
}

void BM_Sample(benchmark::State& state) {
  const bool greedy = state.range(0) == 0;
  const auto num_seen = (size_t)state.range(1);
  SamplingParams p{.temperature = greedy ? 0.0f : 1.0f,
                   .top_k = 0,
                   .top_p = greedy ? 1.0f : 0.9f,
                   .min_p = 0.0f,
                   .seed = 1,
                   .repetition_penalty = num_seen > 0 ? 1.1f : 1.0f};
  Sampler s(p, kVocab);
  std::vector<float> row = random_row(1);
  SeenTokens seen(num_seen);
  seen.add(random_ids(num_seen, 2));
  for (auto _ : state) benchmark::DoNotOptimize(s.sample(row.data(), {.seen = seen.ids()}));
  state.counters["seen"] = (double)seen.ids().size();
}
BENCHMARK(BM_Sample)
    ->ArgNames({"greedy0_t1p1", "seen"})
    ->ArgsProduct({{0, 1}, {0, 1024, 8192, 32768}})
    ->Unit(benchmark::kMicrosecond);

void BM_SeenTokensAddPrompt(benchmark::State& state) {
  const std::vector<int32_t> prompt = random_ids((size_t)state.range(0), 3);
  for (auto _ : state) {
    SeenTokens seen(prompt.size());
    seen.add(prompt);
    benchmark::DoNotOptimize(seen.ids().data());
  }
}
BENCHMARK(BM_SeenTokensAddPrompt)
    ->ArgName("tokens")
    ->Arg(4096)
    ->Arg(32768)
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvw

BENCHMARK_MAIN();
