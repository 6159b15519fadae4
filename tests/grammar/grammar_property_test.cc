// Property tests: a random-logits "model" (fresh N(0,1) logits each step, sampled at temperature
// 1 from the masked distribution, seeded) over the default model's real vocabulary. Every
// completed output must be in the language (JSON that validates against its schema, a regex
// match, one of the choices), EOS must come only at accepting states, and generation must end
// within the token budget or be cut there ("length").
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <regex>

#include "grammar/gbnf_parser.h"
#include "grammar/grammar_constraint.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "schema_suite.h"
#include "schema_validator.h"
#include "test_vocab.h"
#include "tokenizer/utf8.h"

namespace kvw::grammar {
namespace {

struct Sampled {
  bool completed = false;  // ended by EOS; else cut at max_tokens ("length")
  std::string text;        // tokenizer.decode of the generated tokens (EOS excluded)
};

Sampled sample_constrained(std::shared_ptr<const Grammar> g, uint64_t seed, int max_tokens) {
  const Tokenizer& tok = default_tokenizer();
  auto trie = default_trie();
  GrammarConstraint c(std::move(g), trie, tok.strips_leading_space());
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> logits(trie->n_vocab());
  std::vector<double> cdf(trie->n_vocab());
  std::vector<int32_t> ids;
  Sampled out;
  for (int step = 0; step < max_tokens; ++step) {
    for (float& l : logits) l = normal(rng);
    c.mask(logits.data());
    double sum = 0;
    for (size_t i = 0; i < logits.size(); ++i) {
      sum += std::isinf(logits[i]) ? 0.0 : std::exp((double)logits[i]);
      cdf[i] = sum;
    }
    EXPECT_GT(sum, 0.0) << "mask left nothing";
    const double u = std::uniform_real_distribution<double>(0.0, sum)(rng);
    const int32_t t = (int32_t)(std::upper_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
    EXPECT_FALSE(std::isinf(logits[t]));
    if (trie->is_eog(t)) {
      EXPECT_TRUE(c.can_end()) << "EOS sampled at a non-accepting state";
      EXPECT_TRUE(c.accept(t).ok());
      EXPECT_TRUE(c.done());
      out.completed = true;
      break;
    }
    const Status st = c.accept(t);
    EXPECT_TRUE(st.ok()) << st.message();
    if (!st.ok()) break;
    ids.push_back(t);
  }
  out.text = tok.decode(ids);
  return out;
}

constexpr int kSeedsPerSchema = 6;
constexpr int kMaxTokens = 160;

TEST(GrammarProperty, JsonSchemaSuiteOutputsAlwaysParseAndValidate) {
  const auto& suite = schema_suite();
  ASSERT_GE(suite.size(), 50u);
  int completed = 0, total = 0, schemas_with_completion = 0;
  for (size_t k = 0; k < suite.size(); ++k) {
    const auto schema = nlohmann::ordered_json::parse(suite[k]);
    auto g = compile_json_schema(schema);
    ASSERT_TRUE(g.ok()) << "schema " << k << ": " << g.message();
    int done_here = 0;
    for (int seed = 0; seed < kSeedsPerSchema; ++seed) {
      const Sampled s = sample_constrained(g.value(), 1000 * k + seed, kMaxTokens);
      ++total;
      if (!s.completed) continue;
      ++completed, ++done_here;
      auto v = nlohmann::ordered_json::parse(s.text, nullptr, false);
      ASSERT_FALSE(v.is_discarded()) << "schema " << k << " output does not parse: " << s.text;
      const std::string why = validate_json(v, schema, schema);
      EXPECT_EQ(why, "") << "schema " << k << " " << suite[k] << "\noutput: " << s.text;
    }
    schemas_with_completion += done_here > 0;
  }
  std::printf("json schemas: %zu, samples %d, completed %d, schemas with a completed sample %d\n",
              suite.size(), total, completed, schemas_with_completion);
  EXPECT_GE(schemas_with_completion, (int)suite.size() * 8 / 10);
}

TEST(GrammarProperty, JsonObjectOutputsAreObjects) {
  auto g = compile_json_object();
  ASSERT_TRUE(g.ok());
  int completed = 0;
  for (int seed = 0; seed < 12; ++seed) {
    const Sampled s = sample_constrained(g.value(), seed, 200);
    if (!s.completed) continue;
    ++completed;
    auto v = nlohmann::json::parse(s.text, nullptr, false);
    ASSERT_FALSE(v.is_discarded()) << s.text;
    EXPECT_TRUE(v.is_object()) << s.text;
  }
  EXPECT_GT(completed, 0);
}

TEST(GrammarProperty, RegexOutputsMatch) {
  // ECMAScript std::regex as the oracle (same meaning for this subset; it counts bytes where we
  // count code points, so a pattern with a bounded `.`-like class also checks UTF-8 below).
  const char* patterns[] = {
      R"(\d{3}-\d{4})",           R"((yes|no|maybe))", R"([A-Z][a-z]{1,5}( [A-Z][a-z]{1,5})?)",
      R"(-?\d+(\.\d{1,2})?)",     R"([a-f0-9]{8})",    R"(\w{1,6}@\w{1,6}\.(com|org))",
      R"(\(\d\) [^\n0-9]{0,6})",  R"(a*b+c?)",         R"(#[0-9A-F]{6})",
      R"((\d{1,3}\.){3}\d{1,3})",
  };
  for (const char* p : patterns) {
    auto g = compile_regex(p);
    ASSERT_TRUE(g.ok()) << p << ": " << g.message();
    const std::regex oracle(p);
    int completed = 0;
    for (int seed = 0; seed < 8; ++seed) {
      const Sampled s = sample_constrained(g.value(), seed, 64);
      if (!s.completed) continue;
      ++completed;
      if (std::string_view(p).find("[^") != std::string_view::npos) {
        EXPECT_EQ(s.text, to_valid_utf8(s.text)) << p;  // whole characters only
        continue;
      }
      EXPECT_TRUE(std::regex_match(s.text, oracle)) << p << " output: " << s.text;
    }
    EXPECT_GT(completed, 0) << p;
  }
}

TEST(GrammarProperty, ChoiceOutputsAreOneOfTheChoices) {
  const std::vector<std::string> choices = {"positive", "negative", "neutral", "the king of Judah"};
  auto g = compile_choice(choices);
  ASSERT_TRUE(g.ok());
  for (int seed = 0; seed < 16; ++seed) {
    const Sampled s = sample_constrained(g.value(), seed, 32);
    ASSERT_TRUE(s.completed);
    EXPECT_NE(std::find(choices.begin(), choices.end(), s.text), choices.end()) << s.text;
  }
}

TEST(GrammarProperty, GbnfOutputsMatch) {
  auto g = parse_gbnf(R"(
    root ::= item+
    item ::= "- " [a-z]{1,6} (", " [0-9]{1,3})? "\n"
  )");
  ASSERT_TRUE(g.ok()) << g.message();
  const std::regex oracle(R"((- [a-z]{1,6}(, [0-9]{1,3})?\n)+)");
  int completed = 0;
  for (int seed = 0; seed < 12; ++seed) {
    const Sampled s = sample_constrained(g.value(), seed, 80);
    if (!s.completed) continue;
    ++completed;
    EXPECT_TRUE(std::regex_match(s.text, oracle)) << s.text;
  }
  EXPECT_GT(completed, 0);
}

}  // namespace
}  // namespace kvw::grammar
