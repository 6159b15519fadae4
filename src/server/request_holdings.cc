#include "server/request_holdings.h"

#include <algorithm>
#include <string>

#include "server/completion_options.h"
#include "server/server_state.h"

namespace kvw::server {
namespace {

// JSON text of one token's logprobs in the worst case: its piece escaped (\u00XX, 6 bytes per
// byte) in "token" and as a "bytes" array (up to 4 bytes per byte), plus keys and numbers.
uint64_t json_bytes_per_token(int32_t top_k, int64_t max_token_bytes) {
  const uint64_t per_piece = 10 * (uint64_t)max_token_bytes + 96;
  return per_piece * (1 + (uint64_t)std::max(0, top_k));
}

// Why 256: GenerationStream writes a non-streamed answer's logprobs 256 tokens at a time.
constexpr uint64_t kTokensPerPart = 256;

}  // namespace

Holdings request_holdings(const GenParams& p, std::span<const PromptShape> prompts,
                          const HoldingLimits& lim) {
  Holdings h;
  uint64_t max_stop = 0;
  for (const std::string& s : p.stop) {
    h.shared += s.size() + sizeof(std::string);
    max_stop = std::max<uint64_t>(max_stop, s.size());
  }
  // One list, shared by the request and every choice's sampler (model/logit_bias.h).
  h.shared += p.logit_bias.size() * sizeof(LogitBias::Entry) + 64;
  // stop_token_ids: one list for the request; with min_tokens each choice's sampler also keeps
  // them with the end-of-generation ids (a few) as its ban list.
  const uint64_t stop_ids_bytes = p.stop_token_ids ? 4 * p.stop_token_ids->size() + 64 : 0;
  h.shared += stop_ids_bytes;
  const auto n = (uint64_t)num_candidates(p);  // best_of: every candidate is held
  const auto tok_bytes = (uint64_t)std::max<int64_t>(1, lim.max_token_bytes);
  uint64_t largest_part = 0;
  uint64_t most_records = 0;  // the most logprob records one choice's answer can hold
  for (const PromptShape& ps : prompts) {
    const auto max_tokens = (uint64_t)std::max<int64_t>(0, ps.max_tokens);
    // Echo puts the prompt's tokens in the logprobs columns before the generated ones, and
    // prompt_logprobs puts them in the choice's opening part.
    const bool prompt_in_part = p.echo || p.prompt_logprobs >= 0;
    most_records =
        std::max(most_records, max_tokens + (prompt_in_part ? (uint64_t)ps.num_tokens : 0));
    // The prompt's ids and their block hashes (at most 8 B a token): one copy shared by its
    // choices from the request to the scheduler (core/token_list.h).
    h.shared += 12 * (uint64_t)ps.num_tokens;
    // Its turn offsets: one list shared the same way (core/turn_starts.h).
    h.shared += 8 * (uint64_t)ps.num_turn_starts;
    uint64_t choice = kChoiceFixedBytes;
    choice += 4 * max_tokens;        // the engine's output ids
    choice += 8 * max_tokens;        // the runner's token arrival times
    choice += max_stop + tok_bytes;  // text held back while it may start a stop string
    if (p.min_tokens > 0) choice += stop_ids_bytes + 64;
    // repetition_penalty: the sequence's distinct tokens (model/seen_tokens.h).
    if (p.repetition_penalty != 1.0f) {
      choice += 4 * (uint64_t)std::min<int64_t>(lim.n_vocab, ps.num_tokens + (int64_t)max_tokens);
    }
    h.choices += n * choice;
    if (p.stream) continue;
    // Not streamed: the text and logprob records are kept until the answer is written.
    uint64_t answer = max_tokens * tok_bytes;
    if (p.logprobs >= 0) {
      answer += max_tokens * (kTokenRecordBytes + kTopLogprobBytes * (uint64_t)p.logprobs);
    }
    h.answer += n * answer;
    largest_part = std::max(largest_part, 6 * max_tokens * tok_bytes + 256);
  }
  // Not streamed, the part being written: made by the stream and copied into the transport's
  // buffer (a streamed answer's chunks are the stream buffer's, outside this lease).
  if (!p.stream) {
    // A part holds at most kTokensPerPart records of one choice, and never more than it has.
    const int32_t top_k = std::max(p.logprobs, p.prompt_logprobs);
    const uint64_t logprob_part = top_k >= 0 ? std::min(kTokensPerPart, most_records) *
                                                   json_bytes_per_token(top_k, lim.max_token_bytes)
                                             : 0;
    h.answer += 2 * std::max(largest_part, logprob_part);
  }
  return h;
}

HoldingLimits holding_limits(const ServerState& st) {
  return {.max_token_bytes = st.max_token_bytes, .n_vocab = st.limits().n_vocab};
}

uint64_t num_logprob_records(const GenParams& p, std::span<const PromptShape> prompts) {
  if (p.logprobs < 0) return 0;
  uint64_t records = 0;
  for (const PromptShape& ps : prompts) {
    records += (uint64_t)num_candidates(p) * (uint64_t)std::max<int64_t>(0, ps.max_tokens) *
               (1 + (uint64_t)p.logprobs);
  }
  return records;
}

namespace {

ApiError too_many_records(const GenParams& p, uint64_t records) {
  return invalid_param(p.n > 1 ? "n" : "max_tokens",
                       "n x max_tokens x (1 + top logprobs) over the prompts is " +
                           std::to_string(records) + " logprob records; at most " +
                           std::to_string(kMaxLogprobRecords) +
                           " (lower n, max_tokens or logprobs)");
}

}  // namespace

std::optional<ApiError> check_field_bounds(const GenParams& p, size_t num_prompts) {
  uint64_t stop_bytes = 0;
  for (const std::string& s : p.stop) stop_bytes += s.size();
  if (stop_bytes > kMaxStopBytes) {
    return invalid_param("stop", "'stop' strings total " + std::to_string(stop_bytes) +
                                     " bytes; at most " + std::to_string(kMaxStopBytes));
  }
  if (p.logit_bias.size() > kMaxLogitBiasEntries) {
    return invalid_param("logit_bias", "'logit_bias' has " + std::to_string(p.logit_bias.size()) +
                                           " entries; at most " +
                                           std::to_string(kMaxLogitBiasEntries));
  }
  if (p.stop_token_ids && p.stop_token_ids->size() > kMaxStopTokenIds) {
    return invalid_param("stop_token_ids",
                         "'stop_token_ids' has " + std::to_string(p.stop_token_ids->size()) +
                             " distinct ids; at most " + std::to_string(kMaxStopTokenIds));
  }
  if (p.max_tokens && p.logprobs >= 0) {
    const PromptShape one{.max_tokens = *p.max_tokens};
    const uint64_t records = num_logprob_records(p, std::span(&one, 1)) * num_prompts;
    if (records > kMaxLogprobRecords) return too_many_records(p, records);
  }
  return std::nullopt;
}

std::optional<ApiError> check_logprob_records(const GenParams& p,
                                              std::span<const PromptShape> prompts) {
  const uint64_t records = num_logprob_records(p, prompts);
  if (records > kMaxLogprobRecords) return too_many_records(p, records);
  return std::nullopt;
}

}  // namespace kvw::server
