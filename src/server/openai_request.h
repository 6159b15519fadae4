// server/openai_request.h: OpenAI request bodies (/v1/completions, /v1/chat/completions) parsed
// and validated into plain structs. Every refusal is a 400 ApiError naming the parameter;
// nothing here throws on user input.
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "chat/chat_template.h"
#include "engine/gen_sampling.h"
#include "server/api_error.h"
#include "tools/tool_call.h"

namespace kvw::server {

template <typename T>
using ApiResult = std::variant<T, ApiError>;

// Knobs shared by both endpoints.
struct GenParams {
  std::string model;                  // empty when absent
  std::optional<int32_t> max_tokens;  // max_tokens / max_completion_tokens
  float temperature = 1.0f;           // OpenAI's default
  float top_p = 1.0f;
  int32_t top_k = 0;   // vLLM extension; 0 or -1 = off
  float min_p = 0.0f;  // vLLM extension
  std::optional<uint64_t> seed;
  int32_t n = 1;
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  // vLLM extensions (engine/gen_sampling.h): > 0, 1 = off; tokens before EOS and stops count;
  // token ids that end the choice (sorted, distinct; checked against the vocabulary by the
  // handler), shared by the choices.
  float repetition_penalty = 1.0f;
  int32_t min_tokens = 0;
  std::shared_ptr<const std::vector<int32_t>> stop_token_ids = {};
  int32_t logprobs = -1;    // engine GenSampling::logprobs: -1 none, k >= 0 top alternatives
  bool ignore_eos = false;  // vLLM extension
  // kvwarden extension: false opts this request out of speculative decoding (when the server
  // runs with --spec-ngram / --draft-model); llama-server's "speculative.n_max": 0 too.
  bool speculative = true;
  LogitBias logit_bias = {};      // {"token id": bias in [-100, 100]}; one list for every choice
  GenConstraint constraint = {};  // structured output (server/structured_output.h); none = off
  // Completions only (server/completion_options.h): the prompt starts the text (with logprobs:
  // its tokens' logprobs too, the first null); vLLM's prompt_logprobs (top k per prompt token);
  // best_of candidates per prompt of which the n with the highest cumulative logprob are
  // returned (0: n).
  bool echo = false;
  int32_t prompt_logprobs = -1;
  int32_t best_of = 0;
  // Tool calling (server/tool_calling.h): the output is parsed for calls in this format.
  std::optional<tools::ToolCallFormat> tool_format = std::nullopt;
  bool parallel_tool_calls = true;
  // Chat with a model that writes harmony (gpt-oss): its analysis channel is returned as
  // reasoning_content and only its final channel as content (tools/harmony_stream.h).
  bool harmony_channels = false;
};

// One completions prompt: text, or token ids when the client sent ids.
struct PromptInput {
  std::string text;
  std::vector<int32_t> tokens;
  bool is_tokens = false;
};

struct CompletionRequest {
  GenParams params;
  std::vector<PromptInput> prompts;  // a batch of prompts gives prompts.size() * n choices
};

struct ChatRequest {
  GenParams params;
  std::vector<ChatMessage> messages;
};

inline constexpr int32_t kMaxN = 16;
inline constexpr int32_t kMaxLogprobs = 20;
inline constexpr size_t kMaxStops = 16;

ApiResult<CompletionRequest> parse_completion_request(const nlohmann::json& body);
ApiResult<ChatRequest> parse_chat_request(const nlohmann::json& body);
// `messages` alone (also used by /tokenize).
ApiResult<std::vector<ChatMessage>> parse_messages(const nlohmann::json& messages);
// A JSON array of token ids in [0, n_vocab) (param names the field for errors).
ApiResult<std::vector<int32_t>> parse_token_ids(const nlohmann::json& v, const std::string& param,
                                                int32_t n_vocab);

// Parses a request body. Malformed JSON (including invalid UTF-8 in strings) and a body that is
// not an object are 400s. The parsed document may cost at most `dom_budget_bytes` (estimated
// as it is built: nodes, keys and strings); a body whose JSON would need more is refused with
// 413 before it is built, so request memory stays within what the transport reserved; JSON
// nested deeper than kMaxJsonDepth is a 400 (no OpenAI request comes close).
ApiResult<nlohmann::json> parse_body(const std::string& body,
                                     uint64_t dom_budget_bytes = UINT64_MAX);
// Estimated heap bytes of a JSON document as parse_body counts them, per node kind.
inline constexpr uint64_t kJsonNodeBytes = 32;       // a value in its parent container
inline constexpr uint64_t kJsonContainerBytes = 64;  // an object or array's own allocation
inline constexpr int kMaxJsonDepth = 64;

}  // namespace kvw::server
