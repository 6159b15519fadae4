// Request parsing: every refusal is a 400 naming the parameter; accepted shapes map to fields.
#include "server/openai_request.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace kvw::server {
namespace {

using nlohmann::json;

template <typename T>
ApiError error_of(const ApiResult<T>& r) {
  EXPECT_TRUE(std::holds_alternative<ApiError>(r));
  return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r) : ApiError{};
}

TEST(OpenAiRequest, MalformedJsonAndInvalidUtf8AreRefused) {
  EXPECT_EQ(error_of(parse_body("{\"a\": ")).status, 400);
  EXPECT_EQ(error_of(parse_body("[1, 2]")).status, 400);
  EXPECT_EQ(error_of(parse_body("{\"prompt\": \"\xFF\xFE\"}")).status, 400);
  EXPECT_EQ(error_of(parse_body("{\"prompt\": \"\\ud800\"}")).status, 400);  // lone surrogate
  EXPECT_TRUE(std::holds_alternative<json>(parse_body("{\"prompt\": \"caf\xC3\xA9\"}")));
}

TEST(OpenAiRequest, CompletionPromptShapes) {
  auto one = parse_completion_request(json{{"prompt", "hi"}});
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(one));
  EXPECT_EQ(std::get<CompletionRequest>(one).prompts.size(), 1u);
  auto ids = parse_completion_request(json{{"prompt", {5, 6, 7}}});
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(ids));
  EXPECT_TRUE(std::get<CompletionRequest>(ids).prompts[0].is_tokens);
  EXPECT_EQ(std::get<CompletionRequest>(ids).prompts[0].tokens, (std::vector<int32_t>{5, 6, 7}));
  auto batch = parse_completion_request(json{{"prompt", json::array({"a", {1, 2}})}});
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(batch));
  EXPECT_EQ(std::get<CompletionRequest>(batch).prompts.size(), 2u);
  for (json bad : {json(5), json::array(), json::array({1.5}), json::array({-1}),
                   json::array({json::object()})}) {
    EXPECT_EQ(error_of(parse_completion_request(json{{"prompt", bad}})).param, "prompt") << bad;
  }
  EXPECT_EQ(error_of(parse_completion_request(json::object())).param, "prompt");
}

TEST(OpenAiRequest, ParamsAreRangeCheckedAndNamed) {
  const json base = {{"prompt", "x"}};
  auto param_of = [&](const char* key, json v) {
    json b = base;
    b[key] = v;
    return error_of(parse_completion_request(b)).param;
  };
  EXPECT_EQ(param_of("temperature", 2.5), "temperature");
  EXPECT_EQ(param_of("temperature", "hot"), "temperature");
  EXPECT_EQ(param_of("top_p", 0), "top_p");
  EXPECT_EQ(param_of("max_tokens", 0), "max_tokens");
  EXPECT_EQ(param_of("max_tokens", 1.5), "max_tokens");
  EXPECT_EQ(param_of("max_completion_tokens", -3), "max_completion_tokens");
  EXPECT_EQ(param_of("n", 0), "n");
  EXPECT_EQ(param_of("n", kMaxN + 1), "n");
  EXPECT_EQ(param_of("presence_penalty", 2.1), "presence_penalty");
  EXPECT_EQ(param_of("frequency_penalty", -2.1), "frequency_penalty");
  EXPECT_EQ(param_of("logprobs", 21), "logprobs");
  EXPECT_EQ(param_of("stop", 3), "stop");
  EXPECT_EQ(param_of("stop", json::array({"a", 1})), "stop");
  EXPECT_EQ(param_of("stream", "yes"), "stream");
  EXPECT_EQ(param_of("seed", "1"), "seed");
  EXPECT_EQ(param_of("model", 3), "model");
  json so = base;
  so["stream_options"] = {{"include_usage", 1}};
  EXPECT_EQ(error_of(parse_completion_request(so)).param, "stream_options.include_usage");
}

TEST(OpenAiRequest, AcceptedValuesMapToFields) {
  json b = {{"prompt", "x"},
            {"max_tokens", 7.0},
            {"top_p", 0.5},
            {"seed", 42},
            {"n", 2},
            {"stop", "END"},
            {"stream", true},
            {"stream_options", {{"include_usage", true}}},
            {"presence_penalty", 0.5},
            {"frequency_penalty", -0.5},
            {"logprobs", 3},
            {"temperature", nullptr}};
  auto r = parse_completion_request(b);
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r));
  const GenParams& p = std::get<CompletionRequest>(r).params;
  EXPECT_EQ(*p.max_tokens, 7);
  EXPECT_FLOAT_EQ(p.temperature, 1.0f);  // null = default
  EXPECT_FLOAT_EQ(p.top_p, 0.5f);
  EXPECT_EQ(*p.seed, 42u);
  EXPECT_EQ(p.n, 2);
  EXPECT_EQ(p.stop, (std::vector<std::string>{"END"}));
  EXPECT_TRUE(p.stream && p.include_usage);
  EXPECT_FLOAT_EQ(p.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(p.frequency_penalty, -0.5f);
  EXPECT_EQ(p.logprobs, 3);
}

