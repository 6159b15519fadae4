// bench/bench_main.h: what the Google Benchmark programs with a register_all() share: main's
// body, and the sweep the two attention benches register (KV dtype x depth x threads).
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/kv_dtype.h"

namespace kvw::bench {

// bf16_dot: the attention's opt-in bf16 q.k products (kernels.h AttnScores::bf16_dot).
using AttentionBench = void (*)(benchmark::State&, KvDtype, int64_t, int, bool bf16_dot);

// NAME/<dtype>/depth:D/threads:T for f16 and int8 KV, each depth, 1 and 2 threads; where the
// kernels implement bf16_dot (with_bf16_dot), also NAME/<dtype>/bf16dot/... for f16, bf16 and
// int8 KV.
inline void register_attention_sweep(const std::string& name, AttentionBench fn,
                                     std::initializer_list<int64_t> depths, bool with_bf16_dot) {
  const auto add = [&](KvDtype dtype, bool bf16_dot) {
    for (int64_t depth : depths) {
      for (int threads : {1, 2}) {
        const std::string full = name + "/" + kv_dtype_name(dtype) + (bf16_dot ? "/bf16dot" : "") +
                                 "/depth:" + std::to_string(depth) +
                                 "/threads:" + std::to_string(threads);
        benchmark::RegisterBenchmark(full.c_str(), fn, dtype, depth, threads, bf16_dot)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
      }
    }
  };
  for (KvDtype dtype : {KvDtype::kF16, KvDtype::kInt8}) add(dtype, false);
  if (!with_bf16_dot) return;
  for (KvDtype dtype : {KvDtype::kF16, KvDtype::kBF16, KvDtype::kInt8}) add(dtype, true);
}

// main() of a benchmark program whose benchmarks register_all() registers.
inline int run_registered(int argc, char** argv, void (*register_all)()) {
  register_all();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}

}  // namespace kvw::bench
