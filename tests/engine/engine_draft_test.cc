// Speculative decoding with a draft model (--draft-model): greedy output is identical token for
// token to plain decoding alone, batched (beside opted-out, sampled and chunked-prefill
// requests), preempted (recompute and swap) and after a prefix hit; seeded sampled output is
// identical too, and a chi-square test compares the sampled distribution at drafted positions
// with plain sampling's. Drafts are really accepted and really rejected (the draft is the target
// itself, a truncated-layer copy of it, or another random model), the budget table carries the
// draft's rows exactly as the planner computes them, and a draft with another vocabulary is
// refused naming both files. KV invariants are checked every step; every block is free at the end.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <iostream>
#include <map>
#include <memory>
#include <new>

#include "engine/engine.h"
#include "engine_spec_util.h"
#include "engine_test_util.h"
#include "gguf/gguf_file.h"
#include "gguf/gguf_writer.h"
#include "model/model_maker.h"
#include "planner/engine_budget.h"
#include "planner/model_source.h"
#include "sched/sched_config.h"

namespace kvw {
namespace {

using spectest::expect_all_free;
using spectest::run_batch;
using testutil::config_with_blocks;
using testutil::greedy;
using testutil::make_engine;
using testutil::run_one;

SpecConfig draft_spec(const std::string& draft, int32_t k = 4) {
  return SpecConfig{
      .enabled = true, .num_speculative_tokens = k, .max_seqs = 16, .draft_model = draft};
}

// A copy of `src` keeping only its first `n_layer` layers: a cheaper model that agrees with the
// target often but not always (a functional draft for random weights).
std::string truncated_copy(const std::string& src, int32_t n_layer) {
  auto file = GgufFile::open(src);
  EXPECT_TRUE(file.ok()) << file.message();
  GgufWriter w((*file)->version(), (*file)->alignment());
  for (const auto& kv : (*file)->metadata()) w.set(kv.key, kv.value);
  w.set_u32("llama.block_count", (uint32_t)n_layer);
  for (const auto& t : (*file)->tensors()) {
    if (t.name.rfind("blk.", 0) == 0 && std::stoi(t.name.substr(4)) >= n_layer) continue;
    const uint8_t* d = (*file)->tensor_data(t);
    w.add_tensor(t.name, t.type, t.shape, std::vector<uint8_t>(d, d + t.num_bytes));
  }
  const std::string path =
      ::testing::TempDir() + "/engine_draft_" + std::to_string(n_layer) + "l.gguf";
  Status st = w.write(path);
  EXPECT_TRUE(st.ok()) << st.message();
  return path;
}

std::vector<std::vector<int32_t>> plain_outputs(const std::string& model,
                                                const std::vector<GenerationRequest>& rs) {
  auto e = make_engine(config_with_blocks(model, 256));
  std::vector<std::vector<int32_t>> out;
  if (e == nullptr) return out;
  for (const auto& r : run_batch(*e, rs)) out.push_back(r.tokens);
  EXPECT_EQ(e->stats().spec.num_drafts, 0u);
  return out;
}

class EngineDraftTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = testutil::tiny_model_path();
    half_ = truncated_copy(model_, 1);
  }
  int32_t n_vocab() {
    auto e = make_engine(config_with_blocks(model_, 16));
    return e->model().hparams().n_vocab;
  }
  std::vector<GenerationRequest> prompts(uint64_t seed, int n, int len, int32_t max_tokens) {
    std::vector<GenerationRequest> rs;
    const int32_t nv = n_vocab();
    for (int i = 0; i < n; ++i)
      rs.push_back(greedy(testutil::prompt(seed + i, len, nv), max_tokens));
    return rs;
  }
  std::string model_, half_;
};

TEST_F(EngineDraftTest, SameFileDraftIsAlwaysAcceptedAndOutputIdentical) {
  const auto rs = prompts(10, 3, 20, 64);
  const auto want = plain_outputs(model_, rs);
  auto e = make_engine(config_with_blocks(model_, 256, draft_spec(model_)));
  ASSERT_NE(e, nullptr);
  for (size_t i = 0; i < rs.size(); ++i) EXPECT_EQ(run_one(*e, rs[i]).tokens, want[i]) << i;
  const SpecCounters s = e->stats().spec;
  EXPECT_GT(s.num_draft_tokens, 100u);
  EXPECT_EQ(s.num_accepted_tokens, s.num_draft_tokens);  // the draft is the target
  EXPECT_LE(e->stats().num_steps, 3u * 64u / 3u);        // ~k + 1 tokens per step
  expect_all_free(*e);
}

