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
};

// What one poll produced.
struct ChoiceDelta {
  std::string text;
  std::vector<TokenInfo> tokens;  // only when logprobs were requested
  bool finished = false;          // this poll saw the end
};

class ChoiceRunner {
 public:
  // `arrival_ns`: when the HTTP request arrived (steady_now_ns()). `render_special`: special
  // tokens (other than end-of-generation) appear in the text.
  ChoiceRunner(ServerState& st, std::shared_ptr<TokenChannel> channel,
               const std::vector<std::string>& stops, int32_t logprobs, bool ignore_eos,
               uint64_t arrival_ns, uint32_t num_prompt_tokens, bool render_special = false);
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

 private:
  void on_token(const ChannelEvent& ev, ChoiceDelta& d);
  void on_finished(const ChannelEvent& ev, ChoiceDelta& d);
  void end(ChoiceDelta& d);

  ServerState& st_;
  std::shared_ptr<TokenChannel> channel_;
  StreamDecoder decoder_;
  StopMatcher stop_;
  const int32_t logprobs_;
  const bool ignore_eos_;
  ChoiceTiming timing_;
  int32_t num_tokens_ = 0;
  bool finished_ = false;
  std::string finish_reason_;
  std::string error_;
  ErrorKind error_kind_ = ErrorKind::kInternal;
};

}  // namespace kvw::server
