// SeqSampler with a grammar constraint (issue 31): the engine-side hook masks the row (a copy
// when logprobs are asked for, so they read the raw row; else the row itself), samples, and
// advances the grammar.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <regex>

#include "engine/seq_sampler.h"
#include "gguf/gguf_file.h"
#include "grammar/gbnf_parser.h"
#include "grammar/regex.h"
#include "grammar/token_trie.h"
#include "tokenizer/tokenizer.h"

namespace kvw {
namespace {

std::unique_ptr<Tokenizer> load_tokenizer() {
  auto f = GgufFile::open(KVW_DEFAULT_MODEL_PATH);
  EXPECT_TRUE(f.ok());
  auto t = Tokenizer::from_gguf(*f.value());
  EXPECT_TRUE(t.ok());
  return std::move(t.value());
}

TEST(SeqSamplerGrammar, SampledTokensFollowTheGrammarAndLogprobsSeeTheRawRow) {
  const auto tok = load_tokenizer();
  const auto trie = grammar::TokenTrie::from_tokenizer(*tok);
  const std::vector<std::string> choices = {"yes", "no", "the house of Judah"};
  for (int32_t logprobs : {-1, 0}) {
    for (float temperature : {0.0f, 1.0f}) {
      for (uint64_t seed = 0; seed < 8; ++seed) {
        GenSampling s;
        s.temperature = temperature;
        s.seed = seed;
        s.logprobs = logprobs;
        s.constraint = {.grammar = grammar::compile_choice(choices).value(),
                        .trie = trie,
                        .strip_leading_space = tok->strips_leading_space()};
        auto sampler = SeqSampler::create(s, tok->n_vocab());
        ASSERT_TRUE(sampler.ok()) << sampler.message();
        std::mt19937 rng((uint32_t)seed);
        std::normal_distribution<float> normal;
        std::vector<int32_t> history = {tok->bos_id()}, out;
        std::vector<float> row(tok->n_vocab());
        for (int step = 0; step < 32; ++step) {
          for (float& x : row) x = normal(rng);
          const std::vector<float> raw = row;
          const int32_t t = sampler.value()->sample(row.data(), history, out.size());
          if (logprobs >= 0) {
            ASSERT_EQ(row, raw);  // logprobs read the raw row
          } else {
            // Nothing reads the row afterwards: it is left masked, the drawn token unmasked.
            ASSERT_EQ(row[t], raw[t]);
            size_t masked = 0;
            for (size_t i = 0; i < row.size(); ++i) {
              ASSERT_TRUE(row[i] == raw[i] || std::isinf(row[i])) << i;
              masked += row[i] != raw[i];
            }
            ASSERT_GT(masked, 0u);
          }
          ASSERT_EQ(sampler.value()->constraint_error(), "");
          if (tok->is_end_of_generation(t)) break;
          out.push_back(t);
          history.push_back(t);
        }
        const std::string text = tok->decode(out);
        EXPECT_NE(std::find(choices.begin(), choices.end(), text), choices.end()) << text;
      }
    }
  }
}

// top_k, top_p, min_p and penalties see -inf for every masked token (often more masked tokens
// than k): the draw must still be an allowed token.
TEST(SeqSamplerGrammar, TruncationAndPenaltiesNeverPickAMaskedToken) {
  const auto tok = load_tokenizer();
  const auto trie = grammar::TokenTrie::from_tokenizer(*tok);
  auto g = grammar::compile_regex(R"([0-9]{3}(-[a-z]{2})?)").value();
  std::vector<GenSampling> configs(4);
  configs[0].top_k = 40, configs[0].temperature = 0.8f;
  configs[1].top_p = 0.5f, configs[1].temperature = 1.0f;
  configs[2].min_p = 0.2f, configs[2].temperature = 1.5f;
  configs[3].temperature = 1.0f, configs[3].repetition_penalty = 1.3f,
  configs[3].presence_penalty = 1.0f, configs[3].frequency_penalty = 1.0f;
  const std::regex oracle("[0-9]{3}(-[a-z]{2})?");
  for (GenSampling s : configs) {
    for (uint64_t seed = 0; seed < 6; ++seed) {
      s.seed = seed;
      s.constraint = {
          .grammar = g, .trie = trie, .strip_leading_space = tok->strips_leading_space()};
      auto sampler = SeqSampler::create(s, tok->n_vocab());
      ASSERT_TRUE(sampler.ok()) << sampler.message();
      std::mt19937 rng((uint32_t)seed);
      std::normal_distribution<float> normal(0.0f, 3.0f);
      std::vector<int32_t> history = {tok->bos_id()}, out;
      std::vector<float> row(tok->n_vocab());
      bool ended = false;
      for (int step = 0; step < 32 && !ended; ++step) {
        for (float& x : row) x = normal(rng);
        sampler.value()->observe_prompt(std::span(history).first(1));  // repetition_penalty
        const int32_t t = sampler.value()->sample(row.data(), history, out.size());
        ASSERT_EQ(sampler.value()->constraint_error(), "") << "seed " << seed;
        ended = tok->is_end_of_generation(t);
        if (!ended) out.push_back(t), history.push_back(t);
      }
      ASSERT_TRUE(ended);
      EXPECT_TRUE(std::regex_match(tok->decode(out), oracle)) << tok->decode(out);
    }
  }
}

// min_tokens bans EOS while the grammar may still go on, so an optional tail is always taken;
// once the grammar can only end, its EOS is drawn all the same (a ban would leave no token).
TEST(SeqSamplerGrammar, MinTokensTakesTheOptionalTailAndYieldsToAGrammarThatMustEnd) {
  const auto tok = load_tokenizer();
  const auto trie = grammar::TokenTrie::from_tokenizer(*tok);
  auto g = grammar::compile_regex(R"([0-9]{3}(-[a-z]{2})?)").value();
  const std::regex full("[0-9]{3}-[a-z]{2}");
  int num_full_without = 0;
  for (int32_t min_tokens : {0, 20}) {
    for (uint64_t seed = 0; seed < 8; ++seed) {
      GenSampling s{.temperature = 1.0f, .seed = seed, .min_tokens = min_tokens};
      s.constraint = {
          .grammar = g, .trie = trie, .strip_leading_space = tok->strips_leading_space()};
      auto sampler = SeqSampler::create(
          s, tok->n_vocab(), SeqShape{.end_of_generation_ids = tok->end_of_generation_ids()});
      ASSERT_TRUE(sampler.ok()) << sampler.message();
      std::mt19937 rng((uint32_t)seed);
      std::normal_distribution<float> normal(0.0f, 3.0f);
      std::vector<int32_t> out;
      std::vector<float> row(tok->n_vocab());
      bool ended = false;
      for (int step = 0; step < 32 && !ended; ++step) {
        for (float& x : row) x = normal(rng);
        row[(size_t)tok->eos_id()] = 30.0f;  // ends wherever it may
        const int32_t t = sampler.value()->sample(row.data(), out, out.size());
        ASSERT_EQ(sampler.value()->constraint_error(), "") << "seed " << seed;
        ended = tok->is_end_of_generation(t);
        if (!ended) out.push_back(t);
      }
      ASSERT_TRUE(ended) << "seed " << seed;
      const bool is_full = std::regex_match(tok->decode(out), full);
      if (min_tokens > 0) {
        EXPECT_TRUE(is_full) << tok->decode(out);
      } else {
        num_full_without += is_full;
      }
    }
  }
  EXPECT_EQ(num_full_without, 0) << "without min_tokens EOS ends after the digits";
}

TEST(SeqSamplerGrammar, RefusesATrieOfAnotherVocabulary) {
  GenSampling s;
  s.constraint.grammar = grammar::compile_regex("a").value();
  s.constraint.trie = std::make_shared<const grammar::TokenTrie>(std::vector<std::string>{"", "a"},
                                                                 std::vector<int32_t>{0});
  EXPECT_FALSE(SeqSampler::create(s, 4096).ok());
  EXPECT_TRUE(SeqSampler::create(s, 2).ok());
}

// tool_choice "auto" (issue 31): with triggers the sampler draws from the raw row (text the
// grammar would never allow) until the output spells a trigger, then every token follows the
// grammar from the trigger on. The first tokens are forced by making them the row's maximum
// (greedy), as a model that decides to call a tool would.
TEST(SeqSamplerGrammar, LazyGrammarSwitchesOnAtTheTrigger) {
  const auto tok = load_tokenizer();
  const auto trie = grammar::TokenTrie::from_tokenizer(*tok);
  auto g = grammar::parse_gbnf(R"(root ::= "<tool_call>" [0-9]{1,3} "</tool_call>")").value();
  const std::string free_text = "Let me check <tool_call>";
  const std::vector<int32_t> forced = tok->encode(free_text, false, false);
  for (uint64_t seed = 0; seed < 4; ++seed) {
    GenSampling s;
    s.temperature = 1.0f;
    s.seed = seed;
    s.constraint = {.grammar = g,
                    .trie = trie,
                    .strip_leading_space = tok->strips_leading_space(),
                    .triggers = {{.text = "<tool_call>", .at_start = false}}};
    auto sampler = SeqSampler::create(s, tok->n_vocab());
    ASSERT_TRUE(sampler.ok()) << sampler.message();
    std::mt19937 rng((uint32_t)seed);
    std::normal_distribution<float> normal;
    std::vector<int32_t> history = {tok->bos_id()}, out;
    std::vector<float> row(tok->n_vocab());
    for (int step = 0; step < 48; ++step) {
      for (float& x : row) x = normal(rng);
      if ((size_t)step < forced.size()) row[forced[step]] = 100.0f;  // free: the raw row decides
      const int32_t t = sampler.value()->sample(row.data(), history, out.size());
      ASSERT_EQ(sampler.value()->constraint_error(), "");
      if ((size_t)step < forced.size()) {
        ASSERT_EQ(t, forced[step]) << "masked before a trigger";
      }
      if (tok->is_end_of_generation(t)) break;
      out.push_back(t);
      history.push_back(t);
    }
    const std::string text = tok->decode(out);
    ASSERT_TRUE(text.starts_with("Let me check <tool_call>")) << text;
    EXPECT_TRUE(std::regex_match(text.substr(13), std::regex("<tool_call>[0-9]{1,3}</tool_call>")))
        << text;
  }
}

}  // namespace
}  // namespace kvw
