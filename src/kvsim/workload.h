// kvsim/workload.h: the requests a KV simulation replays: built-in patterns (multi-turn, burst,
// random lengths, shared-prefix groups, Poisson arrivals) and a JSONL trace reader.
// Pure data and pure functions: the same WorkloadSpec and seed always give the same requests.
// Thread safety: none needed (no shared state).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kvw::kvsim {

// One request. Token ids are not stored: token_at() derives them from the keys, so every round of
// a conversation re-sends the same history tokens (prefix-cache hits on the paged side) and every
// member of a shared-prefix group starts with the same `shared_prefix_tokens` tokens.
struct SimRequest {
  double arrival_s = 0;          // absolute arrival; for follow_previous, the think time instead
  uint64_t conversation_id = 0;  // key of the conversation's tokens
  uint32_t round = 0;            // 0-based turn within the conversation
  uint32_t prompt_tokens = 0;    // the whole prompt, history included
  uint32_t output_tokens = 0;    // tokens generated (>= 1)
  uint64_t prefix_group = 0;     // key of the shared prefix tokens (0: none)
  uint32_t shared_prefix_tokens = 0;  // first tokens taken from prefix_group
  bool follow_previous = false;  // arrives arrival_s after the previous round of this conversation
                                 // finishes (a user reading and typing), not at a fixed time
};

// Token id at `pos` of request `r` (deterministic; ids in [1, 32000)).
int32_t token_at(const SimRequest& r, uint32_t pos);

enum class Pattern { kMultiturn, kBurst, kRandom, kSharedPrefix, kPoisson };

std::string_view pattern_name(Pattern p);
Result<Pattern> parse_pattern(std::string_view s);

// Knobs of the built-in patterns. Defaults give the shapes the issue asks for.
struct WorkloadSpec {
  Pattern pattern = Pattern::kMultiturn;
  uint64_t seed = 1;
  uint32_t num_requests = 32;  // burst/random/shared-prefix/poisson: requests in total;
                               // multiturn: conversations
  uint32_t min_rounds = 15;    // multiturn: rounds per conversation, uniform in [min, max]
  uint32_t max_rounds = 20;
  uint32_t system_prompt_tokens = 1024;  // multiturn: first-round context before the user turn
  uint32_t min_prompt_tokens = 128;      // whole prompt (all patterns but multiturn)
  uint32_t max_prompt_tokens = 2048;
  uint32_t min_output_tokens = 64;
  uint32_t max_output_tokens = 1024;
  uint32_t min_turn_tokens = 64;  // multiturn: new user tokens per round
  uint32_t max_turn_tokens = 512;
  uint32_t min_reply_tokens = 64;  // multiturn: generated tokens per round
  uint32_t max_reply_tokens = 512;
  double think_s = 2.0;                 // multiturn: mean pause between a reply and the next turn
  double conversation_stagger_s = 1.0;  // multiturn: conversations start this far apart
  uint32_t burst_size = 32;             // burst: requests arriving together
  double burst_interval_s = 60.0;       // burst: time between bursts
  double rate_per_s = 4.0;              // poisson/shared-prefix: mean arrivals per second;
                                        // random: arrivals spread uniformly at this mean rate
  uint32_t num_groups = 4;              // shared-prefix: distinct prefixes
  uint32_t group_prefix_tokens = 2048;  // shared-prefix: tokens every member of a group shares
  uint32_t max_model_len = 16384;       // no request's prompt + output exceeds this
};

// Generates the pattern's requests, sorted by (arrival, conversation, round) for fixed arrivals.
std::vector<SimRequest> generate_workload(const WorkloadSpec& spec);

// Parses a JSONL trace, one request per line:
//   {"arrival": 0.5, "conversation": 7, "prompt_tokens": 1200, "output_tokens": 300}
// Blank lines are skipped. Requests of one conversation share the conversation's tokens, so a
// later round whose prompt contains the earlier one's hits the prefix cache. Errors name the file
// and line: "t.jsonl:3: missing \"prompt_tokens\"".
Result<std::vector<SimRequest>> parse_trace(std::string_view text, std::string_view file_name);
Result<std::vector<SimRequest>> read_trace_file(const std::string& path);

}  // namespace kvw::kvsim
