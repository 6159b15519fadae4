// server/choice_runner.h: one OpenAI choice = one engine request. Reads its TokenChannel,
// detokenises with a StreamDecoder (never splits a UTF-8 character), applies stop strings
// (cancelling the engine request on a match) and keeps per-token logprobs.
// RAII: the destructor cancels an unfinished engine request (client gone, drain) and does the
// bookkeeping (admission drain rate, latency window, drain registry, the observer's timing)
// exactly once.
// Thread safety: one thread at a time (the connection's strand).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/queues.h"
#include "server/server_state.h"
#include "server/stop_matcher.h"
#include "tokenizer/tokenizer.h"

namespace kvw::server {

struct TokenInfo {
  int32_t token_id = 0;
  float logprob = 0;
  std::vector<TokenLogprob> top;
  int32_t rank = 0;         // prompt tokens: 1 + tokens more likely there (vLLM); 0 unknown
  bool has_logprob = true;  // false for the first prompt token (nothing before it: null)
};

// What one poll produced.
struct ChoiceDelta {
  std::string text;
  std::vector<TokenInfo> tokens;  // only when logprobs were requested
  bool finished = false;          // this poll saw the end
};

// How a choice's output is shown. `discard`: echo with max_tokens 0 (vLLM samples one token and
// drops it): the token is not reported and the choice ends with "length". `render_special`:
// special tokens (other than end-of-generation) appear in the text (tool-call markers).
// `min_tokens`: stop strings match only text that tokens after the first min_tokens add (as
// vLLM). A token of `stop_token_ids` (the engine ends the choice with it) has no text.
struct ChoiceOutput {
  bool discard = false;
  bool render_special = false;
  int32_t min_tokens = 0;
  std::shared_ptr<const std::vector<int32_t>> stop_token_ids = {};
};

class ChoiceRunner {
 public:
  // `arrival_ns`: when the HTTP request arrived (steady_now_ns()). `stops` is the request's one
  // copy, shared by its choices. `max_tokens`: the engine request's.
  ChoiceRunner(ServerState& st, std::shared_ptr<TokenChannel> channel,
               std::shared_ptr<const std::vector<std::string>> stops, int32_t logprobs,
               bool ignore_eos, int32_t max_tokens, uint64_t arrival_ns, uint32_t num_prompt_tokens,
               ChoiceOutput output = {});
  ~ChoiceRunner();
  ChoiceRunner(const ChoiceRunner&) = delete;
  ChoiceRunner& operator=(const ChoiceRunner&) = delete;

  // Takes whatever events are ready (never waits). Appends to `d`.
  void poll(ChoiceDelta& d);
  // `fn` runs on the engine thread whenever the channel has something new (TokenChannel).
  void set_notify(std::function<void()> fn) { channel_->set_notify(std::move(fn)); }
  bool finished() const { return finished_; }
  // "stop" or "length" when finished normally; empty while running or on error.
  const std::string& finish_reason() const { return finish_reason_; }
  // Set when the engine failed or cancelled the request (drain, shutdown, bad input).
  const std::string& error() const { return error_; }
  ErrorKind error_kind() const { return error_kind_; }
  bool produced_tokens() const { return num_tokens_ > 0; }
  int32_t num_tokens() const { return num_tokens_; }
  uint64_t request_id() const { return channel_->request_id(); }
  // Prompt logprobs (GenerationRequest::prompt_logprobs): prompt tokens 1.. as they arrived.
  // Complete once prompt_done() (a token or the end came after them).
  std::vector<TokenInfo> take_prompt_logprobs() { return std::move(prompt_); }
  bool prompt_done() const { return prompt_done_; }
  // Sum of the logprobs of every generated token (engine logprobs requested), stop strings or
  // not: best_of ranks candidates by it.
  double cumulative_logprob() const { return cumulative_logprob_; }

 private:
  void poll_events(ChoiceDelta& d);
  void on_token(const ChannelEvent& ev, ChoiceDelta& d);
  void on_prompt_logprobs(const ChannelEvent& ev);
  void on_finished(const ChannelEvent& ev, ChoiceDelta& d);
  void end(ChoiceDelta& d);
  // From its first token to its end the choice holds a running slot (slot_ends.h).
  void enter_slot();
  void leave_slot();

  ServerState& st_;
  std::shared_ptr<TokenChannel> channel_;
  StreamDecoder decoder_;
  StopMatcher stop_;
  const int32_t logprobs_;
  const bool ignore_eos_;
  const int32_t max_tokens_;
  std::optional<SlotEnds::Key> slot_;  // entered in st_.slot_ends while running
  const bool discard_output_;
  const int32_t min_tokens_;
  std::shared_ptr<const std::vector<int32_t>> stop_token_ids_;  // sorted; null = none
  std::vector<TokenInfo> prompt_;
  bool prompt_done_ = false;
  double cumulative_logprob_ = 0;
  ChoiceTiming timing_;
  int32_t num_tokens_ = 0;
  bool finished_ = false;
  std::string finish_reason_;
  std::string error_;
  ErrorKind error_kind_ = ErrorKind::kInternal;
};

}  // namespace kvw::server
