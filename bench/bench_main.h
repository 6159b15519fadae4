// bench/bench_main.h: what the Google Benchmark programs with a register_all() share: main's
// body, and the sweep the two attention benches register (KV dtype x depth x threads).
#pragma once

#include <benchmark/benchmark.h>

#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/kv_dtype.h"

namespace kvw::bench {

using AttentionBench = void (*)(benchmark::State&, KvDtype, int64_t, int);

// NAME/<dtype>/depth:D/threads:T for f16 and int8 KV, each depth, 1 and 2 threads.
inline void register_attention_sweep(const std::string& name, AttentionBench fn,
                                     std::initializer_list<int64_t> depths) {
  for (KvDtype dtype : {KvDtype::kF16, KvDtype::kInt8}) {
    for (int64_t depth : depths) {
      for (int threads : {1, 2}) {
        const std::string full = name + "/" + kv_dtype_name(dtype) +
                                 "/depth:" + std::to_string(depth) +
                                 "/threads:" + std::to_string(threads);
        benchmark::RegisterBenchmark(full.c_str(), fn, dtype, depth, threads)
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
      }
    }
  }
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
