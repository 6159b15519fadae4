#include "grammar/grammar_constraint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "grammar/byte_dfa.h"
#include "grammar/gbnf_parser.h"
#include "grammar/json_schema.h"
#include "test_vocab.h"

namespace kvw::grammar {
namespace {

bool bit(const std::vector<uint64_t>& b, int32_t i) {
  return (b[i >> 6] >> (i & 63)) & 1;
}

// The oracle: a token is allowed when a copy of the matcher accepts its bytes one by one.
void expect_mask_matches_oracle(GrammarConstraint& c, const TokenTrie& trie, bool strip_space) {
  std::vector<uint64_t> bits;
  c.fill_allowed(&bits);
  int32_t num_allowed = 0;
  for (int32_t id = 0; id < trie.n_vocab(); ++id) {
    bool want;
    if (trie.is_eog(id)) {
      want = c.can_end();
    } else {
      std::string_view bytes = trie.token_bytes(id);
      if (strip_space && !bytes.empty() && bytes[0] == ' ') bytes.remove_prefix(1);
      Matcher copy = c.matcher();
      want = !trie.token_bytes(id).empty() && copy.accept_bytes(bytes);
    }
    ASSERT_EQ(bit(bits, id), want) << "token " << id << " '" << trie.token_bytes(id) << "'";
    num_allowed += want;
  }
  EXPECT_GT(num_allowed, 0);
}

TEST(TokenTrie, HoldsEveryPlainTokenOnceAndSkipsSpecials) {
  TokenTrie trie({"a", "ab", "", "b", "ab", "abc"}, {2});
  EXPECT_EQ(trie.token_ids().size(), 5u);
  EXPECT_EQ(trie.nodes().size(), 4u);  // a, ab, abc, b
  EXPECT_EQ(trie.nodes()[0].skip, 3u);
  EXPECT_EQ(trie.max_depth(), 3);
  EXPECT_TRUE(trie.is_eog(2));
  const auto& real = *default_trie();
  EXPECT_EQ(real.n_vocab(), 4096);
  EXPECT_TRUE(real.is_eog(default_tokenizer().eos_id()));
  EXPECT_EQ(real.token_bytes(1), "");  // BOS: never allowed
}

TEST(GrammarConstraint, MaskEqualsPerTokenOracleOnTheRealVocabulary) {
  auto g = compile_json_schema(std::string_view(R"({"type":"object","properties":{
      "name":{"type":"string"},"tags":{"type":"array","items":{"enum":["a","bc"]}},
      "n":{"type":"number"}},"required":["name"]})"));
  ASSERT_TRUE(g.ok()) << g.message();
  auto trie = default_trie();
  const Tokenizer& tok = default_tokenizer();
  GrammarConstraint c(g.value(), trie, tok.strips_leading_space());
  expect_mask_matches_oracle(c, *trie, tok.strips_leading_space());
  // Walk a fixed document token by token (as the tokenizer splits it), checking every state.
  const std::string doc = R"({"name": "Israel \u00e9", "tags": ["bc","a"], "n": -1.5e3})";
  const auto ids = tok.encode(doc, false, false);
  bool strip = tok.strips_leading_space();
  for (int32_t id : ids) {
    ASSERT_TRUE(c.accept(id).ok()) << "token " << id << " '" << trie->token_bytes(id) << "'";
    strip = false;
    expect_mask_matches_oracle(c, *trie, strip);
  }
  EXPECT_TRUE(c.can_end());
  EXPECT_TRUE(c.done());
  // 16 cached masks of 4096 bits at most, plus small arenas.
  EXPECT_LE(c.mask_cache_bytes(), 16u * 512);
  EXPECT_LT(c.memory_bytes(), 64u * 1024);
}

TEST(GrammarConstraint, EosOnlyWhereTheGrammarMayEnd) {
  auto g = parse_gbnf("root ::= \"ab\"+");
  ASSERT_TRUE(g.ok());
  TokenTrie trie({"<eos>", "a", "b", "ab", "abab", "c"}, {0});
  auto shared = std::make_shared<const TokenTrie>(trie);
  GrammarConstraint c(g.value(), shared);
  std::vector<float> logits(6, 0.0f);
  c.mask(logits.data());
  EXPECT_TRUE(std::isinf(logits[0]));
  EXPECT_FALSE(std::isinf(logits[1]));
  EXPECT_TRUE(std::isinf(logits[2]));
  EXPECT_FALSE(std::isinf(logits[4]));
  EXPECT_TRUE(std::isinf(logits[5]));
  EXPECT_FALSE(c.accept(0).ok());  // EOS before the grammar may end
  EXPECT_FALSE(c.accept(2).ok());  // "b" first
  ASSERT_TRUE(c.accept(1).ok());
  ASSERT_TRUE(c.accept(2).ok());
  std::fill(logits.begin(), logits.end(), 0.0f);
  c.mask(logits.data());
  EXPECT_FALSE(std::isinf(logits[0]));
  EXPECT_FALSE(c.done());
  ASSERT_TRUE(c.accept(0).ok());
  EXPECT_TRUE(c.done());
}

TEST(GrammarConstraint, StripsTheFirstTokensLeadingSpaceOnly) {
  auto g = parse_gbnf("root ::= \"{\" \" \"? \"}\"");
  ASSERT_TRUE(g.ok());
  auto trie = std::make_shared<const TokenTrie>(
      std::vector<std::string>{"</s>", " {", "{", " }", "}"}, std::vector<int32_t>{0});
  GrammarConstraint c(g.value(), trie, /*strip_leading_space=*/true);
  std::vector<uint64_t> bits;
  c.fill_allowed(&bits);
  EXPECT_EQ(bits[0], 0b00110u);  // " {" and "{"
  ASSERT_TRUE(c.accept(1).ok());
  c.fill_allowed(&bits);
  EXPECT_EQ(bits[0], 0b11000u);  // " }" and "}": the space is grammar input now
}

// tool_choice "auto" (issue 31): a lazy grammar leaves the output free until a trigger
// appears, even split over tokens and after a long free text, then constrains from the
// trigger's first byte; text the grammar refuses at the trigger leaves it free for good; an
// at_start trigger counts only as the output's first non-space text.
TEST(GrammarConstraint, LazyGrammarStartsAtItsTrigger) {
  auto g = parse_gbnf(R"(root ::= "<tool_call>" [0-9]+ "</tool_call>")");
  ASSERT_TRUE(g.ok()) << g.message();
  enum { kEos, kHi, kTool, kCall, kCallX, kOne, kTwo, kClose, kSpace, kName, kBrace, kN };
  auto trie = std::make_shared<const TokenTrie>(
      std::vector<std::string>{"<eos>", "Hi", " <tool", "_call>", "_call>x", "1", "2",
                               "</tool_call>", " ", "{\"name\"", "{"},
      std::vector<int32_t>{kEos});
  auto finite = [&](GrammarConstraint& c) {
    std::vector<float> logits(kN, 0.0f);
    c.mask(logits.data());
    std::vector<int32_t> out;
    for (int32_t i = 0; i < kN; ++i)
      if (!std::isinf(logits[i])) out.push_back(i);
    return out;
  };
  const std::vector<int32_t> all = {kEos, kHi,    kTool,  kCall, kCallX, kOne,
                                    kTwo, kClose, kSpace, kName, kBrace};
  GrammarConstraint c(g.value(), trie);
  c.set_triggers({{.text = "<tool_call>", .at_start = false}});
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(c.accept(kHi).ok());
  EXPECT_LT(c.memory_bytes(), 64u << 10) << "the free text is not kept";
  ASSERT_TRUE(c.accept(kTool).ok());
  EXPECT_TRUE(c.waiting_for_trigger());
  EXPECT_EQ(finite(c), all);
  ASSERT_TRUE(c.accept(kCall).ok());
  EXPECT_FALSE(c.waiting_for_trigger());
  EXPECT_EQ(finite(c), (std::vector<int32_t>{kOne, kTwo}));
  EXPECT_FALSE(c.accept(kHi).ok());
  ASSERT_TRUE(c.accept(kOne).ok());
  ASSERT_TRUE(c.accept(kClose).ok());
  EXPECT_EQ(finite(c), (std::vector<int32_t>{kEos}));
  ASSERT_TRUE(c.accept(kEos).ok());
  EXPECT_TRUE(c.done());

  GrammarConstraint refused(g.value(), trie);
  refused.set_triggers({{.text = "<tool_call>", .at_start = false}});
  ASSERT_TRUE(refused.accept(kTool).ok());
  ASSERT_TRUE(refused.accept(kCallX).ok()) << "refused at the trigger: stays free, no error";
  ASSERT_TRUE(refused.accept(kTool).ok());
  ASSERT_TRUE(refused.accept(kCall).ok());
  EXPECT_TRUE(refused.waiting_for_trigger()) << "free for good";
  EXPECT_EQ(finite(refused), all);
  EXPECT_TRUE(refused.accept(kEos).ok());

  auto json = parse_gbnf(R"(root ::= "{\"name\"" [0-9])");
  ASSERT_TRUE(json.ok()) << json.message();
  GrammarConstraint first(json.value(), trie);
  first.set_triggers({{.text = "{\"name\"", .at_start = true}});
  ASSERT_TRUE(first.accept(kSpace).ok());
  ASSERT_TRUE(first.accept(kBrace).ok());
  EXPECT_TRUE(first.waiting_for_trigger());
  GrammarConstraint whole(json.value(), trie);
  whole.set_triggers({{.text = "{\"name\"", .at_start = true}});
  ASSERT_TRUE(whole.accept(kSpace).ok());
  ASSERT_TRUE(whole.accept(kName).ok());
  EXPECT_FALSE(whole.waiting_for_trigger());
  EXPECT_EQ(finite(whole), (std::vector<int32_t>{kOne, kTwo}));
  GrammarConstraint later(json.value(), trie);
  later.set_triggers({{.text = "{\"name\"", .at_start = true}});
  ASSERT_TRUE(later.accept(kHi).ok());
  ASSERT_TRUE(later.accept(kName).ok());
  EXPECT_TRUE(later.waiting_for_trigger()) << "not the answer's first text";
}

// Issue 31: a model may write a trigger as one control token, which has no bytes in the trie
// (it is not rendered unless asked), so matching text alone never sees it. Given its id, the
// token fires the lazy grammar; the running grammar then allows the control tokens it knows
// wherever their text fits, and each stands for its text. Same with the grammar's DFA.
TEST(GrammarConstraint, ControlTokenTriggersFireByIdAndStandForTheirText) {
  auto g = parse_gbnf(R"(root ::= "<tool_call>" [0-9]+ "</tool_call>")");
  ASSERT_TRUE(g.ok()) << g.message();
  enum { kEos, kHi, kOpen, kClose, kOne, kTwo, kN };
  auto trie = std::make_shared<const TokenTrie>(
      std::vector<std::string>{"<eos>", "Hi", "", "", "1", "2"}, std::vector<int32_t>{kEos});
  auto finite = [&](GrammarConstraint& c) {
    std::vector<float> logits(kN, 0.0f);
    c.mask(logits.data());
    std::vector<int32_t> out;
    for (int32_t i = 0; i < kN; ++i)
      if (!std::isinf(logits[i])) out.push_back(i);
    return out;
  };
  const std::vector<GrammarTrigger> markers = {
      {.text = "<tool_call>", .token_id = kOpen},
      {.text = "</tool_call>", .token_id = kClose, .fires = false}};
  for (const auto& grammar : {g.value(), with_dfa(g.value(), 1 << 20)}) {
    GrammarConstraint by_text(grammar, trie);
    by_text.set_triggers({{.text = "<tool_call>"}});
    ASSERT_TRUE(by_text.accept(kHi).ok());
    ASSERT_TRUE(by_text.accept(kOpen).ok());
    EXPECT_TRUE(by_text.waiting_for_trigger()) << "text alone never sees the control token";

    GrammarConstraint c(grammar, trie);
    c.set_triggers(markers);
    ASSERT_TRUE(c.accept(kHi).ok());
    EXPECT_TRUE(c.waiting_for_trigger());
    ASSERT_TRUE(c.accept(kOpen).ok());
    EXPECT_FALSE(c.waiting_for_trigger());
    EXPECT_EQ(finite(c), (std::vector<int32_t>{kOne, kTwo}));
    ASSERT_TRUE(c.accept(kTwo).ok());
    EXPECT_EQ(finite(c), (std::vector<int32_t>{kClose, kOne, kTwo}));
    ASSERT_TRUE(c.accept(kClose).ok());
    EXPECT_EQ(finite(c), (std::vector<int32_t>{kEos}));
    ASSERT_TRUE(c.accept(kEos).ok());
    EXPECT_TRUE(c.done());

    // No firing trigger: constrained from the first token, which may be the control token.
    GrammarConstraint forced(grammar, trie);
    forced.set_triggers({{.text = "<tool_call>", .token_id = kOpen, .fires = false}});
    EXPECT_FALSE(forced.waiting_for_trigger());
    EXPECT_EQ(finite(forced), (std::vector<int32_t>{kOpen}));
    EXPECT_FALSE(forced.accept(kClose).ok());
    ASSERT_TRUE(forced.accept(kOpen).ok());
  }
}

}  // namespace
}  // namespace kvw::grammar
