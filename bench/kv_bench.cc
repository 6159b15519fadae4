// bench/kv_bench.cc: KV manager micro-benchmarks (issue 3, section 8).
//   BM_BlockPoolAllocateFree/n  allocate n blocks + free them; items/s = blocks (target >= 10M/s)
//   BM_BlockLeaseAllocateFree/n the same through optional<BlockLease> (one vector per lease)
//   BM_PrefixLookup/prompt_len  longest cached prefix of a prompt; items/s = lookups
//   BM_SchedulerLikeStep/seqs   one decode step for every running sequence (allocate 1 slot,
//                               commit, hash when a block fills); items/s = sequence-steps
#include <benchmark/benchmark.h>

#include <vector>

#include "kv/block_pool.h"
#include "kv/kv_manager.h"

namespace kvw {
namespace {

std::vector<int32_t> make_tokens(int32_t n, int32_t base) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = base + i * 7;
  return t;
}

void BM_BlockPoolAllocateFree(benchmark::State& state) {
  const uint32_t n = static_cast<uint32_t>(state.range(0));
  BlockPool pool(4096, nullptr);
  std::vector<BlockId> blocks;
  blocks.reserve(n);
  for (auto _ : state) {
    blocks.clear();
    if (!pool.allocate(n, blocks)) state.SkipWithError("pool exhausted");
    pool.free(blocks);
    benchmark::DoNotOptimize(blocks.data());
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * n);
}
BENCHMARK(BM_BlockPoolAllocateFree)->Arg(1)->Arg(16)->Arg(256);

void BM_BlockLeaseAllocateFree(benchmark::State& state) {
  const uint32_t n = static_cast<uint32_t>(state.range(0));
  BlockPool pool(4096, nullptr);
  for (auto _ : state) {
    std::optional<BlockLease> lease = pool.allocate(n);
    benchmark::DoNotOptimize(lease->blocks().data());
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * n);
}
BENCHMARK(BM_BlockLeaseAllocateFree)->Arg(1)->Arg(16);

void BM_PrefixLookup(benchmark::State& state) {
  const int32_t len = static_cast<int32_t>(state.range(0));
  KvManager kv(KvManagerConfig{.num_blocks = 8192}, nullptr);
  // 64 cached prompts of `len` tokens sharing nothing.
  std::vector<std::vector<int32_t>> prompts;
  for (uint64_t s = 0; s < 64; ++s) {
    prompts.push_back(make_tokens(len, int32_t(s) * 100000));
    kv.add_sequence(SeqId{s}, prompts.back());
    if (kv.allocate_slots(SeqId{s}, len) != AllocStatus::kOk) state.SkipWithError("pool full");
    kv.commit_computed(SeqId{s}, prompts.back(), len);
    kv.free_sequence(SeqId{s});
  }
  size_t i = 0;
  int64_t hit_tokens = 0;
  for (auto _ : state) {
    hit_tokens += kv.num_cached_prefix_tokens(prompts[i++ & 63]);
  }
  benchmark::DoNotOptimize(hit_tokens);
  state.SetItemsProcessed(int64_t(state.iterations()));
  state.counters["blocks_per_lookup"] = double(len - 1) / 16;
}
BENCHMARK(BM_PrefixLookup)->Arg(512)->Arg(4096);

void BM_SchedulerLikeStep(benchmark::State& state) {
  const uint64_t num_seqs = static_cast<uint64_t>(state.range(0));
  constexpr int32_t kMaxLen = 1024;
  KvManager kv(KvManagerConfig{.num_blocks = uint32_t(num_seqs) * (kMaxLen / 16 + 1)}, nullptr);
  std::vector<std::vector<int32_t>> tokens(num_seqs);
  uint64_t next_id = 0;
  std::vector<uint64_t> ids(num_seqs);
  auto start = [&](size_t k) {
    ids[k] = next_id++;
    tokens[k] = make_tokens(200 + int32_t(k % 64), int32_t(k) * 3);
    const int64_t cached = kv.add_sequence(SeqId{ids[k]}, tokens[k]);
    (void)kv.allocate_slots(SeqId{ids[k]}, int64_t(tokens[k].size()) - cached);
    kv.commit_computed(SeqId{ids[k]}, tokens[k], int64_t(tokens[k].size()));
  };
  for (size_t k = 0; k < num_seqs; ++k) start(k);
  for (auto _ : state) {
    for (size_t k = 0; k < num_seqs; ++k) {
      const SeqId s{ids[k]};
      tokens[k].push_back(int32_t(tokens[k].size()));
      if (kv.allocate_slots(s, 1) != AllocStatus::kOk) state.SkipWithError("no blocks");
      kv.commit_computed(s, tokens[k], int64_t(tokens[k].size()));
      if (tokens[k].size() >= kMaxLen) {
        kv.free_sequence(s);
        start(k);
      }
    }
    kv.advance_step();
  }
  state.SetItemsProcessed(int64_t(state.iterations()) * int64_t(num_seqs));
}
BENCHMARK(BM_SchedulerLikeStep)->Arg(256);

}  // namespace
}  // namespace kvw

BENCHMARK_MAIN();