// Per-request opt-out of speculative decoding (kvwarden's "speculative", or llama-server's
// "speculative.n_max": 0); on by default, so a server with --spec-ngram/--draft-model speculates.
TEST(OpenAiRequest, SpeculativeOptOutFieldIsReadAndNamedOnErrors) {
  auto params = [](json b) {
    b["prompt"] = "x";
    auto r = parse_completion_request(b);
    EXPECT_TRUE(std::holds_alternative<CompletionRequest>(r));
    return std::holds_alternative<CompletionRequest>(r) ? std::get<CompletionRequest>(r).params
                                                        : GenParams{};
  };
  EXPECT_TRUE(params(json::object()).speculative);
  EXPECT_FALSE(params({{"speculative", false}}).speculative);
  EXPECT_TRUE(params({{"speculative", true}}).speculative);
  EXPECT_FALSE(params({{"speculative.n_max", 0}}).speculative);
  EXPECT_TRUE(params({{"speculative.n_max", 8}}).speculative);
  EXPECT_EQ(error_of(parse_completion_request({{"prompt", "x"}, {"speculative", "no"}})).param,
            "speculative");
  EXPECT_EQ(error_of(parse_completion_request({{"prompt", "x"}, {"speculative.n_max", -1}})).param,
            "speculative.n_max");
}

// Issue 30: "1", "01" and " +001" are distinct JSON keys for one token; only the canonical
// spelling is a token id, so logit_bias cannot name a token twice.
TEST(OpenAiRequest, LogitBiasKeysMustBeCanonicalTokenIds) {
  auto ok = parse_completion_request(
      json{{"prompt", "x"}, {"logit_bias", {{"0", -100}, {"50256", 5}, {"2147483647", 1}}}});
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(ok));
  const LogitBias& list = std::get<CompletionRequest>(ok).params.logit_bias;
  std::vector<LogitBias::Entry> bias(list.begin(), list.end());
  std::sort(bias.begin(), bias.end());
  EXPECT_EQ(bias, (std::vector<std::pair<int32_t, float>>{{0, -100}, {50256, 5}, {INT32_MAX, 1}}));
  for (const char* key : {"01", " 1", "+1", " +001", "-1", "1.0", "1e3", "", "0x10", "2147483648",
                          "99999999999", "1 "}) {
    const ApiError e =
        error_of(parse_completion_request(json{{"prompt", "x"}, {"logit_bias", {{key, 1}}}}));
    EXPECT_EQ(e.status, 400) << key;
    EXPECT_EQ(e.param, "logit_bias") << key;
  }
}

TEST(OpenAiRequest, ChatMessagesAndLogprobs) {
  json b = {
      {"messages",
       {{{"role", "system"}, {"content", "be brief"}},
        {{"role", "user"},
         {"content", {{{"type", "text"}, {"text", "a"}}, {{"type", "text"}, {"text", "b"}}}}}}},
      {"logprobs", true},
      {"top_logprobs", 2},
      {"max_completion_tokens", 5}};
  auto r = parse_chat_request(b);
  ASSERT_TRUE(std::holds_alternative<ChatRequest>(r));
  const ChatRequest& c = std::get<ChatRequest>(r);
  ASSERT_EQ(c.messages.size(), 2u);
  EXPECT_EQ(c.messages[1].content, "ab");
  EXPECT_EQ(c.params.logprobs, 2);
  EXPECT_EQ(*c.params.max_tokens, 5);

  json no_lp = {{"messages", {{{"role", "user"}, {"content", "x"}}}}, {"top_logprobs", 2}};
  EXPECT_EQ(error_of(parse_chat_request(no_lp)).param, "top_logprobs");
  json bad_role = {{"messages", {{{"role", "wizard"}, {"content", "x"}}}}};
  EXPECT_EQ(error_of(parse_chat_request(bad_role)).param, "messages[0].role");
  json bad_part = {{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}}};
  EXPECT_EQ(error_of(parse_chat_request(bad_part)).param, "messages[0].content");
  EXPECT_EQ(error_of(parse_chat_request(json{{"messages", json::array()}})).param, "messages");
  EXPECT_EQ(error_of(parse_chat_request(json{{"messages", "hi"}})).param, "messages");
}

