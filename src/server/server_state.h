// server/server_state.h: what the route handlers share (internal to kvw_server): the engine
// (and its limits), the chat prompter, admission, breaker, latency window, counters and the
// registry of engine requests in flight (so drain can cancel them).
// Thread safety: everything here is thread-safe or immutable after Server::start().
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_set>

#include "engine/engine.h"
#include "server/admission.h"
#include "server/api_error.h"
#include "server/breaker.h"
#include "server/chat_prompt.h"
#include "server/server_config.h"
#include "server/server_observer.h"
#include "server/server_stats.h"
#include "server/slot_ends.h"
#include "tools/tool_call.h"

namespace kvw::grammar {
class GrammarCache;
}

namespace kvw::server {

struct ServerState {
  ServerConfig cfg;
  Engine* engine;
  std::string model_name;
  int64_t max_token_bytes = 1;  // the most text bytes one token stands for (vocab, specials too)
  std::unique_ptr<ChatPrompter> prompter;
  tools::ToolCallFormat tool_format = tools::ToolCallFormat::kHermes;  // how the model calls tools
  bool harmony_output = false;  // chat answers are harmony channels (tool_calling.h writes_harmony)
  AdmissionController admission;
  SlotEnds slot_ends;  // when running choices end: admission's wait for a slot
  Breaker breaker;
  LatencyWindow latency;
  RefusalCounters refusals;
  ServerCounters counters;
  std::atomic<bool> ready{false};
  std::atomic<bool> draining{false};
  std::atomic<bool> drain_cancelled{false};  // drain timed out: in-flight requests were cancelled
  ServerObserver* observer = nullptr;        // set before start(); may stay null

  // Counts a refusal and tells the observer.
  void refused(RefusalReason r) {
    refusals.add(r);
    if (observer != nullptr) observer->on_refusal(r);
  }

  ServerState(const ServerConfig& c, Engine& e)
      : cfg(c), engine(&e), admission(c.admission, e.limits().max_num_seqs), breaker(c.breaker) {}

  const Tokenizer& tokenizer() const { return engine->tokenizer(); }
  // The vocabulary's byte trie for constrained decoding, built on first use (a server that never
  // sees a grammar never pays for it) and shared by every request.
  std::shared_ptr<const grammar::TokenTrie> token_trie();
  // Grammars and their mask caches shared across requests by content (grammar_cache.h),
  // within cfg.grammar_cache_bytes; built with the trie.
  grammar::GrammarCache& grammar_cache();
  // The cache once the first grammar built it, else null; never builds it (for /metrics).
  const grammar::GrammarCache* built_grammar_cache() const {
    return grammar_cache_ready_.load(std::memory_order_acquire);
  }
  // The constraint a request's grammar becomes: the shared trie and the tokenizer's rules, and
  // the mask cache of at most mask_cache_bytes that every request with this grammar shares (by
  // DFA state class for a regular grammar, else by stack top).
  GenConstraint constraint_for(std::shared_ptr<const grammar::Grammar> g, size_t mask_cache_bytes);
  // max_model_len, n_vocab, max_num_seqs, overflow policy: the engine's, never copied here.
  const EngineLimits& limits() const { return engine->limits(); }

  // Engine requests in flight (drain waits for them, then cancels the rest).
  void register_request(uint64_t id);
  void unregister_request(uint64_t id);
  size_t num_registered() const;
  void cancel_registered();

 private:
  mutable std::mutex mu_;
  std::unordered_set<uint64_t> in_flight_;
  std::once_flag trie_once_;
  std::shared_ptr<const grammar::TokenTrie> trie_;
  // shared_ptr: its deleter is bound where the type is complete (this header only declares it).
  std::shared_ptr<grammar::GrammarCache> grammar_cache_;
  std::atomic<const grammar::GrammarCache*> grammar_cache_ready_{nullptr};
};

inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace kvw::server
