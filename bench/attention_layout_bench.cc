// bench/attention_layout_bench.cc: does block placement change attention speed on CPU?
// One decode-step attention (all heads of one token) over a 4096-token context whose 256 blocks
// are either contiguous (what the defragmenter restores) or scattered at random over an arena
// of 4096 blocks (a fragmented pool). Same bytes read either way; only the addresses differ.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/kernels.h"

namespace kvw::kernels {
namespace {

constexpr int32_t kBlockSize = 16, kKvHeads = 8, kHeads = 32, kHeadDim = 64;
constexpr int64_t kContext = 4096;
constexpr uint32_t kArenaBlocks = 4096;

void BM_AttentionDecode(benchmark::State& state) {
  const bool scattered = state.range(0) != 0;
  const int64_t stride = 2LL * kKvHeads * kBlockSize * kHeadDim * 2;  // f16 K and V
  std::vector<uint8_t> arena(kArenaBlocks * stride, 0);
  std::mt19937 rng(1);
  for (size_t i = 0; i < arena.size(); i += 2) arena[i + 1] = 0x3c ^ (rng() & 0x3);  // ~1.0 f16
  KvLayerView kv{KvDtype::kF16, arena.data(), arena.data() + stride / 2,
                 nullptr,       nullptr,      stride,
                 kBlockSize,    kKvHeads,     kHeadDim};
  std::vector<uint32_t> table(kContext / kBlockSize);
  if (scattered) {
    std::vector<uint32_t> all(kArenaBlocks);
    std::iota(all.begin(), all.end(), 0u);
    std::shuffle(all.begin(), all.end(), rng);
    std::copy_n(all.begin(), table.size(), table.begin());
  } else {
    std::iota(table.begin(), table.end(), 1000u);
  }
  std::vector<float> q(kHeads * kHeadDim, 0.01f), out(kHeads * kHeadDim);
  std::vector<float> scratch(attention_scratch_floats(kHeadDim));
  const KernelTable& t = kernels();
  // Evict the context from cache between iterations so both layouts read DRAM, as a real step
  // that visits every layer does.
  std::vector<uint8_t> flush(64 << 20, 1);
  for (auto _ : state) {
    state.PauseTiming();
    for (size_t i = 0; i < flush.size(); i += 64) flush[i]++;
    state.ResumeTiming();
    const AttnQuery query = {q.data(), out.data(), 0, kContext};
    t.attention({&query, 1}, kHeads, kv, table, {0.125f}, scratch.data());
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * (int64_t)table.size() * stride);
  state.SetLabel(scattered ? "scattered" : "contiguous");
}
BENCHMARK(BM_AttentionDecode)->Arg(0)->Arg(1)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace kvw::kernels

BENCHMARK_MAIN();
