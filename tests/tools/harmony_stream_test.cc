// gpt-oss harmony output by channel (issue 29): analysis is reasoning, final is content, calls
// are calls; streamed at any split the parts add up to the whole-text parse, and reasoning
// never leaks into content (nor a marker into either).
#include "tools/harmony_stream.h"

#include <gtest/gtest.h>

#include "tools/tool_parser.h"

namespace kvw::tools {
namespace {

// Hand-written harmony replies, as gpt-oss writes them after "<|start|>assistant".
constexpr std::string_view kThinkThenAnswer =
    "<|channel|>analysis<|message|>User asks 2+2. Simple.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4.<|return|>";
constexpr std::string_view kThinkThenCall =
    "<|channel|>analysis<|message|>Need the weather.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    "<|message|>{\"city\":\"Paris\"}<|call|>";
constexpr std::string_view kPreambleThenAnswer =
    "<|channel|>analysis<|message|>Two steps.<|end|>"
    "<|start|>assistant<|channel|>commentary<|message|>Let me think.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Done.<|return|>";

struct Streamed {
  std::string reasoning, content;
  ParsedToolOutput end;
};

// Pushes `text` in pieces of `step` bytes and collects what went out, then finish().
Streamed stream(std::string_view text, size_t step) {
  HarmonyStreamFilter f;
  Streamed s;
  for (size_t i = 0; i < text.size(); i += step) {
    HarmonyDelta d = f.push(text.substr(i, step));
    s.reasoning += d.reasoning;
    s.content += d.content;
  }
  s.end = f.finish();
  return s;
}

TEST(HarmonyChannels, AnalysisIsReasoningAndFinalIsContent) {
  ParsedToolOutput p = parse_harmony(kThinkThenAnswer);
  EXPECT_EQ(p.reasoning, "User asks 2+2. Simple.");
  EXPECT_EQ(p.content, "2 + 2 = 4.");
  EXPECT_TRUE(p.calls.empty());
  p = parse_harmony(kThinkThenCall);
  EXPECT_EQ(p.reasoning, "Need the weather.");
  EXPECT_EQ(p.content, "");
  ASSERT_EQ(p.calls.size(), 1u);
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, R"({"city":"Paris"})");
  // A commentary preamble (no recipient) is for the user, as the final answer is.
  p = parse_harmony(kPreambleThenAnswer);
  EXPECT_EQ(p.reasoning, "Two steps.");
  EXPECT_EQ(p.content, "Let me think.Done.");
}

TEST(HarmonyChannels, StreamedAtEverySplitAddsUpToTheWholeParse) {
  for (std::string_view text : {kThinkThenAnswer, kThinkThenCall, kPreambleThenAnswer}) {
    const ParsedToolOutput whole = parse_harmony(text);
    for (size_t step : {1, 2, 3, 5, 7, 11, 64}) {
      SCOPED_TRACE(std::string(text.substr(0, 40)) + " step " + std::to_string(step));
      const Streamed s = stream(text, step);
      EXPECT_EQ(s.reasoning + s.end.reasoning, whole.reasoning);
      EXPECT_EQ(s.content + s.end.content, whole.content);
      ASSERT_EQ(s.end.calls.size(), whole.calls.size());
      for (size_t i = 0; i < whole.calls.size(); ++i) {
        EXPECT_EQ(s.end.calls[i].name, whole.calls[i].name);
        EXPECT_EQ(s.end.calls[i].arguments, whole.calls[i].arguments);
      }
      for (const std::string* part : {&s.reasoning, &s.content}) {
        EXPECT_EQ(part->find("<|"), std::string::npos) << *part;
      }
    }
  }
}

TEST(HarmonyChannels, ReasoningStreamsBeforeTheAnswerEnds) {
  HarmonyStreamFilter f;
  HarmonyDelta d = f.push("<|channel|>analysis<|message|>Thinking hard");
  EXPECT_EQ(d.reasoning, "Thinking hard");
  EXPECT_EQ(d.content, "");
  d = f.push(" still<|e");  // "<|e" may begin <|end|>: held
  EXPECT_EQ(d.reasoning, " still");
  d = f.push("nd|><|start|>assistant<|channel|>final<|message|>Yes");
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "Yes");
  const ParsedToolOutput end = f.finish();
  EXPECT_EQ(end.content, "");
  EXPECT_EQ(end.reasoning, "");
}

TEST(HarmonyChannels, CutOffOutputsKeepWhatCame) {
  // max_tokens inside the analysis: the reasoning so far, no content.
  Streamed s = stream("<|channel|>analysis<|message|>Let me see, the", 4);
  EXPECT_EQ(s.reasoning + s.end.reasoning, "Let me see, the");
  EXPECT_EQ(s.content + s.end.content, "");
  // Cut inside the next header: the unfinished header is dropped.
  s = stream("<|channel|>analysis<|message|>Hm.<|end|><|start|>assistant<|chan", 3);
  EXPECT_EQ(s.reasoning + s.end.reasoning, "Hm.");
  EXPECT_EQ(s.content + s.end.content, "");
}

TEST(HarmonyChannels, OutputWithoutHarmonyHeadersIsPlainContent) {
  const Streamed s = stream("Hello there <|end|>", 2);
  EXPECT_EQ(s.content + s.end.content, "Hello there <|end|>");
  EXPECT_EQ(s.reasoning + s.end.reasoning, "");
  EXPECT_EQ(parse_harmony("Hello there").content, "Hello there");
  // Only the start of a header, and nothing more: still content.
  EXPECT_EQ(parse_harmony("<|chan").content, "<|chan");
}

// Two calls, each in its own commentary message (as gpt-oss writes them when the stop token
// <|call|> is rendered and the turn goes on).
constexpr std::string_view kTwoCalls =
    "<|channel|>analysis<|message|>Weather, then time.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    "<|message|>{\"city\":\"Paris\"}<|call|>"
    "<|start|>assistant<|channel|>commentary to=functions.get_time <|constrain|>json"
    "<|message|>{}<|call|>"
    "<|start|>assistant<|channel|>final<|message|>Both asked.<|return|>";

struct Taken {
  std::string reasoning, content;
  std::vector<ToolCall> calls;
  std::vector<size_t> ready_at;  // [calls] bytes pushed when the call was taken
};

// Pushes `text` cut at the given byte offsets, taking calls after every push as the server
// does after every token; then finish().
Taken stream_taking_calls(std::string_view text, const std::vector<size_t>& cuts,
                          bool parallel = true) {
  HarmonyStreamFilter f(parallel);
  Taken t;
  size_t at = 0;
  auto take = [&](std::vector<ToolCall> calls, size_t first) {
    EXPECT_EQ(first, t.calls.size()) << "indices follow the calls' order";
    for (ToolCall& c : calls) t.calls.push_back(std::move(c)), t.ready_at.push_back(at);
  };
  for (size_t cut : cuts) {
    HarmonyDelta d = f.push(text.substr(at, cut - at));
    at = cut;
    t.reasoning += d.reasoning;
    t.content += d.content;
    size_t first = 0;
    std::vector<ToolCall> calls = f.take_calls(&first);
    take(std::move(calls), first);
  }
  size_t first = 0;
  ParsedToolOutput end = f.finish(&first);
  t.reasoning += end.reasoning;
  t.content += end.content;
  take(std::move(end.calls), first);
  return t;
}

void expect_whole_parse(const Taken& t, std::string_view text) {
  const ParsedToolOutput whole = parse_harmony(text);
  EXPECT_EQ(t.reasoning, whole.reasoning);
  EXPECT_EQ(t.content, whole.content);
  ASSERT_EQ(t.calls.size(), whole.calls.size());
  for (size_t i = 0; i < whole.calls.size(); ++i) {
    EXPECT_EQ(t.calls[i].name, whole.calls[i].name);
    EXPECT_EQ(t.calls[i].arguments, whole.calls[i].arguments);
  }
}

// Issue 31: each harmony call goes out when its message ends, not when the output does; at
// every split the stream adds up to the whole parse.
TEST(HarmonyChannels, EachCallGoesOutWhenItsMessageEnds) {
  std::vector<size_t> bytewise;
  for (size_t i = 1; i <= kTwoCalls.size(); ++i) bytewise.push_back(i);
  const Taken t = stream_taking_calls(kTwoCalls, bytewise);
  ASSERT_EQ(t.calls.size(), 2u);
  EXPECT_EQ(t.calls[0].name, "get_weather");
  EXPECT_EQ(t.calls[0].arguments, R"({"city":"Paris"})");
  EXPECT_EQ(t.calls[1].name, "get_time");
  const size_t first_call_end = kTwoCalls.find("<|call|>") + 8;
  EXPECT_EQ(t.ready_at[0], first_call_end);
  EXPECT_EQ(t.ready_at[1], kTwoCalls.find("<|call|>", first_call_end) + 8);
  EXPECT_EQ(t.reasoning, "Weather, then time.");
  EXPECT_EQ(t.content, "Both asked.");
  expect_whole_parse(t, kTwoCalls);
  for (std::string_view text : {kTwoCalls, kThinkThenCall}) {
    for (size_t cut = 0; cut <= text.size(); ++cut) {
      SCOPED_TRACE("cut at " + std::to_string(cut));
      expect_whole_parse(stream_taking_calls(text, {cut, text.size()}), text);
    }
  }
  // parallel_tool_calls false: only the first call.
  const Taken one = stream_taking_calls(kTwoCalls, bytewise, /*parallel=*/false);
  ASSERT_EQ(one.calls.size(), 1u);
  EXPECT_EQ(one.calls[0].name, "get_weather");
}

// A call whose arguments do not parse, or that is cut off, comes back as its raw text, at
// every split as in the whole parse.
TEST(HarmonyChannels, MalformedCallsDegradeToContentAtEverySplit) {
  const std::vector<std::string_view> texts = {
      "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\":"
      "<|call|><|start|>assistant<|channel|>final<|message|>Sorry.<|return|>",
      "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"ci"};
  for (std::string_view text : texts) {
    const ParsedToolOutput whole = parse_harmony(text);
    EXPECT_TRUE(whole.calls.empty());
    EXPECT_NE(whole.content.find("get_weather"), std::string::npos) << "the raw call is kept";
    for (size_t cut = 0; cut <= text.size(); ++cut) {
      SCOPED_TRACE("cut at " + std::to_string(cut));
      expect_whole_parse(stream_taking_calls(text, {cut, text.size()}), text);
    }
  }
}

// Issue 31: gpt-oss ends a call with <|call|>, an end of generation, so a call sent whole goes
// out only as the output ends. With stream_arguments the name goes out as soon as the call's
// body opens, then the arguments fragment by fragment as the tokens arrive.
struct Pieces {
  std::string reasoning, content;
  std::vector<ToolCallDelta> deltas;
  std::vector<size_t> delta_at;  // [deltas] pushes made when the delta was taken
  ParsedToolOutput end;
  size_t num_calls = 0;
};

Pieces stream_pieces(const std::vector<std::string_view>& tokens, bool parallel = true) {
  HarmonyStreamFilter f(parallel, /*stream_arguments=*/true);
  Pieces p;
  size_t pushes = 0;
  auto take = [&] {
    for (ToolCallDelta& d : f.take_call_deltas()) {
      p.deltas.push_back(std::move(d));
      p.delta_at.push_back(pushes);
    }
  };
  for (std::string_view t : tokens) {
    HarmonyDelta d = f.push(t);
    ++pushes;
    p.reasoning += d.reasoning;
    p.content += d.content;
    size_t first = 0;
    EXPECT_TRUE(f.take_calls(&first).empty()) << "a streamed call is never sent whole";
    take();
  }
  p.end = f.finish();
  take();
  p.num_calls = f.num_calls();
  return p;
}

// The calls the deltas add up to (as a client reassembles them by index); checks that each
// call opens once, with its name, before any of its fragments, and that indices go up by one.
std::vector<ToolCall> reassemble(const std::vector<ToolCallDelta>& deltas) {
  std::vector<ToolCall> calls;
  for (const ToolCallDelta& d : deltas) {
    if (!d.name.empty()) {
      EXPECT_EQ(d.index, calls.size()) << "a call opens once, in order";
      EXPECT_EQ(d.arguments, "");
      calls.push_back({.name = d.name, .arguments = ""});
      continue;
    }
    EXPECT_EQ(d.index + 1, calls.size()) << "a fragment belongs to the open call";
    if (d.index + 1 == calls.size()) calls.back().arguments += d.arguments;
  }
  return calls;
}

// gpt-oss-like tokens of a call (the markers are single control tokens).
const std::vector<std::string_view> kCallTokens = {
    "<|channel|>", "analysis",  "<|message|>", "Need",    " weather",      ".",    "<|end|>",
    "<|start|>",   "assistant", "<|channel|>", "comment", "ary",           " to",  "=",
    "functions",   ".get",      "_weather",    " ",       "<|constrain|>", "json", "<|message|>",
    "{\"",         "city",      "\":\"",       "Paris",   "\",\"",         "days", "\":",
    "3",           "}",         "<|call|>"};

TEST(HarmonyCallStream, NameFirstThenArgumentFragmentsAsTokensArrive) {
  const Pieces p = stream_pieces(kCallTokens);
  const size_t open_at = 22;  // pushes up to and including "{\""
  ASSERT_EQ(kCallTokens[open_at - 1], "{\"");
  ASSERT_GE(p.deltas.size(), 8u);
  EXPECT_EQ(p.deltas[0].name, "get_weather");
  EXPECT_EQ(p.deltas[0].index, 0u);
  EXPECT_EQ(p.delta_at[0], open_at) << "the name goes out when the body opens";
  EXPECT_EQ(p.deltas[1].arguments, "{\"");
  // Then one fragment per token, each as it arrives, all before <|call|>.
  for (size_t k = 2; k < p.deltas.size(); ++k) {
    EXPECT_EQ(p.deltas[k].arguments, kCallTokens[open_at + k - 2]);
    EXPECT_EQ(p.delta_at[k], open_at + k - 1);
  }
  const std::vector<ToolCall> calls = reassemble(p.deltas);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].arguments, R"({"city":"Paris","days":3})");
  EXPECT_EQ(p.reasoning, "Need weather.");
  EXPECT_EQ(p.content + p.end.content, "");
  EXPECT_TRUE(p.end.calls.empty()) << "nothing left for the end";
  EXPECT_EQ(p.num_calls, 1u);
  // The end of generation took <|call|> (it is not in the text): the same pieces, and the
  // call still counts (finish_reason "tool_calls").
  std::vector<std::string_view> no_end(kCallTokens.begin(), kCallTokens.end() - 1);
  const Pieces cut = stream_pieces(no_end);
  EXPECT_EQ(reassemble(cut.deltas)[0].arguments, R"({"city":"Paris","days":3})");
  EXPECT_EQ(cut.num_calls, 1u);
  EXPECT_EQ(cut.end.content, "");
}

TEST(HarmonyCallStream, PiecesAddUpToTheWholeParseAtEverySplit) {
  for (std::string_view text : {kTwoCalls, kThinkThenCall, kThinkThenAnswer}) {
    const ParsedToolOutput whole = parse_harmony(text);
    for (size_t step : {1, 2, 3, 7, 16, 1000}) {
      SCOPED_TRACE(std::string(text.substr(0, 30)) + " step " + std::to_string(step));
      std::vector<std::string_view> pieces;
      for (size_t i = 0; i < text.size(); i += step) pieces.push_back(text.substr(i, step));
      const Pieces p = stream_pieces(pieces);
      EXPECT_EQ(p.reasoning + p.end.reasoning, whole.reasoning);
      EXPECT_EQ(p.content + p.end.content, whole.content);
      const std::vector<ToolCall> calls = reassemble(p.deltas);
      ASSERT_EQ(calls.size(), whole.calls.size());
      EXPECT_EQ(p.num_calls, whole.calls.size());
      for (size_t i = 0; i < calls.size(); ++i) {
        EXPECT_EQ(calls[i].name, whole.calls[i].name);
        EXPECT_EQ(nlohmann::json::parse(calls[i].arguments),
                  nlohmann::json::parse(whole.calls[i].arguments));
        EXPECT_EQ(calls[i].arguments.find("<|"), std::string::npos) << calls[i].arguments;
      }
    }
  }
  // parallel_tool_calls false: the second call is neither streamed nor content.
  std::vector<std::string_view> bytes;
  for (size_t i = 0; i < kTwoCalls.size(); ++i) bytes.push_back(kTwoCalls.substr(i, 1));
  const Pieces one = stream_pieces(bytes, /*parallel=*/false);
  const std::vector<ToolCall> calls = reassemble(one.deltas);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].name, "get_weather");
  EXPECT_EQ(one.content + one.end.content, "Both asked.");
}

// A body that does not open a JSON object is held and, as before, comes back as content.
TEST(HarmonyCallStream, BodyThatIsNotJsonIsHeldAndDegradesToContent) {
  constexpr std::string_view text =
      "<|channel|>commentary to=functions.get_weather<|message|>  Paris please<|call|>";
  std::vector<std::string_view> bytes;
  for (size_t i = 0; i < text.size(); ++i) bytes.push_back(text.substr(i, 1));
  const Pieces p = stream_pieces(bytes);
  EXPECT_TRUE(p.deltas.empty());
  EXPECT_EQ(p.num_calls, 0u);
  EXPECT_EQ(p.content + p.end.content, parse_harmony(text).content);
  EXPECT_NE(p.end.content.find("Paris please"), std::string::npos);
}

}  // namespace
}  // namespace kvw::tools