TEST_F(EngineDraftTest, TruncatedDraftGreedyIdenticalAloneWithAcceptsAndRejects) {
  const auto rs = prompts(20, 4, 24, 64);
  const auto want = plain_outputs(model_, rs);
  auto e = make_engine(config_with_blocks(model_, 256, draft_spec(half_)));
  ASSERT_NE(e, nullptr);
  for (size_t i = 0; i < rs.size(); ++i) {
    auto c = run_one(*e, rs[i]);
    EXPECT_EQ(c.reason, FinishReason::kLength) << c.error;
    EXPECT_EQ(c.tokens, want[i]) << "request " << i;
  }
  const SpecCounters s = e->stats().spec;
  std::cout << "1-layer draft of a 2-layer target: drafts " << s.num_drafts << ", draft tokens "
            << s.num_draft_tokens << ", accepted " << s.num_accepted_tokens << "\n";
  EXPECT_GT(s.num_accepted_tokens, 0u);
  EXPECT_LT(s.num_accepted_tokens, s.num_draft_tokens);  // rejections rolled back
  EXPECT_GT(s.num_accepted_tokens_per_pos[0], 0u);
  expect_all_free(*e);
}

TEST_F(EngineDraftTest, BatchedWithOptedOutSampledAndChunkedPrefillsIdentical) {
  const int32_t nv = n_vocab();
  auto rs = prompts(30, 4, 20, 40);
  GenerationRequest opt_out = greedy(testutil::prompt(40, 20, nv), 40);
  opt_out.speculate = false;
  rs.push_back(opt_out);
  GenerationRequest sampled = greedy(testutil::prompt(41, 30, nv), 24);
  sampled.sampling.temperature = 0.9f;
  sampled.sampling.seed = 7;
  rs.push_back(sampled);
  rs.push_back(greedy(testutil::prompt(42, 150, nv), 8));  // prefilled in chunks of 32
  const auto want = plain_outputs(model_, rs);
  EngineConfig cfg = config_with_blocks(model_, 256, draft_spec(half_));
  cfg.sched.long_prefill_chunk_tokens = 32;
  auto e = make_engine(cfg);
  ASSERT_NE(e, nullptr);
  auto got = run_batch(*e, rs);
  for (size_t i = 0; i < rs.size(); ++i) {
    EXPECT_EQ(got[i].reason, FinishReason::kLength) << got[i].error;
    EXPECT_EQ(got[i].tokens, want[i]) << "request " << i;
  }
  EXPECT_GT(e->stats().spec.num_accepted_tokens, 0u);
  expect_all_free(*e);
}

// Issue 30: an exception in the draft model's pass costs that step's drafts, never a request nor
// the engine. Every other one of the first 8 draft passes holding one request fails (so the
// batched passes of the others fail too; their draft state is dropped and caught up again,
// across the end of the prompt): every output still equals plain decoding, drafting resumes
// after the faults, and every target block comes back.
TEST_F(EngineDraftTest, DraftForwardThrowDegradesThatStepToPlainDecoding) {
  constexpr int32_t kFaulty = 41;  // max_tokens of the request whose draft passes fail
  auto rs = prompts(30, 3, 20, 40);
  rs[1].max_tokens = kFaulty;
  const auto want = plain_outputs(model_, rs);
  EngineConfig cfg = config_with_blocks(model_, 256, draft_spec(half_));
  auto faults = std::make_shared<std::atomic<int>>(0);
  auto calls = std::make_shared<std::atomic<int>>(0);
  cfg.draft_fault_hook = [faults, calls](uint64_t, int32_t max_tokens) {
    if (max_tokens != kFaulty) return;
    const int c = calls->fetch_add(1);
    if (c >= 8 || c % 2 != 0) return;
    faults->fetch_add(1);
    throw std::bad_alloc();
  };
  auto e = make_engine(cfg);
  ASSERT_NE(e, nullptr);
  const auto out = run_batch(*e, rs);
  for (size_t i = 0; i < rs.size(); ++i) {
    EXPECT_EQ(out[i].reason, FinishReason::kLength) << i << ": " << out[i].error;
    EXPECT_EQ(out[i].tokens, want[i]) << "request " << i;
  }
  EXPECT_EQ(faults->load(), 4) << "the draft passes did not fail as planned";
  EXPECT_GT(e->stats().spec.num_accepted_tokens, 0u) << "drafting never resumed";
  EXPECT_EQ(e->stats().num_request_faults, 0u);
  expect_all_free(*e);
}

