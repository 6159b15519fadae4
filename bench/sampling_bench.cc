// bench/sampling_bench.cc: one draw's cost at Qwen2's 152k and Gemma 3's 262k vocabularies,
// greedy and sampled, plain and with vLLM's repetition_penalty over a seen set of a given size, so
// the penalty's share is visible next to the O(n_vocab) passes every draw makes anyway; and
// SeenTokens' cost of adding a prompt.
//
//   BM_Sample/mode:<m>/vocab:<n>/seen:<n>   time per draw; seen:0 = no penalty
//     mode 0 greedy, 1 temperature 1, 2 temperature 1 + top_p 0.9, 3 temperature 0.8 + top_p 0.9
//   BM_SampleCold/mode:<m>/vocab:<n>   the same over 16 rows in turn, as a 16-stream step
//     samples them: the rows do not fit in L2, so each draw's passes read from L3 or memory
//   BM_SampleStep/mode:<m>/vocab:<n>   16 rows per iteration, each checked for NaN/inf and then
//     sampled as Engine::sample_rows does, after streaming 64 MiB (as a step's
//     weights do: Qwen-sized output matrices alone are 67 MB at q8_0), so rows and scratch start
//     outside the caches; time per iteration = 16 draws
//   BM_SeenTokensAddPrompt/tokens:<n>      one prompt of n tokens (ids < 152k) into an empty set
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <random>
#include <vector>

#include "model/sampling.h"
#include "model/sampling_rows.h"
#include "model/seen_tokens.h"

namespace kvw {
namespace {

constexpr int32_t kVocab = 152064;  // the id range of the seen sets

// Logits ~ N(0, SIGMA) (environment, default 1: the rows of bench/sampling_vs_llama_server.sh's
// random-weight models measure sd 0.98-1.00, a flat row whose top_p 0.9 set is half the vocabulary;
// trained models' rows are peakier).
std::vector<float> random_row(int32_t n_vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  const char* sigma = std::getenv("SIGMA");
  std::normal_distribution<float> normal(0.0f,
                                         sigma != nullptr ? std::strtof(sigma, nullptr) : 1.0f);
  std::vector<float> row((size_t)n_vocab);
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

// The modes of the header comment.
SamplingParams params_of(int64_t mode) {
  return {.temperature = mode == 0   ? 0.0f
                         : mode == 3 ? 0.8f
                                     : 1.0f,
          .top_k = 0,
          .top_p = mode >= 2 ? 0.9f : 1.0f,
          .min_p = 0.0f,
          .seed = 1};
}

std::vector<std::vector<float>> sixteen_rows(int32_t n_vocab) {
  std::vector<std::vector<float>> rows;
  for (uint32_t r = 0; r < 16; ++r) rows.push_back(random_row(n_vocab, r + 1));
  return rows;
}

// Every mode at the default model's vocabulary and at Gemma's 262,144 tokens.
void every_mode_and_vocab(benchmark::internal::Benchmark* b) {
  b->ArgNames({"mode", "vocab"})
      ->ArgsProduct({{0, 1, 2, 3}, {kVocab, 262144}})
      ->Unit(benchmark::kMicrosecond);
}

void BM_Sample(benchmark::State& state) {
  const int64_t mode = state.range(0);
  const auto n_vocab = (int32_t)state.range(1);
  const auto num_seen = (size_t)state.range(2);
  SamplingParams p = params_of(mode);
  p.repetition_penalty = num_seen > 0 ? 1.1f : 1.0f;
  Sampler s(p, n_vocab);
  std::vector<float> row = random_row(n_vocab, 1);
  SeenTokens seen(num_seen);
  seen.add(random_ids(num_seen, 2));
  for (auto _ : state) benchmark::DoNotOptimize(s.sample(row.data(), {.seen = seen.ids()}));
  state.counters["seen"] = (double)seen.ids().size();
}
BENCHMARK(BM_Sample)
    ->ArgNames({"mode", "vocab", "seen"})
    ->ArgsProduct({{0, 1, 2, 3}, {kVocab, 262144}, {0}})
    ->ArgsProduct({{0, 2}, {kVocab}, {1024, 8192, 32768}})
    ->Unit(benchmark::kMicrosecond);

void BM_SampleCold(benchmark::State& state) {
  const int64_t mode = state.range(0);
  const auto n_vocab = (int32_t)state.range(1);
  Sampler s(params_of(mode), n_vocab);
  std::vector<std::vector<float>> rows = sixteen_rows(n_vocab);
  size_t r = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(s.sample(rows[r].data(), {}));
    r = (r + 1) % rows.size();
  }
}
BENCHMARK(BM_SampleCold)->Apply(every_mode_and_vocab);

void BM_SampleStep(benchmark::State& state) {
  const int64_t mode = state.range(0);
  const auto n_vocab = (int32_t)state.range(1);
  Sampler s(params_of(mode), n_vocab);
  std::vector<std::vector<float>> rows = sixteen_rows(n_vocab);
  std::vector<float> weights(16 << 20, 1.0f);
  float sink = 0.0f;
  for (auto _ : state) {
    state.PauseTiming();
    for (size_t i = 0; i < weights.size(); i += 16) sink += weights[i];
    state.ResumeTiming();
    for (auto& row : rows) {  // as Engine::sample_rows: the numerics guard, then the draw
      benchmark::DoNotOptimize(sampling_rows::all_finite(row.data(), n_vocab));
      benchmark::DoNotOptimize(s.sample(row.data(), {}));
    }
  }
  benchmark::DoNotOptimize(sink);
}
BENCHMARK(BM_SampleStep)->Apply(every_mode_and_vocab);

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
