// Speculative decoding in the scheduler (no model): prompt-lookup drafts, the decode that
// carries them, and the update that keeps the accepted tokens, rolls back the rejected slots
// (blocks wholly beyond freed, nothing unverified hashed), applies stop and length per token,
// caps the draft by max_tokens and adapts its length.
#include <gtest/gtest.h>

#include "sched/ngram_proposer.h"
#include "sched_test_util.h"

namespace kvw {
namespace {

using test::Harness;

TEST(NgramProposer, ProposesWhatFollowedTheMostRecentLongestMatch) {
  std::vector<int32_t> d;
  // "a b c" recurs at 0 and at 4; the most recent earlier occurrence (4) wins.
  const std::vector<int32_t> t = {1, 2, 3, 9, 1, 2, 3, 7, 8, 1, 2, 3};
  EXPECT_EQ(propose_ngram_draft(t, 1, 3, 3, &d), 3);
  EXPECT_EQ(d, (std::vector<int32_t>{7, 8, 1}));
  // The draft stops where the sequence does.
  const std::vector<int32_t> u = {5, 6, 5};
  EXPECT_EQ(propose_ngram_draft(u, 1, 3, 4, &d), 2);
  EXPECT_EQ(d, (std::vector<int32_t>{6, 5}));
  // The longest n-gram is preferred: "2 3" matches at 1 (-> 4), "3" alone more recently (-> 8).
  const std::vector<int32_t> v = {1, 2, 3, 4, 0, 3, 8, 2, 3};
  EXPECT_EQ(propose_ngram_draft(v, 1, 2, 1, &d), 1);
  EXPECT_EQ(d, (std::vector<int32_t>{4}));
  EXPECT_EQ(propose_ngram_draft(v, 1, 1, 1, &d), 1);
  EXPECT_EQ(d, (std::vector<int32_t>{8}));
  // No recurring n-gram of at least ngram_min tokens: no draft.
  EXPECT_EQ(propose_ngram_draft(v, 3, 4, 4, &d), 0);
  EXPECT_TRUE(d.empty());
  EXPECT_EQ(propose_ngram_draft(std::vector<int32_t>{7}, 1, 4, 4, &d), 0);
}

SchedConfig spec_config() {
  return SchedConfig{.max_num_batched_tokens = 64,
                     .max_num_seqs = 4,
                     .max_model_len = 256,
                     .long_prefill_chunk_tokens = 0,
                     .spec = SpecConfig{.enabled = true,
                                        .num_speculative_tokens = 4,
                                        .prompt_lookup_max = 3,
                                        .prompt_lookup_min = 1,
                                        .max_seqs = 4}};
}

// 1 2 3 4 5 repeated: 15 tokens, the last "5" computed by the prefill, then 1 sampled.
std::vector<int32_t> cycle_prompt() {
  std::vector<int32_t> p;
  for (int i = 0; i < 3; ++i) {
    for (int32_t t = 1; t <= 5; ++t) p.push_back(t);
  }
  return p;
}

void add_spec(Harness& h, uint64_t id, std::vector<int32_t> prompt, int32_t max_tokens) {
  ASSERT_TRUE(h.sched
                  .add_request(RequestInput{.id = SeqId{id},
                                            .prompt = std::move(prompt),
                                            .max_tokens = max_tokens,
                                            .speculate = true})
                  .ok());
}

std::vector<FinishedRequest> update(Harness& h, const SchedulerOutput& out,
                                    const std::vector<SampledToken>& toks) {
  auto done = h.sched.update_from_output(out, toks);
  h.kv.check_invariants();
  h.sched.check_invariants();
  return done;
}

SampledToken tok(uint64_t id, int32_t t, bool stop = false) {
  return SampledToken{.seq_id = SeqId{id}, .token_id = t, .stop = stop, .error = false};
}

TEST(SpecDecode, DecodeCarriesDraftsAndRejectedSlotsAreRolledBack) {
  Harness h(KvManagerConfig{.num_blocks = 16, .block_size = 16}, spec_config());
  add_spec(h, 1, cycle_prompt(), 32);
  SchedulerOutput prefill = h.sched.schedule();
  ASSERT_EQ(prefill.scheduled.size(), 1u);
  EXPECT_EQ(prefill.scheduled[0].num_draft_tokens, 0);  // prefills never draft
  update(h, prefill, {tok(1, 1)});                      // ... 4 5 | 1

  // Decode of "1" at position 15 with drafts: "4 5 1" recurs at 3, followed by 2 3 4 5.
  SchedulerOutput out = h.sched.schedule();
  ASSERT_EQ(out.scheduled.size(), 1u);
  const ScheduledSeq& s = out.scheduled[0];
  EXPECT_FALSE(s.is_prefill);
  EXPECT_EQ(s.start_pos, 15);
  EXPECT_EQ(s.num_draft_tokens, 4);
  EXPECT_EQ(s.num_tokens, 5);
  EXPECT_EQ(out.num_batched_tokens, 5);
  const Request* r = h.sched.find(SeqId{1});
  EXPECT_EQ(r->draft_ids, (std::vector<int32_t>{2, 3, 4, 5}));
  EXPECT_EQ(h.kv.num_tokens(SeqId{1}), 20);  // slots for 16 + 4 drafts: two blocks
  EXPECT_EQ(h.kv.block_table(SeqId{1}).size(), 2u);

  // The target accepts 2 and 3, then says 9: positions 15..17 hold valid KV.
  update(h, out, {tok(1, 2), tok(1, 3), tok(1, 9)});
  EXPECT_EQ(r->num_computed_tokens, 18);
  EXPECT_EQ(r->num_tokens(), 19);
  EXPECT_EQ(r->output_token_ids().back(), 9);
  EXPECT_EQ(h.kv.num_tokens(SeqId{1}), 18);  // rolled back to the accepted length
  EXPECT_TRUE(r->draft_ids.empty());
  EXPECT_EQ(r->num_spec_tokens, 3);  // shrank to just past what was accepted
  const SpecCounters& c = h.sched.counters().spec;
  EXPECT_EQ(c.num_drafts, 1u);
  EXPECT_EQ(c.num_draft_tokens, 4u);
  EXPECT_EQ(c.num_accepted_tokens, 2u);
  EXPECT_EQ(c.num_accepted_tokens_per_pos[0], 1u);
  EXPECT_EQ(c.num_accepted_tokens_per_pos[1], 1u);
  EXPECT_EQ(c.num_accepted_tokens_per_pos[2], 0u);
  // Only the first block is full and computed: one hashed block, none past position 18.
  EXPECT_EQ(h.kv.stats().num_cached_blocks + h.kv.stats().num_used_blocks, 2u);
}

TEST(SpecDecode, WholeBlocksOfRejectedDraftsAreFreed) {
  SchedConfig cfg = spec_config();
  Harness h(KvManagerConfig{.num_blocks = 16, .block_size = 16}, cfg);
  // 30 tokens (the cycle, twice over) + the sampled one: the decode is at 30, drafts 31..34.
  std::vector<int32_t> p = cycle_prompt();
  p.insert(p.end(), p.begin(), p.end());
  add_spec(h, 1, p, 32);
  SchedulerOutput prefill = h.sched.schedule();
  update(h, prefill, {tok(1, 1)});
  SchedulerOutput out = h.sched.schedule();
  ASSERT_EQ(out.scheduled[0].num_draft_tokens, 4);
  EXPECT_EQ(h.kv.num_tokens(SeqId{1}), 35);
  EXPECT_EQ(h.kv.block_table(SeqId{1}).size(), 3u);
  const uint32_t free_before = h.kv.pool().num_free_blocks();
  update(h, out, {tok(1, 7)});  // the first draft is rejected
  EXPECT_EQ(h.kv.num_tokens(SeqId{1}), 31);
  EXPECT_EQ(h.kv.block_table(SeqId{1}).size(), 2u);
  EXPECT_EQ(h.kv.pool().num_free_blocks(), free_before + 1);
  EXPECT_EQ(h.sched.find(SeqId{1})->num_spec_tokens, 1);
}

TEST(SpecDecode, StopOnAnAcceptedDraftEndsTheRequestThere) {
  Harness h(KvManagerConfig{.num_blocks = 16, .block_size = 16}, spec_config());
  add_spec(h, 1, cycle_prompt(), 32);
  update(h, h.sched.schedule(), {tok(1, 1)});
  SchedulerOutput out = h.sched.schedule();
  ASSERT_EQ(out.scheduled[0].num_draft_tokens, 4);
  auto done = update(h, out, {tok(1, 2), tok(1, 3, /*stop=*/true)});
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].reason, FinishReason::kStop);
  EXPECT_EQ(h.kv.num_sequences(), 0u);
  EXPECT_EQ(h.kv.stats().num_used_blocks, 0u);
}