TEST_F(EngineDraftTest, OptedOutRequestsNeverDraft) {
  auto rs = prompts(50, 3, 20, 24);
  for (auto& r : rs) r.speculate = false;
  const auto want = plain_outputs(model_, rs);
  auto e = make_engine(config_with_blocks(model_, 256, draft_spec(model_)));
  ASSERT_NE(e, nullptr);
  auto got = run_batch(*e, rs);
  for (size_t i = 0; i < rs.size(); ++i) EXPECT_EQ(got[i].tokens, want[i]) << i;
  EXPECT_EQ(e->stats().spec.num_drafts, 0u);
  expect_all_free(*e);
}

void expect_preempted_identical(const std::string& model, const std::string& draft, bool with_swap,
                                const std::vector<GenerationRequest>& rs) {
  // Each request grows to 4 blocks (24 + 40 tokens) plus its drafts; 12 blocks cannot hold six.
  spectest::expect_preempted_identical(model, draft_spec(draft), with_swap, rs,
                                       plain_outputs(model, rs), "engine_draft_swap.bin");
}

TEST_F(EngineDraftTest, GreedyIdenticalWhenPreemptedForRecompute) {
  expect_preempted_identical(model_, half_, false, prompts(60, 6, 24, 40));
}

TEST_F(EngineDraftTest, GreedyIdenticalWhenSwapped) {
  expect_preempted_identical(model_, half_, true, prompts(70, 6, 24, 40));
}

TEST_F(EngineDraftTest, GreedyIdenticalAfterPrefixHit) {
  // B's prompt is A's prompt and output: B reuses A's cached blocks in the target while the
  // draft catches up on the whole prompt; A again is a hit on itself.
  GenerationRequest a = prompts(80, 1, 37, 48)[0];
  auto e = make_engine(config_with_blocks(model_, 256, draft_spec(half_)));
  ASSERT_NE(e, nullptr);
  const auto a_out = run_one(*e, a).tokens;
  GenerationRequest b = a;
  std::vector<int32_t> b_prompt = a.prompt.to_vector();
  b_prompt.insert(b_prompt.end(), a_out.begin(), a_out.end());
  b.prompt = std::move(b_prompt);
  b.max_tokens = 24;
  const auto b_out = run_one(*e, b).tokens;
  const auto a_again = run_one(*e, a).tokens;
  const auto want = plain_outputs(model_, {a, b});
  ASSERT_EQ(want.size(), 2u);
  EXPECT_EQ(a_out, want[0]);
  EXPECT_EQ(b_out, want[1]);
  EXPECT_EQ(a_again, want[0]);
  EXPECT_GT(e->stats().spec.num_accepted_tokens, 0u);
  e->shutdown();
  EXPECT_GE(e->kv_manager().prefix_counters().num_hit_blocks, (37u + 48u) / 16u);
  expect_all_free(*e);
}

TEST_F(EngineDraftTest, SampledSpeculationGivesTheSeededTokensOfPlainSampling) {
  std::vector<GenerationRequest> rs = prompts(90, 16, 16, 32);
  for (size_t i = 0; i < rs.size(); ++i) {
    rs[i].sampling.temperature = i % 3 == 0 ? 1.0f : 0.3f;
    rs[i].sampling.top_k = i % 2 == 0 ? 0 : 20;
    rs[i].sampling.top_p = i % 4 == 1 ? 0.9f : 1.0f;
    rs[i].sampling.frequency_penalty = i % 5 == 3 ? 0.5f : 0.0f;
    rs[i].sampling.seed = 500 + i;
  }
  const auto want = plain_outputs(model_, rs);
  auto e = make_engine(config_with_blocks(model_, 256, draft_spec(half_)));
  ASSERT_NE(e, nullptr);
  auto got = run_batch(*e, rs);
  for (size_t i = 0; i < rs.size(); ++i) EXPECT_EQ(got[i].tokens, want[i]) << "seed " << i;
  const SpecCounters s = e->stats().spec;
  EXPECT_GT(s.num_accepted_tokens, 10u) << "few sampled drafts accepted: vacuous";
  EXPECT_LT(s.num_accepted_tokens, s.num_draft_tokens);
  expect_all_free(*e);
}

