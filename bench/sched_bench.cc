// bench/sched_bench.cc: the scheduler's own cost per engine step (issue 4, section 7: target
// < 1% of the step time).
//   BM_SchedulerStep/num_seqs:N  schedule() + update_from_output() with N running decodes over a
//                                simulated KV pool (no storage); time per iteration = per step,
//                                items/s = sequence-steps. Finished requests are replaced at once
//                                so N stay running.
#include <benchmark/benchmark.h>

#include <vector>

#include "kv/kv_manager.h"
#include "sched/scheduler.h"

namespace kvw {
namespace {

constexpr int64_t kMaxModelLen = 2048;
constexpr int32_t kPromptTokens = 128;

void add(Scheduler& sched, uint64_t id) {
  std::vector<int32_t> prompt(kPromptTokens);
  for (int32_t i = 0; i < kPromptTokens; ++i) prompt[size_t(i)] = int32_t(id * 131 + uint64_t(i));
  const Status st = sched.add_request(RequestInput{.id = SeqId{id},
                                                   .prompt = std::move(prompt),
                                                   .max_tokens = int32_t(kMaxModelLen),
                                                   .turn_starts = {}});
  if (!st.ok()) std::abort();
}

void BM_SchedulerStep(benchmark::State& state) {
  const int32_t num_seqs = int32_t(state.range(0));
  // Room for every sequence at full length: no preemption, the steady decode path.
  KvManager kv(KvManagerConfig{.num_blocks = uint32_t(num_seqs * kMaxModelLen / 16),
                               .block_size = 16,
                               .enable_prefix_caching = true,
                               .watermark_blocks = 0},
               nullptr);
  Scheduler sched(SchedConfig{.max_num_batched_tokens = 8192,
                              .max_num_seqs = num_seqs,
                              .max_model_len = kMaxModelLen,
                              .long_prefill_chunk_tokens = 512},
                  &kv);
  uint64_t next_id = 1;
  for (int32_t i = 0; i < num_seqs; ++i) add(sched, next_id++);
  std::vector<SampledToken> sampled;
  sampled.reserve(size_t(num_seqs));
  auto step = [&] {
    SchedulerOutput out = sched.schedule();
    sampled.clear();
    for (const ScheduledSeq& s : out.scheduled) {
      if (s.needs_logits) sampled.push_back({.seq_id = s.seq_id, .token_id = int32_t(s.start_pos)});
    }
    for (const FinishedRequest& f : sched.update_from_output(out, sampled)) {
      (void)f;
      add(sched, next_id++);
    }
  };
  while (sched.num_waiting() > 0 || sched.num_running() < size_t(num_seqs)) step();  // prefills
  for (auto _ : state) step();
  if (sched.counters().num_preemptions != 0) state.SkipWithError("unexpected preemption");
  state.SetItemsProcessed(int64_t(state.iterations()) * num_seqs);
}
BENCHMARK(BM_SchedulerStep)->ArgName("num_seqs")->Arg(16)->Arg(256)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvw

BENCHMARK_MAIN();