// A user or system turn needs content (missing or null is 400 naming the field); an assistant
// turn may omit it (a tool-call turn in OpenAI's API).
TEST(OpenAiRequest, ChatContentRequiredExceptForAssistant) {
  json no_content = {{"messages", {{{"role", "user"}}}}};
  EXPECT_EQ(error_of(parse_chat_request(no_content)).param, "messages[0].content");
  json null_system = {
      {"messages",
       {{{"role", "user"}, {"content", "x"}}, {{"role", "system"}, {"content", nullptr}}}}};
  EXPECT_EQ(error_of(parse_chat_request(null_system)).param, "messages[1].content");
  json assistant = {
      {"messages",
       {{{"role", "user"}, {"content", "x"}}, {{"role", "assistant"}, {"content", nullptr}}}}};
  auto r = parse_chat_request(assistant);
  ASSERT_TRUE(std::holds_alternative<ChatRequest>(r));
  EXPECT_EQ(std::get<ChatRequest>(r).messages[1].content, "");
}

TEST(OpenAiRequest, ErrorJsonHasOpenAiShape) {
  ApiError e = invalid_param("n", "bad n");
  json j = json::parse(e.to_json());
  EXPECT_EQ(j["error"]["message"], "bad n");
  EXPECT_EQ(j["error"]["type"], "invalid_request_error");
  EXPECT_EQ(j["error"]["param"], "n");
  EXPECT_TRUE(j["error"].contains("code"));
  ApiError none(RefusalReason::kNotFound, "m");
  EXPECT_EQ(none.status, 404);
  EXPECT_TRUE(json::parse(none.to_json())["error"]["param"].is_null());
  ApiError internal(RefusalReason::kInternal, "m");
  EXPECT_EQ(internal.status, 500);
  EXPECT_EQ(json::parse(internal.to_json())["error"]["type"], "server_error");
  EXPECT_TRUE(json::parse(internal.to_json())["error"]["code"].is_null());
}

// Issue 31: a field that would change the answer but is not implemented is a 400 naming it,
// never accepted and ignored; its "off" values and fields that change nothing pass.
TEST(OpenAiRequest, UnimplementedOutputChangingFieldsAreRefusedByName) {
  auto completion_param = [](json extra) {
    json b = {{"prompt", "x"}};
    b.update(extra);
    auto r = parse_completion_request(b);
    return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r).param : std::string("ok");
  };
  auto chat_param = [](json extra) {
    json b = {{"messages", {{{"role", "user"}, {"content", "hi"}}}}};
    b.update(extra);
    auto r = parse_chat_request(b);
    return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r).param : std::string("ok");
  };
  const json tools = json::array({{{"type", "function"}, {"function", {{"name", "f"}}}}});
  // Structured outputs are implemented (server/structured_output.h): not refused here.
  EXPECT_EQ(chat_param({{"response_format", {{"type", "json_object"}}}}), "ok");
  EXPECT_EQ(chat_param({{"response_format", {{"type", "text"}}}}), "ok");
  // Tool calling is implemented (server/tool_request.h, tested in tool_request_test.cc).
  EXPECT_EQ(chat_param({{"tools", tools}, {"tool_choice", "auto"}}), "ok");
  EXPECT_EQ(chat_param({{"functions", tools}}), "ok");
  EXPECT_EQ(completion_param({{"grammar", "root ::= \"a\""}}), "ok");
  // echo, best_of, prompt_logprobs are implemented (server/completion_options.h).
  EXPECT_EQ(completion_param({{"echo", true}}), "ok");
  EXPECT_EQ(completion_param({{"echo", false}}), "ok");
  EXPECT_EQ(completion_param({{"best_of", 3}}), "ok");
  EXPECT_EQ(completion_param({{"best_of", 2}, {"n", 3}}), "best_of");
  EXPECT_EQ(completion_param({{"best_of", 3}, {"stream", true}}), "best_of");
  EXPECT_EQ(completion_param({{"best_of", 2}, {"n", 2}}), "ok");
  EXPECT_EQ(completion_param({{"best_of", 1}}), "ok");
  EXPECT_EQ(completion_param({{"prompt_logprobs", 2}}), "ok");
  EXPECT_EQ(completion_param({{"prompt_logprobs", 21}}), "prompt_logprobs");
  EXPECT_EQ(completion_param({{"max_tokens", 0}}), "max_tokens");
  EXPECT_EQ(completion_param({{"max_tokens", 0}, {"echo", true}}), "ok");
  EXPECT_EQ(chat_param({{"echo", true}}), "echo");
  EXPECT_EQ(chat_param({{"prompt_logprobs", 1}}), "prompt_logprobs");
  EXPECT_EQ(chat_param({{"max_tokens", 0}}), "max_tokens");
  EXPECT_EQ(completion_param({{"suffix", "end"}}), "suffix");
  EXPECT_EQ(completion_param({{"suffix", ""}}), "ok");
  EXPECT_EQ(completion_param({{"typical_p", 0.5}}), "typical_p");
  EXPECT_EQ(completion_param({{"bad_words", {"x"}}}), "bad_words");
  // vLLM's min_tokens, repetition_penalty, stop_token_ids are implemented (below).
  EXPECT_EQ(completion_param({{"min_tokens", 5}}), "ok");
  EXPECT_EQ(chat_param({{"repetition_penalty", 1.1}}), "ok");
  // Fields that do not change the output are accepted.
  EXPECT_EQ(chat_param({{"user", "u1"}, {"metadata", {{"k", "v"}}}, {"store", false}}), "ok");
  auto msg = parse_completion_request(json{{"prompt", "x"}, {"typical_p", 0.2}});
  ASSERT_TRUE(std::holds_alternative<ApiError>(msg));
  EXPECT_EQ(std::get<ApiError>(msg).status, 400);
  EXPECT_NE(std::get<ApiError>(msg).message.find("not supported"), std::string::npos);
}