// repetition_penalty reads every token held, so a row after accepted drafts must see them (new
// tokens a draft model wrote, not the prompt's) exactly as plain decoding would.
TEST_F(EngineDraftTest, RepetitionPenaltyCountsTheDraftsAcceptedBeforeEachRow) {
  std::vector<GenerationRequest> rs = prompts(95, 8, 12, 40);
  for (size_t i = 0; i < rs.size(); ++i) {
    rs[i].sampling.repetition_penalty = i % 2 == 0 ? 1e4f : 0.6f;
    if (i % 4 == 3) rs[i].sampling.temperature = 0.7f, rs[i].sampling.seed = 700 + i;
  }
  const auto want = plain_outputs(model_, rs);
  for (const std::string& draft : {model_, half_}) {
    auto e = make_engine(config_with_blocks(model_, 256, draft_spec(draft)));
    ASSERT_NE(e, nullptr);
    auto got = run_batch(*e, rs);
    for (size_t i = 0; i < rs.size(); ++i) EXPECT_EQ(got[i].tokens, want[i]) << "request " << i;
    EXPECT_GT(e->stats().spec.num_accepted_tokens, 10u) << "vacuous";
    expect_all_free(*e);
  }
}

// Upper 0.999 quantile of chi-square with `df` degrees of freedom (Wilson-Hilferty).
double chi2_critical_999(int df) {
  const double a = 2.0 / (9.0 * df);
  return df * std::pow(1.0 - a + 3.0902 * std::sqrt(a), 3.0);
}

TEST_F(EngineDraftTest, ChiSquareSampledDistributionAtDraftedPositionsMatchesPlain) {
  // Independent seeds on each side (not the seed identity above): the second and third tokens
  // (drafted positions) are tallied over 600 requests each and compared by a two-sample
  // chi-square test at p = 0.001. top_k 4 keeps the categories few.
  const int32_t nv = n_vocab();
  const std::vector<int32_t> p = testutil::prompt(100, 12, nv);
  auto make = [&](uint64_t seed0) {
    std::vector<GenerationRequest> rs;
    for (int i = 0; i < 600; ++i) {
      GenerationRequest r = greedy(p, 3);
      r.sampling.temperature = 1.0f;
      r.sampling.top_k = 4;
      r.sampling.seed = seed0 + (uint64_t)i;
      rs.push_back(r);
    }
    return rs;
  };
  auto plain = make_engine(config_with_blocks(model_, 256));
  auto spec = make_engine(config_with_blocks(model_, 256, draft_spec(half_)));
  ASSERT_NE(plain, nullptr);
  ASSERT_NE(spec, nullptr);
  const auto a = run_batch(*plain, make(1));
  const auto b = run_batch(*spec, make(100001));
  for (size_t pos : {size_t(1), size_t(2)}) {
    std::map<int32_t, std::pair<int, int>> counts;
    for (const auto& c : a) ++counts[c.tokens.at(pos)].first;
    for (const auto& c : b) ++counts[c.tokens.at(pos)].second;
    // Categories with fewer than 10 draws in all pool into one.
    std::vector<std::pair<int, int>> cats;
    std::pair<int, int> rest{0, 0};
    for (const auto& [tok, n] : counts) {
      if (n.first + n.second >= 10) {
        cats.push_back(n);
      } else {
        rest.first += n.first;
        rest.second += n.second;
      }
    }
    if (rest.first + rest.second > 0) cats.push_back(rest);
    ASSERT_GE(cats.size(), 2u) << "position " << pos << ": one category, nothing to test";
    double chi2 = 0;
    for (const auto& [x, y] : cats) {
      const double e = (x + y) / 2.0;  // equal sample sizes
      chi2 += (x - e) * (x - e) / e + (y - e) * (y - e) / e;
    }
    const int df = (int)cats.size() - 1;
    std::cout << "position " << pos << ": chi2 " << chi2 << " with " << df << " df (critical "
              << chi2_critical_999(df) << ")\n";
    EXPECT_LT(chi2, chi2_critical_999(df)) << "position " << pos;
  }
  const SpecCounters s = spec->stats().spec;
  EXPECT_GT(s.num_accepted_tokens, 100u);
  EXPECT_LT(s.num_accepted_tokens, s.num_draft_tokens);
}

