// kernels/compute_probe.h: the compute peaks that prefill (compute-bound matmuls) is measured
// against, beside the bandwidth probes of membw.h: f32 FMA GFLOP/s and int8 dot-product GOP/s
// (2 ops per multiply-add) with the widest instructions this CPU has. Register-only loops with
// independent accumulators, so they measure the core, not memory. Call from the thread that owns
// `pool`, never concurrently with other pool work.
#pragma once

#include <string>

#include "core/thread_pool.h"

namespace kvw::kernels {

struct ComputePeak {
  double fma_gflops = 0;  // f32 fused multiply-add, 2 flops per lane
  std::string fma_kind;   // "avx512", "avx2" or "scalar"
  double int8_gops = 0;   // u8 x s8 multiply-adds into int32, 2 ops each
  std::string int8_kind;  // "avx512-vnni", "avx-vnni", "avx512bw-maddubs", "avx2-maddubs", "scalar"
};

// Best of a few short repetitions over all of the pool's threads.
ComputePeak measure_compute_peak(ThreadPool& pool);

}  // namespace kvw::kernels