// vLLM's extensions: repetition_penalty > 0, 0 <= min_tokens <= max_tokens, stop_token_ids a
// list of ids >= 0 (sorted and deduplicated; the vocabulary bound is the handler's); anything
// else a 400 naming the field, on both endpoints.
TEST(OpenAiRequest, VllmPenaltyMinTokensAndStopTokenIdsParseOrAre400NamingTheField) {
  auto param_of = [](json extra, bool chat) {
    json b =
        chat ? json{{"messages", {{{"role", "user"}, {"content", "hi"}}}}} : json{{"prompt", "x"}};
    b.update(extra);
    if (chat) {
      auto r = parse_chat_request(b);
      return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r).param : std::string("ok");
    }
    auto r = parse_completion_request(b);
    return std::holds_alternative<ApiError>(r) ? std::get<ApiError>(r).param : std::string("ok");
  };
  for (bool chat : {false, true}) {
    EXPECT_EQ(param_of({{"repetition_penalty", 1.0}}, chat), "ok");
    EXPECT_EQ(param_of({{"repetition_penalty", 0.5}}, chat), "ok");
    EXPECT_EQ(param_of({{"repetition_penalty", nullptr}}, chat), "ok");
    EXPECT_EQ(param_of({{"repetition_penalty", 0}}, chat), "repetition_penalty");
    EXPECT_EQ(param_of({{"repetition_penalty", -1.2}}, chat), "repetition_penalty");
    EXPECT_EQ(param_of({{"repetition_penalty", "1.2"}}, chat), "repetition_penalty");
    EXPECT_EQ(param_of({{"min_tokens", 0}}, chat), "ok");
    EXPECT_EQ(param_of({{"min_tokens", 4}, {"max_tokens", 4}}, chat), "ok");
    EXPECT_EQ(param_of({{"min_tokens", 5}, {"max_tokens", 4}}, chat), "min_tokens");
    EXPECT_EQ(param_of({{"min_tokens", -1}}, chat), "min_tokens");
    EXPECT_EQ(param_of({{"min_tokens", 1.5}}, chat), "min_tokens");
    EXPECT_EQ(param_of({{"stop_token_ids", json::array()}}, chat), "ok");
    EXPECT_EQ(param_of({{"stop_token_ids", {5, 2, 5}}}, chat), "ok");
    EXPECT_EQ(param_of({{"stop_token_ids", {-1}}}, chat), "stop_token_ids");
    EXPECT_EQ(param_of({{"stop_token_ids", {"2"}}}, chat), "stop_token_ids");
    EXPECT_EQ(param_of({{"stop_token_ids", {2.5}}}, chat), "stop_token_ids");
    EXPECT_EQ(param_of({{"stop_token_ids", 2}}, chat), "stop_token_ids");
  }
  auto r = parse_completion_request(json{{"prompt", "x"},
                                         {"repetition_penalty", 1.25},
                                         {"min_tokens", 3},
                                         {"stop_token_ids", {9, 2, 9, 4}}});
  ASSERT_TRUE(std::holds_alternative<CompletionRequest>(r));
  const GenParams& p = std::get<CompletionRequest>(r).params;
  EXPECT_FLOAT_EQ(p.repetition_penalty, 1.25f);
  EXPECT_EQ(p.min_tokens, 3);
  ASSERT_NE(p.stop_token_ids, nullptr);
  EXPECT_EQ(*p.stop_token_ids, (std::vector<int32_t>{2, 4, 9}));
}

}  // namespace
}  // namespace kvw::server
