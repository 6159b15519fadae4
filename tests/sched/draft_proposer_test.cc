// The Scheduler's seam to a draft model (no model): with a DraftProposer installed, the step's
// prefill chunks are offered for catch-up (max_draft 0, the tokens the target computes), the
// decodes get the proposer's drafts (one call for all), a draft is cut to the free blocks and
// the token budget, and the proposer hears of every finish and preemption.
#include "sched/draft_proposer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "sched_test_util.h"

namespace kvw {
namespace {

using test::Harness;

// Proposes "last token + 1, + 2, ..." and records what it was asked.
class CountingProposer : public DraftProposer {
 public:
  void propose(std::span<DraftSlot> slots) override {
    ++num_calls;
    for (DraftSlot& s : slots) {
      offered[index_of(s.seq_id)].push_back({s.tokens.size(), s.max_draft});
      for (int32_t i = 0; i < s.max_draft; ++i) s.draft[i] = s.tokens.back() + 1 + i;
      s.num_draft = s.max_draft;
    }
  }
  void release(SeqId seq) override { released.push_back(index_of(seq)); }
  int num_calls = 0;
  std::map<uint64_t, std::vector<std::pair<size_t, int32_t>>> offered;  // (tokens, max_draft)
  std::vector<uint64_t> released;
};

SchedConfig config(int32_t max_batched) {
  return SchedConfig{.max_num_batched_tokens = max_batched,
                     .max_num_seqs = 4,
                     .max_model_len = 256,
                     .long_prefill_chunk_tokens = 0,
                     .spec = SpecConfig{.enabled = true,
                                        .num_speculative_tokens = 3,
                                        .max_seqs = 4,
                                        .draft_model = "draft.gguf"}};
}

void add(Harness& h, uint64_t id, int len, int32_t max_tokens, bool speculate = true) {
  std::vector<int32_t> p;
  for (int i = 0; i < len; ++i) p.push_back(100 + i);
  ASSERT_TRUE(h.sched
                  .add_request(RequestInput{.id = SeqId{id},
                                            .prompt = std::move(p),
                                            .max_tokens = max_tokens,
                                            .speculate = speculate})
                  .ok());
}

SampledToken tok(uint64_t id, int32_t t) {
  return SampledToken{.seq_id = SeqId{id}, .token_id = t, .stop = false, .error = false};
}

TEST(DraftProposerSeam, PrefillChunksAreOfferedThenDecodesCarryTheProposersDrafts) {
  Harness h(KvManagerConfig{.num_blocks = 16, .block_size = 16}, config(24));
  CountingProposer p;
  h.sched.set_draft_proposer(&p);
  add(h, 1, 40, 8);
  add(h, 2, 10, 8, /*speculate=*/false);
  // 40 prompt tokens in chunks of 24 and 16: each chunk is offered with the tokens up to its end
  // (the first one in the step that admits it).
  SchedulerOutput a = h.sched.schedule();
  ASSERT_EQ(p.offered[1].size(), 1u);
  h.sched.update_from_output(a, {});
  SchedulerOutput b = h.sched.schedule();
  ASSERT_EQ(p.offered[1].size(), 2u);
  EXPECT_EQ(p.offered[1][0], (std::pair<size_t, int32_t>{24, 0}));
  EXPECT_EQ(p.offered[1][1], (std::pair<size_t, int32_t>{40, 0}));
  EXPECT_FALSE(p.offered.contains(2));  // opted out: never offered
  std::vector<SampledToken> first;
  for (const ScheduledSeq& s : b.scheduled) {
    if (s.needs_logits) first.push_back(tok(index_of(s.seq_id), 7));
  }
  h.sched.update_from_output(b, first);
  // Decode of request 1: the proposer's drafts 8 9 10 after its last token 7.
  SchedulerOutput c = h.sched.schedule();
  const auto it = std::find_if(c.scheduled.begin(), c.scheduled.end(),
                               [](const ScheduledSeq& s) { return index_of(s.seq_id) == 1; });
  ASSERT_NE(it, c.scheduled.end());
  EXPECT_EQ(it->num_draft_tokens, 3);
  EXPECT_EQ(h.sched.find(SeqId{1})->draft_ids, (std::vector<int32_t>{8, 9, 10}));
  EXPECT_EQ(p.offered[1].back(), (std::pair<size_t, int32_t>{41, 3}));
  h.kv.check_invariants();
  h.sched.check_invariants();
}

TEST(DraftProposerSeam, ReleasedOnFinishAndOnPreemption) {
  // 6 blocks: two requests of 40 prompt tokens (3 blocks each once they decode) cannot both grow.
  Harness h(KvManagerConfig{.num_blocks = 6, .block_size = 16, .enable_prefix_caching = false},
            config(128));
  CountingProposer p;
  h.sched.set_draft_proposer(&p);
  add(h, 1, 47, 30);
  add(h, 2, 47, 30);
  bool preempted = false;
  for (int step = 0; step < 200 && h.sched.has_unfinished(); ++step) {
    SchedulerOutput out = h.sched.schedule();
    if (!out.preempted.empty()) {
      preempted = true;
      for (SeqId id : out.preempted) {
        EXPECT_NE(std::find(p.released.begin(), p.released.end(), index_of(id)), p.released.end());
      }
    }
    std::vector<SampledToken> toks;
    for (const ScheduledSeq& s : out.scheduled) {
      if (s.needs_logits) toks.push_back(tok(index_of(s.seq_id), 5));  // rejects every draft
    }
    h.sched.update_from_output(out, toks);
    h.kv.check_invariants();
    h.sched.check_invariants();
  }
  EXPECT_TRUE(preempted);
  EXPECT_FALSE(h.sched.has_unfinished());
  // Both finished: each released at least once at its end.
  EXPECT_NE(std::find(p.released.begin(), p.released.end(), 1u), p.released.end());
  EXPECT_NE(std::find(p.released.begin(), p.released.end(), 2u), p.released.end());
  EXPECT_EQ(h.kv.num_allocatable_blocks(), 6u);
}

}  // namespace
}  // namespace kvw