TEST_F(EngineDraftTest, BudgetTableHasTheDraftRowsThePlannerComputes) {
  auto plain = make_engine(config_with_blocks(model_, 64));
  auto spec = make_engine(config_with_blocks(model_, 64, draft_spec(half_)));
  ASSERT_NE(plain, nullptr);
  ASSERT_NE(spec, nullptr);
  const planner::BudgetTable& b = spec->budget();
  EXPECT_EQ(b.num_blocks, 64u);
  auto target_file = GgufFile::open(model_);
  auto draft_file = GgufFile::open(half_);
  ASSERT_TRUE(target_file.ok() && draft_file.ok());
  auto ts = planner::shape_from_gguf(**target_file);
  auto ds = planner::shape_from_gguf(**draft_file);
  ASSERT_TRUE(ts.ok() && ds.ok());
  EXPECT_EQ(b.draft_weights_bytes, ds->gguf->weight_bytes);
  EXPECT_GT(b.draft_weights_bytes, 0u);
  EXPECT_LT(b.draft_weights_bytes, b.weights_bytes);
  // One layer of two: half the target's KV per block, and 64 blocks of it.
  EXPECT_EQ(b.draft_kv_bytes_per_block * 2, b.kv_bytes_per_block);
  EXPECT_EQ(b.draft_kv_pool_bytes, 64u * b.draft_kv_bytes_per_block);
  EXPECT_EQ(b.total_bytes, b.weights_bytes + b.workspace_bytes + b.kv_pool_bytes + b.reserve_bytes +
                               b.draft_weights_bytes + b.draft_workspace_bytes +
                               b.draft_kv_pool_bytes);
  const std::string t = b.to_string();
  for (const char* row : {"draft_wts", "draft_work", "draft_kv", "draft catch-up"}) {
    EXPECT_NE(t.find(row), std::string::npos) << row << " missing from\n" << t;
  }
  // The catch-up buffer (one int32 per token of the largest step) is in draft_work, sized at
  // start-up, not grown on the serving path.
  EXPECT_EQ(b.draft_catch_up_bytes, 256u * sizeof(int32_t));
  // The same plan from the planner's pure function (what `plan --engine --draft-model` runs).
  planner::EngineOptions opt;
  opt.max_num_batched_tokens = 256;
  opt.block_size = 16;
  opt.n_threads = 1;
  opt.memory_budget_bytes = config_with_blocks(model_, 64, draft_spec(half_)).memory_budget_bytes;
  opt.max_model_len = 512;
  opt.max_num_seqs = 16;
  opt.reserve_bytes = 1 << 20;
  opt.spec_draft_logit_rows = 16 * 4;
  opt.draft = &*ds;
  opt.draft_logit_rows = 16;
  opt.prompt_logit_rows = SchedConfig{}.max_prompt_logit_rows;  // the engine's default rows
  auto p = planner::plan_engine_budget(*ts, opt);
  ASSERT_TRUE(p.ok()) << p.message();
  EXPECT_EQ(p->to_string(), t);
}

TEST_F(EngineDraftTest, RefusesADraftWithAnotherVocabularyNamingBothFiles) {
  MakeModelSpec other;
  other.vocab_type = "bpe";  // another vocabulary (the target is spm)
  const std::string path = ::testing::TempDir() + "/engine_draft_vocab.gguf";
  ASSERT_TRUE(make_model(other, path).ok());
  EngineConfig cfg = config_with_blocks(model_, 64);
  cfg.sched.spec = draft_spec(path);
  auto e = Engine::create(cfg);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.message().find("vocabularies differ"), std::string::npos) << e.message();
  EXPECT_NE(e.message().find(model_), std::string::npos) << e.message();
  EXPECT_NE(e.message().find(path), std::string::npos) << e.message();
}

TEST(SpeculativeConfigDraft, ParsesVllmsDraftModelJson) {
  auto c = parse_speculative_config(R"({"model":"d.gguf","num_speculative_tokens":5})");
  ASSERT_TRUE(c.ok()) << c.message();
  EXPECT_TRUE(c->enabled);
  EXPECT_EQ(c->draft_model, "d.gguf");
  EXPECT_EQ(c->num_speculative_tokens, 5);
  auto m = parse_speculative_config(R"({"method":"draft_model","model":"d.gguf"})");
  ASSERT_TRUE(m.ok()) << m.message();
  EXPECT_EQ(m->draft_model, "d.gguf");
  auto n = parse_speculative_config(R"({"method":"ngram"})", *m);
  ASSERT_TRUE(n.ok()) << n.message();
  EXPECT_TRUE(n->draft_model.empty());
  for (const char* bad : {R"({"method":"draft_model"})", R"({"model":""})",
                          R"({"method":"eagle","model":"d.gguf"})"}) {
    auto e = parse_speculative_config(bad);
    ASSERT_FALSE(e.ok()) << bad;
    EXPECT_NE(e.message().find("--speculative-config"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace kvw
