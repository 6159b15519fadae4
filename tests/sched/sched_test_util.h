// tests/sched/sched_test_util.h: a fake engine for scheduler tests. It runs schedule() ->
// "forward" (nothing) -> "sample" (a deterministic token per position) -> update_from_output(),
// checking the scheduler's and the KV manager's invariants and the step budget after each step.
// No model, no tensors; the optional swap tier runs over a tiny KvArena and an in-memory file.
#pragma once

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "kv/kv_arena.h"
#include "kv/kv_manager.h"
#include "kv/swap_space.h"
#include "sched/scheduler.h"

namespace kvw::test {

class MemFile final : public BlockFile {
 public:
  explicit MemFile(uint64_t size) : bytes_(size) {}
  Status write_at(uint64_t offset, std::span<const uint8_t> data) override {
    std::memcpy(bytes_.data() + offset, data.data(), data.size());
    return Status::ok_status();
  }
  Status read_at(uint64_t offset, std::span<uint8_t> data) override {
    wait_until_open();
    std::memcpy(data.data(), bytes_.data() + offset, data.size());
    return Status::ok_status();
  }

  // While closed, reads wait (a slow disk); writes go through. Open before the harness dies.
  void close_reads() { reads_open_ = false; }
  void open_reads() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      reads_open_ = true;
    }
    cv_.notify_all();
  }
  int reads_waiting() const { return reads_waiting_.load(); }

 private:
  void wait_until_open() {
    std::unique_lock<std::mutex> lock(mu_);
    ++reads_waiting_;
    cv_.wait(lock, [&] { return reads_open_; });
    --reads_waiting_;
  }

  std::vector<uint8_t> bytes_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool reads_open_ = true;
  std::atomic<int> reads_waiting_{0};
};

inline std::vector<int32_t> tokens(int32_t n, int32_t base) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) t[size_t(i)] = base + i;
  return t;
}

// The sampled token at a position: a function of (seq, position) so reruns are comparable.
inline int32_t fake_token(SeqId s, int64_t pos) {
  return int32_t(100000 + (index_of(s) * 7919 + uint64_t(pos)) % 50000);
}

struct Harness {
  // num_swap_slots > 0 attaches a swap tier of that many blocks.
  Harness(const KvManagerConfig& kv_cfg, const SchedConfig& cfg, uint32_t num_swap_slots = 0)
      : arena(KvArenaConfig{.n_layer = 1,
                            .n_kv_heads = 1,
                            .head_dim = 4,
                            .block_size = kv_cfg.block_size,
                            .num_blocks = kv_cfg.num_blocks,
                            .dtype = KvDtype::kF32}),
        kv(kv_cfg, &arena),
        sched(cfg, &kv) {
    if (num_swap_slots > 0) {
      const uint64_t bytes = uint64_t(num_swap_slots) * arena.bytes_per_block();
      auto owned = std::make_unique<MemFile>(bytes);
      file = owned.get();
      auto swap = SwapSpace::open_with_file(
          SwapConfig{.path = "mem", .swap_bytes = bytes, .max_inflight_bytes = bytes}, &arena,
          std::move(owned));
      EXPECT_TRUE(swap.ok()) << swap.message();
      kv.attach_swap(std::move(swap).value());
    }
  }

  void add(uint64_t id, std::vector<int32_t> prompt, int32_t max_tokens) {
    const Status st = sched.add_request(
        RequestInput{.id = SeqId{id}, .prompt = std::move(prompt), .max_tokens = max_tokens});
    ASSERT_TRUE(st.ok()) << st.message();
  }

  // One engine step. `decide` may set stop/error on a sampled token.
  SchedulerOutput step(const std::function<void(SampledToken&)>& decide = nullptr) {
    SchedulerOutput out = sched.schedule();
    last_finished.assign(out.finished.begin(), out.finished.end());
    kv.check_invariants();
    sched.check_invariants();
    EXPECT_LE(out.num_batched_tokens, sched.config().max_num_batched_tokens);
    EXPECT_LE(out.scheduled.size(), size_t(sched.config().max_num_seqs));
    // Decodes (1 token each) come first, then prefill chunks, in every step.
    bool seen_prefill = false;
    for (const ScheduledSeq& s : out.scheduled) {
      EXPECT_FALSE(!s.is_prefill && seen_prefill) << "decode after a prefill, step " << out.step;
      EXPECT_TRUE(s.is_prefill || s.num_tokens == 1);
      seen_prefill = seen_prefill || s.is_prefill;
    }
    std::vector<SampledToken> sampled;
    for (const ScheduledSeq& s : out.scheduled) {
      // Slots for the span must exist before the forward writes them.
      EXPECT_GE(kv.num_tokens(s.seq_id), s.start_pos + s.num_tokens);
      if (!s.needs_logits) continue;
      SampledToken t{.seq_id = s.seq_id,
                     .token_id = fake_token(s.seq_id, s.start_pos + s.num_tokens)};
      if (decide) decide(t);
      sampled.push_back(t);
    }
    for (const FinishedRequest& f : sched.update_from_output(out, sampled)) {
      last_finished.push_back(f);
    }
    for (const FinishedRequest& f : last_finished) finished.push_back(f);
    kv.check_invariants();
    sched.check_invariants();
    return out;
  }

  // Steps until nothing is left (or max_steps); returns the steps taken.
  int run_to_completion(int max_steps = 100000) {
    int n = 0;
    while (sched.has_unfinished() && n < max_steps) {
      step();
      ++n;
    }
    return n;
  }

  FinishReason reason_of(uint64_t id) const {
    for (const FinishedRequest& f : finished) {
      if (f.seq_id == SeqId{id}) return f.reason;
    }
    return FinishReason::kNone;
  }

  KvArena arena;
  KvManager kv;
  Scheduler sched;
  MemFile* file = nullptr;                     // the swap tier's backing store, when attached
  std::vector<FinishedRequest> finished;       // all so far
  std::vector<FinishedRequest> last_finished;  // in the last step
};

inline const ScheduledSeq* find_scheduled(const SchedulerOutput& out, uint64_t id) {
  for (const ScheduledSeq& s : out.scheduled) {
    if (s.seq_id == SeqId{id}) return &s;
  }
  return nullptr;
}

}  // namespace kvw::test
