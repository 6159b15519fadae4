// server/generation_stream.h: the answer to /v1/completions and /v1/chat/completions as an
// http::ResponseStream (streamed SSE or one JSON body), and the OpenAI logprobs objects.
// Thread safety: poll() on one connection strand at a time; the wake runs on the engine thread.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <string>
#include <vector>

#include "http/byte_budget.h"
#include "http/http_message.h"
#include "server/choice_runner.h"
#include "server/openai_request.h"
#include "server/prompt_echo.h"
#include "tools/harmony_stream.h"
#include "tools/tool_stream.h"

namespace kvw::server {

// Chat: {"content":[{"token","logprob","bytes","top_logprobs":[...]}]}.
// Completions: {"tokens","token_logprobs","top_logprobs":[{token: logprob}],"text_offset"}.
class LogprobBuilder {
 public:
  LogprobBuilder(const Tokenizer& tok, bool chat) : tok_(tok), chat_(chat) {}
  // `text_offset`: where the first token's text starts in the choice (completions only);
  // advanced past these tokens.
  nlohmann::json build(std::span<const TokenInfo> tokens, size_t& text_offset) const;
  // The object is one array per column, so a long answer can be written a slice at a time:
  // chat has one ("content"), completions four ("tokens", "token_logprobs", "top_logprobs",
  // "text_offset"; only the last reads and advances `text_offset`).
  int num_columns() const { return chat_ ? 1 : 4; }
  const char* column_name(int col) const;
  nlohmann::json column(std::span<const TokenInfo> tokens, int col, size_t& text_offset) const;

 private:
  const Tokenizer& tok_;
  const bool chat_;
};

// The answer to one generation request, produced as the engine emits tokens, on the
// connection's strand (no thread waits for it). Streamed: `data: {chunk}\n\n` SSE events, then
// the usage chunk (stream_options.include_usage) and `data: [DONE]`. Not streamed: one JSON body
// once every choice has finished (or the error of the first failed choice), written in parts
// of kTokensPerPart tokens' logprobs, each made when the client has taken the last (pull), so
// n choices x thousands of tokens with logprobs never sit whole in memory as JSON.
// Destroying it (client gone, too slow, server stop) cancels the unfinished choices.
// Completions: runners are prompt-major, num_candidates(params) per prompt; with best_of the n
// with the highest cumulative logprob are the choices (usage counts every candidate). With
// echo / prompt_logprobs, `prompts` has one entry per prompt; their logprobs are part of the
// request memory hold() keeps.
class GenerationStream final : public http::ResponseStream {
 public:
  GenerationStream(ServerState& st, bool chat, const GenParams& params, std::string id,
                   int64_t created, int64_t prompt_tokens,
                   std::vector<std::unique_ptr<ChoiceRunner>> runners,
                   std::vector<EchoPrompt> prompts = {});
  ~GenerationStream() override;
  GenerationStream(const GenerationStream&) = delete;
  GenerationStream& operator=(const GenerationStream&) = delete;

  // The request memory this answer holds (request_holdings.h) until it is destroyed: after the
  // last byte is written, or when the client goes away.
  void hold(http::ByteLease lease) { lease_ = std::move(lease); }

  void start(std::function<void()> wake) override;
  void poll(http::StreamOutput& out) override;

 private:
  void poll_streamed(http::StreamOutput& out);
  void poll_whole(http::StreamOutput& out);
  bool start_whole(http::StreamOutput& out);  // false: not every choice has finished
  void write_part(std::string& out);
  void release_runners();
  void finish();
  void emit(size_t i, ChoiceDelta& d, std::string& out, nlohmann::json prompt_logprobs = nullptr);
  // Streamed: puts choice i's prompt in front of its first delta once its prompt logprobs are
  // all in; false while they are not (the delta waits).
  bool echo_first(size_t i, ChoiceDelta& d, nlohmann::json& prompt_logprobs);
  // Not streamed, every choice finished: the prompts in front, best_of's pick in order_.
  void prepare_whole();
  const EchoPrompt& prompt_of(size_t runner) const;
  const std::vector<TokenInfo>& prompt_logprobs_of(size_t runner);
  // Harmony calls piece by piece as the model writes them (tool_call_delta_json).
  void emit_call_deltas(size_t i, const std::vector<tools::ToolCallDelta>& deltas,
                        std::string& out);
  // With tools, each call as OpenAI's delta.tool_calls chunks (id and name, then argument
  // fragments), sent as soon as the call is whole.
  void emit_tool_calls(size_t i, const std::vector<tools::ToolCall>& calls, size_t first_index,
                       std::string& out);
  // The end: content held back and calls not sent yet. Returns the finish_reason
  // ("tool_calls" when there were calls).
  std::string emit_tool_end(size_t i, const std::string& finish_reason, std::string& out);
  // Harmony: what the channel filter still held, and its calls (with tools), at the end.
  std::string emit_harmony_end(size_t i, const std::string& finish_reason, std::string& out);
  nlohmann::json harmony_message(const std::string& text, std::string& finish_reason) const;
  nlohmann::json chat_message(const std::string& text, std::string& finish_reason) const;
  void write_chunk(std::string& out, nlohmann::json choice);
  static void write_event(std::string& out, const std::string& payload);
  nlohmann::json envelope() const;

  ServerState& st_;
  http::ByteLease lease_;  // destroyed last: everything below is what it pays for
  const bool chat_;
  const GenParams params_;
  const std::string id_;
  const int64_t created_;
  const int64_t prompt_tokens_;
  std::vector<std::unique_ptr<ChoiceRunner>> runners_;
  const std::vector<EchoPrompt> prompts_;  // [prompts] with echo or prompt_logprobs, else empty
  std::vector<bool> echo_pending_;         // [runners]: streamed, prompt not yet sent
  std::vector<size_t> order_;              // [choices]: the runner each choice shows
  std::vector<nlohmann::json> prompt_lp_;  // [runners]: prompt_logprobs, kept past runners
  // [prompts]: the engine's prompt logprobs, from the prompt's first candidate, shared by all.
  std::vector<std::shared_ptr<const std::vector<TokenInfo>>> prompt_sent_;
  std::vector<ChoiceDelta> whole_;   // [choices]: not streamed, everything so far
  std::vector<bool> ended_;          // [choices]: final chunk written
  std::vector<size_t> text_offset_;  // [choices]: completions logprobs text_offset
  std::vector<tools::ToolStreamFilter> tool_filters_;  // [choices] when streamed with tools
  // [choices] when streamed with harmony channels (instead of tool_filters_)
  std::vector<tools::HarmonyStreamFilter> harmony_filters_;
  LogprobBuilder logprobs_;
  bool started_ = false;
  bool done_ = false;
  // Not streamed, once every choice has finished: the part written next.
  struct WholePart {
    size_t choice = 0;
    int column = -1;  // -1: the choice's opening (index, text, finish_reason)
    size_t token = 0;
    size_t text_offset = 0;
  };
  bool whole_started_ = false;
  WholePart part_;
  std::vector<std::string> finish_reasons_;  // [choices], kept when the runners go
  int64_t completion_tokens_ = 0;
};

}  // namespace kvw::server
