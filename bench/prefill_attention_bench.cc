// bench/prefill_attention_bench.cc: prefill attention at depth as the model runs it, in GFLOP/s
// beside the f32 FMA peak of the same threads (issue 32 item 2).
//
//   BM_PrefillAttention/<dtype>/depth:<d>/threads:<t>   one 512-token prompt chunk (the engine's
//       chunk) of one TinyLlama-shaped layer (4 KV heads x GQA 8, head_dim 64, blocks of 16
//       scattered over the arena) whose queries sit at positions d..d+511 and attend causally:
//       tiles of 16 queries x one KV head dealt round-robin over the threads as
//       model/forward.cc deals them. GFLOP/s: 4 x head_dim flops (QK and PV) per (query head,
//       position attended); fma_GFLOP/s: the compute probe on the same threads, run once before
//       the timed loop; share = GFLOP/s / fma_GFLOP/s.
// KVW_ISA=ref|avx2|avx2vnni|avx512|avx512vnni pins the kernel table.
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "bench_main.h"
#include "core/thread_pool.h"
#include "kernels/compute_probe.h"
#include "kernels/kernels.h"

namespace kvw::kernels {
namespace {

constexpr int32_t kHd = 64, kGroup = 8, kKvHeads = 4, kBlock = 16, kHeads = kGroup * kKvHeads;
constexpr int64_t kChunk = 512, kTile = 16;

void bm_prefill_attention(benchmark::State& state, KvDtype dtype, int64_t depth, int threads,
                          bool bf16_dot) {
  const KernelTable& k = kernels();
  const int64_t n_pos = depth + kChunk;
  const int64_t n_blocks = (n_pos + kBlock - 1) / kBlock;
  const int64_t row_bytes = (int64_t)kv_elem_bytes(dtype) * kHd;
  const int64_t scale_bytes = dtype == KvDtype::kInt8 ? kKvHeads * kBlock * 4 : 0;
  const int64_t k_bytes = kKvHeads * kBlock * row_bytes;
  const int64_t stride = 2 * k_bytes + 2 * scale_bytes;
  std::vector<uint8_t> arena(n_blocks * stride);
  uint8_t* b = arena.data();
  const KvLayerView view{dtype,
                         b,
                         b + k_bytes,
                         scale_bytes ? b + 2 * k_bytes : nullptr,
                         scale_bytes ? b + 2 * k_bytes + scale_bytes : nullptr,
                         stride,
                         kBlock,
                         kKvHeads,
                         kHd};
  std::vector<uint32_t> table(n_blocks);  // scattered: 7 is coprime with these block counts
  for (int64_t i = 0; i < n_blocks; ++i) table[i] = (uint32_t)((i * 7) % n_blocks);
  std::mt19937 rng(5);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> kr(kKvHeads * kHd), vr(kKvHeads * kHd);
  for (int64_t p = 0; p < n_pos; ++p) {
    for (auto& x : kr) x = dist(rng);
    for (auto& x : vr) x = dist(rng);
    k.kv_store(view, table, p, kr.data(), vr.data());
  }
  std::vector<float> q(kChunk * kHeads * kHd), out(kChunk * kHeads * kHd);
  for (auto& x : q) x = dist(rng);

  ThreadPool pool(threads);
  const double peak = measure_compute_peak(pool).fma_gflops;
  const int64_t scratch_floats = attention_scratch_floats(kHd);
  std::vector<float> scratch(scratch_floats * threads);
  for (auto _ : state) {
    pool.run([&](int ith, int nth) {
      AttnQuery tile[kTile];
      int64_t item = 0;
      for (int64_t t0 = 0; t0 < kChunk; t0 += kTile) {
        for (int32_t g = 0; g < kKvHeads; ++g, ++item) {
          if (item % nth != ith) continue;
          for (int64_t t = t0; t < t0 + kTile; ++t) {
            const int64_t off = (t * kHeads + g * kGroup) * kHd;
            tile[t - t0] = {q.data() + off, out.data() + off, 0, depth + t + 1};
          }
          k.attention({tile, (size_t)kTile}, kGroup, kv_head_view(view, g), table,
                      {0.125f, 0.0f, nullptr, bf16_dot}, scratch.data() + ith * scratch_floats);
        }
      }
    });
    benchmark::DoNotOptimize(out.data());
  }
  // Positions attended: depth + t + 1 for t in [0, kChunk).
  const double attended = (double)kChunk * depth + (double)kChunk * (kChunk + 1) / 2;
  const double flops = attended * kHeads * 4.0 * kHd;
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * state.iterations() * 1e-9, benchmark::Counter::kIsRate);
  state.counters["fma_GFLOP/s"] = peak;
  state.counters["share"] =
      benchmark::Counter(flops * state.iterations() * 1e-9 / peak, benchmark::Counter::kIsRate);
  state.SetLabel(k.isa);
}

void register_all() {
  bench::register_attention_sweep("BM_PrefillAttention", bm_prefill_attention, {0, 8192, 32768},
                                  attention_bf16_dot_supported(kernels()));
}

}  // namespace
}  // namespace kvw::kernels

int main(int argc, char** argv) {
  return kvw::bench::run_registered(argc, argv, kvw::kernels::register_all);
}
