// Grammars and mask caches shared across requests (grammar_cache.h): separate compiles of one
// grammar share one entry and the masks an earlier request computed, different grammars never
// do, the cache stays within its bytes (least recently used evicted), and concurrent requests
// all get a working entry.
#include "grammar/grammar_cache.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "grammar/byte_dfa.h"
#include "grammar/grammar_constraint.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"
#include "test_vocab.h"

namespace kvw::grammar {
namespace {

constexpr size_t kMaskBytes = 1u << 20;

std::shared_ptr<const Grammar> schema(const char* text) {
  return compile_json_schema(std::string_view(text)).value();
}

TEST(GrammarCache, SeparateCompilesOfOneGrammarShareOneEntry) {
  GrammarCache cache(default_trie(), 64u << 20);
  auto a = compile_json_object().value(), b = compile_json_object().value();
  ASSERT_NE(a, b);
  const GrammarCache::Entry ea = cache.get(a, kMaskBytes), eb = cache.get(b, kMaskBytes);
  EXPECT_EQ(ea.grammar, eb.grammar);
  ASSERT_NE(ea.context_masks, nullptr);
  EXPECT_EQ(ea.context_masks, eb.context_masks);
  EXPECT_EQ(ea.dfa_masks, nullptr);
  // Another schema (or the same one with another property) is another grammar.
  const auto ec =
      cache.get(schema(R"({"type":"object","properties":{"a":{"type":"integer"}}})"), kMaskBytes);
  const auto ed =
      cache.get(schema(R"({"type":"object","properties":{"b":{"type":"integer"}}})"), kMaskBytes);
  EXPECT_NE(ec.grammar, ea.grammar);
  EXPECT_NE(ec.context_masks, ed.context_masks);
  EXPECT_NE(grammar_content_key(*ec.grammar), grammar_content_key(*ed.grammar));
  const GrammarCache::Stats s = cache.stats();
  EXPECT_EQ(s.num_hits, 1u);
  EXPECT_EQ(s.num_misses, 3u);
  EXPECT_EQ(s.num_entries, 3u);
  EXPECT_LE(s.bytes, cache.max_bytes());
}

// What request 1 computed (from each key's second sighting), request 2 (another compile of
// the grammar) reads: equal masks and no new context-mask entry computed.
TEST(GrammarCache, SecondRequestReadsTheMasksTheFirstComputed) {
  auto trie = default_trie();
  GrammarCache cache(trie, 64u << 20);
  const std::string text = R"({"name": "a long string value", "n": [1, 2)";
  auto masks_along = [&](const GrammarCache::Entry& e, bool use_cache) {
    GrammarConstraint c(e.grammar, trie, false, /*max_cached_masks=*/0,
                        use_cache ? e.context_masks : nullptr);
    std::vector<std::vector<uint64_t>> out;
    for (char ch : text) {
      EXPECT_TRUE(c.accept_text(std::string(1, ch)).ok()) << ch;
      out.emplace_back();
      c.fill_allowed(&out.back());
    }
    return out;
  };
  const auto e1 = cache.get(compile_json_object().value(), kMaskBytes);
  const auto walked = masks_along(e1, false);
  EXPECT_EQ(masks_along(e1, true), walked);  // first sightings: remembered
  EXPECT_EQ(masks_along(e1, true), walked);  // second: computed
  const uint64_t computed = e1.context_masks->num_misses();
  ASSERT_GT(computed, 0u);
  const uint64_t hits = e1.context_masks->num_hits();
  const auto e2 = cache.get(compile_json_object().value(), kMaskBytes);
  EXPECT_EQ(masks_along(e2, true), walked);
  EXPECT_EQ(e2.context_masks->num_misses(), computed);
  EXPECT_GT(e2.context_masks->num_hits(), hits);
}

// A regular grammar's start mask is computed when its entry is built, so a request's first
// mask is a hit, and equals the walk.
TEST(GrammarCache, RegularGrammarComesWithItsStartMask) {
  auto trie = default_trie();
  GrammarCache cache(trie, 64u << 20);
  const auto e =
      cache.get(compile_regex(R"(\d{4}-\d{2}-\d{2}( [a-z]{2,12}){0,6})").value(), kMaskBytes);
  ASSERT_NE(e.dfa_masks, nullptr);
  EXPECT_EQ(e.context_masks, nullptr);
  EXPECT_EQ(e.dfa_masks->num_misses(), 1u);
  GrammarConstraint c(e.grammar, trie, false, 16, nullptr, e.dfa_masks);
  std::vector<uint64_t> cached, walked;
  c.fill_allowed(&cached);
  EXPECT_EQ(c.num_dfa_cache_hits(), 1u);
  EXPECT_EQ(e.dfa_masks->num_misses(), 1u);
  GrammarConstraint plain(e.grammar, trie, false, 0);
  plain.fill_allowed(&walked);
  EXPECT_EQ(cached, walked);
}

TEST(GrammarCache, StaysWithinItsBytesEvictingTheLeastRecentlyUsed) {
  auto trie = default_trie();
  auto g = [](int i) {
    return schema(("{\"type\":\"object\",\"properties\":{\"p" + std::to_string(i) +
                   "\":{\"type\":\"string\"}}}")
                      .c_str());
  };
  // Room for two entries (each is charged its mask cache's 1 MiB).
  GrammarCache cache(trie, 2 * kMaskBytes + (256u << 10));
  const auto a = cache.get(g(1), kMaskBytes);
  const auto b = cache.get(g(2), kMaskBytes);
  EXPECT_EQ(cache.get(g(1), kMaskBytes).grammar, a.grammar);  // a is now the most recent
  (void)cache.get(g(3), kMaskBytes);                          // evicts b
  GrammarCache::Stats s = cache.stats();
  EXPECT_EQ(s.num_entries, 2u);
  EXPECT_EQ(s.num_evicted, 1u);
  EXPECT_LE(s.bytes, cache.max_bytes());
  EXPECT_EQ(cache.get(g(1), kMaskBytes).grammar, a.grammar);
  EXPECT_NE(cache.get(g(2), kMaskBytes).grammar, b.grammar);  // rebuilt
  // An entry larger than the whole cache is used but not kept; 0 bytes keeps nothing.
  GrammarCache small(trie, kMaskBytes / 2);
  const auto x = small.get(g(1), kMaskBytes);
  ASSERT_NE(x.context_masks, nullptr);
  EXPECT_NE(small.get(g(1), kMaskBytes).context_masks, x.context_masks);
  s = small.stats();
  EXPECT_EQ(s.num_too_large, 2u);
  EXPECT_EQ(s.num_entries, 0u);
  EXPECT_EQ(s.bytes, 0u);
  GrammarCache off(trie, 0);
  EXPECT_NE(off.get(g(1), kMaskBytes).grammar, off.get(g(1), kMaskBytes).grammar);
  EXPECT_EQ(off.stats().num_entries, 0u);
}

TEST(GrammarCache, ConcurrentRequestsGetWorkingEntries) {
  auto trie = default_trie();
  GrammarCache cache(trie, 64u << 20);
  constexpr int kThreads = 4, kEach = 20;
  std::vector<std::thread> threads;
  std::vector<int> ok(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        const auto e =
            cache.get(i % 2 ? compile_json_object().value() : compile_regex("[a-c]{1,5}").value(),
                      kMaskBytes);
        GrammarConstraint c(e.grammar, trie, false, 16, e.context_masks, e.dfa_masks);
        std::vector<uint64_t> bits;
        c.fill_allowed(&bits);
        ok[t] += c.accept_text(i % 2 ? "{" : "ab").ok();
      }
    });
  }
  for (auto& th : threads) th.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(ok[t], kEach);
  const GrammarCache::Stats s = cache.stats();
  EXPECT_EQ(s.num_hits + s.num_misses, (uint64_t)kThreads * kEach);
  EXPECT_EQ(s.num_entries, 2u);
}

}  // namespace
}  // namespace kvw::grammar