TEST(SpecDecode, DraftIsCappedSoMaxTokensEndsOnTheLastToken) {
  Harness h(KvManagerConfig{.num_blocks = 16, .block_size = 16}, spec_config());
  add_spec(h, 1, cycle_prompt(), 3);  // 1 from the prefill, at most 2 more
  update(h, h.sched.schedule(), {tok(1, 1)});
  SchedulerOutput out = h.sched.schedule();
  ASSERT_EQ(out.scheduled[0].num_draft_tokens, 1);
  auto done = update(h, out, {tok(1, 2), tok(1, 3)});
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].reason, FinishReason::kLength);
}

TEST(SpecDecode, DraftsUseOnlyFreeBlocksAndOptedOutRequestsNeverDraft) {
  // Three blocks: request 1 (speculating) holds two, request 2 (opted out) the third. No block
  // is free, so request 1's draft shrinks to the slots left in its own last block.
  Harness h(KvManagerConfig{.num_blocks = 3, .block_size = 16}, spec_config());
  std::vector<int32_t> p = cycle_prompt();
  p.insert(p.end(), p.begin(), p.begin() + 14);  // 29 tokens, decode at 29, slots up to 31
  add_spec(h, 1, p, 32);
  ASSERT_TRUE(
      h.sched.add_request(RequestInput{.id = SeqId{2}, .prompt = cycle_prompt(), .max_tokens = 8})
          .ok());  // speculate defaults to false
  SchedulerOutput prefill = h.sched.schedule();
  ASSERT_EQ(prefill.scheduled.size(), 2u);
  update(h, prefill, {tok(1, 5), tok(2, 1)});
  EXPECT_EQ(h.kv.pool().num_free_blocks(), 0u);
  SchedulerOutput out = h.sched.schedule();
  ASSERT_EQ(out.scheduled.size(), 2u);
  EXPECT_EQ(out.scheduled[0].num_draft_tokens, 2);  // positions 30, 31: its block's last slots
  EXPECT_EQ(out.scheduled[1].num_draft_tokens, 0);  // request 2 opted out
  EXPECT_EQ(out.scheduled[1].num_tokens, 1);
  EXPECT_EQ(h.sched.counters().num_preemptions, 0u);
  update(h, out, {tok(1, 9), tok(2, 2)});
}

}  // namespace
}  // namespace kvw
