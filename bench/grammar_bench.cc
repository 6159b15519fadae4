// Mask cost of constrained decoding (issue 31): GrammarConstraint::mask() per token for the
// default model's 4k SPM vocabulary and a synthetic 152k byte-level vocabulary shaped like
// Qwen's (English pieces with and without a leading space, code punctuation, digits, CJK,
// Cyrillic). make-model's 151936-token BPE vocabulary is not used: all but a few thousand of
// its tokens are <|unused_N|> padding, which a grammar never allows, so it would flatter us.
// States: the start of a JSON object (few tokens allowed) and inside a string (most allowed:
// the worst case), for a typical schema and for json_object.
#include <benchmark/benchmark.h>

#include <random>
#include <set>
#include <string>
#include <vector>

#include "gguf/gguf_file.h"
#include "grammar/grammar_constraint.h"
#include "grammar/json_schema.h"
#include "tokenizer/tokenizer.h"

namespace kvw::grammar {
namespace {

std::shared_ptr<const TokenTrie> default_vocab_trie() {
  static const auto trie = [] {
    auto f = GgufFile::open(KVW_DEFAULT_MODEL_PATH);
    auto t = Tokenizer::from_gguf(*f.value());
    return TokenTrie::from_tokenizer(*t.value());
  }();
  return trie;
}

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6));
  } else {
    s += char(0xE0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3F));
  }
  s += char(0x80 | (cp & 0x3F));
  return s;
}

// Deterministic: 256 byte tokens, then unique synthetic pieces up to 151936, 0 = EOS.
std::shared_ptr<const TokenTrie> synthetic_152k_trie() {
  static const auto trie = [] {
    std::mt19937 rng(7);
    auto pick = [&](int n) { return (int)(rng() % n); };
    std::vector<std::string> tokens = {""};  // id 0: end of text
    for (int b = 0; b < 256; ++b) tokens.push_back(std::string(1, char(b)));
    std::set<std::string> seen(tokens.begin(), tokens.end());
    const std::string punct = "{}[]()\":,.;=+-*/_<>!?'#&|\\\n\t ";
    while (tokens.size() < 151936) {
      std::string t;
      const int kind = pick(100);
      if (kind < 60) {  // English-like piece, often with a leading space
        if (pick(2)) t += ' ';
        const int len = 1 + pick(4) + pick(5);
        for (int i = 0; i < len; ++i)
          t += char(i == 0 && pick(5) == 0 ? 'A' + pick(26) : 'a' + pick(26));
      } else if (kind < 72) {  // code punctuation runs
        const int len = 1 + pick(4);
        for (int i = 0; i < len; ++i) t += punct[pick((int)punct.size())];
      } else if (kind < 76) {
        const int len = 1 + pick(3);
        for (int i = 0; i < len; ++i) t += char('0' + pick(10));
      } else if (kind < 94) {  // CJK, 1-3 characters
        const int len = 1 + pick(3);
        for (int i = 0; i < len; ++i) t += utf8(0x4E00 + pick(0x5000));
      } else {  // Cyrillic
        if (pick(2)) t += ' ';
        const int len = 1 + pick(6);
        for (int i = 0; i < len; ++i) t += utf8(0x430 + pick(32));
      }
      if (seen.insert(t).second) tokens.push_back(t);
    }
    return std::make_shared<const TokenTrie>(std::move(tokens), std::vector<int32_t>{0});
  }();
  return trie;
}

const char* kSchema = R"({"type":"object","properties":{
  "name":{"type":"string"},"age":{"type":"integer"},
  "tags":{"type":"array","items":{"type":"string"}},"email":{"type":"string"}},
  "required":["name","age"]})";

// args: [0] vocab (0 = default 4k, 1 = synthetic 152k), [1] state (0 = object start, 1 = inside
// a string), [2] grammar (0 = the schema above, 1 = json_object), [3] mask cache (0 = off: every
// call walks the trie, the cost of a state seen for the first time; 1 = on: the state repeats).
void BM_Mask(benchmark::State& state) {
  auto trie = state.range(0) == 0 ? default_vocab_trie() : synthetic_152k_trie();
  auto g =
      state.range(2) == 0 ? compile_json_schema(std::string_view(kSchema)) : compile_json_object();
  GrammarConstraint c(g.value(), trie, false, state.range(3) ? 16 : 0);
  const char* prefix = state.range(1) == 0 ? "{" : R"({"name": "Jo)";
  if (!c.accept_text(prefix).ok()) {
    state.SkipWithError("prefix rejected");
    return;
  }
  std::vector<float> logits(trie->n_vocab(), 0.0f);
  std::vector<uint64_t> bits;
  c.fill_allowed(&bits);
  size_t allowed = 0;
  for (uint64_t w : bits) allowed += __builtin_popcountll(w);
  for (auto _ : state) {
    c.mask(logits.data());
    benchmark::DoNotOptimize(logits.data());
  }
  state.counters["allowed"] = (double)allowed;
  state.counters["trie_nodes"] = (double)trie->nodes().size();
  state.SetLabel(std::string(state.range(0) ? "152k" : "4k") +
                 (state.range(1) ? " in-string" : " object-start") +
                 (state.range(2) ? " json_object" : " schema") +
                 (state.range(3) ? " cached" : " walk"));
}
BENCHMARK(BM_Mask)->ArgsProduct({{0, 1}, {0, 1}, {0, 1}, {0, 1}})->Unit(benchmark::kMicrosecond);

void BM_CompileSchema(benchmark::State& state) {
  for (auto _ : state) benchmark::DoNotOptimize(compile_json_schema(std::string_view(kSchema)));
}
BENCHMARK(BM_CompileSchema)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace kvw::grammar

BENCHMARK_MAIN();
