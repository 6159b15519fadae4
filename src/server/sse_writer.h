// server/sse_writer.h: the streamed (SSE) side of a generation response, and the OpenAI
// logprobs objects. SseJob is driven by httplib's chunked content provider: each step() waits
// briefly for tokens and writes `data: {chunk}\n\n` events; a failed write (client gone) makes
// httplib drop the response, and SseJob's destructor then cancels the unfinished choices.
// Thread safety: one HTTP thread at a time.
#pragma once

#include <httplib.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

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

class SseJob {
 public:
  SseJob(ServerState& st, bool chat, const GenParams& params, std::string id, int64_t created,
         int64_t prompt_tokens, std::vector<std::unique_ptr<ChoiceRunner>> runners);
  ~SseJob();
  SseJob(const SseJob&) = delete;
  SseJob& operator=(const SseJob&) = delete;

  // One provider call: false aborts the response (write failed).
  bool step(httplib::DataSink& sink);

 private:
  bool emit(httplib::DataSink& sink, size_t i, ChoiceDelta& d, bool& wrote);
  bool write_chunk(httplib::DataSink& sink, nlohmann::json choice);
  bool write_event(httplib::DataSink& sink, const std::string& payload);
  nlohmann::json envelope() const;

  ServerState& st_;
  const bool chat_;
  const GenParams params_;
  const std::string id_;
  const int64_t created_;
  const int64_t prompt_tokens_;
  std::vector<std::unique_ptr<ChoiceRunner>> runners_;
  std::vector<bool> ended_;          // [choices]: final chunk written
  std::vector<size_t> text_offset_;  // [choices]: completions logprobs text_offset
  LogprobBuilder logprobs_;
  bool started_ = false;
  bool done_ = false;
};

}  // namespace kvw::server
