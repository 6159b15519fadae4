// server/generation_stream.h: the answer to /v1/completions and /v1/chat/completions as an
// http::ResponseStream (streamed SSE or one JSON body), and the OpenAI logprobs objects.
// Thread safety: poll() on one connection strand at a time; the wake runs on the engine thread.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "http/http_message.h"
#include "server/choice_runner.h"
#include "server/openai_request.h"

namespace kvw::server {

// Chat: {"content":[{"token","logprob","bytes","top_logprobs":[...]}]}.
// Completions: {"tokens","token_logprobs","top_logprobs":[{token: logprob}],"text_offset"}.
class LogprobBuilder {
 public:
  LogprobBuilder(const Tokenizer& tok, bool chat) : tok_(tok), chat_(chat) {}
  // `text_offset`: where the first token's text starts in the choice (completions only);
  // advanced past these tokens.
  nlohmann::json build(const std::vector<TokenInfo>& tokens, size_t& text_offset) const;

 private:
  const Tokenizer& tok_;
  const bool chat_;
};

// The answer to one generation request, produced as the engine emits tokens, on the
// connection's strand (no thread waits for it). Streamed: `data: {chunk}\n\n` SSE events, then
// the usage chunk (stream_options.include_usage) and `data: [DONE]`. Not streamed: one JSON body
// once every choice has finished (or the error of the first failed choice).
// Destroying it (client gone, too slow, server stop) cancels the unfinished choices.
class GenerationStream final : public http::ResponseStream {
 public:
  GenerationStream(ServerState& st, bool chat, const GenParams& params, std::string id,
                   int64_t created, int64_t prompt_tokens,
                   std::vector<std::unique_ptr<ChoiceRunner>> runners);
  ~GenerationStream() override;
  GenerationStream(const GenerationStream&) = delete;
  GenerationStream& operator=(const GenerationStream&) = delete;

  void start(std::function<void()> wake) override;
  void poll(http::StreamOutput& out) override;

 private:
  void poll_streamed(http::StreamOutput& out);
  void poll_whole(http::StreamOutput& out);
  void finish();
  void emit(size_t i, ChoiceDelta& d, std::string& out);
  void write_chunk(std::string& out, nlohmann::json choice);
  static void write_event(std::string& out, const std::string& payload);
  nlohmann::json envelope() const;

  ServerState& st_;
  const bool chat_;
  const GenParams params_;
  const std::string id_;
  const int64_t created_;
  const int64_t prompt_tokens_;
  std::vector<std::unique_ptr<ChoiceRunner>> runners_;
  std::vector<ChoiceDelta> whole_;   // [choices]: not streamed, everything so far
  std::vector<bool> ended_;          // [choices]: final chunk written
  std::vector<size_t> text_offset_;  // [choices]: completions logprobs text_offset
  LogprobBuilder logprobs_;
  bool started_ = false;
  bool done_ = false;
};

}  // namespace kvw::server
