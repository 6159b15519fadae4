#include "server/server_state.h"

#include <algorithm>

#include "grammar/grammar_cache.h"
#include "grammar/token_trie.h"

namespace kvw::server {

std::shared_ptr<const grammar::TokenTrie> ServerState::token_trie() {
  std::call_once(trie_once_, [this] {
    trie_ = grammar::TokenTrie::from_tokenizer(tokenizer());
    grammar_cache_ = std::make_shared<grammar::GrammarCache>(trie_, cfg.grammar_cache_bytes);
    grammar_cache_ready_.store(grammar_cache_.get(), std::memory_order_release);
  });
  return trie_;
}

grammar::GrammarCache& ServerState::grammar_cache() {
  (void)token_trie();
  return *grammar_cache_;
}

GenConstraint ServerState::constraint_for(std::shared_ptr<const grammar::Grammar> g,
                                          size_t mask_cache_bytes) {
  if (!g) return {};
  grammar::GrammarCache& cache = grammar_cache();
  // The cached grammar replaces g (same content): its mask cache's positions refer to it.
  grammar::GrammarCache::Entry e = cache.get(std::move(g), mask_cache_bytes);
  return GenConstraint{.grammar = std::move(e.grammar),
                       .trie = cache.trie(),
                       // the grammar sees the text the client gets, which keeps the SPM
                       // space before the first word (ChoiceRunner's continuation decoder)
                       .strip_leading_space = false,
                       .context_masks = std::move(e.context_masks),
                       .dfa_masks = std::move(e.dfa_masks)};
}

Status ServerConfig::validate() const {
  const http::HttpServerConfig& h = http;
  if (h.port < 0 || h.port > 65535) return Error{"--port must be in [0, 65535]"};
  if (h.max_body_bytes < 1) return Error{"--max-body-bytes must be >= 1"};
  if (!(h.write_timeout_s > 0) || !(h.keep_alive_timeout_s > 0)) {
    return Error{"HTTP timeouts must be > 0"};
  }
  if (!(h.header_timeout_s > 0) || !(h.body_timeout_s > 0)) {
    return Error{"--header-timeout and --body-timeout must be > 0"};
  }
  if (h.max_header_bytes < 1024 || h.max_headers < 1 || h.listen_backlog < 1) {
    return Error{"header limits must be >= 1 KiB and >= 1 field; the backlog >= 1"};
  }
  if (h.max_connections > 0) KVW_RETURN_IF_ERROR(h.validate());
  if (drain_timeout_s < 0) return Error{"--drain-timeout must be >= 0"};
  if (breaker_tick_ms < 1) return Error{"breaker tick must be >= 1 ms"};
  if (admission.max_queue < 0) return Error{"--max-queue must be >= 0"};
  if (admission.max_queue_wait_s < 0) return Error{"--max-queue-wait must be >= 0"};
  if (admission.initial_drain_rate <= 0) return Error{"the initial drain rate must be > 0"};
  if (!(admission.initial_token_rate > 0)) return Error{"the initial token rate must be > 0"};
  const BreakerConfig& b = breaker;
  if (!(b.kv_low > 0 && b.kv_low <= b.kv_high && b.kv_high <= 1)) {
    return Error{
        "--breaker-kv-recover must be in (0, --breaker-kv-threshold] and the threshold <= 1"};
  }
  if (b.latency_sla_s < 0) return Error{"--latency-sla must be >= 0"};
  if (b.kv_shed_after_s < 0 || b.latency_shed_after_s < 0 || b.recover_hold_s < 0) {
    return Error{"breaker durations must be >= 0"};
  }
  if (!(b.latency_recover_ratio > 0 && b.latency_recover_ratio <= 1)) {
    return Error{"--breaker-latency-recover must be in (0, 1]"};
  }
  return Status::ok_status();
}

uint64_t steady_now_ns() {
  return (uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void ServerState::register_request(uint64_t id) {
  std::lock_guard lock(mu_);
  in_flight_.insert(id);
}

void ServerState::unregister_request(uint64_t id) {
  std::lock_guard lock(mu_);
  in_flight_.erase(id);
}

size_t ServerState::num_registered() const {
  std::lock_guard lock(mu_);
  return in_flight_.size();
}

void ServerState::cancel_registered() {
  std::lock_guard lock(mu_);
  for (uint64_t id : in_flight_) engine->cancel(id);
}

}  // namespace kvw::server

namespace kvw::server {}  // namespace kvw::server
